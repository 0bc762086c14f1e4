package sync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/names"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/lua"
	"github.com/redis/rueidis"
)

// latchKeyFor is the form of an owner's unlock latch key: one key per owner.
func latchKeyFor(name, id string) string { return names.Prefix(unlockLatchPrefix, name) + ":" + id }

// The first run of an unlock whose reply was lost may reach Redis after its repeat (a
// delayed segment of the broken connection, a proxy in between). It must change nothing: the
// script reads the latch before anything else even on a first run (docs/redisson-interop.md,
// unlock latch). Were a first run to skip that read, a late first run of a partial release
// would drop the owner's last hold, and Redis would free a lock its owner still holds.
func TestLateFirstRunOfUnlockChangesNothing(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		c, rdb := newClient(t, b.Addr)
		mu := c.Lock("late-first-run")
		const owner = "late-owner"
		for holds := range 2 { // the owner holds the lock twice
			err := lua.LockAcquire{Lock: mu.Name(), LeaseMs: "30000", Owner: owner, Holds: holds}.Call().Exec(ctx, rdb).Error()
			if !rueidis.IsRedisNil(err) {
				t.Fatalf("acquire: %v", err)
			}
		}
		latch := latchKeyFor(mu.Name(), c.newRequestID())
		p := mu.plain()
		release := lua.LockRelease{Lock: mu.Name(), Channel: p.channel, Numbered: lua.Numbered{Latch: latch, N: 7, LatchMs: unlockLatchMs},
			Clients: p.clients, Listener: p.listener, LeaseMs: "30000", Owner: owner, Publish: c.publishCmd, Holds: 2,
			Token: c.lockToken, RegMs: c.fairWaitMs}.Call()
		// The repeat of the partial unlock runs first: 2 → 1, and Unlock returns.
		if v, err := release.Exec(ctx, rdb).AsInt64(); err != nil || v != 0 {
			t.Fatalf("repeat run: %v, %v; want 0", v, err)
		}
		// The lost first run of the same request then reaches Redis.
		v, err := release.Exec(ctx, rdb).AsInt64()
		if err != nil || v != 0 {
			t.Fatalf("late first run replied %v, %v; want the stored 0", v, err)
		}
		if n := mustInt(t, rdb.Do(ctx, rdb.B().Hget().Key(mu.Name()).Field(owner).Build())); n != 1 {
			t.Fatalf("hold count %d after the late first run, want 1", n)
		}
	})
}

