package sync

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/names"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/lua"
	"github.com/redis/rueidis"
)

// A plain lock's release wakes one waiting Client, not one waiter in every Client: waiting
// Clients register in {name}:lock_clients and listen on a channel of their own,
// {name}:lock_clients:<token>; a release that frees the lock publishes 0 there for the
// first-registered one, then 0 on Redisson's channel for Redisson's waiters, where latchkey
// Clients listen only while a holder is not a latchkey Client.

// redissonOwner is a Java thread's owner ID: Redisson's client IDs are version-4 UUIDs.
const redissonOwner = "9c345276-aa6e-44c1-b478-bf4b14ba1498:805"

// registered returns the tokens of the Clients registered as waiting for name, in order.
func registered(t *testing.T, rdb rueidis.Client, name string) []string {
	t.Helper()
	tokens, err := rdb.Do(context.Background(), rdb.B().Zrange().Key(names.Suffix(name, "lock_clients")).Min("0").Max("-1").Build()).AsStrSlice()
	must(t, err)
	return tokens
}

// countAttempts counts c's acquire scripts that got a reply.
func countAttempts(c *Client) *atomic.Int64 {
	n := new(atomic.Int64)
	hooks(c).afterAcquire.set(func([]string) { n.Add(1) })
	return n
}

// lockAsync runs l.Lock in a goroutine; its result arrives on the channel.
func lockAsync(ctx context.Context, l interface {
	Lock(context.Context, ...LockOption) error
}) <-chan error {
	got := make(chan error, 1)
	go func() { got <- l.Lock(ctx) }()
	return got
}

func wantResult(t *testing.T, what string, got <-chan error, within time.Duration) {
	t.Helper()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(within):
		t.Fatalf("%s: not within %v", what, within)
	}
}

// Three Clients wait, registered in turn. Each release wakes the first-registered Client
// alone (on its channel, then 0 for Java on Redisson's, where no latchkey Client listens),
// and no other Client attempts: every waiter makes one attempt after it started waiting,
// the one that takes the lock.
func TestReleaseWakesLongestWaitingClientAlone(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "wake-one-client"
		holderC, rdb := newClient(t, b.Addr, fairSlow()...)
		holder := holderC.Lock(name)
		must(t, holder.Lock(ctx))
		sub := rawSubscribeAlso(t, ctx, rdb, lockChannel(name), names.Suffix(name, "lock_clients")+":*")

		var locks []*Lock
		var results []<-chan error
		var attempts []*atomic.Int64
		var base []int64
		var tokens, channels []string
		for range 3 {
			// Registrations are ordered by server time: one made in the same tick as the
			// last (miniredis's clock moves in steps of a few ms) may go either side of it.
			last := serverMs(t, rdb)
			eventually(t, waitFor, "the server's clock moving on", func() bool { return serverMs(t, rdb) > last })
			c, _ := newClient(t, b.Addr, fairSlow()...)
			n := countAttempts(c)
			l := c.Lock(name)
			results = append(results, lockAsync(ctx, l))
			tokens = append(tokens, c.lockToken)
			// Registered, and subscribed: its attempt after the subscription was confirmed
			// is its last until something wakes it.
			eventually(t, waitFor, "waiter registered and subscribed", func() bool {
				return slices.Equal(registered(t, rdb, name), tokens) && listening(t, b, c, name) &&
					n.Load() >= 2
			})
			eventually(t, waitFor, "the first waiting Client listening on Redisson's channel", func() bool {
				return numsub(t, b, c, lockChannel(name)) == 2
			})
			channels = append(channels, waitChannel(c, name))
			locks, attempts, base = append(locks, l), append(attempts, n), append(base, n.Load())
		}

		must(t, holder.Unlock(ctx))
		for i, l := range locks {
			wantResult(t, "waiter "+strconv.Itoa(i), results[i], waitFor)
			for j := i + 1; j < len(locks); j++ {
				notYet(t, results[j], "waiter "+strconv.Itoa(j))
			}
			// (A raw subscriber may see a pattern's message after a channel's: order not checked.)
			// The listener's waiter, taking the lock, hands the role to the next Client.
			want := []string{"00", channels[i] + " 0"}
			if i+1 < len(locks) {
				want = append(want, channels[i+1]+" 00")
			}
			if got := sub.published(t, ctx); !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
				t.Fatalf("release %d published %q, want 0 on waiter %d's Client's channel, 00 on Redisson's (and the listener role passed on: %q)", i, got, i, want)
			}
			must(t, l.Unlock(ctx))
		}
		if got := sub.published(t, ctx); !slices.Equal(got, []string{"00"}) {
			t.Fatalf("the last release, with nobody registered, published %q, want 00", got)
		}
		for i, n := range attempts {
			if d := n.Load() - base[i]; d != 1 {
				t.Errorf("waiter %d's Client attempted %d times while waiting, want once (when woken)", i, d)
			}
		}
		if exists(t, rdb, name) || exists(t, rdb, names.Suffix(name, "lock_clients")) {
			t.Fatal("lock or registrations left after every waiter released")
		}
	})
}

