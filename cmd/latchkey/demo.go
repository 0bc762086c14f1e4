package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/latchkey/latchkey/internal/embedredis"
	"github.com/redis/rueidis"
)

const demoSummary = "show on an embedded Redis why a distributed lock is needed and how it behaves"

// demoConfig holds the demo's knobs. The command line sets the stock scenario; the timings
// are fields so the test can run the whole demo in about a second.
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

	stepTimeout time.Duration // bounds each section, so a bug hangs nothing for long
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
		stepTimeout:  time.Minute,
	}
}

// demoCommand is "latchkey demo [flags]".
func demoCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := defaultDemoConfig()
	fs := flag.NewFlagSet("latchkey demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.instances, "instances", cfg.instances, "service instances, each with its own Redis connection and dsync.Client")
	fs.IntVar(&cfg.buyers, "buyers-per-instance", cfg.buyers, "concurrent buyers (goroutines) per instance")
	fs.IntVar(&cfg.stock, "stock", cfg.stock, "items in stock when the sale opens")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: latchkey demo [flags]\n\n%s.\nIt needs no Redis server: it starts an embedded one.\n\nflags:\n", demoSummary)
		fs.PrintDefaults()
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
	case cfg.instances < 1:
		bad = fmt.Sprintf("-instances must be at least 1, got %d", cfg.instances)
	case cfg.buyers < 1:
		bad = fmt.Sprintf("-buyers-per-instance must be at least 1, got %d", cfg.buyers)
	case cfg.stock < 0:
		bad = fmt.Sprintf("-stock must not be negative, got %d", cfg.stock)
	}
	if bad != "" {
		fmt.Fprintf(stderr, "latchkey demo: %s\n", bad)
		fs.Usage()
		return errUsage
	}
	return runDemo(ctx, stdout, cfg)
}

// demo is one run of the demo: where it prints, its settings and its server.
type demo struct {
	w    io.Writer
	cfg  demoConfig
	addr string
}

// runDemo starts an embedded Redis, runs the four sections against it and returns an error
// naming the first invariant that did not hold.
func runDemo(ctx context.Context, w io.Writer, cfg demoConfig) error {
	srv, err := embedredis.Start()
	if err != nil {
		return err
	}
	defer srv.Close()
	d := &demo{w: w, cfg: cfg, addr: srv.Addr()}
	d.printf("Embedded Redis (miniredis, clock in real time) on %s.\n", d.addr)

	sections := []struct {
		title string
		run   func(context.Context) error
	}{
		{"Stock sale WITHOUT a lock", d.saleWithoutLock},
		{"Stock sale WITH a lock", d.saleWithLock},
		{"A waiter woken by pub/sub", d.wake},
		{"A lease kept by the watchdog", d.watchdog},
	}
	start := time.Now()
	for i, s := range sections {
		d.printf("\n== %d/%d %s ==\n", i+1, len(sections), s.title)
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

// connect opens a rueidis client to the embedded server; each one stands for the Redis
// connection of one service instance.
func (d *demo) connect() (rueidis.Client, error) {
	return rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{d.addr},
		// miniredis has no CLIENT TRACKING, which client-side caching needs.
		DisableCache: true,
		// miniredis answers CLUSTER SLOTS, which would make rueidis build a cluster client
		// for what is a single server.
		ForceSingleClient: true,
	})
}

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