// A hand-off whose outcome stays unknown (its reply lost, no repeat within the retry budget)
// did run: the heir's field holds the lock in Redis. The heir, told the lock was not handed
// to it, makes its own attempt, which adopts that hold (the count comes from the heir's
// handle): the heir's Lock succeeds, Redis counts one hold, and its Unlock frees the lock, so
// nothing is left held. The releaser's unknown release, repeated before its next request,
// replies what its first run did and does not touch the heir's hold.
func TestUnknownHandoffHeirAdoptsHold(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "orphan-relay"
		// No retry budget: the lost reply is at once an unknown outcome.
		r := startLossyRelay(t, ctx, ctx, b, name, WithRetryBudget(0))
		proxy, admin, a, heirMu, done := r.proxy, r.admin, r.holder, r.heir, r.heirDone
		other, _ := newClient(t, b.Addr)

		if err := a.Unlock(ctx); !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("releaser's Unlock with its hand-off reply lost: %v, want ErrOutcomeUnknown", err)
		}
		if proxy.Dropped() != 1 {
			t.Fatalf("the proxy dropped %d replies, want 1", proxy.Dropped())
		}
		if err := <-done; err != nil {
			t.Fatalf("heir: %v, want the lock its own attempt adopted", err)
		}
		if n := mustInt(t, admin.Do(ctx, admin.B().Hget().Key(name).Field(heirMu.Owner()).Build())); n != 1 {
			t.Fatalf("heir's hold count in Redis %d, want 1 (adopted, not counted twice)", n)
		}
		fields, err := admin.Do(ctx, admin.B().Hgetall().Key(name).Build()).AsStrMap()
		if err != nil || len(fields) != 1 {
			t.Fatalf("lock hash %v (%v), want the heir's field only", fields, err)
		}
		if isClosed(heirMu.Lost()) || !heirMu.Valid() {
			t.Fatal("the heir's adopted hold reported lost")
		}
		if ttl := pttl(t, admin, name); ttl <= 0 || ttl > DefaultWatchdogTimeout.Milliseconds() {
			t.Fatalf("the heir's hold has PTTL %d, want within its lease", ttl)
		}

		// The releaser's next request repeats its unknown release first: it must not release
		// the heir's hold, and the lock is busy for it.
		if ok, err := a.TryLock(ctx); ok || err != nil {
			t.Fatalf("releaser's TryLock while the heir holds the lock: %v, %v; want false, nil", ok, err)
		}
		if n, err := heirMu.HoldCount(ctx); n != 1 || err != nil {
			t.Fatalf("heir's hold count %d (%v) after the releaser settled its release, want 1", n, err)
		}

		if err := heirMu.Unlock(ctx); err != nil {
			t.Fatalf("heir's Unlock of the adopted hold: %v", err)
		}
		if exists(t, admin, name) {
			t.Fatal("lock alive after its only holder released it: a hold was left over")
		}
		o := other.Lock(name)
		if ok, err := o.TryLock(ctx); err != nil || !ok {
			t.Fatalf("another Client cannot take the lock after its only user released it (TryLock %v, %v)", ok, err)
		}
		must(t, o.Unlock(ctx))
	})
}

