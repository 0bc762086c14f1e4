package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/latchkey/latchkey/internal/embedredis"
	"github.com/redis/rueidis"
)

const demoSummary = "show on an embedded Redis why locks, semaphores and latches are needed and how they behave"

// demoConfig holds the demos' knobs. The command line sets each demo's scenario; the timings
// are fields so the tests can run every demo in about a second.
type demoConfig struct {
	instances int // service instances: one rueidis client and one dsync.Client each
	buyers    int // concurrent buyers (goroutines) per instance
	stock     int // items in stock when the sale opens

	// pause is the "business logic" between reading and writing the stock. Without it the
	// race still exists but shows only now and then; real code does work there.
	pause time.Duration

	wakeHold  time.Duration // how long A holds the lock while B waits
	wakeLimit time.Duration // how soon after A's unlock B must have the lock

	leaseTimeout time.Duration // watchdog timeout of the lease section
	leaseHold    time.Duration // how long that lock is held; must exceed the timeout
	// leaseSamples is how many PTTL readings are taken while it is held. Six over 2 s are
	// 333 ms apart, out of step with the 200 ms renewals, so the readings show the TTL at
	// different points of its renewal cycle rather than always just before a renewal.
	leaseSamples int

	// The gate demo: callers per instance, each making one call to a downstream that takes
	// callTime and must never see more than permits calls at once.
	callers  int
	permits  int
	callTime time.Duration

	// The jobs demo: workers spread over the instances; worker i works i*workStep, so they
	// finish one by one and the timeline reads in order.
	workers  int
	workStep time.Duration

	stepTimeout time.Duration // bounds each section, so a bug hangs nothing for long

	// redis is the --redis URL of a server to run on instead of the embedded one ("": the
	// embedded one).
	redis string
}

func defaultDemoConfig() demoConfig {
	return demoConfig{
		instances:    4,
		buyers:       50,
		stock:        100,
		pause:        time.Millisecond,
		wakeHold:     300 * time.Millisecond,
		wakeLimit:    5 * time.Second,
		leaseTimeout: 600 * time.Millisecond,
		leaseHold:    2 * time.Second,
		leaseSamples: 6,
		callers:      25,
		permits:      5,
		callTime:     5 * time.Millisecond,
		workers:      10,
		workStep:     20 * time.Millisecond,
		stepTimeout:  time.Minute,
	}
}

// demoSpec is one demo "latchkey demo <name>" runs: its defaults, its flags bound to a
// config, and the demo itself.
type demoSpec struct {
	name    string
	summary string
	config  func() demoConfig
	flags   func(cfg *demoConfig) []demoFlag
	run     func(ctx context.Context, w io.Writer, cfg demoConfig) error
}

// demoFlag is one whole-number flag of a demo: the setting it sets and the least value the
// demo can run with, so that one table gives both the flag and its check.
type demoFlag struct {
	name  string
	value *int
	least int
	usage string
	why   string // if not "", why least is what it is: said with a value below it
}

// checkDemoFlags returns what is wrong with the first of flags whose value is below its
// least, in a message that names the flag, or "" when none is.
func checkDemoFlags(flags []demoFlag) string {
	for _, f := range flags {
		if *f.value >= f.least {
			continue
		}
		rule := fmt.Sprintf("must be at least %d", f.least)
		if f.least == 0 {
			rule = "must not be negative"
		}
		if f.why != "" {
			rule += " (" + f.why + ")"
		}
		return fmt.Sprintf("-%s %s, got %d", f.name, rule, *f.value)
	}
	return ""
}

// demos lists the demos in the order usage shows them; the first is the one "latchkey demo"
// runs when given no name.
func demos() []demoSpec {
	return []demoSpec{
		{name: "lock", summary: "the oversell race without and with a lock, a pub/sub wake-up, the watchdog",
			config: defaultDemoConfig, flags: lockFlags, run: runDemo},
		{name: "gate", summary: "a Semaphore caps the calls in flight to a downstream service across instances",
			config: defaultGateConfig, flags: gateFlags, run: runGateDemo},
		{name: "jobs", summary: "a CountDownLatch holds a coordinator until every job is done, a crashed worker's too",
			config: defaultJobsConfig, flags: jobsFlags, run: runJobsDemo},
	}
}