// A Client at the end of its hand-off run frees the lock for the Client that registered
// before it, and registers again behind it for its own waiter.
func TestHandoffRunEndsWithTheNextClient(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "run-ends"
		runC, rdb := newClient(t, b.Addr, fairSlow(WithLocalHandoff(1))...)
		otherC, _ := newClient(t, b.Addr, fairSlow()...)
		first := runC.Lock(name)
		must(t, first.Lock(ctx))
		other := lockAsync(ctx, otherC.Lock(name))
		eventually(t, waitFor, "the other Client registered", func() bool {
			return slices.Equal(registered(t, rdb, name), []string{otherC.lockToken})
		})
		heir := runC.Lock(name)
		heirGot := lockAsync(ctx, heir)
		eventually(t, waitFor, "the heir registered its Client", func() bool {
			return len(registered(t, rdb, name)) == 2
		})
		settled(t, runC, name, 1)
		must(t, first.Unlock(ctx)) // hands the lock to the heir: the run's one hand-off
		wantResult(t, "heir", heirGot, waitFor)
		last := runC.Lock(name)
		lastGot := lockAsync(ctx, last)
		// Its attempt made (it registers the run's Client again): one still to come could
		// take the lock that the release below frees for the other Client.
		eventually(t, waitFor, "a third waiter on the run's Client, its attempt made", func() bool {
			return runC.mux.Waiters(waitChannel(runC, name)) == 1 && len(registered(t, rdb, name)) == 2
		})
		must(t, heir.Unlock(ctx)) // the run is over: the other Client's turn
		wantResult(t, "the other Client's waiter", other, waitFor)
		notYet(t, lastGot, "the run's Client's third waiter")
		if got := registered(t, rdb, name); !slices.Equal(got, []string{runC.lockToken}) {
			t.Fatalf("registered %q after the run ended, want the run's Client alone", got)
		}
	})
}

// A Client registered but gone (its process died) may be the one a release wakes. Nobody
// else is told, and the others take the lock at their next keep-alive attempt, a third of
// the fair wait time after their last one.
func TestGoneClientCostsAKeepAlive(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "gone-client"
		holderC, rdb := newClient(t, b.Addr, fairSlow()...)
		waiterC, _ := newClient(t, b.Addr, WithFairLockWaitTimeout(3*time.Second))
		holder := holderC.Lock(name)
		must(t, holder.Lock(ctx))
		// The dead Client's registration lapses a second before the live one's would.
		now := serverMs(t, rdb)
		must(t, rdb.Do(ctx, rdb.B().Zadd().Key(names.Suffix(name, "lock_clients")).ScoreMember().
			ScoreMember(float64((now+2000)*1000), "77").Build()).Error())
		attempts := countAttempts(waiterC)
		waiter := waiterC.Lock(name)
		got := lockAsync(ctx, waiter)
		eventually(t, waitFor, "the live waiter registered and subscribed", func() bool {
			return slices.Equal(registered(t, rdb, name), []string{"77", waiterC.lockToken}) &&
				listening(t, b, waiterC, name) && attempts.Load() >= 2
		})
		must(t, holder.Unlock(ctx))
		wantResult(t, "the live waiter", got, waitFor)
		// The release woke the dead Client (its registration is gone, a second before it
		// would have lapsed), and the live one's take dropped its own.
		if r := registered(t, rdb, name); len(r) != 0 {
			t.Fatalf("registered %q once the live waiter holds the lock, want none", r)
		}
		must(t, waiter.Unlock(ctx))
	})
}