// Handles of two Clients contend with random cancellations and TryLock waits, hand-offs
// and frees interleaving: at most one holder at any time, and every call's result matches
// Redis (a call that failed holds nothing; one that succeeded holds the lock).
func TestHandoffStress(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		cpuBound(t)
		ctx := testCtx(t, 60*time.Second)
		c1, _ := newClient(t, b.Addr, WithLocalHandoff(3))
		c2, _ := newClient(t, b.Addr, WithLocalHandoff(3))
		admin := b.Client(t)
		var inside atomic.Int32
		var acquired atomic.Int64
		var wg gosync.WaitGroup
		errs := make(chan error, 64)
		for i := range 12 {
			c := c1
			if i%3 == 2 {
				c = c2
			}
			mu := c.Lock("stress")
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewSource(int64(i)))
				for range 60 {
					cctx, cancel := context.WithTimeout(ctx, time.Duration(r.Intn(8)+1)*time.Millisecond)
					var ok bool
					var err error
					switch r.Intn(3) {
					case 0:
						err = mu.Lock(cctx)
						ok = err == nil
					case 1:
						ok, err = mu.TryLock(cctx, WaitTime(time.Duration(r.Intn(5))*time.Millisecond))
					default:
						err = mu.Lock(ctx)
						ok = err == nil
					}
					cancel()
					if err != nil && !errors.Is(err, context.DeadlineExceeded) {
						errs <- fmt.Errorf("lock: %w", err)
						return
					}
					held, herr := mu.IsHeld(ctx)
					if herr != nil {
						errs <- herr
						return
					}
					if held != ok {
						errs <- fmt.Errorf("call said ok=%v (err %v) but Redis says held=%v", ok, err, held)
						return
					}
					if !ok {
						continue
					}
					if n := inside.Add(1); n != 1 {
						errs <- fmt.Errorf("%d holders at once", n)
					}
					acquired.Add(1)
					time.Sleep(time.Duration(r.Intn(300)) * time.Microsecond) // work under the lock
					inside.Add(-1)
					if err := mu.Unlock(ctx); err != nil {
						errs <- fmt.Errorf("unlock: %w", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		// A wait that ended as a hold was on its way gives it back in the background; a hold
		// nobody gave back would stay its whole 30 s lease.
		eventually(t, waitFor, "the lock free at the end", func() bool { return !exists(t, admin, "stress") })
		t.Logf("%d acquisitions", acquired.Load())
	})
}

// A local hand-off never goes to a waiting handle whose release is unsettled: a late run
// of that release would free the handed hold. Two goroutines share handle h: one waits in
// h.Lock behind holder a (same Client), the other makes an Unlock of h (holding nothing)
// whose reply is lost. When a releases, the lock is freed and published, not handed to h; the
// waiter takes it by its own attempt, which settles h's release first, and h then holds the
// lock for real.
//
// The waiter must make no attempt between the test's finding h's release unsettled and a's
// release: that attempt would settle it, and a hand-off to h would then be right. So the
// waiter is started with startHeir (parked for good: nothing wakes it before a releases),
// and the checks come right before a.Unlock.
func TestNoHandoffToHandleWithUnsettledRelease(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		const name = "no-handoff-unsettled"
		var aOwner, hOwner atomic.Value // set once the handles are made; "" matches no release
		aOwner.Store("")
		hOwner.Store("")
		var drop, hSends atomic.Int32
		hSendsAtA := atomic.Int32{} // h's release's sends when a's release first went; -1: not yet
		hSendsAtA.Store(-1)
		rdb := &hookedRDB{Client: redistest.ClientFor(t, b.Addr)}
		rdb.hook = func(_ context.Context, cmd rueidis.Completed) (rueidis.RedisResult, bool) {
			switch {
			case isReleaseOf(cmd, hOwner.Load().(string)):
				hSends.Add(1)
				if drop.CompareAndSwap(1, 0) {
					return rueidis.NewErrorResult(io.ErrUnexpectedEOF), true // lost, and never sent
				}
			case isReleaseOf(cmd, aOwner.Load().(string)):
				hSendsAtA.CompareAndSwap(-1, hSends.Load())
			}
			return rueidis.RedisResult{}, false
		}
		// No retry budget: the lost reply is at once an unknown outcome.
		c, err := New(rdb, WithRetryBudget(0))
		must(t, err)
		t.Cleanup(func() { c.Close() })
		attempts := countAttempts(c)
		admin := b.Client(t)
		other, _ := newClient(t, b.Addr)
		sub := rawSubscribe(t, ctx, admin, lockChannel(name))
		a := c.Lock(name, Reentrant())
		h := c.Lock(name, Reentrant())
		aOwner.Store(a.Owner())
		hOwner.Store(h.Owner())
		must(t, a.Lock(ctx))
		hDone := startHeir(t, ctx, c, h, attempts) // G1: waits as an heir
		sub.quiet(t, ctx, "before a's release")

		drop.Store(1)
		if err := h.Unlock(ctx); !errors.Is(err, ErrOutcomeUnknown) { // G2: holds nothing; reply lost
			t.Fatalf("h.Unlock with its reply lost: %v, want ErrOutcomeUnknown", err)
		}
		if n := hSends.Load(); n != 1 || drop.Load() != 0 {
			t.Fatalf("h's release sent %d times (dropped: %v), want once, dropped", n, drop.Load() == 0)
		}
		if !unsettledOf(t, ctx, h) {
			t.Fatal("h's release of unknown outcome is not kept for settling")
		}
		if n := parkedHeirs(c, name); n != 1 {
			t.Fatalf("%d parked heirs, want h's waiter", n)
		}

		must(t, a.Unlock(ctx))
		// The premise: h's release, lost, was not repeated before a's went (its waiter, which
		// nothing woke, made no attempt), so h was doubtful when a's release looked for an heir.
		if n := hSendsAtA.Load(); n != 1 {
			t.Fatalf("h's release sent %d times when a's release went, want once (the lost run): h's waiter "+
				"attempted, settling it, though nothing should have woken it", n)
		}
		await(t, hDone, "h's waiter takes the lock")
		// h's next request: were its release still unsettled, the repeat would free the lock.
		if err := h.Lock(ctx); err != nil {
			t.Fatalf("h's re-entry after its waiter took the lock: %v — its unsettled release, run late, freed "+
				"the hold handed to it", err)
		}
		if got := sub.published(t, ctx); len(got) != 1 {
			t.Fatalf("a's release published %q: want the lock freed (one message), not handed to h", got)
		}
		if n := hget(t, ctx, admin, name, h.Owner()); n != 2 || !h.Valid() {
			t.Fatalf("h's hold count in Redis %d, Valid %v; want 2, true", n, h.Valid())
		}
		if ok, err := other.Lock(name, Reentrant()).TryLock(ctx); ok || err != nil {
			t.Fatalf("another Client's TryLock while h holds the lock: %v, %v; want false, nil", ok, err)
		}
		must(t, h.Unlock(ctx))
		must(t, h.Unlock(ctx))
		if exists(t, admin, name) {
			t.Fatal("lock alive after h's last Unlock")
		}
	})
}

