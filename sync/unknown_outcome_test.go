package sync

import (
	"context"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/lua"
	"github.com/redis/rueidis"
)

// unlockHeldBack runs l's Unlock with every request that contains marker held back in p
// (none of them has reached Redis yet), and returns Unlock's error with p disarmed.
func unlockHeldBack(t *testing.T, p *holdProxy, l *Lock, marker string) error {
	t.Helper()
	ctx := testCtx(t, 20*time.Second)
	p.arm(marker, true)
	err := l.Unlock(ctx)
	p.disarm()
	if p.holding() == 0 {
		t.Fatal("no run held back")
	}
	return err
}

// failUnlockHeldBack is unlockHeldBack for an Unlock that must fail.
func failUnlockHeldBack(t *testing.T, p *holdProxy, l *Lock, marker string) {
	t.Helper()
	if err := unlockHeldBack(t, p, l, marker); err == nil {
		t.Fatal("Unlock succeeded with every run held back")
	}
}

// A handle whose Unlock's outcome stayed unknown and that then waits behind another local
// waiter must not be handed the lock before its own acquire has raised its latch's mark, or
// a late run of the failed Unlock would free the hold it was handed and another Client could
// take the lock while the handle believes it holds it. With real late runs, end to end
// (TestHandoffSkipsHandleWithUnknownUnlock checks the rule itself).
func TestLateRunCannotFreeHoldOfUnsureHandle(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "unsure-heir"
		p := newHoldProxy(t, b.Addr)
		c, _ := newClient(t, p.addr()) // local hand-off on (the default)
		other, _ := newClient(t, b.Addr)
		admin := b.Client(t)

		h := c.Lock(name)
		must(t, h.Lock(ctx))
		must(t, h.Unlock(ctx)) // warm up: scripts cached, so a held EVALSHA runs when delivered
		must(t, h.Lock(ctx))
		failUnlockHeldBack(t, p, h, "PUBLISH")
		if len(h.fences) == 0 {
			t.Fatal("precondition: handle not marked unsure after the failed Unlock")
		}
		// h's hold lapses with its lease; free it now rather than wait.
		must(t, admin.Do(ctx, admin.B().Del().Key(name).Build()).Error())

		a, w := c.Lock(name), c.Lock(name)
		must(t, a.Lock(ctx))
		wDone := startLock(ctx, w)
		settled(t, c, name, 1)
		hDone := startLock(ctx, h) // attempts, raising the mark, and waits, not as an heir
		settledHeirs(t, c, name, 2, 1)
		must(t, a.Unlock(ctx)) // hands to w
		await(t, wDone, "w handed the lock")
		must(t, w.Unlock(ctx)) // frees; h takes it by its own acquire
		await(t, hDone, "h took the lock")

		p.release() // the failed Unlock's runs reach Redis at last

		if held, err := h.IsHeld(ctx); err != nil || !held {
			t.Errorf("a late run of h's failed Unlock freed the hold h was handed since (IsHeld %v, %v; h.fences %v)", held, err, h.fences)
		}
		if ok, err := other.Lock(name).TryLock(ctx); err != nil || ok {
			t.Errorf("another Client took the lock while h holds it (TryLock %v, %v)", ok, err)
		}
	})
}