func lookupDemo(name string) (demoSpec, bool) {
	for _, s := range demos() {
		if s.name == name {
			return s, true
		}
	}
	return demoSpec{}, false
}

// lockFlags are the lock demo's flags, bound to cfg.
func lockFlags(cfg *demoConfig) []demoFlag {
	return []demoFlag{
		{name: "instances", value: &cfg.instances, least: 1, usage: "service instances, each with its own Redis connection and dsync.Client"},
		{name: "buyers-per-instance", value: &cfg.buyers, least: 1, usage: "concurrent buyers (goroutines) per instance"},
		{name: "stock", value: &cfg.stock, least: 0, usage: "items in stock when the sale opens"},
	}
}

// newDemoFlags returns the flag set of demo s, its flags bound to cfg. Its usage is that of
// s alone; "latchkey demo -h", with no name, shows every demo's (demoUsage).
func newDemoFlags(s demoSpec, cfg *demoConfig, output io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("latchkey demo "+s.name, flag.ContinueOnError)
	fs.SetOutput(output)
	for _, f := range s.flags(cfg) {
		fs.IntVar(f.value, f.name, *f.value, f.usage)
	}
	fs.StringVar(&cfg.redis, "redis", "", "run on the Redis server at `URL` (as for the other commands) instead of an embedded one; deleting its keys there first (demo:… and stock:lock)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: latchkey demo %s [flags]\n\n%s.\nIt needs no Redis server: it starts an embedded one (or give --redis).\n\nflags:\n",
			s.name, s.summary)
		fs.PrintDefaults()
	}
	return fs
}

// demoUsage is the usage of "latchkey demo": the demos and each one's flags.
func demoUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: latchkey demo [name] [flags]\n\n%s.\nIt needs no Redis server: it starts an embedded one (or give --redis).\n\ndemos:\n", demoSummary)
	all := demos()
	for i, s := range all {
		summary := s.summary
		if i == 0 {
			summary += " (the default)"
		}
		fmt.Fprintf(w, "  %-5s %s\n", s.name, summary)
	}
	for _, s := range all {
		cfg := s.config()
		fs := newDemoFlags(s, &cfg, w)
		fmt.Fprintf(w, "\nflags of \"latchkey demo %s\":\n", s.name)
		fs.PrintDefaults()
	}
}

// demoCommand is "latchkey demo [name] [flags]".
func demoCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	all := demos()
	s, named := all[0], false
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		var ok bool
		if s, ok = lookupDemo(args[0]); !ok {
			fmt.Fprintf(stderr, "latchkey demo: unknown demo %q\n\n", args[0])
			demoUsage(stderr)
			return errUsage
		}
		named, args = true, args[1:]
	}
	cfg := s.config()
	fs := newDemoFlags(s, &cfg, stderr)
	if !named {
		fs.Usage = func() { demoUsage(fs.Output()) }
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage
	}
	var bad string
	switch {
	case fs.NArg() > 0:
		bad = fmt.Sprintf("unexpected argument %q", fs.Arg(0))
		if _, ok := lookupDemo(fs.Arg(0)); ok {
			bad += " (a demo's name goes before its flags)"
		}
	default:
		bad = checkDemoFlags(s.flags(&cfg))
	}
	if bad == "" && cfg.redis != "" {
		if _, err := rueidis.ParseURL(cfg.redis); err != nil {
			bad = fmt.Sprintf("--redis %q: %v", cfg.redis, err)
		}
	}
	if bad != "" {
		fmt.Fprintf(stderr, "latchkey demo: %s\n", bad)
		fs.Usage()
		return errUsage
	}
	return s.run(ctx, stdout, cfg)
}

// demo is one run of a demo: where it prints, its settings and its server.
type demo struct {
	w   io.Writer
	cfg demoConfig
	opt rueidis.ClientOption // how each instance connects
}

