package sync

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/rueidis"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// Regression tests for the findings of a review of the core (S1–S5, L1).

// hookedRDB is a rueidis client whose Do runs hook first: the hook may answer for Redis
// (ok: the command is not sent) or hold the command back before letting it through.
type hookedRDB struct {
	rueidis.Client
	hook func(ctx context.Context, cmd rueidis.Completed) (res rueidis.RedisResult, ok bool)
}

func (r *hookedRDB) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if res, ok := r.hook(ctx, cmd); ok {
		return res
	}
	return r.Client.Do(ctx, cmd)
}

// isReleaseOf reports whether cmd is a run of lua.LockRelease by owner (its own release, not
// one that hands the lock to it): EVALSHA|EVAL, script, 4, name, channel, latch, clients,
// lease, owner, ...
func isReleaseOf(cmd rueidis.Completed, owner string) bool {
	args := cmd.Commands() // EVALSHA sha 5 lock channel latch clients listener leaseMs owner ...
	return len(args) > 9 && strings.HasPrefix(args[5], unlockLatchPrefix) && args[9] == owner
}

// hget is the hold count owner has on name in Redis; 0 when it has no field.
func hget(t *testing.T, ctx context.Context, rdb rueidis.Client, name, owner string) int64 {
	t.Helper()
	n, err := rdb.Do(ctx, rdb.B().Hget().Key(name).Field(owner).Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0
	}
	must(t, err)
	return n
}

// hashLatch turns the owner's unlock latch into a hash, so that every release of the owner is
// refused with WRONGTYPE, without running, until the latch is deleted.
func hashLatch(t *testing.T, ctx context.Context, admin rueidis.Client, latch string) {
	t.Helper()
	if latch == "" {
		t.Fatal("the owner has no unlock latch yet")
	}
	must(t, admin.Do(ctx, admin.B().Del().Key(latch).Build()).Error())
	must(t, admin.Do(ctx, admin.B().Hset().Key(latch).FieldValue().FieldValue("x", "1").Build()).Error())
}

// unsettledOf reports, under the owner's op, whether l has a release of unknown outcome.
func unsettledOf(t *testing.T, ctx context.Context, l *Lock) bool {
	t.Helper()
	must(t, l.o.lock(ctx))
	defer l.o.unlock()
	return l.o.unsettled != nil
}