// The last waiter of a Client that a release woke as it gave up passes the wake on: with
// the lock free and its registration gone, its leave wakes the next Client, which would
// otherwise wait for its keep-alive (a minute here).
func TestLastWaiterLeavingPassesTheWakeOn(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "leave-passes"
		leaverC, rdb := newClient(t, b.Addr, fairSlow()...)
		nextC, _ := newClient(t, b.Addr, fairSlow()...)
		// A Java thread holds the lock, with a TTL past the test.
		redissonHolds(t, ctx, rdb, name)
		leaveCtx, leave := context.WithCancel(ctx)
		leaverAttempts := countAttempts(leaverC)
		leaver := lockAsync(leaveCtx, leaverC.Lock(name))
		// Registered, and both its attempts answered (its first, and the one the confirmation
		// of its Client's channel wakes; the listener's forward of Redisson's channel wakes
		// none): see TestReleaseForWaiterThatLeftDropsRegistration.
		eventually(t, waitFor, "the leaver registered, its attempts answered", func() bool {
			return slices.Equal(registered(t, rdb, name), []string{leaverC.lockToken}) && leaverAttempts.Load() >= 2
		})
		next := lockAsync(ctx, nextC.Lock(name))
		eventually(t, waitFor, "the next waiter registered and subscribed", func() bool {
			return len(registered(t, rdb, name)) == 2 && listening(t, b, nextC, name)
		})
		// A release woke the leaver's Client — its registration taken, the lock freed — and
		// the message never reached it.
		must(t, rdb.Do(ctx, rdb.B().Zrem().Key(names.Suffix(name, "lock_clients")).Member(leaverC.lockToken).Build()).Error())
		must(t, rdb.Do(ctx, rdb.B().Del().Key(name).Build()).Error())
		leave()
		if err := <-leaver; err != context.Canceled {
			t.Fatalf("leaver: %v, want context.Canceled", err)
		}
		wantResult(t, "the next Client's waiter", next, waitFor)
	})
}

// A Client woken by a latchkey release that finds a Redisson holder there (it took the lock
// in between) listens on Redisson's channel from then on, so the Redisson release wakes it,
// not its keep-alive (a minute here).
func TestWokenClientHearsARedissonHolderRelease(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "woken-finds-java"
		holderC, rdb := newClient(t, b.Addr, fairSlow()...)
		waiterC, _ := newClient(t, b.Addr, fairSlow()...)
		holder := holderC.Lock(name)
		must(t, holder.Lock(ctx))
		got := lockAsync(ctx, waiterC.Lock(name))
		eventually(t, waitFor, "the waiter registered and subscribed, and the listener", func() bool {
			return slices.Equal(registered(t, rdb, name), []string{waiterC.lockToken}) &&
				listening(t, b, waiterC, name) && numsub(t, b, waiterC, lockChannel(name)) == 1 &&
				waiterC.mux.Pending(waitChannel(waiterC, name)) == 0
		})
		// The latchkey holder's lease ends and a Java thread takes the lock; then the wake of
		// the release the waiter missed arrives.
		must(t, rdb.Do(ctx, rdb.B().Del().Key(name).Build()).Error())
		redissonHolds(t, ctx, rdb, name)
		must(t, rdb.Do(ctx, rdb.B().Publish().Channel(waitChannel(waiterC, name)).Message("0").Build()).Error())
		eventually(t, waitFor, "the waiter listening on Redisson's channel", func() bool {
			return numsub(t, b, waiterC, lockChannel(name)) == 1
		})
		notYet(t, got, "the waiter, while Java holds the lock")
		must(t, rdb.Do(ctx, rdb.B().Del().Key(name).Build()).Error())
		must(t, rdb.Do(ctx, rdb.B().Publish().Channel(lockChannel(name)).Message("0").Build()).Error())
		wantResult(t, "the waiter, after the Redisson release", got, waitFor)
	})
}

