package sync

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/rueidis"
)

// The classic oversell: buyers on 4 service instances race for a stock of 100 through a
// non-atomic GET → decide → SET, each with a handle of its own. Under the lock exactly the
// stock is sold, never more, and never two buyers inside at once: on a server of its own,
// and under every kind of mutex on a Cluster and a Sentinel set.
func TestStockNeverOversold(t *testing.T) {
	t.Parallel()
	sell := func(t *testing.T, b *redistest.Backend, kind int) {
		cpuBound(t)
		name := topoName(t, "stock:lock")
		sellStock(t, b, name, 4, 50, func(c *Client) func() mutex {
			return func() mutex { return mutexKinds[kind].make(c, name) }
		})
	}
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) { sell(t, b, 0) })
	// Every kind on the topologies (TestSharedHandleNeverOversells has the others on a
	// server of the test's own).
	topologies.Shared(t, func(t *testing.T, b *redistest.Backend) {
		for kind := range mutexKinds {
			t.Run(mutexKinds[kind].name, func(t *testing.T) { sell(t, b, kind) })
		}
	})
}

func TestReentrancy(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		c, rdb := newClient(t, b.Addr, WithWatchdogTimeout(time.Minute))
		mu := c.Lock("reentrant", Reentrant())
		holdCount := func() int {
			n, err := mu.HoldCount(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		for i := 1; i <= 3; i++ {
			// A short lease first, so that re-entry visibly resets the TTL to the new lease.
			opts := []LockOption{Lease(5 * time.Second)}
			if i == 3 {
				opts = nil
			}
			if err := mu.Lock(ctx, opts...); err != nil {
				t.Fatal(err)
			}
			if got := holdCount(); got != i {
				t.Fatalf("hold count %d after %d locks", got, i)
			}
		}
		if ttl := pttl(t, rdb, "reentrant"); ttl <= 5000 || ttl > 60000 {
			t.Fatalf("re-entry without lease: PTTL %d, want reset to the 60000 ms watchdog timeout", ttl)
		}
		if held, _ := mu.IsHeld(ctx); !held {
			t.Fatal("IsHeld false while held")
		}
		if got := mustInt(t, rdb.Do(ctx, rdb.B().Hget().Key("reentrant").Field(mu.Owner()).Build())); got != 3 {
			t.Fatalf("hash field %s = %d, want 3 (Redisson's hold counter)", mu.Owner(), got)
		}
		for i := 2; i >= 0; i-- {
			if err := mu.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if got := holdCount(); got != i {
				t.Fatalf("hold count %d, want %d", got, i)
			}
			if got := exists(t, rdb, "reentrant"); got != (i > 0) {
				t.Fatalf("key exists = %v with %d holds left", got, i)
			}
		}
		if err := mu.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("extra unlock: %v, want ErrNotHeld", err)
		}
	})
}

func TestNonOwnerUnlock(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		c1, rdb := newClient(t, b.Addr)
		c2, _ := newClient(t, b.Addr)
		owner := c1.Lock("shared", Reentrant())
		if err := owner.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		before, err := rdb.Do(ctx, rdb.B().Hgetall().Key("shared").Build()).AsStrMap()
		if err != nil {
			t.Fatal(err)
		}
		for _, other := range []*Lock{c1.Lock("shared"), c2.Lock("shared")} {
			err := other.Unlock(ctx)
			if !errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLockLost) {
				t.Fatalf("non-owner unlock: %v, want ErrNotHeld only", err)
			}
		}
		after, _ := rdb.Do(ctx, rdb.B().Hgetall().Key("shared").Build()).AsStrMap()
		if len(after) != 1 || after[owner.Owner()] != before[owner.Owner()] {
			t.Fatalf("lock changed by a non-owner's unlock: %v → %v", before, after)
		}
		if err := owner.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A holder that crashes (never unlocks, never renews) loses the lock when its lease runs out.
