package sync

import (
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

// A settlement of a hand-off can itself be lost on the network that lost the release. The
// heir, told "not handed", then takes the lock by its own acquire, which raises the
// releaser's latch mark past the settlement; when the release and settlement runs reach Redis
// at last, they change nothing — they must not delete the hold the heir took since. (This
// also needs the releaser's latch to survive the releaser's handle being collected: a latch
// guarding requests of unknown outcome is pinned until its PX.)
func TestLateSettleKeepsHoldTakenSince(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "late-settle"
		p := newHoldProxy(t, b.Addr)
		c, _ := newClient(t, p.addr(), WithWatchdogTimeout(time.Second))
		other, _ := newClient(t, b.Addr)
		warmScripts(t, ctx, c) // so that held EVALSHAs run when delivered

		l, h := c.Lock(name), c.Lock(name)
		must(t, l.Lock(ctx))
		hDone := startLock(ctx, h)
		settled(t, c, name, 1)

		p.arm(l.Owner(), true) // every run of l's hand-off release, and the settle after them
		uerr := l.Unlock(ctx)
		p.disarm()
		if !errors.Is(uerr, errOutcomeUnknown) {
			t.Fatalf("Unlock: %v, want an unknown outcome", uerr)
		}
		t.Logf("held back: %d requests (release runs + settle); l.fences=%v", p.holding(), l.fences)
		if len(l.fences) == 0 {
			t.Fatal("precondition: the settle got through")
		}
		// The heir, told "not handed", takes the lock itself once l's lapsed lease runs out.
		await(t, hDone, "heir took the lock by its own acquire")

		p.release() // the release runs, then the settle, reach Redis late

		if held, err := h.IsHeld(ctx); err != nil || !held {
			t.Errorf("a late run of the settle script deleted the hold the heir took since (IsHeld %v, %v; h.holds %d)",
				held, err, h.holds)
		}
		if ok, err := other.Lock(name).TryLock(ctx); err != nil || ok {
			t.Errorf("another Client took the lock while the heir believes it holds it (TryLock %v, %v)", ok, err)
		}
	})
}

// The releaser's variant: its next acquire raises its latch mark past the failed release and
// the settlement, so that neither, reaching Redis late, deletes the releaser's new hold.
func TestLateSettleKeepsReleasersNewHold(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "late-settle-releaser"
		p := newHoldProxy(t, b.Addr)
		c, _ := newClient(t, p.addr())
		other, _ := newClient(t, b.Addr)
		warmScripts(t, ctx, c)
		l, h := c.Lock(name), c.Lock(name)
		must(t, l.Lock(ctx))
		hDone := make(chan error, 1)
		go func() {
			_, err := h.TryLock(ctx, WaitTime(300*time.Millisecond))
			hDone <- err
		}()
		settled(t, c, name, 1)

		p.arm(l.Owner(), true)
		uerr := l.Unlock(ctx)
		p.disarm()
		if !errors.Is(uerr, errOutcomeUnknown) || len(l.fences) == 0 {
			t.Fatalf("Unlock: %v (fence %v), want an unknown outcome with the settle lost", uerr, l.fences)
		}
		await(t, hDone, "heir gave up")
		lockAfterOutage(t, ctx, l) // adopts its own field; raises the mark past the failed release

		p.release()

		if held, err := l.IsHeld(ctx); err != nil || !held {
			t.Errorf("a late run of the settle deleted the releaser's new hold (IsHeld %v, %v; l.holds %d)", held, err, l.holds)
		}
		if ok, err := other.Lock(name).TryLock(ctx); err != nil || ok {
			t.Errorf("another Client took the lock while the releaser believes it holds it (TryLock %v, %v)", ok, err)
		}
	})
}

// After a settlement that got through, the releaser's hold is known to be gone (the
// settlement deleted it, or found it gone): Unlock succeeds and its lease stays stopped, so
// Lost does not report a hold "lost while held" that the caller gave up and Redis no longer
// has.
func TestSettledHandoffDoesNotReportLost(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "settled-lost"
		const wd = 600 * time.Millisecond
		p := newHoldProxy(t, b.Addr)
		c, _ := newClient(t, p.addr(), WithWatchdogTimeout(wd))
		warmScripts(t, ctx, c)
		l, h := c.Lock(name), c.Lock(name)
		must(t, l.Lock(ctx))
		hDone := make(chan error, 1)
		go func() {
			_, err := h.TryLock(ctx, WaitTime(100*time.Millisecond))
			hDone <- err
		}()
		settled(t, c, name, 1)
		// The release's runs are held back; the settlement gets through.
		if err := unlockHeldBack(t, p, l, string(handoffMarker(h))); err != nil || len(l.fences) > 0 {
			t.Fatalf("Unlock with its hand-off settled: %v (fence %v), want nil", err, l.fences)
		}
		await(t, hDone, "heir done")
		if ok, _ := h.IsHeld(ctx); ok {
			must(t, h.Unlock(ctx))
		}
		select {
		case <-l.Lost():
			t.Errorf("Lost closed for a hold the settle freed (the caller gave it up; Redis has nothing)")
		case <-time.After(3 * wd):
		}
	})
}