// One waiting Client, the listener, hears the lock's Redisson channel for all: a Java
// forceUnlock (DEL, then 0 on Redisson's channel alone) wakes a waiter at once, not at its
// re-check (20 s here), while no other Client is subscribed there to hear every release.
// When the listener's waiter takes the lock, the role passes to the next waiting Client.
func TestJavaForceUnlockWakesAWaiter(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "java-force-unlock"
		holderC, rdb := newClient(t, b.Addr)
		firstC, _ := newClient(t, b.Addr, WithFairLockWaitTimeout(time.Minute))
		secondC, _ := newClient(t, b.Addr, WithFairLockWaitTimeout(time.Minute))
		must(t, holderC.Lock(name).Lock(ctx))
		first := lockAsync(ctx, firstC.Lock(name))
		eventually(t, waitFor, "the first waiter the listener", func() bool {
			return firstC.mux.Subscribed(lockChannel(name)) && mustGet(t, rdb, listenerKey(name)) == firstC.lockToken
		})
		second := lockAsync(ctx, secondC.Lock(name))
		eventually(t, waitFor, "both Clients registered", func() bool {
			return slices.Equal(registered(t, rdb, name), []string{firstC.lockToken, secondC.lockToken}) &&
				listening(t, b, secondC, name)
		})
		if n := numsub(t, b, secondC, lockChannel(name)); n != 1 {
			t.Fatalf("%d subscribers of Redisson's channel, want the listener alone", n)
		}
		forceUnlockAsJava := func() time.Time {
			must(t, rdb.Do(ctx, rdb.B().Del().Key(name).Build()).Error())
			at := time.Now()
			must(t, rdb.Do(ctx, rdb.B().Publish().Channel(lockChannel(name)).Message("0").Build()).Error())
			return at
		}
		at := forceUnlockAsJava()
		wantResult(t, "the listener's waiter", first, 5*time.Second)
		t.Logf("%s: woken and acquired %v after the forceUnlock", b.Name, time.Since(at))
		eventually(t, waitFor, "the second Client the listener, and the first no longer", func() bool {
			return mustGet(t, rdb, listenerKey(name)) == secondC.lockToken && secondC.mux.Subscribed(lockChannel(name)) &&
				!firstC.mux.Subscribed(lockChannel(name)) && numsub(t, b, secondC, lockChannel(name)) == 1
		})
		at = forceUnlockAsJava()
		wantResult(t, "the second Client's waiter", second, 5*time.Second)
		t.Logf("%s: woken and acquired %v after the forceUnlock", b.Name, time.Since(at))
	})
}

// listenerKey is the key naming the listener Client of the plain lock name.
func listenerKey(name string) string { return names.Suffix(name, "lock_clients") + ":listener" }

// mustGet is GET key, "" when it does not exist.
func mustGet(t *testing.T, rdb rueidis.Client, key string) string {
	t.Helper()
	v, err := rdb.Do(context.Background(), rdb.B().Get().Key(key).Build()).ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		t.Fatal(err)
	}
	return v
}

// listening reports whether c's waiters of the plain lock name have their channel
// subscribed on the server.
func listening(t *testing.T, b *redistest.Backend, c *Client, name string) bool {
	t.Helper()
	return numsub(t, b, c, waitChannel(c, name)) == 1
}

// redissonHolds writes a Java thread's hold of the plain lock name as Redisson's acquire
// does, with a TTL past the test.
func redissonHolds(t *testing.T, ctx context.Context, rdb rueidis.Client, name string) {
	t.Helper()
	must(t, rdb.Do(ctx, rdb.B().Hset().Key(name).FieldValue().FieldValue(redissonOwner, "1").Build()).Error())
	must(t, rdb.Do(ctx, rdb.B().Pexpire().Key(name).Milliseconds(60000).Build()).Error())
}

// serverMs is the server's clock in ms.
func serverMs(t *testing.T, rdb rueidis.Client) int64 {
	t.Helper()
	tm, err := rdb.Do(context.Background(), rdb.B().Time().Build()).AsStrSlice()
	must(t, err)
	s, _ := strconv.ParseInt(tm[0], 10, 64)
	us, _ := strconv.ParseInt(tm[1], 10, 64)
	return s*1000 + us/1000
}