func TestLeaseExpiryFreesCrashedHolder(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		// What a crashed holder leaves: its field, with the 300 ms lease it took. Written
		// directly, so that no acquisition races the short lease on a loaded machine.
		admin := b.Client(t)
		must(t, admin.Do(ctx, admin.B().Hset().Key("crash").FieldValue().
			FieldValue("9c345276-aa6e-44c1-b478-bf4b14ba1498:1", "1").Build()).Error())
		must(t, admin.Do(ctx, admin.B().Pexpire().Key("crash").Milliseconds(300).Build()).Error())
		c, _ := newClient(t, b.Addr)
		start := time.Now()
		mu := c.Lock("crash")
		if err := mu.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited > 3*time.Second {
			t.Fatalf("lock taken %v after the crash; the lease was 300ms", waited)
		}
		if err := mu.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestWatchdogKeepsLockAndReportsLoss(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		// Renewals every 2 s keep a 6 s lease with 4 s to spare on a loaded machine (a 1.5 s
		// lease renewed every 500 ms expired after 2.1 s and 2.4 s under two CPU hogs, and ran
		// out before a slow acquisition returned).
		const timeout = 6 * time.Second
		ctx := testCtx(t, 60*time.Second)
		c, rdb := newClient(t, b.Addr, WithWatchdogTimeout(timeout))

		t.Run("kept beyond 3x the timeout", func(t *testing.T) {
			mu := c.Lock("kept")
			if err := mu.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			held := time.Now()
			for time.Since(held) < 3*timeout+timeout/10 {
				if !exists(t, rdb, "kept") {
					t.Fatalf("lock expired %v after it was taken despite the watchdog", time.Since(held))
				}
				time.Sleep(100 * time.Millisecond) // an expired key stays gone: no need to look more often
			}
			if closed(mu.Lost()) {
				t.Fatal("Lost closed while the lease was kept")
			}
			if err := mu.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if exists(t, rdb, "kept") {
				t.Fatal("key alive after unlock")
			}
		})

		t.Run("lost when deleted by someone else", func(t *testing.T) {
			mu := c.Lock("deleted")
			if err := mu.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := rdb.Do(ctx, rdb.B().Del().Key("deleted").Build()).Error(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-mu.Lost():
			case <-time.After(timeout + 5*time.Second):
				t.Fatal("Lost not closed within one lease after the key was deleted")
			}
			err := mu.Unlock(ctx)
			if !errors.Is(err, ErrLockLost) || !errors.Is(err, ErrNotHeld) {
				t.Fatalf("unlock after loss: %v, want ErrLockLost and ErrNotHeld", err)
			}
		})

		t.Run("lost when Redis stays unreachable past the lease", func(t *testing.T) {
			proxy := redistest.NewProxy(t, b.Addr)
			pc, _ := newClient(t, proxy.Addr(), WithWatchdogTimeout(timeout))
			mu := pc.Lock("unreachable")
			if err := mu.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			cut := time.Now()
			proxy.Blackhole(true)
			// The lease ends a timeout after the last renewal, before the cut: Lost closes
			// then, give or take a loaded machine's delays, not a retry budget (10 s) later.
			select {
			case <-mu.Lost():
				if since := time.Since(cut); since > timeout+3*time.Second {
					t.Fatalf("Lost closed %v after the cut; the lease was %v", since, timeout)
				}
			case <-time.After(timeout + waitFor):
				t.Fatal("Lost not closed while Redis was unreachable past the lease")
			}
		})
	})
}

// With re-checks a minute apart (fairSlow), a waiter that got the lock within waitFor of the
// unlock was woken by the release message, not by its fallback.
func TestWaiterWokenByUnlockMessage(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		holderC, _ := newClient(t, b.Addr, fairSlow()...)
		waiterC, _ := newClient(t, b.Addr, fairSlow()...)
		holder := holderC.Lock("wake")
		if err := holder.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		waiter := waiterC.Lock("wake")
		got := make(chan time.Time, 1)
		go func() {
			if err := waiter.Lock(ctx); err != nil {
				t.Error(err)
			}
			got <- time.Now()
		}()
		// The waiter must be subscribed before the unlock for the test to mean anything.
		eventually(t, waitFor, "waiter subscribed", func() bool {
			return numsub(t, b, holderC, waitChannel(waiterC, "wake")) == 1
		})
		unlocked := time.Now()
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case at := <-got:
			if d := at.Sub(unlocked); d > waitFor {
				t.Fatalf("waiter took %v after the unlock (its fallback is a minute away)", d)
			}
		case <-time.After(waitFor):
			t.Fatalf("waiter not woken within %v of the unlock (its fallback is a minute away)", waitFor)
		}
		if err := waiter.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// numsub returns the subscriber count of channel; miniredis knows PUBSUB NUMSUB too.