// An heir whose wait ends (its context) while a release is handing
// it the lock, and that release's reply is lost, must not leave holding the lock without
// knowing: its attempt adopts what the release wrote, whatever its context says, so its Lock
// succeeds (granted as its context ended) and its Unlock frees the lock.
func TestHeirLeavingDuringUnknownHandoffAdopts(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "heir-leaves-unknown-handoff"
		admin := b.Client(t)
		raw := b.Client(t)
		var aOwner atomic.Value
		aOwner.Store("")
		entered, gate := make(chan struct{}), make(chan struct{})
		rdb := &hookedRDB{Client: raw, hook: func(ctx context.Context, cmd rueidis.Completed) (rueidis.RedisResult, bool) {
			if !isReleaseOf(cmd, aOwner.Load().(string)) {
				return rueidis.RedisResult{}, false
			}
			close(entered)
			<-gate
			raw.Do(ctx, cmd) // the release runs and hands the lock over; its reply is lost
			return rueidis.NewErrorResult(io.ErrUnexpectedEOF), true
		}}
		c, err := New(rdb, WithRetryBudget(0))
		must(t, err)
		t.Cleanup(func() { c.Close() })
		warmScripts(t, ctx, c) // so that the held-back EVALSHA runs, not NOSCRIPT
		attempts := countAttempts(c)
		a, h := c.Lock(name, Reentrant()), c.Lock(name, Reentrant())
		aOwner.Store(a.Owner())
		must(t, a.Lock(ctx))
		hctx, cancel := context.WithCancel(ctx)
		defer cancel()
		hdone := startHeir(t, hctx, c, h, attempts) // parked for good: a's release reserves it

		adone := make(chan error, 1)
		go func() { adone <- a.Unlock(ctx) }()
		<-entered                         // h is reserved, the release on its way
		cancel()                          // the heir's wait ends meanwhile
		time.Sleep(20 * time.Millisecond) // let h see its context end first (either order must adopt)
		close(gate)
		if err := <-adone; !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("a.Unlock with its reply lost and no repeats: %v, want ErrOutcomeUnknown", err)
		}
		select {
		case err := <-hdone:
			if err != nil {
				t.Fatalf("h.Lock: %v; want it to hold the lock the release handed it (adopted)", err)
			}
		case <-time.After(waitFor):
			t.Fatal("h.Lock did not return")
		}
		if n := hget(t, ctx, admin, name, h.Owner()); n != 1 || !h.Valid() {
			t.Fatalf("h's hold count %d, Valid %v; want 1, true", n, h.Valid())
		}
		must(t, h.Unlock(ctx))
		if exists(t, admin, name) {
			t.Fatal("lock alive after h's Unlock")
		}
	})
}
