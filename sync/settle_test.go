package sync

import (
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/lua"
)

// The heir of a local hand-off holds the lock as soon as the release is sent: its Lock
// returns while the release has not reached Redis, where the releaser's field still holds the
// lock for this Client. When the hand-off's outcome then stays unknown (the release and the
// settlement both lost), the heir's lease is reported lost before the releaser's Unlock
// returns. The heir, told so, unlocks (nothing of its own is in Redis) and takes the lock
// again once the releaser's lapsed lease runs out; when the release and the settlement reach
// Redis at last they change nothing — they must not delete or move the hold taken since.
// (This also needs the releaser's latch to survive the releaser's handle being collected: a
// latch guarding requests of unknown outcome is pinned until its PX.)
func TestLateSettleKeepsHoldTakenSince(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "late-settle"
		other, _ := newClient(t, b.Addr)
		admin := b.Client(t)
		r := startHeldRelay(t, ctx, b, name, relayOpts{client: []Option{WithWatchdogTimeout(time.Second)}})
		p, l, h := r.p, r.l, r.h
		// Every run of l's hand-off release, and the settlement after them.
		unlocked := r.handOffHeldBack(t, ctx, l.Owner(), true)
		// Nothing of l's can have reached Redis while the proxy holds it back.
		if n := mustInt(t, admin.Do(ctx, admin.B().Hget().Key(name).Field(l.Owner()).Build())); n != 1 {
			t.Fatalf("releaser's count %d in Redis when the heir's Lock returned, want 1 (the release not yet run)", n)
		}
		uerr := <-unlocked
		p.disarm()
		if !errors.Is(uerr, errOutcomeUnknown) {
			t.Fatalf("Unlock: %v, want an unknown outcome", uerr)
		}
		t.Logf("held back: %d requests (release runs + settlement); l.fences=%v", p.holding(), l.fences)
		if len(l.fences) == 0 {
			t.Fatal("precondition: the settlement got through")
		}
		if !isClosed(h.Lost()) {
			t.Fatal("the heir's lease was not reported lost when its hand-off could not be confirmed")
		}
		if err := h.Unlock(ctx); !errors.Is(err, ErrLockLost) {
			t.Fatalf("heir's Unlock: %v, want ErrLockLost", err)
		}
		// The heir takes the lock itself once l's lapsed lease runs out.
		lockAfterOutage(t, ctx, h)

		p.release() // the release runs, then the settlement, reach Redis late

		if held, err := h.IsHeld(ctx); err != nil || !held {
			t.Errorf("a late run deleted or moved the hold the heir took since (IsHeld %v, %v; h.holds %d)",
				held, err, h.holds)
		}
		if ok, err := other.Lock(name).TryLock(ctx); err != nil || ok {
			t.Errorf("another Client took the lock while the heir believes it holds it (TryLock %v, %v)", ok, err)
		}
		must(t, h.Unlock(ctx))
	})
}

// The releaser's variant: its next acquire raises its latch mark past the failed release and
// the settlement, so that neither, reaching Redis late, hands the releaser's new hold to the
// heir.
func TestLateSettleKeepsReleasersNewHold(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "late-settle-releaser"
		other, _ := newClient(t, b.Addr)
		r := startHeldRelay(t, ctx, b, name, relayOpts{})
		p, l, h := r.p, r.l, r.h

		uerr := <-r.handOffHeldBack(t, ctx, l.Owner(), true) // the release and the settlement
		p.disarm()
		if !errors.Is(uerr, errOutcomeUnknown) || len(l.fences) == 0 {
			t.Fatalf("Unlock: %v (fence %v), want an unknown outcome with the settlement lost", uerr, l.fences)
		}
		if !isClosed(h.Lost()) {
			t.Fatal("the heir's lease was not reported lost")
		}
		lockAfterOutage(t, ctx, l) // adopts its own field; raises the mark past the failed requests

		p.release()

		if held, err := l.IsHeld(ctx); err != nil || !held {
			t.Errorf("a late run took the releaser's new hold (IsHeld %v, %v; l.holds %d)", held, err, l.holds)
		}
		if held, err := h.IsHeld(ctx); err != nil || held {
			t.Errorf("a late run handed the releaser's new hold to the heir (IsHeld %v, %v)", held, err)
		}
		if ok, err := other.Lock(name).TryLock(ctx); err != nil || ok {
			t.Errorf("another Client took the lock while the releaser believes it holds it (TryLock %v, %v)", ok, err)
		}
	})
}