// A hand-off release whose outcome stays unknown is settled while the heir's handle is still
// held: the releaser's latch mark is raised past the release, and the settlement passes the
// lock on to the heir if the release never ran. A run of the release reaching Redis after that
// changes nothing — neither freeing the hold the releaser took since nor handing it to the
// heir, which has unlocked meanwhile.
func TestLateHandoffRunAfterSettleChangesNothing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "late-handoff"
		p := newHoldProxy(t, b.Addr)
		c, _ := newClient(t, p.addr())
		warmScripts(t, ctx, c)
		l, h := c.Lock(name), c.Lock(name)
		must(t, l.Lock(ctx))
		type result struct {
			ok  bool
			err error
		}
		hDone := make(chan result, 1)
		go func() {
			ok, err := h.TryLock(ctx, WaitTime(1500*time.Millisecond))
			hDone <- result{ok, err}
		}()
		settled(t, c, name, 1)

		// The release's runs are held back; the settlement (which does not carry the marker)
		// gets through, passes the lock to the heir, and Unlock succeeds.
		if err := unlockHeldBack(t, p, l, string(handoffMarker(h))); err != nil {
			t.Fatalf("Unlock with its hand-off settled: %v, want nil", err)
		}
		r := <-hDone
		if r.err != nil || !r.ok {
			t.Fatalf("heir: %v, %v; want the lock handed over", r.ok, r.err)
		}
		if n, err := h.HoldCount(ctx); n != 1 || err != nil {
			t.Fatalf("heir's hold count %d (%v), want 1", n, err)
		}
		must(t, h.Unlock(ctx))
		must(t, l.Lock(ctx)) // the releaser takes the lock again

		p.release() // the failed release's runs reach Redis after the settlement

		if held, err := l.IsHeld(ctx); err != nil || !held {
			t.Fatalf("a late run of the settled release freed the releaser's new hold (IsHeld %v, %v)", held, err)
		}
		if held, err := h.IsHeld(ctx); err != nil || held {
			t.Fatalf("a late run of the settled release handed the lock to the heir (IsHeld %v, %v)", held, err)
		}
		must(t, l.Unlock(ctx))
	})
}

// An Unlock after one whose outcome stayed unknown releases whatever the failed one left (the
// failed one never reached Redis here, so the lock): nil, and the lock is free. The failed
// request's runs, reaching Redis afterwards, change nothing.
func TestUnlockAfterFailedOneReleasesWhatItLeft(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "after-failed"
		p, l, other := heldBackHandle(t, ctx, b, name)
		admin := b.Client(t)
		must(t, l.Lock(ctx))
		failUnlockHeldBack(t, p, l, "PUBLISH")
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock after a failed one: %v, want nil (it released what the failed one left)", err)
		}
		if exists(t, admin, name) {
			t.Fatal("lock still held after the second Unlock")
		}
		o := other.Lock(name)
		must(t, o.Lock(ctx))
		p.release() // the failed request's runs reach Redis now
		if held, err := o.IsHeld(ctx); err != nil || !held {
			t.Fatalf("late runs of the failed unlock touched another owner's hold (IsHeld %v, %v)", held, err)
		}
		must(t, o.Unlock(ctx))
	})
}

// A kept hold re-entered with a Lease shorter than the watchdog's, whose inner Unlock's
// outcome stays unknown: its release, when it runs — even late, after a renewal would have
// set the long TTL back — sets the TTL to that short lease. Redis may then drop the hold and
// another Client take the lock, but never while the handle's Lost is open: the remaining
// hold's lease is timed by the short lease, and no longer renewed. (A review found it kept
// its 30 s deadline; pulling the deadline in but renewing on fails when the late run lands
// after the renewal.)
func TestUnknownPartialReleaseTimesHoldByItsShortLease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "unknown-partial-short"
		const short = 1500 * time.Millisecond
		p, l, other := heldBackHandle(t, ctx, b, name)
		admin := b.Client(t)
		must(t, l.Lock(ctx))
		must(t, l.Lock(ctx, Lease(short))) // re-entry: TTL 1.5 s, still kept
		eventually(t, 2*time.Second, "the watchdog renews the kept hold", func() bool { return pttl(t, admin, name) > 5000 })
		failUnlockHeldBack(t, p, l, "PUBLISH") // the inner Unlock: outcome unknown
		if l.holds != 1 {
			t.Fatalf("holds %d after the failed inner Unlock, want 1", l.holds)
		}
		lost := l.Lost()
		// Give a renewal — due within a third of the short lease, if the lease were still
		// renewed — its chance to land before the late run does.
		time.Sleep(short / 2)
		p.release() // the held runs reach Redis: holds 1, PEXPIRE 1500
		eventually(t, 10*time.Second, "another Client takes the lock once Redis dropped it", func() bool {
			ok, err := other.Lock(name).TryLock(ctx)
			return err == nil && ok
		})
		if !isClosed(lost) {
			t.Fatal("another Client holds the lock while the handle's Lost is open")
		}
	})
}

