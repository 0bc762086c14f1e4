package sync

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/lua"
	"github.com/latchkey/latchkey/pubsub"
	"github.com/redis/rueidis"
)

// A waiter that takes the only wake-up of a release and then cannot use it (its attempt
// fails: a context that ended, a broken connection) passes it on: the other local waiter
// takes the free lock at once, not at its TTL re-check 30 s later. The attempts are scripted,
// so the interleaving is exact: B is the oldest waiter, so the release message goes to B; C
// queues behind B without attempting.
func TestWakeUpPassedOnWhenWokenWaiterFails(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 60*time.Second)
		c, rdb := newClient(t, b.Addr)
		const channel = "redisson_lock__channel:{wake-pass}"
		const holderTTL = 30000 // ms: the re-check a lost wake-up would fall back to
		var released atomic.Bool
		var bCalls, cCalls atomic.Int32
		bDone, cDone := make(chan error, 1), make(chan error, 1)
		go func() {
			_, err := c.acquire(ctx, wait{channel: channel, policy: pubsub.LockPolicy, limit: -1, join: true,
				attempt: attemptFunc(func(context.Context) (int64, bool, error) {
					if bCalls.Add(1) <= 2 {
						return holderTTL, false, nil // the first try, and the one after subscribing
					}
					return 0, false, errors.New("B cannot use its wake-up")
				})})
			bDone <- err
		}()
		eventually(t, waitFor, "B subscribed and re-attempted", func() bool { return bCalls.Load() == 2 })
		go func() {
			ok, err := c.acquire(ctx, wait{channel: channel, policy: pubsub.LockPolicy, limit: -1, join: true,
				attempt: attemptFunc(func(context.Context) (int64, bool, error) {
					cCalls.Add(1)
					if released.Load() {
						return 0, true, nil
					}
					return holderTTL, false, nil
				})})
			if err == nil && !ok {
				err = errors.New("C gave up")
			}
			cDone <- err
		}()
		eventually(t, waitFor, "C queued behind B", func() bool { return c.mux.Waiters(channel) == 2 })
		if n := cCalls.Load(); n != 0 {
			t.Fatalf("C attempted %d times before any release: it should queue behind B", n)
		}

		released.Store(true)
		if err := rdb.Do(ctx, rdb.B().Publish().Channel(channel).Message("0").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := <-bDone; err == nil {
			t.Fatal("B: want its attempt's error")
		}
		select {
		case err := <-cDone:
			if err != nil {
				t.Fatalf("C: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("C still waiting 5 s after the release: the only wake-up died with B")
		}
	})
}