func numsub(t *testing.T, b *redistest.Backend, c *Client, channel string) int64 {
	t.Helper()
	m, err := c.rdb.Do(context.Background(), c.rdb.B().PubsubNumsub().Channel(channel).Build()).AsIntMap()
	if err != nil {
		t.Fatalf("%s: PUBSUB NUMSUB: %v", b.Name, err)
	}
	return m[channel]
}

// Java at the wire: a holder in Redisson's format, written with raw commands, excludes our
// lock; our release is what a Redisson waiter listens for; a Redisson-style release wakes us.
func TestRedissonWireCompatibility(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		// The default watchdog, whose lease is Redisson's; a waiter keeps its registration alive
		// only a minute apart, and under a Java hold of minutes re-checks 30 s after its last
		// attempt: woken within waitFor of the Java unlock, it was woken by the message.
		c, rdb := newClient(t, b.Addr, WithFairLockWaitTimeout(3*time.Minute))
		const javaOwner = "9c345276-aa6e-44c1-b478-bf4b14ba1498:805"

		// A Java thread holds "orders".
		rdb.Do(ctx, rdb.B().Hincrby().Key("orders").Field(javaOwner).Increment(1).Build())
		rdb.Do(ctx, rdb.B().Pexpire().Key("orders").Milliseconds(180000).Build())
		mu := c.Lock("orders")
		if ok, err := mu.TryLock(ctx); ok || err != nil {
			t.Fatalf("TryLock over a Redisson holder: %v, %v; want false, nil", ok, err)
		}

		// Our waiter wakes when the Java side releases as Redisson's unlock script does.
		got := make(chan error, 1)
		go func() { got <- mu.Lock(ctx) }()
		eventually(t, waitFor, "waiter subscribed", func() bool {
			return numsub(t, b, c, "redisson_lock__channel:{orders}") == 1
		})
		javaUnlock := rueidis.NewLuaScript(`
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end
local n = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if n > 0 then redis.call('pexpire', KEYS[1], 30000) return 0 end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return 1`)
		unlocked := time.Now()
		if n, err := javaUnlock.Exec(ctx, rdb, []string{"orders", "redisson_lock__channel:{orders}"},
			[]string{"0", javaOwner}).AsInt64(); err != nil || n != 1 {
			t.Fatalf("Redisson-style unlock: %v, %v", n, err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(unlocked); d > waitFor {
				t.Fatalf("woken %v after the Java unlock (its own re-check is 30 s away)", d)
			}
		case <-time.After(waitFor):
			t.Fatal("not woken by the Redisson-format unlock")
		}

		// What we wrote is Redisson's layout: a hash, field <uuid>:<n>, count 1, a TTL.
		fields, err := rdb.Do(ctx, rdb.B().Hgetall().Key("orders").Build()).AsStrMap()
		if err != nil || len(fields) != 1 || fields[mu.Owner()] != "1" {
			t.Fatalf("lock hash %v (%v), want {%s: 1}", fields, err, mu.Owner())
		}
		owner := mu.Owner()
		if id, n, ok := strings.Cut(owner, ":"); !ok || id != c.ID() || len(id) != 36 {
			t.Fatalf("owner %q is not <uuid>:<n>", owner)
		} else if _, err := strconv.ParseInt(n, 10, 64); err != nil {
			t.Fatalf("owner %q: thread part %q is not a long", owner, n)
		}
		if ttl := pttl(t, rdb, "orders"); ttl <= 0 || ttl > 30000 {
			t.Fatalf("PTTL %d, want the 30000 ms watchdog lease", ttl)
		}

		// Our unlock publishes "0" on the lock channel, as a Java waiter expects.
		sub, cancel := rdb.Dedicate()
		defer cancel()
		msgs := make(chan rueidis.PubSubMessage, 4)
		sub.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(m rueidis.PubSubMessage) { msgs <- m }})
		if err := sub.Do(ctx, sub.B().Subscribe().Channel("redisson_lock__channel:{orders}").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := mu.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-msgs:
			// Redisson reads a payload as a Java Long, and so 00 as 0, its unlock message;
			// latchkey's listener lets 00 pass (its own releases wake Clients directly).
			if n, err := strconv.ParseInt(m.Message, 10, 64); m.Channel != "redisson_lock__channel:{orders}" || err != nil || n != 0 || m.Message == "0" {
				t.Fatalf("published %q on %q, want 00 on redisson_lock__channel:{orders}", m.Message, m.Channel)
			}
		case <-time.After(waitFor):
			t.Fatal("no unlock message seen by a raw subscriber")
		}
		if exists(t, rdb, "orders") {
			t.Fatal("lock key alive after the last unlock")
		}
	})
}

