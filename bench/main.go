// Command bench measures latchkey's lock against its peers — redsync, bsm/redislock,
// rueidislock and the naive SET NX PX algorithm — on one Redis, in one run, and reports each
// figure with its ratio to the best peer. It also measures how long a writer of latchkey's
// read-write lock waits under continuous readers (rw.go), a lock no Go peer has; how close
// latchkey's Semaphore comes to the rate its permits allow, against a hand-written INCR/DECR
// gate (semaphore.go); and how soon a CountDownLatch's count-down reaches 1,000 awaiters
// (latch.go); and, uncontended, its MultiLock, its RedLock against redsync over five servers,
// and its Lock confirmed by a replica (quorum.go).
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
	contended    []scenario
	parallel     int
	scaleWaiters int
	scaleLocks   int
	only         []string
	cmdstats     bool
	rounds       int
	pin          bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var workers, only string
	fs.StringVar(&o.redis, "redis", "", "Redis address `host:port`; empty starts a redis-server on a free loopback port")
	fs.DurationVar(&o.dur, "dur", 5*time.Second, "duration of each timed scenario, per contender")
	fs.StringVar(&o.out, "out", "", "repository `dir` to write docs/benchmarks.md and the charts into")
	fs.StringVar(&workers, "workers", "8,64,64/8,64/64", "comma-separated contended scenarios: `W` workers on one client, or W/C: W workers spread over C clients")
	fs.IntVar(&o.parallel, "parallel", 64, "goroutines (each on its own key) of the parallel scenario")
	fs.IntVar(&o.scaleWaiters, "scale-waiters", 10000, "waiters of the waiters-at-scale scenario")
	fs.IntVar(&o.scaleLocks, "scale-locks", 1000, "locks of the waiters-at-scale scenario")
	fs.StringVar(&only, "only", "", "run only the contenders, read-write, semaphore and latch rows whose name contains one of these comma-separated `words` "+
		"(profiling, short runs); naming no lock contender skips floor, solo, parallel, contended and waiters at scale: "+
		"-only RWLock runs the read-write scenario alone, -only Semaphore the semaphore scenario, -only CountDownLatch the latch fan-out, -only RedLock the quorum scenario (MultiLock, RedLock, redsync over 5 servers, WithSyncReplicas), -only Cluster the Redis Cluster scenario")
	fs.BoolVar(&o.cmdstats, "cmdstats", false, "print Redis INFO commandstats of each parallel, contended, read-write and semaphore run (profiling; use with -only)")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds each scenario's time is split into, the contenders taking turns, so drift in the machine's speed hits all alike")
	fs.BoolVar(&o.pin, "pin", true, "run the latency scenarios (floor, solo) with this process and the redis-server it started on one CPU (Linux)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.dur <= 0 {
		return o, fmt.Errorf("-dur must be > 0, got %v", o.dur)
	}
	if o.parallel <= 0 || o.scaleWaiters <= 0 || o.scaleLocks <= 0 || o.rounds <= 0 {
		return o, errors.New("-parallel, -scale-waiters, -scale-locks and -rounds must be > 0")
	}
	for _, f := range strings.Split(workers, ",") {
		sc, err := parseScenario(strings.TrimSpace(f))
		if err != nil {
			return o, fmt.Errorf("-workers: %w", err)
		}
		o.contended = append(o.contended, sc)
	}
	if only != "" {
		o.only = strings.Split(only, ",")
	}
	return o, nil
}

// scenario is one contended setup: workers looping on one key, spread over clients sessions
// of the library, as over that many instances of a service.
type scenario struct{ workers, clients int }

// parseScenario reads W (one client) or W/C.
func parseScenario(f string) (scenario, error) {
	w, c, spread := strings.Cut(f, "/")
	sc := scenario{clients: 1}
	var err error
	if sc.workers, err = strconv.Atoi(w); err != nil || sc.workers < 2 {
		return sc, fmt.Errorf("%q: %q is not a worker count >= 2", f, w)
	}
	if spread {
		if sc.clients, err = strconv.Atoi(c); err != nil || sc.clients < 1 || sc.clients > sc.workers {
			return sc, fmt.Errorf("%q: %q is not a client count from 1 to %d", f, c, sc.workers)
		}
	}
	return sc, nil
}

func (sc scenario) String() string {
	if sc.clients == 1 {
		return fmt.Sprintf("W=%d", sc.workers)
	}
	return fmt.Sprintf("W=%d over %d clients", sc.workers, sc.clients)
}

// describe says in words how the workers are spread.
func (sc scenario) describe() string {
	switch {
	case sc.clients == 1:
		return fmt.Sprintf("%d workers on one client", sc.workers)
	case sc.workers%sc.clients == 0:
		return fmt.Sprintf("%d workers over %d clients, %d on each", sc.workers, sc.clients, sc.workers/sc.clients)
	}
	return fmt.Sprintf("%d workers spread over %d clients", sc.workers, sc.clients)
}