// A watchdog-kept hold re-entered with a short explicit lease stays kept, as in Redisson: the
// watchdog renews it before the short TTL runs out, so it neither expires while held nor
// reports a false loss.
func TestReentryWithShortLeaseStaysKept(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		c, rdb := newClient(t, b.Addr, WithWatchdogTimeout(3*time.Second)) // renews every 1 s
		mu := c.Lock("reenter-short", Reentrant())
		if err := mu.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := mu.Lock(ctx, Lease(100*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		held := time.Now()
		for time.Since(held) < 400*time.Millisecond {
			if !exists(t, rdb, "reenter-short") {
				t.Fatalf("the lock expired %v after a re-entry with a 100ms lease while held", time.Since(held))
			}
			time.Sleep(10 * time.Millisecond)
		}
		if closed(mu.Lost()) {
			t.Fatal("Lost closed while the lock was kept")
		}
		for i := 0; i < 2; i++ {
			if err := mu.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// Goroutines sharing a handle: G2 locks while G1's final Unlock is in flight (slowed by a lost
// reply). G2's hold must end up kept by the watchdog, not orphaned by G1's bookkeeping.
func TestSharedHandleUnlockRacesLock(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		ctx := testCtx(t, 60*time.Second)
		proxy := redistest.NewProxy(t, b.Addr)
		// Renewals every 500 ms keep a 1.5 s lease with a second to spare on a loaded machine.
		const timeout = 1500 * time.Millisecond
		c, _ := newClient(t, proxy.Addr(), WithWatchdogTimeout(timeout))
		admin := b.Client(t)
		warmScripts(t, ctx, c)
		mu := c.Lock("shared-handle")
		if err := mu.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		proxy.DropReplyAfter([]byte(unlockLatchPrefix))
		unlocked := make(chan error, 1)
		go func() { unlocked <- mu.Unlock(ctx) }() // G1
		eventually(t, 10*time.Second, "release ran", func() bool { return !exists(t, admin, "shared-handle") })
		if err := mu.Lock(ctx); err != nil { // G2, same handle
			t.Fatal(err)
		}
		if err := <-unlocked; err != nil {
			t.Fatalf("G1 Unlock: %v", err)
		}
		if proxy.Dropped() != 1 {
			t.Fatalf("the proxy dropped %d replies, want 1", proxy.Dropped())
		}
		held := time.Now()
		for time.Since(held) < timeout+timeout/3 { // past the TTL G2's acquisition set
			if !exists(t, admin, "shared-handle") {
				t.Fatalf("G2's hold expired %v after it was taken: nothing renewed it", time.Since(held))
			}
			time.Sleep(20 * time.Millisecond)
		}
		if closed(mu.Lost()) {
			t.Fatal("Lost closed while G2's hold was kept")
		}
		if err := mu.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// `defer mu.Unlock(reqCtx)` with a request context that has ended still releases the lock.
func TestUnlockWithEndedContextReleases(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		c, rdb := newClient(t, b.Addr)
		mu := c.Lock("ended-ctx")
		if err := mu.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		ended, cancel := context.WithCancel(ctx)
		cancel()
		if err := mu.Unlock(ended); err != nil {
			t.Fatalf("Unlock with an ended context: %v", err)
		}
		if exists(t, rdb, "ended-ctx") {
			t.Fatal("lock still held after Unlock")
		}
	})
}

// A final Unlock that fails leaves the lock neither renewed for ever nor held by a handle
// that thinks otherwise. Its outcome unknown (Redis unreachable through every repeat within
// the retry budget), the hold counts as given up: Valid is false at once, nothing renews the
// lock, which expires with its lease, and a later Unlock (which first repeats the unknown
// one) has nothing to release. Refused (an error reply: nothing ran), the handle still holds
// the lock, but its lease lapses: not renewed, Lost closes when it runs out, and the lock
// expires.
func TestFailedUnlockLapsesLease(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		// Renewals every 500 ms keep a 1.5 s lease with a second to spare on a loaded machine,
		// until a failed release stops them.
		const timeout = 1500 * time.Millisecond
		ctx := testCtx(t, 60*time.Second)
		proxy := redistest.NewProxy(t, b.Addr)
		// A short retry budget keeps the test fast: the repeats end while Redis is unreachable.
		c, _ := newClient(t, proxy.Addr(), WithWatchdogTimeout(timeout), WithRetryBudget(200*time.Millisecond))
		admin := b.Client(t)

		t.Run("unknown", func(t *testing.T) {
			mu := c.Lock("unlock-unknown")
			must(t, mu.Lock(ctx))
			proxy.Blackhole(true)
			err := mu.Unlock(ctx)
			proxy.Blackhole(false)
			if !errors.Is(err, ErrOutcomeUnknown) {
				t.Fatalf("Unlock with Redis unreachable: %v, want ErrOutcomeUnknown", err)
			}
			if mu.Valid() {
				t.Fatal("Valid after an Unlock whose outcome is unknown: the hold was given up")
			}
			if _, ok := mu.Deadline(); ok {
				t.Fatal("a deadline after the hold was given up")
			}
			eventually(t, timeout+10*time.Second, "the unreleased lock expires", func() bool { return !exists(t, admin, "unlock-unknown") })
			if err := mu.Unlock(ctx); !errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLockLost) {
				t.Fatalf("Unlock after a failed one: %v, want ErrNotHeld (the hold was given up)", err)
			}
		})
		t.Run("refused", func(t *testing.T) {
			mu := c.Lock("unlock-refused", Reentrant())
			must(t, mu.Lock(ctx))
			must(t, mu.Lock(ctx))
			must(t, mu.Unlock(ctx)) // makes the handle's latch
			// The latch turned into a hash: the release's first command fails, nothing runs.
			must(t, admin.Do(ctx, admin.B().Del().Key(mu.o.latch).Build()).Error())
			must(t, admin.Do(ctx, admin.B().Hset().Key(mu.o.latch).FieldValue().FieldValue("x", "1").Build()).Error())
			if err := mu.Unlock(ctx); err == nil || errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrNotHeld) {
				t.Fatalf("Unlock refused by Redis: %v, want its error", err)
			}
			if !mu.Valid() {
				t.Fatal("not Valid after a refused Unlock: the handle still holds the lock")
			}
			select {
			case <-mu.Lost():
			case <-time.After(timeout + 10*time.Second):
				t.Fatal("Lost not closed after the refused release, although nothing renews the lock")
			}
			eventually(t, timeout+10*time.Second, "the lapsed lock expires", func() bool { return !exists(t, admin, "unlock-refused") })
		})
	})
}