// The same for a re-entry with a shorter Lease whose reply is lost and whose undo never gets
// through: the attempt, reaching Redis late, may set the TTL to that lease, so the hold's
// lease is timed by it and no longer renewed.
func TestLostReentryWithShortLeaseTimesHoldByIt(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const short = 1500 * time.Millisecond
		p, l, _ := heldBackHandle(t, ctx, b, "lost-reentry-short")
		must(t, l.Lock(ctx))
		p.arm("EVALSHA", true) // the re-entry's attempt and every run of its undo
		err := l.Lock(ctx, Lease(short))
		p.disarm()
		if err == nil {
			t.Fatal("the re-entry succeeded with its attempt held back")
		}
		if l.holds != 1 || len(l.fences) == 0 {
			t.Fatalf("holds %d, fences %v: want the outer hold, fenced past the undo", l.holds, l.fences)
		}
		if d, ok := l.lease.Deadline(); !ok || time.Until(d) > short {
			t.Fatalf("lease deadline in %v (lost %v), want within the re-entry's %v", time.Until(d), !ok, short)
		}
		select { // not renewed: Lost closes by the short lease
		case <-l.Lost():
		case <-time.After(short + 2*time.Second):
			t.Fatal("Lost still open after the short lease: the hold is still renewed")
		}
	})
}

// A re-entry under the watchdog of a hold whose latest lease is short: the attempt's reply is
// lost and its undo never gets through. The undo, reaching Redis late, sets the TTL to the
// handle's latest lease — the short one — so the hold's lease must not count on more.
func TestLateUndoSetsTheLatestLease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "late-undo-short"
		const short = 1500 * time.Millisecond
		p, l, other := heldBackHandle(t, ctx, b, name)
		admin := b.Client(t)
		// Load the undo script, so that its held EVALSHA runs when delivered.
		if err := lua.LockUndo.Exec(ctx, admin, []string{"warm", "warm-ch", "warm-latch"},
			[]string{"x", "0", "1000", l.c.publishCmd, "0", "1", "1000"}).Error(); err != nil && !rueidis.IsRedisNil(err) {
			t.Fatalf("loading the undo script: %v", err)
		}
		must(t, l.Lock(ctx))
		must(t, l.Lock(ctx, Lease(short)))
		eventually(t, 2*time.Second, "the watchdog renews the kept hold", func() bool { return pttl(t, admin, name) > 5000 })
		p.arm("EVALSHA", true) // a re-entry's attempt and every run of its undo
		if err := l.Lock(ctx); err == nil {
			t.Fatal("the re-entry succeeded with its attempt held back")
		}
		p.disarm()
		lost := l.Lost()
		p.release()
		if ms := pttl(t, admin, name); ms > short.Milliseconds() {
			t.Skipf("the held undo did not take effect (PTTL %d ms)", ms)
		}
		eventually(t, 10*time.Second, "another Client takes the lock once Redis dropped it", func() bool {
			ok, err := other.Lock(name).TryLock(ctx)
			return err == nil && ok
		})
		if !isClosed(lost) {
			t.Fatal("another Client holds the lock while the handle's Lost is open")
		}
	})
}

// After a failed inner Unlock ended the renewals of a kept hold, the handle's next acquire
// raises the latch past the failed release, so the hold is kept again — also when that
// acquire is a re-entry with an explicit lease (Redisson's rule for re-entry).
func TestKeptAgainAfterTheFenceIsRaised(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "kept-again"
		const short = time.Second
		p, l, _ := heldBackHandle(t, ctx, b, name)
		admin := b.Client(t)
		must(t, l.Lock(ctx))
		must(t, l.Lock(ctx, Lease(short)))
		failUnlockHeldBack(t, p, l, "PUBLISH") // the inner Unlock: outcome unknown
		must(t, l.Lock(ctx, Lease(short)))     // raises the latch past it
		must(t, l.Unlock(ctx))
		// Past several short leases: the outer hold, taken under the watchdog, is renewed.
		time.Sleep(3 * short)
		if isClosed(l.Lost()) || !exists(t, admin, name) {
			t.Fatalf("the outer hold ran out (lost %v, key exists %v): not kept again", isClosed(l.Lost()), exists(t, admin, name))
		}
		must(t, l.Unlock(ctx))
	})
}

