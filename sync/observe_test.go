package sync

import (
	"context"
	"errors"
	gosync "sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/watchdog"
)

// events records what an Observer hears.
type events struct {
	mu       gosync.Mutex
	acquired []Acquisition
	released []Release
	leases   []LeaseEvent
	outcomes []OutcomeEvent
}

func (e *events) Acquired(a Acquisition) {
	e.mu.Lock()
	e.acquired = append(e.acquired, a)
	e.mu.Unlock()
}
func (e *events) Released(r Release) { e.mu.Lock(); e.released = append(e.released, r); e.mu.Unlock() }
func (e *events) Lease(l LeaseEvent) { e.mu.Lock(); e.leases = append(e.leases, l); e.mu.Unlock() }
func (e *events) Outcome(o OutcomeEvent) {
	e.mu.Lock()
	e.outcomes = append(e.outcomes, o)
	e.mu.Unlock()
}
func (e *events) lease(want watchdog.LeaseEvent) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range e.leases {
		if l.Event == want {
			return true
		}
	}
	return false
}

// classOf is a classify that keeps the label set bounded: the name's part before its first
// ':'.
func classOf(name string) string {
	for i := range len(name) {
		if name[i] == ':' {
			return name[:i]
		}
	}
	return name
}

// An Observer hears acquisitions (taken, timed out), releases (how long held, handed off),
// leases (renewed, lost) and unknown outcomes with their settling, each with the primitive's
// kind and the name's class.
func TestObserverHearsWhatPrimitivesDo(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		type callerKey struct{}
		ctx := context.WithValue(testCtx(t, 20*time.Second), callerKey{}, "caller")
		ev := &events{}
		// Renewals every second: a Renewed event comes within waitFor.
		c, rdb := newClient(t, b.Addr, WithObserver(ev, classOf), WithWatchdogTimeout(3*time.Second))
		other, _ := newClient(t, b.Addr)

		l := c.Lock("orders:42")
		must(t, l.Lock(ctx))
		locked := time.Now()
		eventually(t, waitFor, "a renewal heard", func() bool { return ev.lease(watchdog.Renewed) })
		minHeld := time.Since(locked) // the hold is older than that when Unlock begins
		must(t, l.Unlock(ctx))
		must(t, other.Lock("orders:42").Lock(ctx))
		if ok, err := c.Lock("orders:42").TryLock(ctx, WaitTime(50*time.Millisecond)); ok || err != nil {
			t.Fatalf("TryLock of a lock held elsewhere: %v, %v", ok, err)
		}

		s := c.Semaphore("gate:a")
		must(t, s.SetPermits(ctx, 1))
		must(t, s.Acquire(ctx, 1))
		waiter := make(chan error, 1)
		go func() { waiter <- c.Semaphore("gate:a").Acquire(ctx, 1) }()
		parked(t, c, s, 1)
		must(t, s.Release(ctx, 1)) // to the parked waiter of this Client
		must(t, <-waiter)

		lost := c.Lock("lost:1")
		must(t, lost.Lock(ctx))
		must(t, rdb.Do(ctx, rdb.B().Del().Key("lost:1").Build()).Error())
		eventually(t, waitFor, "the lost lease heard", func() bool { return ev.lease(watchdog.LeaseLost) })

		ev.mu.Lock()
		defer ev.mu.Unlock()
		want := []struct {
			kind, class  string
			taken, timed bool
		}{
			{"lock", "orders", true, false},
			{"lock", "orders", false, true},
			{"semaphore", "gate", true, false},
			{"semaphore", "gate", true, false},
			{"lock", "lost", true, false},
		}
		if len(ev.acquired) != len(want) {
			t.Fatalf("%d acquisitions heard, want %d: %+v", len(ev.acquired), len(want), ev.acquired)
		}
		for i, w := range want {
			a := ev.acquired[i]
			if a.Kind != w.kind || a.Class != w.class || a.Taken != w.taken || a.TimedOut != w.timed || a.Err != nil || a.Permits != 1 {
				t.Errorf("acquisition %d: %+v, want %s/%s taken %v timed out %v", i, a, w.kind, w.class, w.taken, w.timed)
			}
			if a.Context == nil || a.Context.Value(callerKey{}) != "caller" {
				t.Errorf("acquisition %d: its Context is not the caller's", i)
			}
		}
		if a := ev.acquired[1]; a.Wait < 50*time.Millisecond {
			t.Errorf("the timed-out acquisition waited %v, want its 50ms at least", a.Wait)
		}
		if len(ev.released) != 2 {
			t.Fatalf("%d releases heard, want 2: %+v", len(ev.released), ev.released)
		}
		if r := ev.released[0]; r.Kind != "lock" || r.Class != "orders" || r.Held < minHeld || r.HandedOff || r.Err != nil {
			t.Errorf("the lock's release: %+v, want held %v at least, not handed off", r, minHeld)
		}
		if r := ev.released[1]; r.Kind != "semaphore" || !r.HandedOff || r.Err != nil {
			t.Errorf("the semaphore's release: %+v, want handed off to the parked waiter", r)
		}
		for _, l := range ev.leases {
			if l.Kind != "lock" || (l.Class != "orders" && l.Class != "lost") {
				t.Errorf("lease event %+v, want kind lock, class orders or lost", l)
			}
		}
	})
}

// A request whose outcome is unknown is heard, and so is its settling.
func TestObserverHearsUnknownOutcomes(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		ev := &events{}
		p := newHoldProxy(t, b.Addr)
		c, _ := newClient(t, p.addr(), WithLocalHandoff(0), WithRetryBudget(shortBudget), WithObserver(ev, nil))
		l := c.Lock("unknown", Reentrant())
		must(t, l.Lock(ctx))
		unknownUnlock(t, ctx, p, l, false)
		must(t, l.Lock(ctx)) // settles the release first
		must(t, l.Unlock(ctx))
		ev.mu.Lock()
		defer ev.mu.Unlock()
		if len(ev.outcomes) != 2 || ev.outcomes[0].Settled || !ev.outcomes[1].Settled || ev.outcomes[1].Err != nil ||
			ev.outcomes[0].Kind != "lock" || ev.outcomes[0].Class != "" {
			t.Fatalf("outcomes %+v, want one unknown, then settled", ev.outcomes)
		}
		var unknown int
		for _, r := range ev.released {
			if errors.Is(r.Err, ErrOutcomeUnknown) {
				unknown++
			}
		}
		if unknown != 1 {
			t.Errorf("releases %+v, want one of unknown outcome", ev.released)
		}
	})
}

var _ Observer = NopObserver{}