// runs tells whether the contender named name is to run: -only names none, or part of it.
func (o options) runs(name string) bool {
	if len(o.only) == 0 {
		return true
	}
	for _, w := range o.only {
		if w = strings.TrimSpace(w); w != "" && strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// results are one run's figures.
type results struct {
	opts    options
	server  string
	ping    durations
	pinned  string // how the latency scenarios ran: on which CPU, or why not pinned
	scale   scaleResult
	rows    []row
	rw      []rwRow
	sem     []semRow
	latch   *latchResult   // nil when not run
	quorum  *quorumResult  // nil when not run
	cluster *clusterResult // nil when not run
	started time.Time
}

// row is one contender's figures; err is set when it failed, note when it was not run.
type row struct {
	c         contender
	solo      durations
	parallel  float64
	contended []contendedResult
	err       error

	s          session
	key        string
	parCycles  int64
	parElapsed time.Duration
	parCPU     cpuUse // over the rounds whose CPU was read; its cycles are counted in it
}

// cpuUse is CPU time spent over cycles: by this process, which is the client side of every
// library (they run in it one at a time), and by the Redis server. Each is summed only over
// the runs it could be read for.
type cpuUse struct {
	client, server             time.Duration
	clientCycles, serverCycles int64
}

func (u cpuUse) clientPer() (time.Duration, bool) { return per(u.client, u.clientCycles) }
func (u cpuUse) serverPer() (time.Duration, bool) { return per(u.server, u.serverCycles) }

func per(d time.Duration, cycles int64) (time.Duration, bool) {
	if cycles <= 0 {
		return 0, false
	}
	return d / time.Duration(cycles), true
}

// cpuMark is the CPU readings taken as a timed run starts.
type cpuMark struct {
	client, server         time.Duration
	haveClient, haveServer bool
}

func startCPU(ctx context.Context, srv *server) cpuMark {
	var m cpuMark
	m.client, m.haveClient = processCPU()
	sv, err := srv.cpu(ctx)
	m.server, m.haveServer = sv, err == nil
	return m
}

// stop adds to u what was used since the mark, over the run's cycles.
func (m cpuMark) stop(ctx context.Context, srv *server, u *cpuUse, cycles int64) {
	if c, ok := processCPU(); ok && m.haveClient {
		u.client += c - m.client
		u.clientCycles += cycles
	}
	if sv, err := srv.cpu(ctx); err == nil && m.haveServer {
		u.server += sv - m.server
		u.serverCycles += cycles
	}
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
	if err := runLocks(ctx, srv, res, stdout); err != nil {
		return err
	}
	res.rw = runRW(ctx, srv, o, stdout)
	if err := runSemaphores(ctx, srv, res, stdout); err != nil {
		return err
	}
	res.latch = runLatch(ctx, srv, o, stdout)
	res.quorum = runQuorum(ctx, o, stdout)
	res.cluster = runCluster(ctx, o, stdout)
	overlaps, oversubscribed := res.overlaps(), res.oversubscribed()
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
		return fmt.Errorf("MUTUAL EXCLUSION VIOLATED — two holders that exclude each other held a lock at once:\n  %s", strings.Join(overlaps, "\n  "))
	}
	if len(oversubscribed) > 0 {
		return fmt.Errorf("SEMAPHORE VIOLATED — more than %d permits in use at once:\n  %s", semPermits, strings.Join(oversubscribed, "\n  "))
	}
	for _, r := range res.rows {
		if r.err != nil {
			return fmt.Errorf("%s failed: %w", r.c.name, r.err)
		}
	}
	for _, r := range res.rw {
		if r.err != nil {
			return fmt.Errorf("%s failed: %w", r.name, r.err)
		}
	}
	for _, r := range res.sem {
		if r.err != nil {
			return fmt.Errorf("%s failed: %w", r.c.name, r.err)
		}
	}
	if res.latch != nil && res.latch.err != nil {
		return fmt.Errorf("%s failed: %w", latchName, res.latch.err)
	}
	if c := res.cluster; c != nil {
		if c.err != nil {
			return fmt.Errorf("%s failed: %w", clusterName, c.err)
		}
		for _, p := range c.par {
			if p.err != nil {
				return fmt.Errorf("%s parallel on %s failed: %w", clusterName, p.name, p.err)
			}
		}
		for _, r := range c.rows {
			if r.err != nil {
				return fmt.Errorf("%s on the Cluster failed: %w", r.c.name, r.err)
			}
		}
	}
	if q := res.quorum; q != nil {
		if q.err != nil {
			return fmt.Errorf("%s failed: %w", quorumName, q.err)
		}
		for _, r := range q.rows {
			if r.err != nil {
				return fmt.Errorf("%s %s failed: %w", r.name, r.servers, r.err)
			}
		}
	}
	return nil
}

// runLocks runs the scenarios of the lock contenders -only names (all by default): waiters
// at scale, the floor, then runScenarios. When -only names none of them (-only RWLock), it
// runs nothing, so that the read-write scenario can run alone.
func runLocks(ctx context.Context, srv *server, res *results, stdout io.Writer) error {
	o := res.opts
	var cs []contender
	for _, c := range contenders() {
		if o.runs(c.name) {
			cs = append(cs, c)
		}
	}
	if len(cs) == 0 {
		return nil
	}
	// First, while the process is small, so its peak RSS is the scenario's own.
	fmt.Fprintf(stdout, "waiters at scale: %d waiters on %d locks ...\n", o.scaleWaiters, o.scaleLocks)
	var err error
	if res.scale, err = scale(ctx, srv, o.scaleWaiters, o.scaleLocks); err != nil {
		return fmt.Errorf("waiters at scale: %w", err)
	}
	pin, err := measureFloor(ctx, srv, res, stdout)
	if err != nil {
		return err
	}
	for _, c := range cs {
		r := row{c: c, key: "bench:" + strings.ReplaceAll(c.name, " ", "-")}
		if c.open != nil {
			if r.s, r.err = c.open(srv.addr); r.err == nil {
				defer r.s.close()
			}
		}
		res.rows = append(res.rows, r)
	}
	runScenarios(ctx, srv, res.rows, o, stdout, pin)
	return nil
}

// measureFloor measures the floor (see floor) as the latency scenarios run, pinned where it
// can be (see latencyPinning), records it in res and returns what pins those scenarios.
func measureFloor(ctx context.Context, srv *server, res *results, stdout io.Writer) (pin func() (unpin func()), err error) {
	pin = latencyPinning(res.opts, srv, res, stdout)
	unpin := pin()
	res.ping, err = floor(ctx, srv.addr, min(res.opts.dur, 2*time.Second))
	unpin()
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	return pin, nil
}

// overlaps lists every run in which two holders that exclude each other were inside at once.
func (res *results) overlaps() []string {
	var out []string
	for _, r := range res.rows {
		for _, cr := range r.contended {
			if cr.overlaps > 0 {
				out = append(out, fmt.Sprintf("%s: %d overlaps at %v", r.c.name, cr.overlaps, cr.scenario))
			}
		}
	}
	if res.cluster != nil {
		for _, r := range res.cluster.rows {
			for _, cr := range r.contended {
				if cr.overlaps > 0 {
					out = append(out, fmt.Sprintf("%s: %d overlaps at %v on the Cluster", r.c.name, cr.overlaps, cr.scenario))
				}
			}
		}
	}
	for _, r := range res.rw {
		if r.res.overlaps > 0 {
			out = append(out, fmt.Sprintf("%s: %d overlaps in the read-write scenario", r.name, r.res.overlaps))
		}
	}
	return out
}

// runScenarios runs every scenario for every contender. Each scenario's time is split into
// rounds in which the contenders take turns, so that a machine whose speed drifts (a shared
// or throttled CPU, a noisy neighbour) does not favour whoever happened to run in a fast
// spell. A contender that fails is dropped from the remaining turns.
func runScenarios(ctx context.Context, srv *server, rows []row, o options, stdout io.Writer, pin func() (unpin func())) {
	slice := o.dur / time.Duration(o.rounds)
	turn := func(what string, f func(r *row) error) {
		fmt.Fprintf(stdout, "%s ...\n", what)
		for range o.rounds {
			for i := range rows {
				r := &rows[i]
				if r.s == nil || r.err != nil {
					continue
				}
				if err := f(r); err != nil {
					r.err = fmt.Errorf("%s: %w", what, err)
				}
			}
		}
	}
	turn("solo", func(r *row) error {
		unpin := pin()
		d, err := solo(ctx, r.s, r.key+":solo", slice)
		unpin()
		r.solo = append(r.solo, d...)
		return err
	})
	turn("parallel", func(r *row) error {
		stats := o.cmdstats && resetStats(ctx, srv) == nil
		cpu := startCPU(ctx, srv)
		n, el, err := parallel(ctx, r.s, r.key+":parallel:", o.parallel, slice)
		cpu.stop(ctx, srv, &r.parCPU, n)
		r.parCycles += n
		r.parElapsed += el
		if el > 0 {
			r.parallel = float64(r.parCycles) / r.parElapsed.Seconds()
		}
		if stats {
			printStats(ctx, srv, stdout, fmt.Sprintf("%s parallel, %d cycles; server µs per cycle", r.c.name, n), n, usecPer)
		}
		return err
	})
	for i, sc := range o.contended {
		turn("contended "+sc.String(), func(r *row) error {
			if len(r.contended) <= i {
				r.contended = append(r.contended, contendedResult{})
			}
			ss, closeAll, err := r.sessions(ctx, srv.addr, sc)
			if err != nil {
				return err
			}
			defer closeAll()
			cr, err := contended(ctx, srv, ss, fmt.Sprintf("%s:contended:%d/%d", r.key, sc.workers, sc.clients), sc, slice)
			if err != nil {
				return err
			}
			r.contended[i].add(cr)
			if o.cmdstats { // contended reset the stats as it started
				printStats(ctx, srv, stdout, fmt.Sprintf("%s %v, %d acquisitions; calls per acquisition", r.c.name, sc, cr.acquisitions),
					cr.acquisitions, callsPer)
			}
			return nil
		})
	}
}

// sessions returns the sessions sc spreads its workers over. One client is the row's own
// session, as in a single instance of a service. More are opened here, one per client as each
// instance of a service has its own, warmed up with the row's session holding the lock (see
// openSessions), and closed by closeAll.
func (r *row) sessions(ctx context.Context, addr string, sc scenario) (ss []session, closeAll func(), err error) {
	if sc.clients == 1 {
		return []session{r.s}, func() {}, nil
	}
	return openSessions(ctx, addr, r.c.open, r.s, sc.clients, (sc.workers+sc.clients-1)/sc.clients, r.key+":warm")
}

// openSessions opens n sessions with open and warms them up (see warmUp): perSession waiters
// of each wait on key while holder holds it (nil: the first of the sessions). Their first
// timed wait then finds what waiting needs already dialled, as in a service that has been
// running. closeAll closes them.
func openSessions(ctx context.Context, addr string, open func(string) (session, error), holder session, n, perSession int, key string) (ss []session, closeAll func(), err error) {
	closeAll = func() {
		for _, s := range ss {
			s.close()
		}
	}
	for i := range n {
		s, err := open(addr)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("client %d of %d: %w", i+1, n, err)
		}
		ss = append(ss, s)
	}
	if holder == nil {
		holder = ss[0]
	}
	if err := warmUp(ctx, holder, ss, key, perSession); err != nil {
		closeAll()
		return nil, nil, err
	}
	return ss, closeAll, nil
}