// A release that knew of no waiter left in its Client keeps the Client's registration: it
// is that of a waiter that registered while the release was on its way, which the release
// wakes (here, the one registered Client) rather than strand it until its keep-alive (a minute).
func TestReleaseKeepsRegistrationOfWaiterThatCameMeanwhile(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "came-meanwhile"
		c, rdb := newClient(t, b.Addr, fairSlow(WithLocalHandoff(0))...)
		holder := c.Lock(name)
		must(t, holder.Lock(ctx))
		got := lockAsync(ctx, c.Lock(name))
		eventually(t, waitFor, "the waiter registered and subscribed", func() bool {
			return slices.Equal(registered(t, rdb, name), []string{c.lockToken}) && listening(t, b, c, name)
		})
		// The holder's release as sent before the waiter came: no waiters left.
		release := lua.LockRelease{Lock: name, Channel: lockChannel(name),
			Numbered: lua.Numbered{Latch: names.Prefix(unlockLatchPrefix, name) + ":meanwhile", N: 1, LatchMs: unlockLatchMs},
			Clients:  names.Suffix(name, "lock_clients"), Listener: listenerKey(name), LeaseMs: "30000", Owner: holder.Owner(),
			Publish: "PUBLISH", Holds: 1, Token: c.lockToken, RegMs: c.fairWaitMs}
		if v, err := release.Call().Exec(ctx, rdb).AsInt64(); err != nil || v != 1 {
			t.Fatalf("release: %v, %v; want 1 (freed)", v, err)
		}
		wantResult(t, "the waiter that came meanwhile", got, waitFor)
	})
}

// A waiter that came as its Client's last waiter left, and registered just before the
// leave dropped the registration, is made to attempt again, and so registers again: the
// release wakes it rather than strand it until its keep-alive (a minute here).
func TestWaiterRegisteredAsLastOneLeftIsWoken(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "came-as-last-left"
		holderC, rdb := newClient(t, b.Addr, fairSlow()...)
		c, _ := newClient(t, b.Addr, fairSlow()...)
		holder := holderC.Lock(name)
		must(t, holder.Lock(ctx))
		attempts := countAttempts(c)
		leaveCtx, leave := context.WithCancel(ctx)
		first := lockAsync(leaveCtx, c.Lock(name))
		eventually(t, waitFor, "the first waiter registered and subscribed, its attempts answered", func() bool {
			return slices.Equal(registered(t, rdb, name), []string{c.lockToken}) && listening(t, b, c, name) &&
				attempts.Load() >= 2
		})
		var next <-chan error
		hooks(c).beforeLeave.set(func([]string) {
			hooks(c).beforeLeave.set(nil)
			n := attempts.Load()
			next = lockAsync(ctx, c.Lock(name))
			eventually(t, waitFor, "the next waiter attempted", func() bool { return attempts.Load() > n })
		})
		leave()
		if err := <-first; err != context.Canceled {
			t.Fatalf("first waiter: %v, want context.Canceled", err)
		}
		must(t, holder.Unlock(ctx))
		wantResult(t, "the next waiter", next, waitFor)
	})
}

// A release that registered its Client again for a waiter that left while the release was
// on its way drops that registration, which would otherwise take the wake of a later
// release from the Client registered behind it (a minute's keep-alive here). A FencedLock
// releases as a Lock does, without the local hand-off.
func TestReleaseForWaiterThatLeftDropsRegistration(t *testing.T) {
	t.Parallel()
	type mutex interface {
		Lock(context.Context, ...LockOption) error
		Unlock(context.Context) error
	}
	kinds := []struct {
		kind string
		make func(c *Client, name string) mutex
	}{
		{"lock", func(c *Client, name string) mutex { return c.Lock(name) }},
		{"fenced lock", func(c *Client, name string) mutex { return c.FencedLock(name) }},
	}
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		for _, k := range kinds {
			t.Run(k.kind, func(t *testing.T) {
				ctx := testCtx(t, 20*time.Second)
				name := "left-meanwhile:" + k.kind
				x, rdb := newClient(t, b.Addr, fairSlow(WithLocalHandoff(0))...)
				z1C, _ := newClient(t, b.Addr, fairSlow()...)
				z2C, _ := newClient(t, b.Addr, fairSlow()...)
				holder := k.make(x, name)
				must(t, holder.Lock(ctx))
				z1 := k.make(z1C, name)
				got1 := lockAsync(ctx, z1)
				eventually(t, waitFor, "z1 registered", func() bool {
					return slices.Equal(registered(t, rdb, name), []string{z1C.lockToken}) && listening(t, b, z1C, name)
				})
				last := serverMs(t, rdb)
				eventually(t, waitFor, "the server's clock moving on", func() bool { return serverMs(t, rdb) > last })
				leaveCtx, leave := context.WithCancel(ctx)
				xAttempts := countAttempts(x)
				w := lockAsync(leaveCtx, k.make(x, name))
				// Registered, and both its attempts answered (its first, and the one its
				// subscription's confirmation wakes, which registers): one still on its way as
				// the wait ends is awaited 25 ms at most, and its outcome is then unknown, which
				// a loaded machine made it.
				eventually(t, waitFor, "x's waiter registered, its attempts answered", func() bool {
					return slices.Equal(registered(t, rdb, name), []string{z1C.lockToken, x.lockToken}) &&
						x.mux.Waiters(waitChannel(x, name)) == 1 && xAttempts.Load() >= 2
				})
				hooks(x).beforeRelease.set(func([]string) {
					hooks(x).beforeRelease.set(nil)
					leave()
					if err := <-w; err != context.Canceled {
						t.Errorf("x's waiter: %v, want context.Canceled", err)
					}
				})
				must(t, holder.Unlock(ctx)) // counted x's waiter, which left before it ran
				wantResult(t, "z1", got1, waitFor)
				got2 := lockAsync(ctx, k.make(z2C, name))
				eventually(t, waitFor, "z2 registered", func() bool {
					return slices.Contains(registered(t, rdb, name), z2C.lockToken) && listening(t, b, z2C, name)
				})
				must(t, z1.Unlock(ctx))
				wantResult(t, "z2", got2, waitFor)
			})
		}
	})
}

