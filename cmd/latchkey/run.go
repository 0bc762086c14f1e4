package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	dsync "github.com/latchkey/latchkey/sync"
	"github.com/redis/rueidis"
)

const runSummary = "run a command while holding a lock, a read or write lock, or a semaphore permit"

// runSpec is the help of "latchkey run".
func runSpec() spec {
	return spec{
		synopsis: "run (--lock NAME [--fair|--fenced] | --semaphore NAME --permits N | --read NAME | --write NAME) [flags] -- CMD [ARG...]",
		about: `Takes the lock (or permit), runs CMD while holding it, and releases it when CMD exits,
whatever the cause. The lease is renewed every third of --lease while CMD runs, so a
latchkey killed with -9 frees the lock at most --lease later, and CMD dies with it, with
everything it started (in its process group). CMD runs in a process group of its own: signals sent to latchkey (INT,
TERM, HUP, QUIT, USR1, USR2) are passed on to it, and on a terminal it has the foreground
(it reads the terminal and gets Ctrl-C; Ctrl-Z stops the job, latchkey with CMD, and fg
continues it — meanwhile the lease is not renewed). Should the lease be lost while CMD runs (the key
deleted, Redis unreachable for longer than the lease), CMD gets SIGTERM, and SIGKILL after
--grace.

While it waits, and stderr is a terminal, a live line shows the time waited, the holder,
the place in a fair lock's queue or the permits free; --quiet turns it off.

Exit status: CMD's own (128+n if it died of signal n); 75 when not acquired within --wait;
76 when the lease was lost while CMD ran; 126/127 when CMD cannot be executed or is not
found; 128+n when latchkey got signal n while waiting; 1 for latchkey's own failures
(Redis unreachable); 2 for a bad command line (or a name the library refuses).`,
		examples: []string{
			"latchkey run --lock nightly-report --wait 0 -- /usr/local/bin/report   # cron: skip if running elsewhere",
			"latchkey run --lock db-migrate --fenced -- ./migrate.sh                # it gets $LATCHKEY_TOKEN",
			"latchkey run --semaphore batch --permits 5 --wait 10m -- ./step.sh      # five at a time",
			"latchkey run --read config --lease 10s -- ./read-config.sh",
		},
	}
}

// runOptions are run's flags.
type runOptions struct {
	target
	wait  optDuration
	lease time.Duration
	grace time.Duration
	quiet bool
	redis *string
}

// forwarded are the signals run passes on to the command. While it waits, any of them ends
// it, as their default action would.
func forwarded() []os.Signal {
	return []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}
}

// runCommand is "latchkey run".
func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, argv, err := parseRun(args, stderr)
	if err != nil {
		return err
	}
	opt, err := redisOptions(*o.redis)
	if err != nil {
		return usageMessage(stderr, "run", err)
	}
	// Registered before any waiting, so that no signal meant for the command is lost to the
	// default action in between. Until the command starts, the first one ends run (128+n):
	// it is what ends wctx, and nothing else does (main's context ends on SIGINT too, which
	// would race it).
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded()...)
	defer signal.Stop(sigs)
	wctx, stopWatching := untilSignal(context.WithoutCancel(ctx), sigs)
	s, h, err := connectAndWait(wctx, opt, o, stderr)
	stopWatching()
	if err != nil {
		return err
	}
	defer s.close()
	c, err := startChild(argv, h.env, stdout, stderr)
	if err != nil {
		releaseHeld(ctx, h, false, stderr)
		return err
	}
	lost, werr := c.supervise(sigs, h.lost, o.grace, stderr, o.what())
	releaseHeld(ctx, h, lost, stderr)
	code, err := status(werr)
	switch {
	case lost:
		return &exitStatus{code: exitLeaseLost, msg: fmt.Sprintf("the lease of %s was lost while the command ran (it exited with status %d)", o.what(), code)}
	case err != nil:
		return err
	case code != 0:
		return &exitStatus{code: code}
	}
	return nil
}

// parseRun parses run's command line into its options and the command to run.
func parseRun(args []string, stderr io.Writer) (runOptions, []string, error) {
	fs := newFlags("run", runSpec(), stderr)
	o := runOptions{lease: dsync.DefaultWatchdogTimeout, grace: 10 * time.Second}
	fs.StringVar(&o.lock, "lock", "", "hold the lock called `NAME`")
	fs.BoolVar(&o.fair, "fair", false, "with --lock: a fair lock, granted in the order asked for")
	fs.BoolVar(&o.fenced, "fenced", false, "with --lock: a fenced lock; CMD gets its token as $"+envToken)
	fs.StringVar(&o.semaphore, "semaphore", "", "hold one permit of the permit-expirable semaphore called `NAME`")
	fs.IntVar(&o.permits, "permits", 0, "with --semaphore: the semaphore's `N` permits in all, set when it has none yet")
	fs.StringVar(&o.read, "read", "", "hold a read lock of the read-write lock called `NAME`")
	fs.StringVar(&o.write, "write", "", "hold the write lock of the read-write lock called `NAME`")
	fs.Var(&o.wait, "wait", "give up after waiting `D` (exit 75); 0: one attempt (default: wait as long as it takes)")
	fs.Var(positiveDuration{&o.lease}, "lease", "the lease `D`: renewed every D/3 while CMD runs; the lock outlives a killed latchkey by at most D")
	fs.Var(positiveDuration{&o.grace}, "grace", "after a lost lease, the time `D` between CMD's SIGTERM and its SIGKILL")
	fs.BoolVar(&o.quiet, "quiet", false, "show no progress line while waiting")
	o.redis = redisFlag(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, nil, errHelp
		}
		return o, nil, errUsage
	}
	argv := fs.Args()
	n := 0
	for _, name := range []string{o.lock, o.semaphore, o.read, o.write} {
		if name != "" {
			n++
		}
	}
	switch {
	case n != 1:
		return o, nil, usageError(fs, "give exactly one of --lock, --semaphore, --read and --write")
	case (o.fair || o.fenced) && o.lock == "":
		return o, nil, usageError(fs, "--fair and --fenced go with --lock")
	case o.fair && o.fenced:
		return o, nil, usageError(fs, "--fair and --fenced do not go together: a fenced lock is not fair")
	case o.semaphore != "" && o.permits < 1:
		return o, nil, usageError(fs, "--semaphore needs --permits, at least 1, got %d", o.permits)
	case o.semaphore == "" && o.permits != 0:
		return o, nil, usageError(fs, "--permits goes with --semaphore")
	case o.lease < 3*time.Millisecond:
		return o, nil, usageError(fs, "--lease must be at least 3ms, got %v", o.lease)
	case len(argv) == 0:
		return o, nil, usageError(fs, "no command to run: give it after --")
	}
	return o, argv, nil
}