// latencyPinning returns what pins the latency scenarios to one CPU (see pinOneCPU), and
// records in res how they ran. Pinning needs the redis-server this run started; with -redis
// or -pin=false, or where it fails, they run unpinned.
func latencyPinning(o options, srv *server, res *results, stdout io.Writer) func() (unpin func()) {
	none := func() func() { return func() {} }
	switch {
	case !o.pin:
		res.pinned = "unpinned (-pin=false)"
		return none
	case srv.cmd == nil:
		res.pinned = "unpinned (Redis not started by this run)"
		return none
	}
	restore, cpu, err := pinOneCPU(srv.cmd.Process.Pid)
	if err != nil {
		res.pinned = "unpinned (" + err.Error() + ")"
		fmt.Fprintf(stdout, "Latency scenarios run unpinned: %v\n", err)
		return none
	}
	restore()
	res.pinned = fmt.Sprintf("with the benchmark and Redis on one CPU (%d)", cpu)
	return func() func() {
		restore, _, err := pinOneCPU(srv.cmd.Process.Pid)
		if err != nil {
			return func() {}
		}
		return restore
	}
}

func resetStats(ctx context.Context, srv *server) error {
	return srv.admin.Do(ctx, srv.admin.B().ConfigResetstat().Build()).Error()
}

// countedSinceReset returns the commands Redis ran since resetStats (see countedCalls), and
// whether INFO commandstats could be read.
func countedSinceReset(ctx context.Context, srv *server) (int64, bool) {
	info, err := readStats(ctx, srv)
	if err != nil {
		return 0, false
	}
	return countedCalls(info), true
}

// readStats returns INFO commandstats.
func readStats(ctx context.Context, srv *server) (string, error) {
	return srv.admin.Do(ctx, srv.admin.B().Info().Section("commandstats").Build()).ToString()
}

func printStats(ctx context.Context, srv *server, w io.Writer, what string, n int64, summarise func(string, int64) string) {
	stats, err := readStats(ctx, srv)
	if err != nil {
		fmt.Fprintf(w, "  %s: %v\n", what, err)
		return
	}
	fmt.Fprintf(w, "  %s:%s\n", what, summarise(stats, n))
}

func redisVersion(info string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "unknown"
}
