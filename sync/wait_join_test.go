package sync

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/pubsub"
)

// subscribed waits until c's subscription to channel is confirmed: from then on, a waiter
// that joins is not woken by the confirmation.
func subscribed(t *testing.T, c *Client, channel string) {
	t.Helper()
	eventually(t, waitFor, "channel subscribed", func() bool { return c.mux.Subscribed(channel) })
}

// heldWithWaiter takes name with one handle and parks a second handle of the same Client on
// it, subscribed; the second handle's Lock result arrives on done (its wait ends with the test).
func heldWithWaiter(t *testing.T, ctx context.Context, c *Client, name string) (holder *Lock, done <-chan error) {
	t.Helper()
	holder = c.Lock(name, Reentrant())
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	otherCtx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	result := make(chan error, 1)
	go func() { result <- c.Lock(name).Lock(otherCtx) }()
	eventually(t, waitFor, "other handle waiting", func() bool { return c.mux.Waiters(holder.plain().clientCh) == 1 })
	subscribed(t, c, holder.plain().clientCh)
	return holder, result
}

// A handle that already holds the lock re-enters at once even while other handles of the
// same Client wait for it. Queued behind them without attempting, the re-entry would stall
// until its re-check (30 s): the only release that could wake it is its own.
func TestReentryNotQueuedBehindWaiters(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		c, _ := newClient(t, b.Addr)
		holder, done := heldWithWaiter(t, ctx, c, "join:reentry")

		// Seconds on a loaded machine; a re-entry queued behind the waiter takes 30 s.
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		if err := holder.Lock(rctx); err != nil {
			t.Fatalf("re-entrant Lock by the holder: %v after %v (queued behind a waiter that can only be woken by this holder's release)", err, time.Since(start).Round(time.Millisecond))
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("re-entry took %v", d)
		}
		// TryLock with a wait time and a shorter ctx: never attempts at all.
		tctx, tcancel := context.WithTimeout(ctx, 5*time.Second)
		defer tcancel()
		ok, err := holder.TryLock(tctx, WaitTime(10*time.Second))
		if !ok || err != nil {
			t.Fatalf("re-entrant TryLock(WaitTime) = %v, %v; want true, nil", ok, err)
		}
		for i := 0; i < 3; i++ {
			if err := holder.Unlock(ctx); err != nil {
				t.Fatalf("unlock %d of 3: %v", i+1, err)
			}
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// A joined waiter learns the holder's TTL from the channel's hint. When the waiter ahead of it
// leaves (its TryLock wait ran out) and the holder's lease then expires without any release
// message, the joined waiter re-checks at the lease expiry, not 30 s later.
func TestJoinedWaiterRechecksAtHolderTTL(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		ctx := testCtx(t, 30*time.Second)
		other, _ := newClient(t, b.Addr) // another process: its lock just expires
		c, _ := newClient(t, b.Addr)
		const name = "join:expiry"
		// A waits long enough to be seen waiting and joined by B on a loaded machine, and
		// leaves well before the lease expires (seconds each: 3 s and 1.5 s left B joining
		// after A had left under two CPU hogs and -race), far from the 30 s re-check.
		const lease, aWait = 8 * time.Second, 4 * time.Second
		if err := other.Lock(name).Lock(ctx, Lease(lease)); err != nil {
			t.Fatal(err)
		}
		aDone := make(chan error, 1)
		go func() {
			ok, err := c.Lock(name).TryLock(ctx, WaitTime(aWait))
			if ok {
				err = errors.New("A got a lock that was held")
			}
			aDone <- err
		}()
		eventually(t, waitFor, "A waiting", func() bool { return c.mux.Waiters(waitChannel(c, name)) == 1 })
		subscribed(t, c, waitChannel(c, name))
		bctx, cancel := context.WithTimeout(ctx, lease+7*time.Second) // not 30 s
		defer cancel()
		start := time.Now()
		err := c.Lock(name).Lock(bctx)
		if err != nil {
			t.Fatalf("B: %v after %v; the lock expired at ~%v", err, time.Since(start).Round(time.Millisecond), lease)
		}
		if e := <-aDone; e != nil {
			t.Fatal(e)
		}
	})
}

// The waiter ahead takes the lock with a lease and lets it expire, as lease users do. The
// joined waiter behind it re-checks at that lease's expiry (the hint its acquisition left),
// not 30 s later.
func TestJoinedWaiterBehindExpiringHolder(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		ctx := testCtx(t, 30*time.Second)
		c, _ := newClient(t, b.Addr)
		const name = "join:expiry-chain"
		// Long enough to outlast an acquisition on a loaded machine (300 ms was not, and 1.5 s
		// only just), twice of it still far from the 30 s re-check.
		const lease = 4 * time.Second
		if err := c.Lock(name).Lock(ctx, Lease(lease)); err != nil {
			t.Fatal(err)
		}
		go c.Lock(name).Lock(ctx, Lease(lease)) // A: takes it at ~4 s, lets it expire at ~8 s
		eventually(t, waitFor, "A waiting", func() bool { return c.mux.Waiters(waitChannel(c, name)) == 1 })
		subscribed(t, c, waitChannel(c, name))
		bctx, cancel := context.WithTimeout(ctx, 2*lease+7*time.Second) // not 30 s
		defer cancel()
		start := time.Now()
		if err := c.Lock(name).Lock(bctx); err != nil {
			t.Fatalf("B: %v after %v; A's lease expired at ~%v", err, time.Since(start).Round(time.Millisecond), 2*lease)
		}
	})
}

// TryLock with a tiny WaitTime that joins makes one attempt before its deadline ends the wait.
func TestTryLockTinyWaitAttemptsOnce(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		c, _ := newClient(t, b.Addr)
		holder, _ := heldWithWaiter(t, ctx, c, "join:tiny")
		ok, err := holder.TryLock(ctx, WaitTime(time.Nanosecond))
		if !ok || err != nil {
			t.Fatalf("re-entrant TryLock(WaitTime(1ns)) = %v, %v; want true (TryLock() without WaitTime says true)", ok, err)
		}
	})
}

// A waiter that joins behind others with a deadline already past still makes its one attempt.
func TestJoinedTryLockAttemptsBeforeGivingUp(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		c, _ := newClient(t, b.Addr)
		const channel = "redisson_lock__channel:{join:scripted}"
		aCtx, cancelA := context.WithCancel(ctx)
		defer cancelA()
		go c.acquire(aCtx, wait{channel: channel, policy: pubsub.LockPolicy, limit: -1, join: true,
			attempt: attemptFunc(func(context.Context) (int64, bool, error) {
				return 30000, false, nil // A waits behind a holder with 30 s left
			})})
		eventually(t, waitFor, "A waiting", func() bool { return c.mux.Waiters(channel) == 1 })
		subscribed(t, c, channel)
		var calls int
		ok, err := c.acquire(ctx, wait{channel: channel, policy: pubsub.LockPolicy, limit: time.Nanosecond, join: true,
			attempt: attemptFunc(func(context.Context) (int64, bool, error) {
				calls++
				return 30000, true, nil // the lock was free after all
			})})
		if !ok || err != nil || calls != 1 {
			t.Fatalf("joined TryLock with a 1ns wait: %v, %v after %d attempts; want true after 1", ok, err, calls)
		}
	})
}

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
		case <-time.After(waitFor):
			t.Fatalf("C still waiting %v after the release (its re-check is 30 s away): the only wake-up died with B", waitFor)
		}
	})
}