// A signalCause ends run's context: a signal came before the command started.
type signalCause struct{ sig os.Signal }

func (c signalCause) Error() string { return c.sig.String() }

// untilSignal returns a context that the first of sigs ends, with a signalCause, until
// stop is called; stop waits until sigs is no longer read, so that every later signal is
// the command's.
func untilSignal(parent context.Context, sigs <-chan os.Signal) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		select {
		case sig := <-sigs:
			cancel(signalCause{sig})
		case <-quit:
		}
	}()
	return ctx, func() { close(quit); <-done }
}

// signalled is the exit status of a run that a signal ended (see untilSignal) while it was
// doing what, if one did.
func signalled(ctx context.Context, what string) error {
	var sc signalCause
	if !errors.As(context.Cause(ctx), &sc) {
		return nil
	}
	return &exitStatus{code: exitSignalOffset + signalNumber(sc.sig), msg: fmt.Sprintf("%v while %s", sc.sig, what)}
}

// connectAndWait connects to Redis and acquires o's target, showing progress on a
// terminal. A signal (ctx's end) ends it with the status 128+n; a wait that runs out, with
// exitNotAcquired. On an error, nothing is held and the session is closed.
func connectAndWait(ctx context.Context, opt rueidis.ClientOption, o runOptions, stderr io.Writer) (*session, *held, error) {
	// rueidis dials without a context: a signal does not wait for it.
	type connected struct {
		s   *session
		err error
	}
	ch := make(chan connected, 1)
	go func() {
		s, err := connect(opt, dsync.WithWatchdogTimeout(o.lease))
		ch <- connected{s, err}
	}()
	var c connected
	select {
	case c = <-ch:
	case <-ctx.Done():
		go func() {
			if c := <-ch; c.err == nil {
				c.s.close()
			}
		}()
		return nil, nil, signalled(ctx, "connecting to Redis")
	}
	s, err := c.s, c.err
	if err != nil {
		return nil, nil, err
	}
	h, err := pingAndWait(ctx, s, o, stderr)
	if err != nil {
		s.close()
		return nil, nil, err
	}
	return s, h, nil
}

func pingAndWait(ctx context.Context, s *session, o runOptions, stderr io.Writer) (*held, error) {
	if err := s.ping(ctx); err != nil {
		if serr := signalled(ctx, "connecting to Redis"); serr != nil {
			return nil, serr
		}
		return nil, err
	}
	h, err := acquireShowing(ctx, s, o, stderr)
	if serr := signalled(ctx, "waiting for "+o.what()); serr != nil {
		if h != nil { // taken as the wait was cancelled
			releaseHeld(ctx, h, false, stderr)
		}
		return nil, serr
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("acquire %s: %w", o.what(), err)
	case h == nil:
		return nil, &exitStatus{code: exitNotAcquired, msg: fmt.Sprintf("%s not acquired within --wait %v", o.what(), o.wait.d)}
	}
	return h, nil
}

// acquireShowing acquires o's target, with the progress line while it waits.
func acquireShowing(ctx context.Context, s *session, o runOptions, stderr io.Writer) (*held, error) {
	stop := startProgress(ctx, s, o, stderr)
	defer stop()
	return acquire(ctx, s.c, o.target, o.wait, stderr)
}

// signalNumber is sig's number; every signal run asks for is a syscall.Signal.
func signalNumber(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return int(s)
	}
	return 0
}

// releaseHeld gives back h, even when ctx has ended (a signal), within a bound of its own.
func releaseHeld(ctx context.Context, h *held, lost bool, stderr io.Writer) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := h.release(rctx); releaseFailed(err, lost) {
		fmt.Fprintf(stderr, "latchkey run: release: %v (it lapses with its lease)\n", err)
	}
}

// usageMessage reports a bad command line found after parsing, such as a bad --redis URL.
func usageMessage(stderr io.Writer, cmd string, err error) error {
	fmt.Fprintf(stderr, "latchkey %s: %v\n", cmd, err)
	return errUsage
}