// Unlock latches do not pile up: a handle has one latch key, which each of its unlocks
// overwrites, and the janitor deletes it once the handle has been garbage-collected — no
// Close needed. (While the handle lives, the latch is what makes a late duplicate of its
// earlier unlocks a no-op, so it stays.)
func TestLatchesDoNotLinger(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		c, rdb := newClient(t, b.Addr)
		latches := func() int {
			keys, err := rdb.Do(ctx, rdb.B().Keys().Pattern(unlockLatchPrefix+"*").Build()).AsStrSlice()
			if err != nil {
				t.Fatal(err)
			}
			return len(keys)
		}
		cycle := func(mu *Lock) {
			for range 2 { // a partial release writes the latch too
				if err := mu.Lock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for range 2 {
				if err := mu.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		mu := c.Lock("latches", Reentrant())
		for i := 0; i < 50; i++ {
			cycle(mu)
			if n := latches(); n != 1 {
				t.Fatalf("cycle %d: %d unlock latches alive, want the handle's one", i, n)
			}
		}
		if ttl := pttl(t, rdb, mu.o.latch); ttl <= 0 {
			t.Fatalf("latch PTTL %d, want it to expire by itself", ttl)
		}
		for i := range 20 { // handles made per request, as services do, and dropped
			cycle(c.Lock("latches:"+strconv.Itoa(i), Reentrant()))
		}
		runtime.KeepAlive(mu)
		eventually(t, waitFor, "the latches of collected handles deleted", func() bool {
			runtime.GC()
			return latches() == 0
		})
	})
}

// A release that finds the lock not held records that, as minus its request number, so that
// its repeat finds the lock not held too instead of taking the first run for a success.
func TestNotHeldReleaseRepeatsAsNotHeld(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		c, rdb := newClient(t, b.Addr)
		mu := c.Lock("not-held")
		latch := latchKeyFor(mu.Name(), c.newRequestID())
		for i, holds := range []string{"1", "2"} {
			req := strconv.Itoa(9 + i)
			args := []string{"30000", mu.Owner(), c.publishCmd, unlockLatchMs, holds, req, c.lockToken, "0", c.fairWaitMs}
			for run := range 2 {
				err := lua.LockRelease.Exec(ctx, rdb, []string{mu.Name(), mu.plain().channel, latch, mu.plain().clients, mu.plain().listener}, args).Error()
				if !rueidis.IsRedisNil(err) {
					t.Fatalf("holds %s, run %d: %v, want nil (not held)", holds, run, err)
				}
			}
			if v, err := rdb.Do(ctx, rdb.B().Get().Key(latch).Build()).ToString(); err != nil || v != "-"+req {
				t.Fatalf("holds %s: latch %q (%v), want -%s", holds, v, err, req)
			}
		}
	})
}

// Close deletes the latches of idle handles but not of one whose unlock is still running
// (simulated by holding its op lock): that unlock may yet retry, and needs its latch to tell
// a repeat from a first run.
func TestCloseSparesLatchOfRunningUnlock(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		c, rdb := newClient(t, b.Addr)
		idle, busy := c.Lock("close-idle", Reentrant()), c.Lock("close-busy", Reentrant())
		for _, mu := range []*Lock{idle, busy} {
			must(t, mu.Lock(ctx))
			must(t, mu.Unlock(ctx))
		}
		must(t, busy.o.lock(ctx)) // as an unlock still running would
		c.Close()
		busy.o.unlock()
		if exists(t, rdb, idle.o.latch) {
			t.Fatal("Close left an idle handle's latch")
		}
		if !exists(t, rdb, busy.o.latch) {
			t.Fatal("Close deleted the latch of a handle whose unlock was running")
		}
	})
}

// A Close that lands while an acquire is on its way gives the hold back: the script took it,
// but nobody would renew or release it, and it would block every other process for its
// lease. (A wait that a wake-up and Close end at the same moment may pick the wake-up —
// select chooses at random — and attempt after Close: the same case.) For a fair lock, a grant that reaches a waiter whose Client closed meanwhile goes
// back too (its wait's leave finds it).
func TestCloseDuringAcquireGivesTheHoldBack(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		admin := b.Client(t)
		t.Run("lock", func(t *testing.T) {
			const name = "close-during-acquire"
			c, _ := newClient(t, b.Addr)
			c.afterAcquire = func() { c.Close() } // the script ran; Close comes before its reply is read
			if err := c.Lock(name).Lock(ctx); !errors.Is(err, ErrClosed) {
				t.Fatalf("Lock closed during its acquire: %v, want ErrClosed", err)
			}
			if exists(t, admin, name) {
				t.Fatalf("the hold taken as the Client closed is still there (PTTL %d ms)", pttl(t, admin, name))
			}
		})
		t.Run("fair grant", func(t *testing.T) {
			const name = "fair:close-during-grant"
			hc, _ := newClient(t, b.Addr)
			holder := hc.FairLock(name)
			must(t, holder.Lock(ctx))
			c, _ := newClient(t, b.Addr)
			w := c.FairLock(name, Reentrant())
			var once gosync.Once
			c.afterAcquire = func() { // the waiter queued; the holder grants it the lock, and its Client closes
				once.Do(func() {
					must(t, holder.Unlock(ctx))
					if _, ok := hgetField(t, admin, name, w.Owner()); !ok {
						t.Error("the release did not grant the waiter the lock: the situation this test is about did not arise")
					}
					c.Close()
				})
			}
			if err := w.Lock(ctx); !errors.Is(err, ErrClosed) {
				t.Fatalf("fair Lock whose Client closed as it was granted the lock: %v, want ErrClosed", err)
			}
			if exists(t, admin, name) {
				t.Fatalf("the lock granted to a closed Client's waiter is still held (PTTL %d ms)", pttl(t, admin, name))
			}
		})
	})
}