// Redisson's issue #7272: a renewal that outlives unlock keeps a released key alive. Over
// 1,000 cycles, 20 holds each last until a renewal round carrying them has started, and end
// at varying points after it, so that renewals and unlocks interleave; the same owner locks
// again at once. Afterwards nothing of the locks may remain — neither a hash nor an unlock
// latch.
func TestLockUnlockCyclesLeaveNoKey(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		cpuBound(t)
		// Renewals every 2 s keep a hold with 4 s to spare on a loaded machine (with 1.5 s, a
		// first hold waiting for its round ran out under two CPU hogs); the 20 handles wait
		// for theirs side by side, not one after another.
		const timeout = 6 * time.Second
		const handles, cycles = 20, 50
		ctx := testCtx(t, 60*time.Second)
		c, rdb := newClient(t, b.Addr, WithWatchdogTimeout(timeout))
		rounds := watchRenewals(c)
		names := make([]string, handles)
		errs := make(chan error, handles)
		var wg gosync.WaitGroup
		for h := range handles {
			names[h] = "cycles:" + strconv.Itoa(h)
			mu := c.Lock(names[h])
			wg.Go(func() {
				for i := range cycles {
					if err := mu.Lock(ctx); err != nil {
						errs <- err
						return
					}
					if i == 0 {
						// Hold until a renewal round carrying the hold has started, then unlock
						// h ms after it: while it is on its way, or just after it returned.
						before := rounds.of(names[h])
						for rounds.of(names[h]) == before && ctx.Err() == nil {
							time.Sleep(time.Millisecond)
						}
						time.Sleep(time.Duration(h) * time.Millisecond)
					}
					if err := mu.Unlock(ctx); err != nil {
						errs <- fmt.Errorf("%s, cycle %d: %w", names[h], i, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for _, name := range names {
			if rounds.of(name) == 0 {
				t.Fatalf("%s: no renewal round carried its hold", name)
			}
			if exists(t, rdb, name) {
				t.Fatalf("%s: lock key alive right after the last unlock", name)
			}
		}
		// No hold is left to renew: once the last round has returned, an orphan renewal would
		// have landed.
		eventually(t, waitFor, "no renewal round on its way", rounds.idle)
		c.Close() // flushes the latch janitor
		if n := dbsize(t, rdb); n != 0 {
			keys, _ := rdb.Do(ctx, rdb.B().Keys().Pattern("*").Build()).AsStrSlice()
			t.Fatalf("%d keys alive after 1,000 cycles: %v", n, keys)
		}
	})
}

// An unlock whose reply is lost is retried with the same request ID: a partial release is
// not applied twice, and a final release is not reported as ErrNotHeld.
func TestUnlockReplyLost(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		proxy := redistest.NewProxy(t, b.Addr)
		c, _ := newClient(t, proxy.Addr())
		admin := b.Client(t)
		warmScripts(t, ctx, c)
		mu := c.Lock("lossy", Reentrant())
		for i := 0; i < 2; i++ {
			if err := mu.Lock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		proxy.DropReplyAfter([]byte(unlockLatchPrefix))
		if err := mu.Unlock(ctx); err != nil {
			t.Fatalf("unlock with a lost reply: %v", err)
		}
		if proxy.Dropped() != 1 {
			t.Fatalf("the proxy dropped %d replies, want 1", proxy.Dropped())
		}
		if n := mustInt(t, admin.Do(ctx, admin.B().Hget().Key("lossy").Field(mu.Owner()).Build())); n != 1 {
			t.Fatalf("hold count %d after one unlock of two, want 1 (no double decrement)", n)
		}
		proxy.DropReplyAfter([]byte(unlockLatchPrefix))
		if err := mu.Unlock(ctx); err != nil {
			t.Fatalf("final unlock with a lost reply: %v, want success", err)
		}
		if proxy.Dropped() != 2 {
			t.Fatalf("the proxy dropped %d replies, want 2", proxy.Dropped())
		}
		if exists(t, admin, "lossy") {
			t.Fatal("lock alive after the final unlock")
		}
		c.Close()
		eventually(t, waitFor, "unlock latches deleted", func() bool {
			keys, _ := admin.Do(ctx, admin.B().Keys().Pattern(unlockLatchPrefix+"*").Build()).AsStrSlice()
			return len(keys) == 0
		})
	})
}

// An acquire whose reply is lost may have taken the lock: it is repeated, and the repeat
// adopts the hold the first run took (the count comes from the handle), so the caller is
// told it holds the lock, and Redis counts what the handle counts.
func TestAcquireReplyLostIsAdopted(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		proxy := redistest.NewProxy(t, b.Addr)
		c, _ := newClient(t, proxy.Addr())
		admin := b.Client(t)
		warmScripts(t, ctx, c)
		mu := c.Lock("lost-acquire", Reentrant())
		count := func() int64 {
			n, err := admin.Do(ctx, admin.B().Hget().Key("lost-acquire").Field(mu.Owner()).Build()).AsInt64()
			if err != nil {
				t.Fatalf("HGET: %v", err)
			}
			return n
		}
		for want := int64(1); want <= 2; want++ { // a first acquire, then a re-entry
			proxy.DropReplyAfter([]byte("lost-acquire"))
			ok, err := mu.TryLock(ctx)
			if !ok || err != nil {
				t.Fatalf("TryLock #%d with a lost reply: %v, %v; want true, nil", want, ok, err)
			}
			if proxy.Dropped() != int(want) {
				t.Fatalf("the proxy dropped %d replies, want %d", proxy.Dropped(), want)
			}
			if n := count(); n != want {
				t.Fatalf("hold count %d after acquire #%d with a lost reply, want %d", n, want, want)
			}
		}
		for i := 0; i < 2; i++ {
			if err := mu.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if exists(t, admin, "lost-acquire") {
			t.Fatal("lock held after as many unlocks as acquires")
		}
	})
}

// warmScripts loads the lock scripts into the server's cache, so that the next EVALSHA runs
// the script; otherwise a dropped reply could be the NOSCRIPT of a command that did nothing.
func warmScripts(t *testing.T, ctx context.Context, c *Client) {
	t.Helper()
	mu := c.Lock("warm-up")
	if err := mu.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := mu.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestForceUnlock(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		ctx := testCtx(t, 30*time.Second)
		// A renewal every 2 s finds the lock gone soon (the default's every 10 s); the 6 s
		// lease outlives a slow acquisition on a loaded machine (1.5 s ran out under two CPU
		// hogs).
		c, _ := newClient(t, b.Addr, WithWatchdogTimeout(6*time.Second))
		holder, other := c.Lock("forced"), c.Lock("forced")
		if err := holder.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if ok, err := other.ForceUnlock(ctx); !ok || err != nil {
			t.Fatalf("ForceUnlock: %v, %v", ok, err)
		}
		if locked, _ := holder.IsLocked(ctx); locked {
			t.Fatal("still locked after ForceUnlock")
		}
		select {
		case <-holder.Lost():
		case <-time.After(waitFor):
			t.Fatal("the holder's Lost not closed after ForceUnlock")
		}
		if ok, err := other.ForceUnlock(ctx); ok || err != nil {
			t.Fatalf("ForceUnlock of a free lock: %v, %v; want false, nil", ok, err)
		}
	})
}

func TestInspection(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		c, _ := newClient(t, b.Addr)
		mu, other := c.Lock("inspect"), c.Lock("inspect")
		if ttl, err := mu.RemainingTTL(ctx); ttl != 0 || err != nil {
			t.Fatalf("RemainingTTL of a free lock: %v, %v", ttl, err)
		}
		if mu.Lost() != nil {
			t.Fatal("Lost before any hold should be nil")
		}
		if err := mu.Lock(ctx, Lease(10*time.Second)); err != nil {
			t.Fatal(err)
		}
		if ttl, err := mu.RemainingTTL(ctx); err != nil || ttl <= 9*time.Second || ttl > 10*time.Second {
			t.Fatalf("RemainingTTL %v, %v; want about the 10 s lease", ttl, err)
		}
		for _, l := range []*Lock{mu, other} {
			if locked, err := l.IsLocked(ctx); !locked || err != nil {
				t.Fatalf("IsLocked %v, %v", locked, err)
			}
		}
		if held, _ := other.IsHeld(ctx); held {
			t.Fatal("IsHeld true for another handle")
		}
		if n, _ := other.HoldCount(ctx); n != 0 {
			t.Fatalf("HoldCount %d for another handle", n)
		}
		if mu.Name() != "inspect" || mu.Owner() == other.Owner() || !strings.HasPrefix(mu.Owner(), c.ID()+":") {
			t.Fatalf("Name %q, owners %q and %q", mu.Name(), mu.Owner(), other.Owner())
		}
		if err := mu.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A TryLock with a wait time gives up when it ends, and a held lock with an explicit lease
// reports its loss when that lease runs out.
func TestTryLockWaitAndLeaseLoss(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		ctx := testCtx(t, 30*time.Second)
		c, _ := newClient(t, b.Addr)
		holder, waiter := c.Lock("try"), c.Lock("try")
		// Long enough to outlast the acquisition and the 100 ms TryLock below on a loaded
		// machine (1.5 s ran out before the acquisition returned under two CPU hogs); then it
		// runs out.
		if err := holder.Lock(ctx, Lease(5*time.Second)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if ok, err := waiter.TryLock(ctx, WaitTime(100*time.Millisecond)); ok || err != nil {
			t.Fatalf("TryLock on a held lock: %v, %v", ok, err)
		}
		if d := time.Since(start); d < 100*time.Millisecond {
			t.Fatalf("TryLock gave up after %v, before its 100ms wait", d)
		}
		select {
		case <-holder.Lost():
		case <-time.After(waitFor):
			t.Fatal("Lost not closed when the explicit lease ran out")
		}
		if ok, err := waiter.TryLock(ctx, WaitTime(waitFor)); !ok || err != nil {
			t.Fatalf("TryLock after the lease ran out: %v, %v", ok, err)
		}
		if err := holder.Unlock(ctx); !errors.Is(err, ErrLockLost) {
			t.Fatalf("unlock by the expired holder: %v, want ErrLockLost", err)
		}
		if held, _ := waiter.IsHeld(ctx); !held {
			t.Fatal("the expired holder's unlock touched the new holder's lock")
		}
		// Context cancellation ends a wait with ctx.Err().
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if err := holder.Lock(cctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock with an expiring ctx: %v, want DeadlineExceeded", err)
		}
		if err := waiter.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestInvalidArguments(t *testing.T) {
	t.Parallel()
	b := redistest.Miniredis(t)
	rdb := b.Client(t)
	for name, opt := range map[string]Option{
		"watchdog timeout": WithWatchdogTimeout(0),
		"logger":           WithLogger(nil),
		"client ID":        WithClientID("not-a-uuid"),
		"pub/sub mode":     WithPubSubMode(PubSubMode(7)),
	} {
		if _, err := New(rdb, opt); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), name) {
			t.Errorf("New with bad %s: %v", name, err)
		}
	}
	if _, err := New(nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("New(nil): %v", err)
	}
	c, err := New(rdb, WithClientID("9C345276-AA6E-44C1-B478-BF4B14BA1498"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.ID() != "9c345276-aa6e-44c1-b478-bf4b14ba1498" {
		t.Errorf("client ID %q, want the canonical lowercase form", c.ID())
	}
	ctx := context.Background()
	var nilCtx context.Context
	mu := c.Lock("args")
	cases := []struct {
		arg string
		err error
	}{
		{"name", c.Lock("").Lock(ctx)},
		{"lease", mu.Lock(ctx, Lease(0))},
		{"lease", mu.Lock(ctx, Lease(-time.Second))},
		{"lease", mu.Lock(ctx, Lease(time.Microsecond))},
		{"wait time", second(mu.TryLock(ctx, WaitTime(-1)))},
		{"ctx", mu.Lock(nilCtx)},
		{"ctx", mu.Unlock(nilCtx)},
		{"ctx", second(mu.IsLocked(nilCtx))},
		{"option", mu.Lock(ctx, nil)},
	}
	for _, tc := range cases {
		if !errors.Is(tc.err, ErrInvalidArgument) || !strings.Contains(tc.err.Error(), tc.arg) {
			t.Errorf("bad %s: got %v", tc.arg, tc.err)
		}
	}
	if !strings.Contains(mu.Lock(ctx, Lease(-time.Second)).Error(), "-1s") {
		t.Error("the error should give the bad value")
	}
	if locked, _ := mu.IsLocked(ctx); locked {
		t.Error("a rejected call touched Redis")
	}
}

func second[T any](_ T, err error) error { return err }

func TestClosedClient(t *testing.T) {
	t.Parallel()
	b := redistest.Miniredis(t)
	ctx := testCtx(t, 10*time.Second)
	c, _ := newClient(t, b.Addr)
	holder, waiter := c.Lock("closing"), c.Lock("closing")
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(ctx) }()
	eventually(t, waitFor, "waiter subscribed", func() bool {
		return numsub(t, b, c, waitChannel(c, "closing")) == 1
	})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("waiting Lock after Close: %v, want ErrClosed", err)
		}
	case <-time.After(waitFor):
		t.Fatal("waiting Lock not ended by Close")
	}
	if !closed(holder.Lost()) {
		t.Fatal("Lost not closed when Close stopped the watchdog")
	}
	if err := holder.Unlock(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Unlock after Close: %v", err)
	}
	if _, err := holder.TryLock(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("TryLock after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
}

func TestRequestIDs(t *testing.T) {
	t.Parallel()
	c, err := New(redistest.Miniredis(t).Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seen := make(map[string]bool)
	for i := 0; i < 1000; i++ {
		id := c.newRequestID()
		if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
			t.Fatalf("request ID %q is not 32 lowercase hex characters (Redisson's generateId form)", id)
		}
		if seen[id] {
			t.Fatalf("request ID %q repeated", id)
		}
		seen[id] = true
	}
}

// Leases only grow: no script lowers the TTL of a hold its owner keeps — not a re-entry with
// a shorter Lease, not the release of an inner hold whose lease was shorter, not a renewal of
// a hold whose explicit lease is longer than the watchdog's — so the handle's Deadline never
// promises more than Redis has, whatever order the scripts run in.
func TestLeasesOnlyGrow(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		// The watchdog's lease, renewed every 500 ms, is far shorter than the explicit one.
		const timeout, lease = 1500 * time.Millisecond, 20 * time.Second
		c, rdb := newClient(t, b.Addr, WithWatchdogTimeout(timeout))
		rounds := watchRenewals(c)
		mu := c.Lock("grow", Reentrant())
		var sent time.Time // when the explicit lease was asked for
		// atLeast fails unless the TTL and the handle's deadline are still the explicit
		// lease's, less the time since it was asked for (and 5 ms of the server's clock and
		// rounding), however long the test took.
		atLeast := func(what string) {
			t.Helper()
			ms := pttl(t, rdb, "grow")
			if min := lease - time.Since(sent) - 5*time.Millisecond; time.Duration(ms)*time.Millisecond < min {
				t.Fatalf("%s: PTTL %d ms, want at least %v", what, ms, min)
			}
			d, ok := mu.Deadline()
			if !ok {
				t.Fatalf("%s: no deadline while held", what)
			}
			now := time.Now()
			if left, min := d.Sub(now), lease-now.Sub(sent); left < min {
				t.Fatalf("%s: deadline %v ahead, want at least %v", what, left, min)
			}
		}
		sent = time.Now()
		must(t, mu.Lock(ctx, Lease(lease)))
		must(t, mu.Lock(ctx, Lease(time.Second))) // shorter: the TTL stays
		atLeast("re-entry with a shorter lease")
		must(t, mu.Lock(ctx)) // the watchdog's 1.5 s: the TTL stays, and is kept from now on
		atLeast("re-entry under the watchdog")
		must(t, mu.Unlock(ctx)) // the latest hold's lease is 1.5 s: the TTL stays
		atLeast("release of an inner hold")
		// A renewal of the kept hold sets 1.5 s at least: wait for one to have landed.
		before := rounds.of("grow")
		eventually(t, waitFor, "a renewal of the kept hold", func() bool { return rounds.of("grow") > before && rounds.idle() })
		atLeast("after renewals")
		must(t, mu.Unlock(ctx))
		must(t, mu.Unlock(ctx))
		if exists(t, rdb, "grow") {
			t.Fatal("lock held after as many unlocks as acquires")
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
		// Renews every 2 s: the 6 s lease outlasts its acquisition and a late round on a loaded
		// machine.
		c, rdb := newClient(t, b.Addr, WithWatchdogTimeout(6*time.Second))
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
		// Renewals every 2 s keep a 6 s lease with 4 s to spare on a loaded machine (1.5 s
		// renewed every 500 ms was lost under two CPU hogs), until a failed release stops them.
		const timeout = 6 * time.Second
		ctx := testCtx(t, 60*time.Second)
		proxy := redistest.NewProxy(t, b.Addr)
		// A short retry budget keeps the test fast: the repeats end while Redis is unreachable.
		c, _ := newClient(t, proxy.Addr(), WithWatchdogTimeout(timeout), WithRetryBudget(shortBudget))
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
			eventually(t, timeout+waitFor, "the unreleased lock expires", func() bool { return !exists(t, admin, "unlock-unknown") })
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
			case <-time.After(timeout + waitFor):
				t.Fatal("Lost not closed after the refused release, although nothing renews the lock")
			}
			eventually(t, timeout+waitFor, "the lapsed lock expires", func() bool { return !exists(t, admin, "unlock-refused") })
		})
	})
}

