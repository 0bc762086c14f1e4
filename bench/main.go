// Command bench measures latchkey's lock against its peers — redsync, bsm/redislock,
// rueidislock and the naive SET NX PX algorithm — on one Redis, in one run, and reports each
// figure with its ratio to the best peer.
//
//	cd bench && go run . [-redis ADDR] [-dur D] [-out DIR]
//
// Without -redis it starts its own redis-server on a free loopback port. With -out it also
// writes DIR/docs/benchmarks.md and PNG charts under DIR/docs/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type options struct {
	redis        string
	dur          time.Duration
	out          string
	workers      []int
	parallel     int
	scaleWaiters int
	scaleLocks   int
	only         string
	cmdstats     bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var workers string
	fs.StringVar(&o.redis, "redis", "", "Redis address `host:port`; empty starts a redis-server on a free loopback port")
	fs.DurationVar(&o.dur, "dur", 5*time.Second, "duration of each timed scenario, per contender")
	fs.StringVar(&o.out, "out", "", "repository `dir` to write docs/benchmarks.md and the charts into")
	fs.StringVar(&workers, "workers", "8,64", "comma-separated worker counts of the contended scenario")
	fs.IntVar(&o.parallel, "parallel", 64, "goroutines (each on its own key) of the parallel scenario")
	fs.IntVar(&o.scaleWaiters, "scale-waiters", 10000, "waiters of the waiters-at-scale scenario")
	fs.IntVar(&o.scaleLocks, "scale-locks", 1000, "locks of the waiters-at-scale scenario")
	fs.StringVar(&o.only, "only", "", "run only the contenders whose name contains this (profiling)")
	fs.BoolVar(&o.cmdstats, "cmdstats", false, "print Redis INFO commandstats calls per acquisition of each contended run (profiling)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.dur <= 0 {
		return o, fmt.Errorf("-dur must be > 0, got %v", o.dur)
	}
	if o.parallel <= 0 || o.scaleWaiters <= 0 || o.scaleLocks <= 0 {
		return o, errors.New("-parallel, -scale-waiters and -scale-locks must be > 0")
	}
	for _, f := range strings.Split(workers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 {
			return o, fmt.Errorf("-workers: %q is not a count >= 2", f)
		}
		o.workers = append(o.workers, n)
	}
	return o, nil
}

// results are one run's figures.
type results struct {
	opts    options
	server  string
	ping    durations
	scale   scaleResult
	rows    []row
	started time.Time
}

// row is one contender's figures; err is set when it failed, note when it was not run.
type row struct {
	c         contender
	solo      durations
	parallel  float64
	contended []contendedResult
	err       error
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	res := &results{opts: o, started: time.Now()}
	var srv *server
	if o.redis == "" {
		if srv, err = startServer(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Started redis-server on %s for this run.\n", srv.addr)
	} else {
		srv = &server{addr: o.redis}
		if err := srv.connect(); err != nil {
			return fmt.Errorf("-redis %s: %w", o.redis, err)
		}
	}
	defer srv.close()
	version, _ := srv.admin.Do(ctx, srv.admin.B().Info().Section("server").Build()).ToString()
	res.server = redisVersion(version)
	fmt.Fprintf(stdout, "Redis %s, %s/%s, GOMAXPROCS %d, %v per scenario.\n\n", res.server,
		runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), o.dur)

	if err := srv.flush(ctx); err != nil {
		return err
	}
	// First, while the process is small, so its peak RSS is the scenario's own.
	fmt.Fprintf(stdout, "waiters at scale: %d waiters on %d locks ...\n", o.scaleWaiters, o.scaleLocks)
	if res.scale, err = scale(ctx, srv, o.scaleWaiters, o.scaleLocks); err != nil {
		return fmt.Errorf("waiters at scale: %w", err)
	}
	if res.ping, err = floor(ctx, srv.addr, min(o.dur, 2*time.Second)); err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	var overlaps []string
	for _, c := range contenders() {
		if o.only != "" && !strings.Contains(c.name, o.only) {
			continue
		}
		r := row{c: c}
		if c.open != nil {
			fmt.Fprintf(stdout, "%s ...\n", c.name)
			r.err = runContender(ctx, srv, &r, o)
			for _, cr := range r.contended {
				if cr.overlaps > 0 {
					overlaps = append(overlaps, fmt.Sprintf("%s: %d overlaps with %d workers", c.name, cr.overlaps, cr.workers))
				}
			}
		}
		res.rows = append(res.rows, r)
	}
	fmt.Fprintln(stdout)
	report := markdown(res)
	fmt.Fprint(stdout, report)
	if o.out != "" {
		if err := writeOut(o.out, res, report); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nWrote %s/docs/benchmarks.md and its charts.\n", o.out)
	}
	if len(overlaps) > 0 {
		return fmt.Errorf("MUTUAL EXCLUSION VIOLATED — two workers held a lock at once:\n  %s", strings.Join(overlaps, "\n  "))
	}
	for _, r := range res.rows {
		if r.err != nil {
			return fmt.Errorf("%s failed: %w", r.c.name, r.err)
		}
	}
	return nil
}

func runContender(ctx context.Context, srv *server, r *row, o options) error {
	if err := srv.flush(ctx); err != nil {
		return err
	}
	s, err := r.c.open(srv.addr)
	if err != nil {
		return err
	}
	defer s.close()
	key := "bench:" + strings.ReplaceAll(r.c.name, " ", "-")
	if r.solo, err = solo(ctx, s, key+":solo", o.dur); err != nil {
		return fmt.Errorf("solo: %w", err)
	}
	if o.cmdstats {
		if err := srv.admin.Do(ctx, srv.admin.B().ConfigResetstat().Build()).Error(); err != nil {
			return err
		}
	}
	if r.parallel, err = parallel(ctx, s, key+":parallel:", o.parallel, o.dur); err != nil {
		return fmt.Errorf("parallel: %w", err)
	}
	if o.cmdstats {
		stats, err := srv.admin.Do(ctx, srv.admin.B().Info().Section("commandstats").Build()).ToString()
		if err != nil {
			return err
		}
		fmt.Printf("  %s parallel: %.0f cycles/s; server µs per cycle:%s\n", r.c.name, r.parallel,
			usecPer(stats, int64(r.parallel*o.dur.Seconds())))
	}
	for _, w := range o.workers {
		if o.cmdstats {
			if err := srv.admin.Do(ctx, srv.admin.B().ConfigResetstat().Build()).Error(); err != nil {
				return err
			}
		}
		cr, err := contended(ctx, srv, s, key+":contended:"+strconv.Itoa(w), w, o.dur)
		if err != nil {
			return fmt.Errorf("contended W=%d: %w", w, err)
		}
		if o.cmdstats {
			stats, err := srv.admin.Do(ctx, srv.admin.B().Info().Section("commandstats").Build()).ToString()
			if err != nil {
				return err
			}
			fmt.Printf("  %s W=%d: %d acquisitions; calls per acquisition:%s\n", r.c.name, w, cr.acquisitions,
				callsPer(stats, cr.acquisitions))
		}
		r.contended = append(r.contended, cr)
	}
	return nil
}

func redisVersion(info string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "unknown"
}