// A settlement that gets through completes the hand-off: the release never ran, so it passes
// the releaser's hold to the heir. Unlock succeeds; the heir keeps its hold, now kept by the
// watchdog, and neither lease is reported lost. The release's runs, reaching Redis after the
// settlement, change nothing.
func TestSettledHandoffKeepsHeirsHold(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "settled-kept"
		const wd = 600 * time.Millisecond
		p := newHoldProxy(t, b.Addr)
		c, rdb := newClient(t, p.addr(), WithWatchdogTimeout(wd))
		warmScripts(t, ctx, c)
		l, h := c.Lock(name), c.Lock(name)
		// The release's runs are held back; the settlement gets through. With so short a
		// watchdog timeout the parked heir re-checks every 600 ms, and a release that finds it
		// making that attempt frees the lock instead: then there is no hand-off to hold back,
		// and the scenario starts again.
		for try := 1; ; try++ {
			must(t, l.Lock(ctx))
			hDone := startLock(ctx, h)
			settled(t, c, name, 1)
			p.arm(string(handoffMarker(h)), true)
			err := l.Unlock(ctx)
			p.disarm()
			if p.holding() == 0 && try < 3 {
				must(t, err)
				await(t, hDone, "waiter took the freed lock")
				must(t, h.Unlock(ctx))
				continue
			}
			if p.holding() == 0 {
				t.Fatal("no hand-off in 3 tries")
			}
			if err != nil || len(l.fences) > 0 {
				t.Fatalf("Unlock with its hand-off settled: %v (fence %v), want nil", err, l.fences)
			}
			await(t, hDone, "heir handed the lock")
			break
		}
		if n, err := h.HoldCount(ctx); n != 1 || err != nil {
			t.Fatalf("heir's hold count %d (%v), want 1", n, err)
		}
		p.release() // the release's runs, after the settlement: no-ops
		// Both backends expire keys in real time: the heir's lease must be renewed across
		// several leases.
		time.Sleep(3 * wd)
		if isClosed(h.Lost()) || isClosed(l.Lost()) {
			t.Fatalf("a lease reported lost after a settled hand-off (heir %v, releaser %v)", isClosed(h.Lost()), isClosed(l.Lost()))
		}
		if n, err := h.HoldCount(ctx); n != 1 || err != nil {
			t.Fatalf("heir's hold count %d (%v) after the late release runs, want 1", n, err)
		}
		must(t, h.Unlock(ctx))
		if exists(t, rdb, name) {
			t.Fatal("lock alive after the heir's unlock")
		}
	})
}

// The heir's hold rests on the releaser's lease until Redis records the hand-off: while the
// release is held up, the heir's lease runs out when the releaser's would (here set to end
// soon), long before the release's retries and settlement give up.
func TestHeirLeaseEndsWithReleasersUntilConfirmed(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "heir-rests-on-releaser"
		r := startHeldRelay(t, ctx, b, name, relayOpts{holder: []LockOption{Lease(time.Minute)}})
		l, h := r.l, r.h
		// As far as the releaser knows, its lease ends in 2×handoffMinLeft: well before the
		// release's retries (20+40+80+160 ms of backoff) and the settlement's give up.
		left := 2 * handoffMinLeft
		l.op.Lock()
		l.lease.Reset(time.Now().Add(-time.Minute+left), time.Minute, false)
		l.op.Unlock()

		start := time.Now()
		unlocked := r.handOffHeldBack(t, ctx, l.Owner(), true) // the release and the settlement
		defer r.p.disarm()
		select {
		case <-h.Lost():
			// The Unlock gives up after ~1 s: well after this bound, which leaves room for a
			// slow machine.
			if d := time.Since(start); d > left+500*time.Millisecond {
				t.Fatalf("heir's lease lost after %v, want it to end with the releaser's (%v)", d, left)
			}
		case err := <-unlocked:
			t.Fatalf("Unlock returned (%v) before the heir's lease, resting on the releaser's, ran out", err)
		case <-time.After(10 * time.Second):
			t.Fatal("heir's lease not lost while its hand-off stayed unconfirmed")
		}
		if err := <-unlocked; !errors.Is(err, errOutcomeUnknown) {
			t.Fatalf("Unlock: %v, want an unknown outcome", err)
		}
	})
}