// A mutex handle's Unlock that Redis refuses leaves the hold the handle's at once, so that a
// repeat of the Unlock finds it — also when another call of the handle (a HoldCount, an
// Extend) takes the owner the moment the release lets go of it.
func TestRefusedUnlockKeepsTheHoldWhileItsOwnerIsBusy(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "unlock-refused-owner-busy"
		c, _ := newClient(t, b.Addr)
		admin := b.Client(t)
		mu := c.Lock(name)
		must(t, mu.Lock(ctx))
		must(t, mu.Unlock(ctx)) // makes the owner's latch; the next Lock borrows the owner again
		must(t, mu.Lock(ctx))
		h, _ := mu.held.peek()
		latch := h.o.latch
		if latch == "" {
			t.Fatal("the hold's owner has no latch: the next Lock did not borrow the same owner")
		}
		// The latch turned into a hash: the release's first command fails, nothing runs.
		must(t, admin.Do(ctx, admin.B().Del().Key(latch).Build()).Error())
		must(t, admin.Do(ctx, admin.B().Hset().Key(latch).FieldValue().FieldValue("x", "1").Build()).Error())
		took, letGo := make(chan struct{}), make(chan struct{})
		hooks(c).beforeRelease.set(func([]string) {
			hooks(c).beforeRelease.set(nil)
			// Blocked on the owner while the release has it, the call takes it as the release
			// lets go (a channel hands its slot to a blocked sender), before the Unlock can.
			go takeOwner(&h.o.owner, took, letGo)
			eventually(t, waitFor, "a call waiting for the owner", func() bool { return blockedIn("sync.takeOwner") })
		})
		if err := mu.Unlock(ctx); err == nil || errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrNotHeld) {
			t.Fatalf("Unlock refused by Redis: %v, want its error", err)
		}
		signalled(t, ctx, took, "the owner taken as the release let go of it")
		if !mu.Valid() {
			t.Fatal("not Valid after a refused Unlock: the handle forgot the hold it still has")
		}
		must(t, admin.Do(ctx, admin.B().Del().Key(latch).Build()).Error())
		unlocked := make(chan error, 1)
		go func() { unlocked <- mu.Unlock(ctx) }() // its release waits for the owner
		close(letGo)
		select {
		case err := <-unlocked:
			must(t, err)
		case <-ctx.Done():
			t.Fatal("the repeated Unlock did not return")
		}
		if exists(t, admin, name) {
			t.Fatal("the lock is still there after the handle's Unlock")
		}
	})
}

// takeOwner takes o's op, says so on took, and gives it back once letGo is closed.
func takeOwner(o *owner, took chan<- struct{}, letGo <-chan struct{}) {
	_ = o.lock(context.Background())
	close(took)
	<-letGo
	o.unlock()
}

// blockedIn reports whether a goroutine whose stack has fn is blocked in a select (as
// owner.lock waits for op).
func blockedIn(fn string) bool {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, " [select") && strings.Contains(g, fn+"(") {
			return true
		}
	}
	return false
}