// S1. A last Unlock whose reply is lost leaves its release unsettled. When the settling
// repeat is refused (WRONGTYPE: it did not run, so the first run may still), the release is
// still unsettled: the next acquire fails and does not proceed. Once the repeat gets a reply
// (the release frees the given-up hold), the next hold is a new one with its own lease — not
// the deadline of the given-up hold's lapsing lease, an hour ahead.
func TestReviewS1RefusedSettleKeepsReleaseUnsettled(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "review-s1"
		var l *Lock
		var drop, dropped atomic.Int32
		rdb := &hookedRDB{Client: redistest.ClientFor(t, b.Addr)}
		rdb.hook = func(_ context.Context, cmd rueidis.Completed) (rueidis.RedisResult, bool) {
			if drop.Load() == 1 && isReleaseOf(cmd, l.Owner()) {
				dropped.Add(1)
				return rueidis.NewErrorResult(io.ErrUnexpectedEOF), true // lost, and never sent
			}
			return rueidis.RedisResult{}, false
		}
		c, err := New(rdb, WithRetryBudget(100*time.Millisecond))
		must(t, err)
		t.Cleanup(func() { c.Close() })
		other, _ := newClient(t, b.Addr)
		admin := b.Client(t)
		l = c.Lock(name, Reentrant())
		if ok, err := l.TryLock(ctx, Lease(time.Hour)); !ok || err != nil {
			t.Fatalf("TryLock: %v, %v", ok, err)
		}

		drop.Store(1) // every try of the release is lost
		if err := l.Unlock(ctx); !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("Unlock with every reply lost: %v, want ErrOutcomeUnknown", err)
		}
		drop.Store(0)
		if dropped.Load() < 2 {
			t.Fatalf("the release was tried %d times, want it repeated within the retry budget", dropped.Load())
		}
		if n := hget(t, ctx, admin, name, l.Owner()); n != 1 {
			t.Fatalf("the given-up hold's count in Redis %d, want 1: no release reached Redis", n)
		}

		hashLatch(t, ctx, admin, l.o.latch) // the settling repeat is refused
		ok, err := l.TryLock(ctx, Lease(time.Second))
		if ok || err == nil {
			d, _ := l.Deadline()
			t.Fatalf("TryLock while the earlier release's repeat is refused: %v, %v (deadline %v ahead); "+
				"want an error: a refused repeat did not settle the release", ok, err, time.Until(d).Round(time.Millisecond))
		}
		if !errors.Is(err, ErrWrongType) {
			t.Errorf("TryLock while the repeat is refused with WRONGTYPE: %v, want ErrWrongType", err)
		}
		if !unsettledOf(t, ctx, l) {
			t.Fatal("the release is no longer kept for settling after its repeat was refused")
		}
		if n := hget(t, ctx, admin, name, l.Owner()); n != 1 {
			t.Fatalf("hold count in Redis %d after the refused settle, want 1 (nothing ran)", n)
		}

		must(t, admin.Do(ctx, admin.B().Del().Key(l.o.latch).Build()).Error())
		// A lease of its own, short beside the given-up hold's hour, long enough to last
		// through the checks below on a loaded machine (1 s did not).
		const lease = 10 * time.Second
		ok, err = l.TryLock(ctx, Lease(lease))
		took := time.Now()
		if !ok || err != nil {
			t.Fatalf("TryLock once the latch is back: %v, %v", ok, err)
		}
		if unsettledOf(t, ctx, l) {
			t.Fatal("the release is still unsettled after its repeat got a reply")
		}
		d, dok := l.Deadline()
		if !dok || d.After(took.Add(lease)) {
			t.Fatalf("deadline %v ahead (%v) after TryLock(Lease(%v)), want at most %[3]v: the new hold's own lease",
				d.Sub(took).Round(time.Millisecond), dok, lease)
		}
		if ms := pttl(t, admin, name); ms <= 0 || ms > lease.Milliseconds() {
			t.Fatalf("PTTL %d ms after TryLock(Lease(%v)), want (0, %d]: the given-up hold was released first", ms, lease, lease.Milliseconds())
		}
		if n := hget(t, ctx, admin, name, l.Owner()); n != 1 {
			t.Fatalf("hold count in Redis %d, want 1", n)
		}
		if ok, err := other.Lock(name, Reentrant()).TryLock(ctx); ok || err != nil {
			t.Fatalf("another Client's TryLock while the handle holds the lock: %v, %v; want false, nil", ok, err)
		}
		if !l.Valid() {
			t.Fatal("the new hold is not valid")
		}
		must(t, l.Unlock(ctx))
		if exists(t, admin, name) {
			t.Fatal("lock alive after its Unlock")
		}
	})
}

// S1 (owner.took). A first hold taken while the lease of a given-up hold is still lapsing
// (timed with its old deadline) gets a deadline of its own, not the lapsing one. The state is
// set up through the core: the lapsing lease of a released hold whose key is gone.
func TestReviewS1NewHoldStopsLapsingLease(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		const name = "review-s1-took"
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

		ok, err := l.TryLock(ctx, Lease(time.Second))
		took := time.Now()
		if !ok || err != nil {
			t.Fatalf("TryLock: %v, %v", ok, err)
		}
		if d, dok := l.Deadline(); !dok || d.After(took.Add(time.Second)) {
			t.Fatalf("deadline %v ahead (%v) after TryLock(Lease(1s)), want at most 1s: not the lapsing lease's",
				d.Sub(took).Round(time.Millisecond), dok)
		}
		must(t, l.Unlock(ctx))
	})
}

