package sync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

// Regressions from a review of the fair grant.

// A goroutine of a shared handle adopts the grant (TryLock), releases it (the lock goes to x);
// the held-back grant message then reaches the still-waiting goroutine, whose token it is. It
// must not take it: the owner made requests since the attempt the grant answered.
func TestFairGrantAdoptedBySiblingIsNotTakenAgain(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name = "fair:review-own-token"
		ctx := testCtx(t, 20*time.Second)
		admin := b.Client(t)
		gate := newGateProxy(t, b.Addr)
		wc, _ := newClient(t, gate.addr(), fairSlowRechecks...)
		wn := fairCountAttempts(wc)
		hc, _ := newClient(t, b.Addr, fairSlowRechecks...)
		xc, _ := newClient(t, b.Addr, fairSlowRechecks...)
		xn := fairCountAttempts(xc)
		w, holder, x := wc.FairLock(name, Reentrant()), hc.FairLock(name, Reentrant()), xc.FairLock(name, Reentrant())
		if err := holder.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		g := fairStartLock(ctx, w)
		fairAwaitQueue(t, admin, name, w.Owner())
		fairAwaitSettled(t, wn)
		xDone := fairStartLock(ctx, x)
		fairAwaitQueue(t, admin, name, w.Owner(), x.Owner())
		fairAwaitSettled(t, xn)

		gate.arm([]byte(fairOwnChannel(w)))
		if err := holder.Unlock(ctx); err != nil { // grants w, message held back
			t.Fatal(err)
		}
		eventually(t, waitFor, "grant held back", gate.holding)
		// another goroutine on the handle
		if ok, err := w.TryLock(ctx); !ok || err != nil {
			t.Fatalf("TryLock: %v %v", ok, err)
		}
		if err := w.Unlock(ctx); err != nil { // grants x
			t.Fatal(err)
		}
		if err := fairAwait(t, xDone, waitFor, "x"); err != nil {
			t.Fatal(err)
		}
		gate.open()
		select {
		case err := <-g:
			_, inRedis := hgetField(t, admin, name, w.Owner())
			t.Fatalf("waiting goroutine returned %v (Valid %v, w in hash %v) while x holds", err, w.Valid(), inRedis)
		case <-time.After(time.Second):
		}
	})
}

// A first run of a fair waiter's leave reaching Redis after its retry (as late_unlock_test
// does for releases) must not delete a hold the handle took since: a leave never touches the
// lock.
func TestFairLateLeaveLeavesLaterHold(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name = "fair:late-leave"
		ctx := testCtx(t, 20*time.Second)
		p := newHoldProxy(t, b.Addr)
		wc, _ := newClient(t, p.addr())
		wc.leaveGrace = time.Minute // the wait returns once its leave has run (its repeat)
		hc, _ := newClient(t, b.Addr)
		oc, _ := newClient(t, b.Addr)
		admin := b.Client(t)
		wn := fairCountAttempts(wc)
		w, holder := wc.FairLock(name, Reentrant()), hc.FairLock(name, Reentrant())
		must(t, holder.Lock(ctx))
		wctx, cancel := context.WithCancel(ctx)
		done := fairStartLock(wctx, w)
		fairAwaitQueue(t, admin, name, w.Owner())
		fairAwaitSettled(t, wn)
		p.arm("PUBLISH", false) // the leave's arguments carry it
		cancel()
		if err := fairAwait(t, done, waitFor, "w"); !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		if p.holding() != 1 {
			t.Fatalf("leave not held back")
		}
		must(t, holder.Unlock(ctx))
		must(t, w.Lock(ctx)) // w holds
		p.release()
		if ok, err := oc.FairLock(name, Reentrant()).TryLock(ctx); err != nil || ok {
			t.Fatalf("two holders: another Client took the lock while w holds it (Valid %v): %v %v", w.Valid(), ok, err)
		}
	})
}

// A fair Lock whose attempt cannot settle the handle's earlier release (its outcome still
// unknown, the release not yet run) must not take the lock from the leave that follows: the
// leave finds the owner's old field, which the release will still drop. Lock fails, holding
// nothing; once the release runs, the lock is free.
func TestFairLeaveAfterUnsettledReleaseTakesNothing(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "fair:leave-unsettled"
		p := newHoldProxy(t, b.Addr)
		c, _ := newClient(t, p.addr(), WithRetryBudget(shortBudget))
		admin := b.Client(t)
		l := c.FairLock(name, Reentrant())
		must(t, l.Lock(ctx))
		must(t, l.Unlock(ctx)) // Redis has the release script: a held-back EVALSHA of it runs
		must(t, l.Lock(ctx))
		// Only the release carries an unlock latch key: its runs, and its repeats, are held
		// back; the fair lock's acquire and leave go through.
		p.arm(unlockLatchPrefix, true)
		if err := l.Unlock(ctx); !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("Unlock with its runs held back: %v, want ErrOutcomeUnknown", err)
		}
		if !exists(t, admin, name) {
			t.Fatal("the lock is gone: a run of the release reached Redis, so the situation this test is about did not arise")
		}
		err := l.Lock(ctx)
		if err == nil {
			t.Fatal("Lock returned nil while the handle's release was unsettled: it took the hold the release will drop")
		}
		if !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("Lock: %v, want the unsettled release's ErrOutcomeUnknown", err)
		}
		p.disarm()
		p.release()
		if exists(t, admin, name) {
			t.Fatalf("the lock is still held after the release ran (PTTL %d ms)", pttl(t, admin, name))
		}
		must(t, l.Lock(ctx)) // settles the release first: its repeat changes nothing
		must(t, l.Unlock(ctx))
		if exists(t, admin, name) {
			t.Fatal("the lock is held after Lock/Unlock")
		}
	})
}