// A handle whose last Unlock's outcome stayed unknown may still hold the lock in Redis (the
// release never ran). When it locks again while a waiter of its Client queues for the lock,
// it must not queue behind that waiter — who waits for a release only the handle can make,
// or the lease's end — but attempt, and adopt its hold.
func TestUnsureHandleAttemptsInsteadOfQueueing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "unsure-attempts"
		p := newHoldProxy(t, b.Addr)
		c, _ := newClient(t, p.addr())
		h := c.Lock(name)
		must(t, h.Lock(ctx))
		must(t, h.Unlock(ctx)) // warm up: scripts cached
		must(t, h.Lock(ctx))
		failUnlockHeldBack(t, p, h, "PUBLISH") // never delivered: h's field stays, TTL 30 s
		w := c.Lock(name)
		wDone := startLock(ctx, w)
		settled(t, c, name, 1)
		lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if err := h.Lock(lctx); err != nil {
			t.Fatalf("Lock of the unsure handle: %v, want its own hold adopted at once", err)
		}
		must(t, h.Unlock(ctx))
		await(t, wDone, "the waiter took the lock after the handle's release")
	})
}

// A kept hold re-entered with a short Lease is renewed: Redis has 30 s, and the watchdog's
// next renewal is an interval away. The inner Unlock's partial release then sets the TTL to
// the short lease — and its reply is lost, the retries fail. Redis drops the hold when the
// short lease runs out, and another Client takes the lock: by then the handle's lease must
// have run out too (its deadline is judged, not Lost, which closes a moment after it). It
// trusted the renewal's 30 s until the Unlock returned, too late; now the lease is distrusted
// before the release is sent.
func TestPartialReleaseAfterRenewalIsTimedFromItsSend(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "partial-after-renewal"
		const short = 200 * time.Millisecond
		proxy := redistest.NewProxy(t, b.Addr)
		c, _ := newClient(t, proxy.Addr(), WithLocalHandoff(0))
		other, _ := newClient(t, b.Addr)
		admin := b.Client(t)
		l := c.Lock(name)
		must(t, l.Lock(ctx))
		must(t, l.Lock(ctx, Lease(short)))
		eventually(t, 2*time.Second, "a renewal confirmed 30 s", func() bool {
			d, ok := l.lease.Deadline()
			return ok && time.Until(d) > 5*time.Second
		})
		warm := c.Lock("warm-up") // load the release script, so the dropped EVALSHA runs
		must(t, warm.Lock(ctx))
		must(t, warm.Unlock(ctx))

		proxy.DropReplyAfter([]byte("PUBLISH"))
		errc := make(chan error, 1)
		go func() { errc <- l.Unlock(ctx) }()
		eventually(t, 5*time.Second, "the partial release ran", func() bool {
			n, err := admin.Do(ctx, admin.B().Hget().Key(name).Field(l.Owner()).Build()).AsInt64()
			return err == nil && n == 1
		})
		proxy.Blackhole(true) // the retries fail
		var took time.Time
		eventually(t, 5*time.Second, "another Client takes the lock once Redis dropped it", func() bool {
			ok, err := other.Lock(name).TryLock(ctx)
			took = time.Now()
			return err == nil && ok
		})
		if d, ok := l.lease.Deadline(); ok && d.After(took.Add(expirySlack(b))) {
			t.Errorf("another Client took the lock while the handle's lease had %v to run", d.Sub(took))
		}
		proxy.Blackhole(false)
		<-errc
	})
}