// S2. A local hand-off never goes to a waiting handle whose release is unsettled: a late run
// of that release would free the handed hold. Two goroutines share handle h: one waits in
// h.Lock behind holder a (same Client), the other makes an Unlock of h (holding nothing)
// whose reply is lost. When a releases, the lock is freed and published, not handed to h; the
// waiter takes it by its own attempt, which settles h's release first, and h then holds the
// lock for real.
func TestReviewS2NoHandoffToHandleWithUnsettledRelease(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		const name = "review-s2"
		var h *Lock
		var drop, dropped atomic.Int32
		rdb := &hookedRDB{Client: redistest.ClientFor(t, b.Addr)}
		rdb.hook = func(_ context.Context, cmd rueidis.Completed) (rueidis.RedisResult, bool) {
			if drop.Load() == 1 && isReleaseOf(cmd, h.Owner()) && drop.CompareAndSwap(1, 0) {
				dropped.Add(1)
				return rueidis.NewErrorResult(io.ErrUnexpectedEOF), true // lost, and never sent
			}
			return rueidis.RedisResult{}, false
		}
		// No retry budget: the lost reply is at once an unknown outcome.
		c, err := New(rdb, WithRetryBudget(0))
		must(t, err)
		t.Cleanup(func() { c.Close() })
		admin := b.Client(t)
		other, _ := newClient(t, b.Addr)
		sub := rawSubscribe(t, ctx, admin, lockChannel(name))
		a := c.Lock(name, Reentrant())
		h = c.Lock(name, Reentrant())
		must(t, a.Lock(ctx))
		hDone := startLock(ctx, h) // G1: waits as an heir
		settled(t, c, name, 1)

		drop.Store(1)
		if err := h.Unlock(ctx); !errors.Is(err, ErrOutcomeUnknown) { // G2: holds nothing; reply lost
			t.Fatalf("h.Unlock with its reply lost: %v, want ErrOutcomeUnknown", err)
		}
		if dropped.Load() != 1 {
			t.Fatalf("%d releases of h dropped, want 1", dropped.Load())
		}
		if !unsettledOf(t, ctx, h) {
			t.Fatal("h's release of unknown outcome is not kept for settling")
		}
		if n := parkedHeirs(c, name); n != 1 {
			t.Fatalf("%d parked heirs, want h's waiter", n)
		}
		sub.published(t, ctx)

		must(t, a.Unlock(ctx))
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

// S4. A local hand-off never goes to a waiting handle whose owner is busy: an Unlock of that
// handle holding nothing, in flight when the hand-off is made, would free the handed hold and
// return nil. Two goroutines share handle h: one waits in h.Lock behind holder a, the other's
// h.Unlock (count 0) is held back before it is sent while a releases. The lock is freed and
// published, h's Unlock finds it not held, and h's waiter takes the lock by its own attempt.
func TestReviewS4NoHandoffToBusyHandle(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		const name = "review-s4"
		var h *Lock
		var hold atomic.Int32
		entered, release := make(chan struct{}), make(chan struct{})
		rdb := &hookedRDB{Client: redistest.ClientFor(t, b.Addr)}
		rdb.hook = func(ctx context.Context, cmd rueidis.Completed) (rueidis.RedisResult, bool) {
			if hold.Load() == 1 && isReleaseOf(cmd, h.Owner()) && hold.CompareAndSwap(1, 0) {
				close(entered)
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return rueidis.RedisResult{}, false
		}
		c, err := New(rdb)
		must(t, err)
		t.Cleanup(func() { c.Close() })
		admin := b.Client(t)
		other, _ := newClient(t, b.Addr)
		sub := rawSubscribe(t, ctx, admin, lockChannel(name))
		a := c.Lock(name, Reentrant())
		h = c.Lock(name, Reentrant())
		must(t, a.Lock(ctx))
		hDone := startLock(ctx, h) // G1: waits as an heir
		settled(t, c, name, 1)
		sub.published(t, ctx)

		hold.Store(1)
		unlocked := make(chan error, 1)
		go func() { unlocked <- h.Unlock(ctx) }() // G2: holds nothing
		select {
		case <-entered:
		case <-time.After(5 * time.Second):
			t.Fatal("h's Unlock not sent within 5 s")
		}
		must(t, a.Unlock(ctx)) // while h's Unlock is in flight
		close(release)
		select {
		case err := <-unlocked:
			if !errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLockLost) {
				t.Fatalf("h.Unlock of a handle holding nothing: %v, want ErrNotHeld — it must not free a hold "+
					"handed to h meanwhile", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("h's Unlock not done within 5 s")
		}
		await(t, hDone, "h's waiter takes the lock")
		if n := hget(t, ctx, admin, name, h.Owner()); n != 1 || !h.Valid() {
			t.Fatalf("h's hold count in Redis %d, Valid %v; want 1, true", n, h.Valid())
		}
		if got := sub.published(t, ctx); len(got) != 1 {
			t.Fatalf("a's release published %q: want the lock freed (one message), not handed to h", got)
		}
		if ok, err := other.Lock(name, Reentrant()).TryLock(ctx); ok || err != nil {
			t.Fatalf("another Client's TryLock while h holds the lock: %v, %v; want false, nil", ok, err)
		}
		must(t, h.Unlock(ctx))
		if exists(t, admin, name) {
			t.Fatal("lock alive after h's Unlock")
		}
	})
}

// S3. An Unlock of a handle that holds nothing, whose reply is lost or which Redis refuses,
// leaves the stopped lease of the handle's long-finished hold alone: it is not revived as a
// lapsing lease (Valid true, Deadline an hour ahead) while another Client holds the lock.
func TestReviewS3UnlockOfNothingDoesNotReviveLease(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		for _, how := range []string{"lost", "refused"} {
			t.Run(how, func(t *testing.T) {
				ctx := testCtx(t, 10*time.Second)
				name := "review-s3-" + how
				proxy := redistest.NewProxy(t, b.Addr)
				c, _ := newClient(t, proxy.Addr(), WithRetryBudget(100*time.Millisecond))
				other, _ := newClient(t, b.Addr)
				admin := b.Client(t)
				h := c.Lock(name, Reentrant())
				if ok, err := h.TryLock(ctx, Lease(time.Hour)); !ok || err != nil {
					t.Fatalf("TryLock: %v, %v", ok, err)
				}
				must(t, h.Unlock(ctx))
				o := other.Lock(name, Reentrant())
				if ok, err := o.TryLock(ctx); !ok || err != nil {
					t.Fatalf("another Client's TryLock of the free lock: %v, %v", ok, err)
				}

				var err error
				if how == "lost" {
					proxy.Blackhole(true)
					if err = h.Unlock(ctx); !errors.Is(err, ErrOutcomeUnknown) {
						t.Fatalf("h.Unlock with Redis unreachable: %v, want ErrOutcomeUnknown", err)
					}
				} else {
					hashLatch(t, ctx, admin, h.o.latch)
					if err = h.Unlock(ctx); !errors.Is(err, ErrWrongType) {
						t.Fatalf("h.Unlock with its latch a hash: %v, want ErrWrongType", err)
					}
				}
				if h.Valid() {
					d, _ := h.Deadline()
					t.Fatalf("h.Valid() true after an Unlock of nothing failed (%v), deadline %v ahead, while another "+
						"Client holds the lock", err, time.Until(d).Round(time.Second))
				}
				if d, ok := h.Deadline(); ok {
					t.Fatalf("h.Deadline() %v ahead after an Unlock of nothing failed, want none", time.Until(d).Round(time.Second))
				}
				if n := hget(t, ctx, admin, name, o.Owner()); n != 1 {
					t.Fatalf("the other Client's hold count %d, want 1", n)
				}
				must(t, o.Unlock(ctx))
			})
		}
	})
}