// section is one numbered part of a demo.
type section struct {
	title string
	run   func(context.Context) error
}

// runDemo starts an embedded Redis, runs the lock demo's four sections against it and
// returns an error naming the first invariant that did not hold.
func runDemo(ctx context.Context, w io.Writer, cfg demoConfig) error {
	return runSections(ctx, w, cfg, func(d *demo) []section {
		return []section{
			{"Stock sale WITHOUT a lock", d.saleWithoutLock},
			{"Stock sale WITH a lock", d.saleWithLock},
			{"A waiter woken by pub/sub", d.wake},
			{"A lease kept by the watchdog", d.watchdog},
		}
	})
}

// runSections starts an embedded Redis (unless cfg names a server), runs the sections
// sections returns one after the other, each within cfg.stepTimeout, and returns an error
// naming the first invariant that did not hold.
func runSections(ctx context.Context, w io.Writer, cfg demoConfig, sections func(*demo) []section) error {
	d := &demo{w: w, cfg: cfg}
	if cfg.redis != "" {
		opt, err := redisOptions(cfg.redis)
		if err != nil {
			return err
		}
		d.opt = opt
		if err := d.clear(ctx); err != nil {
			return err
		}
		d.printf("Redis at %v (the demo's keys deleted first: %s).\n", opt.InitAddress, strings.Join(demoKeys(), " "))
	} else {
		srv, err := embedredis.Start()
		if err != nil {
			return err
		}
		defer srv.Close()
		d.opt = rueidis.ClientOption{
			InitAddress: []string{srv.Addr()},
			// miniredis has no CLIENT TRACKING, which client-side caching needs.
			DisableCache: true,
			// miniredis answers CLUSTER SLOTS, which would make rueidis build a cluster
			// client for what is a single server.
			ForceSingleClient: true,
		}
		d.printf("Embedded Redis (miniredis, clock in real time) on %s.\n", srv.Addr())
	}

	all := sections(d)
	start := time.Now()
	for i, s := range all {
		d.printf("\n== %d/%d %s ==\n", i+1, len(all), s.title)
		sctx, cancel := context.WithTimeout(ctx, cfg.stepTimeout)
		err := s.run(sctx)
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", s.title, err)
		}
	}
	d.printf("\nAll invariants held (%v in all).\n", time.Since(start).Round(time.Millisecond))
	return nil
}

func (d *demo) printf(format string, a ...any) {
	// A demo whose output cannot be written has nothing better to do than carry on.
	_, _ = fmt.Fprintf(d.w, format, a...)
}

// demoKeys are the keys the demos write and check: on a server of the user's they are
// deleted before a demo starts, so that what an earlier run left (a semaphore's permits, a
// latch) does not change what this one shows.
func demoKeys() []string {
	return []string{stockKey, stockLockKey, wakeLockKey, leaseLockKey, gateKey, jobsKey}
}

// clear deletes the demo's keys, one DEL each so that a Cluster need not have them in one
// slot.
func (d *demo) clear(ctx context.Context) error {
	rdb, err := dialRedis(d.opt)
	if err != nil {
		return err
	}
	defer rdb.Close()
	for _, k := range demoKeys() {
		if err := rdb.Do(ctx, rdb.B().Del().Key(k).Build()).Error(); err != nil {
			return fmt.Errorf("delete %s: %w", k, err)
		}
	}
	return nil
}

// checkGone returns an error unless key no longer exists on rdb's server; after names what
// should have deleted it, for the error.
func checkGone(ctx context.Context, rdb rueidis.Client, key, after string) error {
	n, err := rdb.Do(ctx, rdb.B().Exists().Key(key).Build()).AsInt64()
	if err != nil {
		return err
	}
	if n != 0 {
		return fmt.Errorf("%s still exists after %s", key, after)
	}
	return nil
}

// connect opens a rueidis client to the demo's server; each one stands for the Redis
// connection of one service instance.
func (d *demo) connect() (rueidis.Client, error) { return rueidis.NewClient(d.opt) }

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ms formats d in milliseconds with one decimal, the scale every demo timing lives on.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}
