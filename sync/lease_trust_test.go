package sync

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/lua"
	"github.com/redis/rueidis"
)

// realOnly skips a test on miniredis.
func realOnly(t *testing.T, b *redistest.Backend) {
	if b.Name != redistest.NameRedis {
		t.Skip("needs real Redis")
	}
}

// expirySlack is how much earlier than its TTL says a key may expire on b: miniredis' clock
// moves in ticks (internal/embedredis: up to one tick, 5 ms, early), a real server's does not.
// A test that judges a lease's deadline against an expiry it observed allows for it.
func expirySlack(b *redistest.Backend) time.Duration {
	if b.Name == redistest.NameMiniredis {
		return 10 * time.Millisecond
	}
	return 0
}

// oom makes Redis refuse writes (maxmemory 1) or accept them again.
func oom(t *testing.T, ctx context.Context, admin rueidis.Client, on bool) {
	v := "0"
	if on {
		v = "1"
	}
	must(t, admin.Do(ctx, admin.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", v).Build()).Error())
}

// A partial release that Redis refuses (OOM) changed nothing: the lease, distrusted while
// the release was in flight, is as it was — kept — not left timed by the short lease.
// (Needs CONFIG SET, so real Redis only.)
func TestRefusedPartialReleaseKeepsLease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		realOnly(t, b)
		ctx := testCtx(t, 20*time.Second)
		admin := b.Client(t)
		c, _ := newClient(t, b.Addr, WithLocalHandoff(0))
		l := c.Lock("refused-partial")
		must(t, l.Lock(ctx))
		must(t, l.Lock(ctx, Lease(time.Second)))
		time.Sleep(500 * time.Millisecond) // a renewal ran: Redis has 30 s
		oom(t, ctx, admin, true)
		err := l.Unlock(ctx)
		oom(t, ctx, admin, false)
		if err == nil {
			t.Fatal("Unlock succeeded under OOM")
		}
		t.Logf("refused: %v", err)
		time.Sleep(1500 * time.Millisecond)
		ok, _ := l.IsHeld(ctx)
		if isClosed(l.Lost()) {
			t.Errorf("Lost closed on a healthy kept hold after a refused partial release (IsHeld %v)", ok)
		}
	})
}

// The same for a re-entry with a short Lease that Redis refuses.
func TestRefusedShortReentryKeepsLease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		realOnly(t, b)
		ctx := testCtx(t, 20*time.Second)
		admin := b.Client(t)
		c, _ := newClient(t, b.Addr, WithLocalHandoff(0))
		l := c.Lock("refused-reentry")
		must(t, l.Lock(ctx))
		oom(t, ctx, admin, true)
		_, err := l.TryLock(ctx, Lease(time.Second))
		oom(t, ctx, admin, false)
		if err == nil {
			t.Fatal("TryLock succeeded under OOM")
		}
		t.Logf("refused: %v", err)
		time.Sleep(1500 * time.Millisecond)
		ok, _ := l.IsHeld(ctx)
		if isClosed(l.Lost()) {
			t.Errorf("Lost closed on a healthy kept hold after a refused re-entry (IsHeld %v)", ok)
		}
	})
}

// A re-entry with a short Lease loses its reply; the undo's first run takes the hold back and
// sets the TTL, and its reply is lost too. The retry is a repeat: it must answer what the
// first run did (the latch mark is signed), so the lease is kept again, not left timed by the
// short lease on a healthy hold.
func TestUndoRepeatAnswersLikeItsFirstRun(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		realOnly(t, b)
		ctx := testCtx(t, 20*time.Second)
		proxy := redistest.NewProxy(t, b.Addr)
		c, _ := newClient(t, proxy.Addr(), WithLocalHandoff(0))
		l := c.Lock("undo-repeat")
		must(t, l.Lock(ctx))
		// load the undo script
		must(t, lua.LockUndo.Exec(ctx, c.rdb, []string{"w", lockChannel("w"), "w-latch"},
			[]string{"x", "0", "1000", c.publishCmd, "0", "1", "1000"}).Error())
		owner := []byte(l.Owner())
		proxy.DropReplyAfter(owner) // the re-entry
		go func() {
			for proxy.Dropped() < 1 {
				time.Sleep(50 * time.Microsecond)
			}
			proxy.DropReplyAfter([]byte("PUBLISH")) // the undo's first run
		}()
		_, err := l.TryLock(ctx, Lease(time.Second))
		if err == nil || proxy.Dropped() != 2 {
			t.Fatalf("TryLock err %v, dropped %d; want an error and 2 drops", err, proxy.Dropped())
		}
		if n, _ := l.HoldCount(ctx); n != 1 {
			t.Fatalf("hold count %d, want 1", n)
		}
		time.Sleep(1500 * time.Millisecond)
		if isClosed(l.Lost()) {
			ok, _ := l.IsHeld(ctx)
			t.Errorf("Lost closed on a healthy kept hold after an undo whose repeat replied 0 (IsHeld %v)", ok)
		}
	})
}