// S5. A hold whose lease the watchdog found lost stays lost even when a field of its owner is
// back in Redis (a late acquire of the same owner): a re-entry fails with ErrLockLost rather
// than succeed on a fresh lease and mask the gap, and Unlock releases the field but reports
// ErrLockLost.
func TestReviewS5LostLeaseStaysLostWhenFieldIsBack(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		for _, call := range []string{"Lock", "TryLock", "Unlock"} {
			t.Run(call, func(t *testing.T) {
				ctx := testCtx(t, 30*time.Second)
				name := "review-s5-" + call
				// A renewal every 500 ms finds the lock gone soon; the 1.5 s lease outlives a
				// slow acquisition on a loaded machine (300 ms did not always).
				c, _ := newClient(t, b.Addr, WithWatchdogTimeout(1500*time.Millisecond))
				admin := b.Client(t)
				l := c.Lock(name, Reentrant())
				must(t, l.Lock(ctx))
				lost := l.Lost()
				must(t, admin.Do(ctx, admin.B().Del().Key(name).Build()).Error())
				eventually(t, waitFor, "Lost closed by the renewal that finds the lock gone", func() bool {
					return isClosed(lost)
				})
				// A late acquire of the same owner puts its field back.
				must(t, admin.Do(ctx, admin.B().Hset().Key(name).FieldValue().FieldValue(l.Owner(), "1").Build()).Error())
				must(t, admin.Do(ctx, admin.B().Pexpire().Key(name).Milliseconds(30000).Build()).Error())

				switch call {
				case "Lock":
					wantLost(t, "re-entry Lock after the lease was lost", l.Lock(ctx), lost)
				case "TryLock":
					ok, err := l.TryLock(ctx)
					if ok {
						t.Fatalf("re-entry TryLock after the lease was lost reported the lock taken (err %v)", err)
					}
					wantLost(t, "re-entry TryLock after the lease was lost", err, lost)
				case "Unlock":
					wantLost(t, "Unlock after the lease was lost", l.Unlock(ctx), lost)
					if exists(t, admin, name) {
						t.Fatal("the lock is still there after the Unlock: the field put back was not released")
					}
					return
				}
				if n := hget(t, ctx, admin, name, l.Owner()); n != 1 {
					t.Fatalf("the owner's hold count in Redis %d after the failed re-entry, want 1 (not re-entered)", n)
				}
				if l.Valid() {
					t.Fatal("Valid after the re-entry found the lease lost")
				}
			})
		}
	})
}

