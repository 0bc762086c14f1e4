package sync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

// A hold's context ends with the hold: at Unlock (ErrHoldEnded), or when the lease is lost
// (ErrLockLost); a handle holding nothing gives a context that has ended (ErrNotHeld).
func TestHoldContextEndsWithTheHold(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		ctx := testCtx(t, 20*time.Second)
		c, _ := newClient(t, b.Addr)
		for _, kind := range mutexKinds {
			t.Run(kind.name, func(t *testing.T) {
				t.Parallel() // each waits for its lease to run out
				mu := c.Lock("hold-ctx:" + kind.name)
				if hctx, cancel := mu.HoldContext(ctx); hctx.Err() == nil || !errors.Is(context.Cause(hctx), ErrNotHeld) {
					t.Fatalf("HoldContext of a handle holding nothing: %v (%v), want it ended with ErrNotHeld", hctx.Err(), context.Cause(hctx))
				} else {
					cancel()
				}
				must(t, mu.Lock(ctx))
				hctx, cancel := mu.HoldContext(ctx)
				defer cancel()
				if hctx.Err() != nil {
					t.Fatalf("the hold's context ended while held: %v", context.Cause(hctx))
				}
				must(t, mu.Unlock(ctx))
				select {
				case <-hctx.Done():
				case <-time.After(waitFor):
					t.Fatal("the hold's context did not end at Unlock")
				}
				if cause := context.Cause(hctx); !errors.Is(cause, ErrHoldEnded) {
					t.Fatalf("cause %v, want ErrHoldEnded", cause)
				}

				// A lease that runs out: the context ends with the loss. Long enough to outlast
				// the acquisition on a loaded machine (300 ms did not under two CPU hogs).
				const lease = 5 * time.Second
				must(t, mu.Lock(ctx, Lease(lease)))
				lctx, lcancel := mu.HoldContext(ctx)
				defer lcancel()
				select {
				case <-lctx.Done():
				case <-time.After(lease + waitFor):
					t.Fatal("the hold's context did not end when its lease ran out")
				}
				if cause := context.Cause(lctx); !errors.Is(cause, ErrLockLost) {
					t.Fatalf("cause %v, want ErrLockLost", cause)
				}
				if err := mu.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
					t.Fatalf("Unlock of the lost hold: %v, want ErrNotHeld", err)
				}
			})
		}
	})
}

// Extend lengthens a hold with a fixed lease, never shortens one, and reports a hold that is
// gone.
func TestExtend(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		c, admin := newClient(t, b.Addr)
		const name = "extend"
		mu := c.Lock(name)
		if err := mu.Extend(ctx, time.Minute); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("Extend of a handle holding nothing: %v, want ErrNotHeld", err)
		}
		// Leases long enough to outlast the steps up to their Extend on a loaded machine (2 s
		// ran out first under two CPU hogs).
		must(t, mu.Lock(ctx, Lease(10*time.Second)))
		must(t, mu.Extend(ctx, time.Minute))
		if ttl := pttl(t, admin, name); ttl < 50_000 {
			t.Fatalf("PTTL %d ms after Extend(1m), want about a minute", ttl)
		}
		if d, ok := mu.Deadline(); !ok || time.Until(d) < 50*time.Second {
			t.Fatalf("Deadline %v (%v) after Extend(1m), want about a minute ahead", time.Until(d), ok)
		}
		must(t, mu.Extend(ctx, time.Second)) // leases only grow
		if ttl := pttl(t, admin, name); ttl < 50_000 {
			t.Fatalf("PTTL %d ms after Extend(1s), want the minute kept", ttl)
		}
		if err := mu.Extend(ctx, 0); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("Extend(0): %v, want ErrInvalidArgument", err)
		}
		must(t, admin.Do(ctx, admin.B().Del().Key(name).Build()).Error())
		if err := mu.Extend(ctx, time.Minute); !errors.Is(err, ErrLockLost) {
			t.Fatalf("Extend of a deleted hold: %v, want ErrLockLost", err)
		}
		if !closed(mu.Lost()) {
			t.Fatal("Lost not closed after Extend found the hold gone")
		}

		rw := c.RWLock("extend:rw")
		must(t, rw.RLock(ctx, Lease(10*time.Second)))
		must(t, rw.RExtend(ctx, time.Minute))
		if ttl := pttl(t, admin, "extend:rw"); ttl < 50_000 {
			t.Fatalf("read lock PTTL %d ms after RExtend(1m), want about a minute", ttl)
		}
		must(t, rw.RUnlock(ctx))
		must(t, rw.Lock(ctx, Lease(10*time.Second)))
		must(t, rw.Extend(ctx, time.Minute))
		if ttl := pttl(t, admin, "extend:rw"); ttl < 50_000 {
			t.Fatalf("write lock PTTL %d ms after Extend(1m), want about a minute", ttl)
		}
		must(t, rw.Unlock(ctx))
	})
}

// A first hold (owner.took) taken while the lease of a given-up hold is still lapsing
// (timed with its old deadline) gets a deadline of its own, not the lapsing one. The state is
// set up through the core: the lapsing lease of a released hold whose key is gone.
func TestNewHoldStopsLapsingLease(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		const name = "new-hold-lapsing-lease"
		c, admin := newClient(t, b.Addr)
		l := c.Lock(name, Reentrant())
		if ok, err := l.TryLock(ctx, Lease(time.Hour)); !ok || err != nil {
			t.Fatalf("TryLock: %v, %v", ok, err)
		}
		must(t, l.o.lock(ctx))
		lease := l.o.lease.Load()
		lease.Stop()
		l.o.count = 0 // the hold was given up...
		lease.Lapse() // ...and its lease lapses with its old deadline, an hour ahead
		l.o.unlock()
		must(t, admin.Do(ctx, admin.B().Del().Key(name).Build()).Error())

		// Short beside the lapsing lease's hour, long enough to outlast the acquisition on a
		// loaded machine (1 s may not).
		const short = 10 * time.Second
		ok, err := l.TryLock(ctx, Lease(short))
		took := time.Now()
		if !ok || err != nil {
			t.Fatalf("TryLock: %v, %v", ok, err)
		}
		if d, dok := l.Deadline(); !dok || d.After(took.Add(short)) {
			t.Fatalf("deadline %v ahead (%v) after TryLock(Lease(%v)), want at most that: not the lapsing lease's",
				d.Sub(took).Round(time.Millisecond), dok, short)
		}
		must(t, l.Unlock(ctx))
	})
}