// An unknown partial release leaves a fence and a distrusted lease; a later partial release
// that runs moves the latch mark past the failed one, so nothing can cut the TTL any more:
// the kept outer hold is kept again, not left to expire.
func TestLatchPassedKeepsLeaseAgain(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		realOnly(t, b)
		ctx := testCtx(t, 30*time.Second)
		p, l, _ := heldBackHandle(t, ctx, b, "neutralised")
		must(t, l.Lock(ctx))
		must(t, l.Lock(ctx, Lease(time.Second)))
		must(t, l.Lock(ctx, Lease(time.Second)))
		p.arm("PUBLISH", true)
		if err := l.Unlock(ctx); err == nil {
			t.Fatal("Unlock succeeded with every run held back")
		}
		p.disarm()
		must(t, l.Unlock(ctx)) // partial: the latch mark passes the failed one; nothing can cut the TTL now
		time.Sleep(1500 * time.Millisecond)
		held, _ := l.IsHeld(ctx)
		if isClosed(l.Lost()) || !held {
			t.Errorf("the kept outer hold expired (IsHeld %v, Lost %v) though no request of unknown outcome can act any more", held, isClosed(l.Lost()))
		}
		p.release()
	})
}

// A re-entry with a short Lease loses its reply and its undo fails; a later partial release
// runs, so the fences are dropped and the lease is kept again. Then the re-entry's first run
// reaches Redis. It is numbered on the latch (lock_reenter.lua), so it finds its number passed
// and changes nothing; an un-numbered one cut the TTL to its short lease, and another Client
// took the lock while the handle's Lost was open (found by a review).
func TestLateShortReentryChangesNothing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "late-short-reentry"
		p, l, other := heldBackHandle(t, ctx, b, name)
		// Load the scripts whose held runs must run when delivered.
		if err := lua.LockUndo.Exec(ctx, l.c.rdb, []string{"warm-undo", lockChannel("warm-undo"), "warm-undo-latch"},
			[]string{"x", "0", "1000", l.c.publishCmd, "0", "1", "1000"}).Error(); err != nil && !rueidis.IsRedisNil(err) {
			t.Fatal(err)
		}
		if err := lua.LockReenter.Exec(ctx, l.c.rdb, []string{"warm-reenter", "warm-reenter-latch"},
			[]string{"1000", "x", "0", "1000", "1"}).Error(); err != nil && !rueidis.IsRedisNil(err) {
			t.Fatal(err)
		}
		must(t, l.Lock(ctx))
		must(t, l.Lock(ctx)) // two holds, kept
		p.arm(l.Owner(), true)
		if _, err := l.TryLock(ctx, Lease(time.Second)); err == nil {
			t.Fatal("the re-entry succeeded with its requests held back")
		}
		p.disarm()
		must(t, l.Unlock(ctx)) // partial: the latch passes the re-entry and its undo
		if n := deliverHeldIf(t, p, func(d []byte) bool { return !bytes.Contains(d, []byte("PUBLISH")) }); n != 1 {
			t.Fatalf("%d held re-entries delivered, want 1", n)
		}
		time.Sleep(2 * time.Second) // past the re-entry's lease
		if ok, err := other.Lock(name).TryLock(ctx); err != nil || ok {
			t.Fatalf("another Client took the lock (%v, %v) while the handle holds it: the late re-entry cut its TTL", ok, err)
		}
		if isClosed(l.Lost()) {
			t.Fatal("the handle's lease was lost")
		}
		must(t, l.Unlock(ctx))
	})
}