// L1. A request repeating while Redis is unreachable stops once the Client is closed: it
// returns at once, not at the end of its retry budget after spinning without backoff.
func TestReviewL1ExecStopsRetryingWhenClosed(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		const budget = 3 * time.Second
		proxy := redistest.NewProxy(t, b.Addr)
		core, logs := observer.New(zapcore.DebugLevel)
		c, _ := newClient(t, proxy.Addr(), WithRetryBudget(budget), WithLogger(zap.New(core)))
		l := c.Lock("review-l1", Reentrant())
		if ok, err := l.TryLock(ctx, Lease(time.Hour)); !ok || err != nil {
			t.Fatalf("TryLock: %v, %v", ok, err)
		}
		repeats := func() int { return logs.FilterMessageSnippet("repeating the request").Len() }

		proxy.Blackhole(true)
		unlocked := make(chan error, 1)
		go func() { unlocked <- l.Unlock(ctx) }()
		eventually(t, 2*time.Second, "Unlock repeating its request", func() bool { return repeats() >= 1 })
		before := repeats()
		closing := time.Now()
		must(t, c.Close())
		select {
		case err := <-unlocked:
			took := time.Since(closing)
			after := repeats() - before
			t.Logf("Unlock returned %v after Close: %v; %d repeats before Close, %d after", took, err, before, after)
			if took > budget/6 {
				t.Errorf("Unlock returned %v after Close, want promptly (retry budget %v)", took, budget)
			}
			if after > 2 {
				t.Errorf("Unlock repeated its request %d times after Close, want at most 2", after)
			}
			if !errors.Is(err, ErrOutcomeUnknown) {
				t.Errorf("Unlock: %v, want ErrOutcomeUnknown", err)
			}
		case <-time.After(2 * budget):
			t.Fatalf("Unlock still running %v after Close", 2*budget)
		}
	})
}

// Second review, finding 1. An heir whose wait ends (its context) while a release is handing
// it the lock, and that release's reply is lost, must not leave holding the lock without
// knowing: its attempt adopts what the release wrote, whatever its context says, so its Lock
// succeeds (granted as its context ended) and its Unlock frees the lock.
func TestReviewHeirLeavingDuringUnknownHandoffAdopts(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "review-heir-leaves"
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
		a, h := c.Lock(name, Reentrant()), c.Lock(name, Reentrant())
		aOwner.Store(a.Owner())
		must(t, a.Lock(ctx))
		hctx, cancel := context.WithCancel(ctx)
		defer cancel()
		hdone := startLock(hctx, h)
		settled(t, c, name, 1)

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
		case <-time.After(5 * time.Second):
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

// Second review, finding 3. A lease the watchdog loses while a re-entry's script is on its
// way stays lost: the re-entry fails with ErrLockLost instead of starting a fresh lease
// under the old count.
func TestReviewReentryLosingLeaseInFlightIsLost(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		c, _ := newClient(t, b.Addr)
		l := c.Lock("review-reentry-lost", Reentrant())
		must(t, l.Lock(ctx))
		lost := l.Lost()
		c.afterAcquire = func() { l.o.lease.Load().Lose("test: lost while the re-entry was on its way") }
		err := l.Lock(ctx)
		c.afterAcquire = nil
		if !errors.Is(err, ErrLockLost) {
			t.Fatalf("re-entry whose lease was lost on the way: %v, want ErrLockLost", err)
		}
		if !isClosed(lost) || !isClosed(l.Lost()) || l.Valid() {
			t.Fatalf("Lost closed %v (current %v), Valid %v; want closed, closed, false", isClosed(lost), isClosed(l.Lost()), l.Valid())
		}
	})
}
