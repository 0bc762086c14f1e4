package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	dsync "github.com/latchkey/latchkey/sync"
)

const gateKey = "demo:downstream"

func defaultGateConfig() demoConfig { return defaultDemoConfig() }

// gateFlags are the gate demo's flags, bound to cfg.
func gateFlags(cfg *demoConfig) []demoFlag {
	return []demoFlag{
		{name: "instances", value: &cfg.instances, least: 1, usage: "service instances, each with its own Redis connection and dsync.Client"},
		{name: "callers-per-instance", value: &cfg.callers, least: 1, usage: "concurrent callers (goroutines) per instance, one call each"},
		{name: "permits", value: &cfg.permits, least: 1, usage: "permits of the semaphore: the most calls the downstream may see at once"},
	}
}

// runGateDemo runs the gate demo: a downstream service called by every instance at once,
// without a gate and then through a Semaphore.
func runGateDemo(ctx context.Context, w io.Writer, cfg demoConfig) error {
	return runSections(ctx, w, cfg, func(d *demo) []section {
		return []section{
			{"Calls WITHOUT a gate", d.callsWithoutGate},
			{fmt.Sprintf("Calls through a %d-permit Semaphore", cfg.permits), d.callsThroughGate},
		}
	})
}

// downstream is the fake service the gate protects: each call takes a while, and it keeps
// count of the calls in progress and of their most at once.
type downstream struct {
	took        time.Duration
	calls       atomic.Int64
	inFlight    atomic.Int64
	maxInFlight atomic.Int64
}

func (s *downstream) call(ctx context.Context) error {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		peak := s.maxInFlight.Load()
		if n <= peak || s.maxInFlight.CompareAndSwap(peak, n) {
			break
		}
	}
	s.calls.Add(1)
	return sleep(ctx, s.took)
}

func (d *demo) reportGate(s *downstream, elapsed time.Duration) {
	d.printf("calls %d, downstream peak concurrency %d (it allows %d), elapsed %v\n",
		s.calls.Load(), s.maxInFlight.Load(), d.cfg.permits, elapsed.Round(time.Millisecond))
}

func (d *demo) callsWithoutGate(ctx context.Context) error {
	d.printf("A downstream service takes %v a call and must never see more than %d calls at once.\n",
		d.cfg.callTime, d.cfg.permits)
	d.printf("%d instances x %d callers each call it once, all at the same moment:\n", d.cfg.instances, d.cfg.callers)
	s := &downstream{took: d.cfg.callTime}
	// Nothing coordinates these callers, so they need no Redis connection: instances with
	// none stand for them.
	elapsed, err := together(ctx, make([]instance, d.cfg.instances), d.cfg.callers,
		func(ctx context.Context, _ instance) error { return s.call(ctx) })
	if err != nil {
		return err
	}
	d.reportGate(s, elapsed)
	if s.maxInFlight.Load() > int64(d.cfg.permits) {
		d.printf("Each instance knows only its own calls, so together they sent %.1fx what the downstream allows.\n",
			float64(s.maxInFlight.Load())/float64(d.cfg.permits))
	} else {
		d.printf("No overload this time (too few callers); nothing kept it from happening.\n")
	}
	return nil
}

func (d *demo) callsThroughGate(ctx context.Context) error {
	insts, closeAll, err := d.openInstances(d.cfg.instances)
	if err != nil {
		return err
	}
	defer closeAll()

	// Every instance sets the permits at startup; only the first to come finds no semaphore,
	// so a restart never hands out a second set of them.
	sems := make(map[*dsync.Client]*dsync.Semaphore, len(insts))
	set := 0
	for _, in := range insts {
		sem := in.dc.Semaphore(gateKey)
		sems[in.dc] = sem
		ok, err := sem.TrySetPermits(ctx, d.cfg.permits)
		if err != nil {
			return err
		}
		if ok {
			set++
		}
	}
	if set != 1 {
		return fmt.Errorf("%d of %d instances set the permits with TrySetPermits, want 1", set, len(insts))
	}
	d.printf("Each instance called TrySetPermits(%d) on Semaphore %q at startup: 1 set the permits,\n",
		d.cfg.permits, gateKey)
	d.printf("%d found them set. Each caller wraps its call in Acquire(ctx, 1) / Release(ctx, 1) on its\n", len(insts)-1)
	d.printf("instance's handle (permits are counted, not owned, so one handle serves every caller).\n")

	s := &downstream{took: d.cfg.callTime}
	elapsed, err := together(ctx, insts, d.cfg.callers, func(ctx context.Context, in instance) error {
		return gatedCall(ctx, sems[in.dc], s)
	})
	if err != nil {
		return err
	}
	d.reportGate(s, elapsed)
	left, err := sems[insts[0].dc].AvailablePermits(ctx)
	if err != nil {
		return err
	}
	d.printf("permits available afterwards %d of %d\n", left, d.cfg.permits)
	want := int64(d.cfg.instances * d.cfg.callers)
	switch peak := s.maxInFlight.Load(); {
	case peak > int64(d.cfg.permits):
		return fmt.Errorf("the downstream saw %d calls at once through a %d-permit semaphore", peak, d.cfg.permits)
	case s.calls.Load() != want:
		return fmt.Errorf("%d calls made, want %d", s.calls.Load(), want)
	case left != d.cfg.permits:
		return fmt.Errorf("%d permits available after every call, want %d: a permit was lost or made up", left, d.cfg.permits)
	case peak < int64(min(d.cfg.permits, d.cfg.instances*d.cfg.callers)):
		d.printf("(The gate let fewer calls through at once than it allows: the callers came too slowly to fill it.)\n")
	}
	d.printf("Slower, as at most %d calls now run at once, but the downstream never saw more than %d,\n",
		d.cfg.permits, d.cfg.permits)
	d.printf("whichever instance they came from, and every permit came back.\n")
	return nil
}

// gatedCall makes one call to s with a permit of sem.
func gatedCall(ctx context.Context, sem *dsync.Semaphore, s *downstream) (err error) {
	if err := sem.Acquire(ctx, 1); err != nil {
		return err
	}
	defer func() {
		// Given back even when the call failed: a permit not released is lost for good, as
		// permits have no lease. Release is repeated whatever ctx says, so a cancelled ctx
		// does not lose it either.
		err = errors.Join(err, sem.Release(ctx, 1))
	}()
	return s.call(ctx)
}