// A waiter queued behind one that found a Redisson holder never attempted itself; when the
// one ahead gives up, it attempts, finds the holder and listens on Redisson's channel, so
// the Redisson release wakes it (a minute's keep-alive here).
func TestQueuedWaiterHearsRedissonReleaseAfterTheOneAheadLeft(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "queued-java"
		c, rdb := newClient(t, b.Addr, fairSlow()...)
		redissonHolds(t, ctx, rdb, name)
		attempts := countAttempts(c)
		leaveCtx, leave := context.WithCancel(ctx)
		first := lockAsync(leaveCtx, c.Lock(name))
		// Settled: its first attempt, and the one the confirmation of its Client's channel
		// wakes (the listener's forward of Redisson's channel wakes none), both answered. One
		// still on its way when the wait ends is awaited 25 ms at most, and its outcome is then
		// unknown: the leave below would not return context.Canceled alone.
		eventually(t, waitFor, "the first waiter on Redisson's channel, its attempts answered", func() bool {
			return numsub(t, b, c, lockChannel(name)) == 1 && c.mux.Subscribed(lockChannel(name)) && attempts.Load() >= 2
		})
		second := lockAsync(ctx, c.Lock(name))
		eventually(t, waitFor, "the second waiter queued", func() bool { return c.mux.Waiters(waitChannel(c, name)) == 2 })
		leave()
		if err := <-first; err != context.Canceled {
			t.Fatalf("first waiter: %v, want context.Canceled", err)
		}
		eventually(t, waitFor, "the second waiter on Redisson's channel", func() bool {
			return numsub(t, b, c, lockChannel(name)) == 1
		})
		must(t, rdb.Do(ctx, rdb.B().Del().Key(name).Build()).Error())
		must(t, rdb.Do(ctx, rdb.B().Publish().Channel(lockChannel(name)).Message("0").Build()).Error())
		wantResult(t, "the second waiter", second, waitFor)
	})
}

// Closing a Client whose waiters wait drops its registration, which would otherwise take
// the next wake from the Clients registered behind it.
func TestClosedClientLeavesNoRegistration(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "closed-leaves"
		holderC, rdb := newClient(t, b.Addr, fairSlow()...)
		c, _ := newClient(t, b.Addr)
		must(t, holderC.Lock(name).Lock(ctx))
		got := lockAsync(ctx, c.Lock(name))
		eventually(t, waitFor, "the waiter registered", func() bool {
			return slices.Equal(registered(t, rdb, name), []string{c.lockToken})
		})
		must(t, c.Close())
		if err := <-got; !errors.Is(err, ErrClosed) {
			t.Fatalf("waiter: %v, want ErrClosed", err)
		}
		if r := registered(t, rdb, name); len(r) != 0 {
			t.Fatalf("registered %q after the Client closed, want none", r)
		}
	})
}