// A heir's IsHeld right after its Lock returns waits for the hand-off to reach Redis, even
// when the release's first run is lost and retried.
func TestHeirSeesItsHoldAtOnce(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "heir-sees-hold"
		r := startHeldRelay(t, ctx, b, name, relayOpts{})
		p, h := r.p, r.h
		unlocked := r.handOffHeldBack(t, ctx, string(handoffMarker(h)), false) // the release's first run only
		if held, err := h.IsHeld(ctx); err != nil || !held {
			t.Fatalf("heir's IsHeld right after its Lock: %v, %v; want true", held, err)
		}
		if err := <-unlocked; err != nil {
			t.Fatalf("releaser's Unlock: %v", err)
		}
		p.release() // the first run, late: a repeat, which changes nothing
		must(t, h.Unlock(ctx))
	})
}

// A hand-off release runs — the heir holds the lock, with a 150 ms lease — but its reply is
// lost and its retries are held back, so the hand-off is settled after the heir's lease ran
// out. The settlement reads what the release did from the latch: the releaser's Unlock
// succeeds. (It asked Redis whether the heir held the lock, and reported ErrLockLost.)
func TestSettleReportsTheHandoffTheReleaseMade(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const lease = 150 * time.Millisecond
		r := startHeldRelay(t, ctx, b, "settle-reads-latch", relayOpts{heir: []LockOption{Lease(lease)}})
		unlocked := r.handOffHeldBack(t, ctx, heirLeaseMarker(r.h, lease), true) // every run of the release
		eventually(t, 2*time.Second, "the first run is held back", func() bool { return r.p.holding() >= 1 })
		r.p.release() // the first run hands the lock to the heir; its reply is lost
		err := <-unlocked
		r.p.disarm()
		if err != nil {
			t.Fatalf("releaser's Unlock: %v, want nil: its release ran and handed the lock on", err)
		}
		eventually(t, 2*time.Second, "the heir's lease, timed from the release, runs out", func() bool { return isClosed(r.h.Lost()) })
	})
}

// A settlement answers the same however often it runs. Its first run marks the latch n when
// the lock went to the heir and -n when not; a repeat reads the mark in the SET … GET that
// also writes n, so it must put -n back. (A repeat that left +n made the next one answer 1,
// confirming the heir in a lock nobody held.)
func TestSettleRepeatsAnswerAlike(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		rdb := b.Client(t)
		settle := func(lock, latch string) int64 {
			v, err := lua.LockSettleHandoff.Exec(ctx, rdb, []string{lock, latch},
				[]string{"releaser", "2", unlockLatchMs, "30000", "heir"}).AsInt64()
			if err != nil {
				t.Fatalf("settle: %v", err)
			}
			return v
		}
		// The release (request 1) never ran, and the releaser had lost the lock.
		for run := 1; run <= 3; run++ {
			if v := settle("settle-gone", "settle-gone-latch"); v != 0 {
				t.Fatalf("run %d of a settlement of a lost lock replied %d, want 0", run, v)
			}
		}
		if exists(t, rdb, "settle-gone") {
			t.Fatal("a settlement of a lost lock created it")
		}
		// The release never ran, and the releaser still holds the lock: it goes to the heir.
		must(t, rdb.Do(ctx, rdb.B().Hset().Key("settle-held").FieldValue().FieldValue("releaser", "1").Build()).Error())
		for run := 1; run <= 3; run++ {
			if v := settle("settle-held", "settle-held-latch"); v != 1 {
				t.Fatalf("run %d of a settlement that passed the hold replied %d, want 1", run, v)
			}
		}
		if n, err := rdb.Do(ctx, rdb.B().Hget().Key("settle-held").Field("heir").Build()).AsInt64(); err != nil || n != 1 {
			t.Fatalf("heir's count %d (%v), want 1", n, err)
		}
	})
}
