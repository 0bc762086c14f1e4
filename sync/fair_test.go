package sync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/names"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/rueidis"
)

// Fair lock tests. A waiter's place is Redis state (docs/redisson-interop.md): the list
// redisson_lock_queue:{name} and the zset redisson_lock_timeout:{name} of deadlines, so the
// tests wait for states by polling them, and write a Java process's places with raw commands.

func fairQueueKey(name string) string   { return names.Prefix("redisson_lock_queue", name) }
func fairTimeoutKey(name string) string { return names.Prefix("redisson_lock_timeout", name) }

// fairQueue returns the lock's queue of waiting owners, head first.
func fairQueue(t *testing.T, rdb rueidis.Client, name string) []string {
	t.Helper()
	q, err := rdb.Do(context.Background(), rdb.B().Lrange().Key(fairQueueKey(name)).Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil {
		t.Fatalf("LRANGE: %v", err)
	}
	return q
}

// fairPlaces returns how many entries the queue and the deadline zset hold.
func fairPlaces(t *testing.T, rdb rueidis.Client, name string) (queue, deadlines int64) {
	t.Helper()
	ctx := context.Background()
	return mustInt(t, rdb.Do(ctx, rdb.B().Llen().Key(fairQueueKey(name)).Build())),
		mustInt(t, rdb.Do(ctx, rdb.B().Zcard().Key(fairTimeoutKey(name)).Build()))
}

// fairDeadline returns owner's deadline in epoch ms, and false when it has none.
func fairDeadline(t *testing.T, rdb rueidis.Client, name, owner string) (int64, bool) {
	t.Helper()
	s, err := rdb.Do(context.Background(), rdb.B().Zscore().Key(fairTimeoutKey(name)).Member(owner).Build()).AsFloat64()
	if rueidis.IsRedisNil(err) {
		return 0, false
	}
	if err != nil {
		t.Fatalf("ZSCORE: %v", err)
	}
	return int64(s), true
}

// fairNoPlaces fails unless the lock's queue and deadline zset are empty.
func fairNoPlaces(t *testing.T, rdb rueidis.Client, name, when string) {
	t.Helper()
	if q, z := fairPlaces(t, rdb, name); q != 0 || z != 0 {
		t.Fatalf("%s: queue %v (LLEN %d), ZCARD %d; want no places left", when, fairQueue(t, rdb, name), q, z)
	}
}

// fairRawPlace queues owner as a Java waiter would have left it: at the tail, with deadline.
func fairRawPlace(t *testing.T, rdb rueidis.Client, name, owner string, deadline int64) {
	t.Helper()
	ctx := context.Background()
	must(t, rdb.Do(ctx, rdb.B().Rpush().Key(fairQueueKey(name)).Element(owner).Build()).Error())
	must(t, rdb.Do(ctx, rdb.B().Zadd().Key(fairTimeoutKey(name)).ScoreMember().
		ScoreMember(float64(deadline), owner).Build()).Error())
}

// fairAwaitQueue waits until the queue is exactly want (owners, head first).
func fairAwaitQueue(t *testing.T, rdb rueidis.Client, name string, want ...string) {
	t.Helper()
	eventually(t, waitFor, fmt.Sprintf("queue of %s = %v", name, want), func() bool {
		return slices.Equal(fairQueue(t, rdb, name), want)
	})
}

// fairWaiterSubscribed waits until Redis has a subscriber on the waiter's own channel,
// redisson_lock__channel:{name}:<owner> (c: any Client on the server).
func fairWaiterSubscribed(t *testing.T, b *redistest.Backend, c *Client, mu *FairLock) {
	t.Helper()
	channel := lockChannel(mu.Name()) + ":" + mu.Owner()
	eventually(t, waitFor, "the waiter subscribed to "+channel, func() bool {
		return numsub(t, b, c, channel) == 1
	})
}

// fairSlowRechecks are the options of a Client whose waiters attempt by themselves only a
// minute apart: a waiter re-checks at the holder's TTL, a third of the fair wait time, or the
// watchdog timeout, whichever is nearest, so the two timeouts are minutes, on the holder's
// Client too (its holds' TTL). Every attempt a test counts is then one the protocol made, and
// a result that comes within waitFor is a message's, not a re-check's, however slow the
// machine (with the defaults a waiter re-checks every 10 s, which a loaded run outlasted).
var fairSlowRechecks = []Option{WithWatchdogTimeout(3 * time.Minute), WithFairLockWaitTimeout(3 * time.Minute)}

// fairSlow is opts and fairSlowRechecks: the options of a Client whose waiters re-check a
// minute apart (a Lock's waiters too: their Client's registration is kept alive so).
func fairSlow(opts ...Option) []Option { return append(opts, fairSlowRechecks...) }

// fairCountAttempts counts the acquire scripts whose replies c's handles get. Set it up
// before c is used.
func fairCountAttempts(c *Client) *atomic.Int64 {
	n := new(atomic.Int64)
	hooks(c).afterAcquire.set(func([]string) { n.Add(1) })
	return n
}

// fairAwaitSettled waits until a Client's one waiter has made its first attempt and the one
// its subscription's confirmation wakes: it makes no other until its re-check time unless a
// message wakes it, so Redis state changed after this is what it finds at its next attempt.
func fairAwaitSettled(t *testing.T, attempts *atomic.Int64) {
	t.Helper()
	eventually(t, waitFor, "the waiter subscribed and attempted again", func() bool {
		return attempts.Load() >= 2
	})
}

// fairStartLock runs mu.Lock in a goroutine and returns its result.
func fairStartLock(ctx context.Context, mu *FairLock) <-chan error {
	done := make(chan error, 1)
	go func() { done <- mu.Lock(ctx) }()
	return done
}

// fairAwait waits up to within for a result from done.
func fairAwait(t *testing.T, done <-chan error, within time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(within):
		t.Fatalf("%s: no result within %v", what, within)
		return nil
	}
}

// 4 Clients × 8 goroutines, each several Lock/Unlock cycles on one fair lock: never two
// holders, no update lost, and nothing of the lock left in Redis afterwards.
func TestFairLockExclusion(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		cpuBound(t)
		const clients, goroutines, cycles, name = 4, 8, 5, "fair:exclusion"
		ctx := testCtx(t, 2*time.Minute)
		admin := b.Client(t)
		var inside, maxInside, count atomic.Int64
		var wg gosync.WaitGroup
		errs := make(chan error, clients*goroutines)
		var cs []*Client
		for range clients {
			c, _ := newClient(t, b.Addr)
			cs = append(cs, c)
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					mu := c.FairLock(name, Reentrant())
					for range cycles {
						if err := mu.Lock(ctx); err != nil {
							errs <- err
							return
						}
						n := inside.Add(1)
						for m := maxInside.Load(); n > m && !maxInside.CompareAndSwap(m, n); m = maxInside.Load() {
						}
						count.Store(count.Load() + 1) // a read-modify-write only exclusion makes exact
						inside.Add(-1)
						if err := mu.Unlock(ctx); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if maxInside.Load() != 1 {
			t.Fatalf("%d holders inside the fair lock at once", maxInside.Load())
		}
		if got, want := count.Load(), int64(clients*goroutines*cycles); got != want {
			t.Fatalf("counted %d, want exactly %d: an update was lost", got, want)
		}
		fairNoPlaces(t, admin, name, "after every cycle")
		if exists(t, admin, name) {
			t.Fatal("lock key alive after the last unlock")
		}
		for _, c := range cs {
			c.Close() // deletes the handles' unlock latches, the only keys left
		}
		if n := dbsize(t, admin); n != 0 {
			keys, _ := admin.Do(ctx, admin.B().Keys().Pattern("*").Build()).AsStrSlice()
			t.Fatalf("%d keys alive after the Clients closed: %v", n, keys)
		}
	})
}

// Grants follow arrival order across Clients: just before each Unlock the holder reads the
// queue's head, and the next holder must be that waiter. No place lapses here (the wait
// time is the 30 s default), so there is no exception.
func TestFairLockFIFOAcrossClients(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		cpuBound(t)
		const clients, goroutines, cycles, name = 4, 8, 5, "fair:fifo"
		ctx := testCtx(t, 2*time.Minute)
		admin := b.Client(t)
		var (
			mu       gosync.Mutex
			next     string // the head the last holder saw before its Unlock
			checked  int
			bad      []string
			acquired int
		)
		var wg gosync.WaitGroup
		errs := make(chan error, clients*goroutines)
		for range clients {
			c, rdb := newClient(t, b.Addr)
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l := c.FairLock(name, Reentrant())
					for range cycles {
						if err := l.Lock(ctx); err != nil {
							errs <- err
							return
						}
						mu.Lock()
						acquired++
						if next != "" {
							checked++
							if next != l.Owner() {
								bad = append(bad, fmt.Sprintf("grant %d went to %s, the head was %s", acquired, l.Owner(), next))
							}
						}
						mu.Unlock()
						head, err := rdb.Do(ctx, rdb.B().Lindex().Key(fairQueueKey(name)).Index(0).Build()).ToString()
						if err != nil && !rueidis.IsRedisNil(err) {
							errs <- err
							return
						}
						mu.Lock()
						next = head
						mu.Unlock()
						if err := l.Unlock(ctx); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if len(bad) > 0 {
			t.Fatalf("%d of %d checked grants out of queue order, e.g. %s", len(bad), checked, bad[0])
		}
		total := clients * goroutines * cycles
		if acquired != total || checked < total/2 {
			t.Fatalf("%d grants, %d of them checked against the queue; want %d, most of them checked", acquired, checked, total)
		}
		fairNoPlaces(t, admin, name, "after every cycle")
		t.Logf("%d of %d grants checked against the queue's head", checked, acquired)
	})
}

// One-shot FIFO: 32 waiters on 4 Clients queue behind a holder; after the release they get
// the lock exactly in the order Redis queued them, on every topology.
func TestFairLockGrantsInQueueOrder(t *testing.T) {
	t.Parallel()
	topologies.Each(t, func(t *testing.T, b *redistest.Backend) {
		const clients, perClient = 4, 8
		name := topoName(t, "fair:order")
		ctx := testCtx(t, 2*time.Minute)
		admin := b.Client(t)
		c0, _ := newClientOn(t, b)
		holder := c0.FairLock(name, Reentrant())
		if err := holder.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		var mu gosync.Mutex
		var order []string
		var wg gosync.WaitGroup
		errs := make(chan error, clients*perClient)
		for range clients {
			c, _ := newClientOn(t, b)
			for range perClient {
				l := c.FairLock(name, Reentrant())
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := l.Lock(ctx); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					order = append(order, l.Owner())
					mu.Unlock()
					if err := l.Unlock(ctx); err != nil {
						errs <- err
					}
				}()
			}
		}
		eventually(t, waitFor, "32 waiters queued", func() bool {
			q, _ := fairPlaces(t, admin, name)
			return q == clients*perClient
		})
		queued := fairQueue(t, admin, name)
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if !slices.Equal(order, queued) {
			t.Fatalf("acquisition order differs from the queue:\n got %v\nwant %v", order, queued)
		}
		fairNoPlaces(t, admin, name, "after every waiter")
	})
}

// A waiter that died (a Java process, say) leaves its place behind; it lapses one wait after
// it was last renewed, and the live waiter behind it gets the lock then — not before.
func TestFairLockDeadWaiterPlaceLapses(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// The live waiter attempts every 2 s, so its own place (6 s) never lapses on a loaded
		// machine.
		const wait, name, dead = 6 * time.Second, "fair:dead", "9c345276-aa6e-44c1-b478-bf4b14ba1498:805"
		ctx := testCtx(t, 30*time.Second)
		admin := b.Client(t)
		holderC, _ := newClient(t, b.Addr)
		waiterC, _ := newClient(t, b.Addr, WithFairLockWaitTimeout(wait))
		holder, live := holderC.FairLock(name, Reentrant()), waiterC.FairLock(name, Reentrant())
		if err := holder.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		// The dead waiter's place outlives the live waiter's queueing behind it, however slow;
		// its last attempt, below, sets the deadline at which it lapses.
		fairRawPlace(t, admin, name, dead, time.Now().Add(time.Minute).UnixMilli())
		liveCtx := testCtx(t, 20*time.Second)
		done := fairStartLock(liveCtx, live)
		fairAwaitQueue(t, admin, name, dead, live.Owner())
		if err := holder.Unlock(ctx); err != nil { // tells only the dead head
			t.Fatal(err)
		}
		deadline := time.Now().Add(300 * time.Millisecond).UnixMilli()
		must(t, admin.Do(ctx, admin.B().Zadd().Key(fairTimeoutKey(name)).Xx().ScoreMember().
			ScoreMember(float64(deadline), dead).Build()).Error())
		if err := fairAwait(t, done, waitFor, "live waiter"); err != nil {
			t.Fatalf("the live waiter behind a dead place: %v", err)
		}
		if now := time.Now().UnixMilli(); now < deadline {
			t.Fatalf("the live waiter got the lock %d ms before the dead head's place lapsed", deadline-now)
		}
		fairNoPlaces(t, admin, name, "after the dead place lapsed")
		if err := live.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Live waiters keep their places through a hold of five wait times: they attempt every
// third of it, so their places never lapse, and they get the lock in queue order.
func TestFairLockLiveWaitersKeepPlaces(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		// Attempts every second keep a 3 s place with 2 s to spare on a loaded machine (300 ms
		// places were lost to a late attempt).
		const wait, name = 3 * time.Second, "fair:keep"
		const hold = 5 * wait
		ctx := testCtx(t, 60*time.Second)
		admin := b.Client(t)
		// The holder keeps the lock by the default 30 s watchdog; the waiters' places live for
		// the wait time only.
		hc, _ := newClient(t, b.Addr)
		c, _ := newClient(t, b.Addr, WithFairLockWaitTimeout(wait))
		holder, w1, w2 := hc.FairLock(name, Reentrant()), c.FairLock(name, Reentrant()), c.FairLock(name, Reentrant())
		if err := holder.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		var mu gosync.Mutex
		var order []string
		run := func(l *FairLock) <-chan error {
			done := make(chan error, 1)
			go func() {
				if err := l.Lock(ctx); err != nil {
					done <- err
					return
				}
				mu.Lock()
				order = append(order, l.Owner())
				mu.Unlock()
				done <- l.Unlock(ctx)
			}()
			return done
		}
		done1 := run(w1)
		fairAwaitQueue(t, admin, name, w1.Owner())
		done2 := run(w2)
		want := []string{w1.Owner(), w2.Owner()}
		fairAwaitQueue(t, admin, name, want...)
		polls := 0
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for end := time.Now().Add(hold); time.Now().Before(end); polls++ {
			if q := fairQueue(t, admin, name); !slices.Equal(q, want) {
				t.Fatalf("after %v of the hold the queue is %v, want %v: a live waiter lost its place",
					hold-time.Until(end), q, want)
			}
			<-tick.C
		}
		if !holder.Valid() {
			t.Fatal("the holder's lease lapsed during the hold")
		}
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		for _, done := range []<-chan error{done1, done2} {
			if err := fairAwait(t, done, waitFor, "waiter"); err != nil {
				t.Fatal(err)
			}
		}
		if !slices.Equal(order, want) {
			t.Fatalf("acquired in order %v, want %v", order, want)
		}
		fairNoPlaces(t, admin, name, "after both waiters")
		t.Logf("%d polls of the queue during the hold", polls)
	})
}

// A wait that ends without the lock — TryLock's wait time, Lock's context — leaves no place
// behind, and the waiters behind the one that left move up a place: their deadlines drop by
// exactly one wait time, the one ahead keeps its own.
func TestFairLockEndedWaitLeavesNoPlace(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// A waiter attempts every third of the wait time (40 s) — its Client's watchdog timeout,
		// and the holder's TTL, are minutes too: they cap it as well — far more than the test
		// takes on a loaded machine (with 20 s, a 16 s run saw a third attempt).
		const wait, name = 2 * time.Minute, "fair:leave"
		ctx := testCtx(t, 90*time.Second)
		admin := b.Client(t)
		holderC, _ := newClient(t, b.Addr, WithWatchdogTimeout(3*time.Minute))
		holder := holderC.FairLock(name, Reentrant())
		if err := holder.Lock(ctx); err != nil {
			t.Fatal(err)
		}

		// TryLock's wait time ends.
		oc, _ := newClient(t, b.Addr, WithFairLockWaitTimeout(wait))
		other := oc.FairLock(name, Reentrant())
		if ok, err := other.TryLock(ctx, WaitTime(50*time.Millisecond)); ok || err != nil {
			t.Fatalf("TryLock(WaitTime 50ms) on a held lock: %v, %v; want false, nil", ok, err)
		}
		fairNoPlaces(t, admin, name, "after TryLock's wait time ended")

		// Lock's context ends, with a waiter ahead and two behind. Each waiter has a Client of
		// its own, which counts its attempts: after the first and the one its subscription's
		// confirmation wakes, it makes none for a third of the wait time, so the deadlines
		// change only by what the leave does.
		type waiter struct {
			l        *FairLock
			attempts *atomic.Int64
			ctx      context.Context
			cancel   context.CancelFunc
			done     <-chan error
		}
		start := func() *waiter {
			// withLeaveGrace: the wait returns once its leave has run, however slow
			c, _ := newClient(t, b.Addr, WithFairLockWaitTimeout(wait), WithWatchdogTimeout(3*time.Minute), withLeaveGrace(time.Minute))
			w := &waiter{l: c.FairLock(name, Reentrant()), attempts: fairCountAttempts(c)}
			w.ctx, w.cancel = context.WithCancel(ctx)
			t.Cleanup(w.cancel)
			before := len(fairQueue(t, admin, name))
			w.done = fairStartLock(w.ctx, w.l)
			eventually(t, waitFor, "the waiter queued and made its second attempt", func() bool {
				return len(fairQueue(t, admin, name)) == before+1 && w.attempts.Load() >= 2
			})
			return w
		}
		w0, leaver, w1, w2 := start(), start(), start(), start()
		fairAwaitQueue(t, admin, name, w0.l.Owner(), leaver.l.Owner(), w1.l.Owner(), w2.l.Owner())
		before := map[string]int64{}
		for _, w := range []*waiter{w0, w1, w2} {
			d, ok := fairDeadline(t, admin, name, w.l.Owner())
			if !ok || d <= time.Now().UnixMilli() {
				t.Fatalf("waiter %s: deadline %d (%v), want one ahead", w.l.Owner(), d, ok)
			}
			before[w.l.Owner()] = d
		}
		leaver.cancel()
		if err := fairAwait(t, leaver.done, waitFor, "the cancelled waiter"); !errors.Is(err, context.Canceled) {
			t.Fatalf("Lock with its context cancelled: %v, want context.Canceled", err)
		}
		fairAwaitQueue(t, admin, name, w0.l.Owner(), w1.l.Owner(), w2.l.Owner())
		if _, ok := fairDeadline(t, admin, name, leaver.l.Owner()); ok {
			t.Fatal("the cancelled waiter's deadline is still in the zset")
		}
		// Our leaves and acquires move no deadline (a latchkey waiter's deadline is its last
		// attempt plus a wait, whatever its place; a Java waiter's only grows more lenient).
		for i, w := range []*waiter{w0, w1, w2} {
			want := before[w.l.Owner()]
			if got, _ := fairDeadline(t, admin, name, w.l.Owner()); got != want {
				t.Errorf("waiter %d: deadline %d after the leave, want %d, unchanged", i, got, want)
			}
			if n := w.attempts.Load(); n != 2 {
				t.Errorf("waiter %d made %d attempts; the test assumes 2", i, n)
			}
		}

		// Nor does the head's taking the lock: the release wakes the head ("0" on its own
		// channel), which attempts and takes the lock, and the deadlines behind stay.
		for _, w := range []*waiter{w1, w2} {
			before[w.l.Owner()], _ = fairDeadline(t, admin, name, w.l.Owner())
		}
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := fairAwait(t, w0.done, waitFor, "the head waiter"); err != nil {
			t.Fatalf("the head waiter after the release: %v", err)
		}
		fairAwaitQueue(t, admin, name, w1.l.Owner(), w2.l.Owner())
		if n := w0.attempts.Load(); n != 3 {
			t.Errorf("the woken head made %d attempts, want 3 (queued, confirmed, woken)", n)
		}
		for i, w := range []*waiter{w1, w2} {
			want := before[w.l.Owner()]
			if got, _ := fairDeadline(t, admin, name, w.l.Owner()); got != want {
				t.Errorf("waiter %d: deadline %d after the head took the lock, want %d, unchanged", i+1, got, want)
			}
			if n := w.attempts.Load(); n != 2 {
				t.Errorf("waiter %d made %d attempts; the test assumes 2", i+1, n)
			}
		}

		// The others' contexts end too: nothing is left.
		for _, w := range []*waiter{w1, w2} {
			w.cancel()
			if err := fairAwait(t, w.done, waitFor, "a cancelled waiter"); !errors.Is(err, context.Canceled) {
				t.Fatalf("Lock with its context cancelled: %v, want context.Canceled", err)
			}
		}
		fairNoPlaces(t, admin, name, "after every waiter's context ended")
		if err := w0.l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A head waiter that leaves while the lock is free — freed with no message, here by a Java
// operator's DEL — tells the next waiter, which no release will: it gets the lock at once,
// not at its own re-check (a minute later here). And an Unlock that finds the lock gone still tells the
// head, as Redisson's does.
func TestFairLockHeadLeavingFreeLockWakesNext(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name, java = "fair:pass-on", "9c345276-aa6e-44c1-b478-bf4b14ba1498:805"
		ctx := testCtx(t, 20*time.Second)
		admin := b.Client(t)
		// A waiter re-checks by itself only a minute apart (fairSlowRechecks).
		hc, _ := newClient(t, b.Addr, fairSlowRechecks...)
		wc, _ := newClient(t, b.Addr, fairSlowRechecks...)
		hn, wn := fairCountAttempts(hc), fairCountAttempts(wc)
		head, next := hc.FairLock(name, Reentrant()), wc.FairLock(name, Reentrant())
		must(t, admin.Do(ctx, admin.B().Hset().Key(name).FieldValue().FieldValue(java, "1").Build()).Error())
		headCtx, cancelHead := context.WithCancel(ctx)
		defer cancelHead()
		headDone := fairStartLock(headCtx, head)
		fairAwaitQueue(t, admin, name, head.Owner())
		nextCtx := testCtx(t, waitFor)
		nextDone := fairStartLock(nextCtx, next)
		fairAwaitQueue(t, admin, name, head.Owner(), next.Owner())
		fairWaiterSubscribed(t, b, hc, next)
		// Neither attempts again now by itself: the head cannot take the freed lock first.
		fairAwaitSettled(t, hn)
		fairAwaitSettled(t, wn)
		must(t, admin.Do(ctx, admin.B().Del().Key(name).Build()).Error()) // free, and nobody told
		cancelHead()
		left := time.Now()
		if err := fairAwait(t, headDone, waitFor, "the cancelled head"); !errors.Is(err, context.Canceled) {
			t.Fatalf("the head's Lock: %v, want context.Canceled", err)
		}
		if err := fairAwait(t, nextDone, waitFor, "the next waiter"); err != nil {
			t.Fatalf("the next waiter after the head left a free lock (its own re-check is a minute away): %v", err)
		}
		if d := time.Since(left); d > waitFor {
			t.Fatalf("the next waiter got the lock %v after the head left (its own re-check is a minute away)", d)
		}
		fairNoPlaces(t, admin, name, "after the next waiter took the lock")

		// The lock is deleted under its holder, a waiter queues; the holder's Unlock reports the
		// loss and tells the head.
		tc, _ := newClient(t, b.Addr, fairSlowRechecks...)
		tn := fairCountAttempts(tc)
		third := tc.FairLock(name, Reentrant())
		thirdCtx := testCtx(t, waitFor)
		thirdDone := fairStartLock(thirdCtx, third)
		fairAwaitQueue(t, admin, name, third.Owner())
		fairWaiterSubscribed(t, b, wc, third)
		fairAwaitSettled(t, tn)
		must(t, admin.Do(ctx, admin.B().Del().Key(name).Build()).Error())
		unlocked := time.Now()
		if err := next.Unlock(ctx); !errors.Is(err, ErrLockLost) {
			t.Fatalf("Unlock of a deleted fair lock: %v, want ErrLockLost", err)
		}
		if err := fairAwait(t, thirdDone, waitFor, "the head after the holder's Unlock"); err != nil {
			t.Fatalf("the head after an Unlock that found the lock gone: %v", err)
		}
		if d := time.Since(unlocked); d > waitFor {
			t.Fatalf("the head got the lock %v after the Unlock (its own re-check is a minute away)", d)
		}
		if err := third.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		fairNoPlaces(t, admin, name, "at the end")
	})
}

// Closing a Client ends its waits with ErrClosed, and they leave no place behind.
func TestFairLockCloseLeavesNoPlace(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name = "fair:close"
		ctx := testCtx(t, 10*time.Second)
		admin := b.Client(t)
		hc, _ := newClient(t, b.Addr)
		wc, _ := newClient(t, b.Addr)
		holder, waiter := hc.FairLock(name, Reentrant()), wc.FairLock(name, Reentrant())
		if err := holder.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		done := fairStartLock(ctx, waiter)
		fairAwaitQueue(t, admin, name, waiter.Owner())
		wc.Close()
		if err := fairAwait(t, done, 5*time.Second, "the waiter of a closed Client"); !errors.Is(err, ErrClosed) {
			t.Fatalf("Lock on a Client closed while waiting: %v, want ErrClosed", err)
		}
		fairNoPlaces(t, admin, name, "after the Client closed")
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TryLock without a wait time never queues, and does not take a free lock while someone is
// queued for it; TryLock with one leaves the queue as it found it.
func TestFairLockTryLockNeverQueues(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name, java = "fair:try", "9c345276-aa6e-44c1-b478-bf4b14ba1498:805"
		ctx := testCtx(t, 10*time.Second)
		admin := b.Client(t)
		c, _ := newClient(t, b.Addr)
		holder, other := c.FairLock(name, Reentrant()), c.FairLock(name, Reentrant())
		if err := holder.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if ok, err := other.TryLock(ctx); ok || err != nil {
			t.Fatalf("TryLock on a held lock: %v, %v; want false, nil", ok, err)
		}
		fairNoPlaces(t, admin, name, "after TryLock without wait")
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}

		// Free, but a (Java) waiter is queued: it comes first.
		fairRawPlace(t, admin, name, java, time.Now().Add(time.Minute).UnixMilli())
		if ok, err := other.TryLock(ctx); ok || err != nil {
			t.Fatalf("TryLock on a free lock with a waiter queued: %v, %v; want false, nil", ok, err)
		}
		if ok, err := other.TryLock(ctx, WaitTime(50*time.Millisecond)); ok || err != nil {
			t.Fatalf("TryLock(WaitTime 50ms) behind a queued waiter: %v, %v; want false, nil", ok, err)
		}
		if q := fairQueue(t, admin, name); !slices.Equal(q, []string{java}) {
			t.Fatalf("queue %v, want only the Java waiter", q)
		}
		if locked, err := other.IsLocked(ctx); locked || err != nil {
			t.Fatalf("IsLocked %v, %v; want false", locked, err)
		}

		// The Java waiter gives up its place (acquireFailed): now TryLock takes the lock.
		must(t, admin.Do(ctx, admin.B().Lrem().Key(fairQueueKey(name)).Count(0).Element(java).Build()).Error())
		must(t, admin.Do(ctx, admin.B().Zrem().Key(fairTimeoutKey(name)).Member(java).Build()).Error())
		if ok, err := other.TryLock(ctx); !ok || err != nil {
			t.Fatalf("TryLock on a free lock, nobody queued: %v, %v; want true, nil", ok, err)
		}
		fairNoPlaces(t, admin, name, "after TryLock took the lock")
		if err := other.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A fair lock is reentrant like Lock; an Unlock of nothing is ErrNotHeld; ForceUnlock wakes
// the head waiter by its own channel.
func TestFairLockReentrancyAndForceUnlock(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name = "fair:reentrant"
		ctx := testCtx(t, 10*time.Second)
		admin := b.Client(t)
		// A 30 s watchdog (and wait time): a waiter re-checks by itself only after 10 s.
		c, _ := newClient(t, b.Addr, WithWatchdogTimeout(30*time.Second))
		mu := c.FairLock(name, Reentrant())
		for range 2 {
			if err := mu.Lock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := mu.HoldCount(ctx); n != 2 || err != nil {
			t.Fatalf("HoldCount %d, %v; want 2", n, err)
		}
		if got := mustInt(t, admin.Do(ctx, admin.B().Hget().Key(name).Field(mu.Owner()).Build())); got != 2 {
			t.Fatalf("hash field = %d, want 2", got)
		}
		fairNoPlaces(t, admin, name, "after a re-entry")
		for i := 1; i >= 0; i-- {
			if err := mu.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if got := exists(t, admin, name); got != (i > 0) {
				t.Fatalf("key exists = %v with %d holds left", got, i)
			}
		}
		if err := mu.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("Unlock when not held: %v, want ErrNotHeld", err)
		}

		// ForceUnlock tells the head waiter.
		wc, _ := newClient(t, b.Addr, WithWatchdogTimeout(30*time.Second))
		wn := fairCountAttempts(wc)
		if err := mu.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		waiter := wc.FairLock(name, Reentrant())
		waitCtx := testCtx(t, 5*time.Second)
		done := fairStartLock(waitCtx, waiter)
		fairAwaitQueue(t, admin, name, waiter.Owner())
		fairWaiterSubscribed(t, b, c, waiter)
		fairAwaitSettled(t, wn)
		// The holder re-enters at once, ahead of the queue: queued, it would wait for itself.
		if ok, err := mu.TryLock(ctx); !ok || err != nil {
			t.Fatalf("re-entry by TryLock with a waiter queued: %v, %v; want true, nil", ok, err)
		}
		if err := mu.Lock(ctx); err != nil {
			t.Fatalf("re-entry by Lock with a waiter queued: %v", err)
		}
		if n, err := mu.HoldCount(ctx); n != 3 || err != nil {
			t.Fatalf("HoldCount %d, %v; want 3", n, err)
		}
		if q := fairQueue(t, admin, name); !slices.Equal(q, []string{waiter.Owner()}) {
			t.Fatalf("queue %v after the re-entries, want only the waiter", q)
		}
		forced := time.Now()
		if ok, err := c.FairLock(name, Reentrant()).ForceUnlock(ctx); !ok || err != nil {
			t.Fatalf("ForceUnlock: %v, %v; want true, nil", ok, err)
		}
		if err := fairAwait(t, done, 6*time.Second, "the head waiter after ForceUnlock"); err != nil {
			t.Fatalf("the head waiter after ForceUnlock (its own re-check is 10 s away): %v", err)
		}
		if d := time.Since(forced); d > 2*time.Second {
			t.Fatalf("the head waiter got the lock %v after ForceUnlock", d)
		}
		fairNoPlaces(t, admin, name, "after the head took the lock")
		if err := waiter.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if ok, err := waiter.ForceUnlock(ctx); ok || err != nil {
			t.Fatalf("ForceUnlock of a free lock: %v, %v; want false, nil", ok, err)
		}
	})
}

// Java at the wire (docs/redisson-interop.md, fair lock): a Redisson holder's release wakes our waiter by its
// own channel; our release tells a Java head waiter on its channel, and nobody on the plain
// lock channel; what we write is Redisson's layout.
func TestFairLockRedissonWireCompatibility(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name, java = "fair:orders", "9c345276-aa6e-44c1-b478-bf4b14ba1498:805"
		ctx := testCtx(t, 20*time.Second)
		admin := b.Client(t)
		// A 30 s watchdog and a 3-minute wait time, under a Java hold of minutes: our waiter
		// re-checks by itself only 30 s after its last attempt (the watchdog timeout), and a
		// wake within waitFor of the release is the message's, however loaded the machine (a
		// 10 s re-check was too near to tell apart under two CPU hogs).
		c, _ := newClient(t, b.Addr, WithWatchdogTimeout(30*time.Second), WithFairLockWaitTimeout(3*time.Minute))
		attempts := fairCountAttempts(c)
		mu := c.FairLock(name, Reentrant())
		ownChannel := "redisson_lock__channel:{fair:orders}:" + mu.Owner()

		// (a) A Java thread holds the lock; our waiter queues in Redisson's layout.
		must(t, admin.Do(ctx, admin.B().Hset().Key(name).FieldValue().FieldValue(java, "1").Build()).Error())
		must(t, admin.Do(ctx, admin.B().Pexpire().Key(name).Milliseconds(180000).Build()).Error())
		waitCtx := testCtx(t, waitFor)
		done := fairStartLock(waitCtx, mu)
		fairAwaitQueue(t, admin, name, mu.Owner())
		eventually(t, waitFor, "our waiter subscribed to "+ownChannel, func() bool {
			return numsub(t, b, c, ownChannel) == 1
		})
		fairAwaitSettled(t, attempts) // so that it can only be the message that wakes it
		if q := fairQueue(t, admin, "fair:orders"); !slices.Equal(q, []string{mu.Owner()}) {
			t.Fatalf("redisson_lock_queue:{fair:orders} = %v, want [%s]", q, mu.Owner())
		}
		z, err := admin.Do(ctx, admin.B().Zrange().Key("redisson_lock_timeout:{fair:orders}").Min("0").Max("-1").Withscores().Build()).AsZScores()
		if err != nil || len(z) != 1 || z[0].Member != mu.Owner() || int64(z[0].Score) <= time.Now().UnixMilli() {
			t.Fatalf("redisson_lock_timeout:{fair:orders} = %v (%v), want our owner with a deadline ahead", z, err)
		}
		// The Java thread releases as Redisson does: DEL, "0" on the head's channel.
		must(t, admin.Do(ctx, admin.B().Del().Key(name).Build()).Error())
		released := time.Now()
		if n := mustInt(t, admin.Do(ctx, admin.B().Publish().Channel(ownChannel).Message("0").Build())); n != 1 {
			t.Fatalf("the Java release reached %d subscribers, want our waiter", n)
		}
		if err := fairAwait(t, done, waitFor, "our waiter after the Java release"); err != nil {
			t.Fatalf("our waiter after a Redisson-style release (its own re-check is 30 s away): %v", err)
		}
		if d := time.Since(released); d > waitFor {
			t.Fatalf("woken %v after the Java release (its own re-check is 30 s away)", d)
		}

		// (c) Held: the hash is Redisson's, with the watchdog lease; no place is left.
		fields, err := admin.Do(ctx, admin.B().Hgetall().Key(name).Build()).AsStrMap()
		if err != nil || len(fields) != 1 || fields[mu.Owner()] != "1" {
			t.Fatalf("lock hash %v (%v), want {%s: 1}", fields, err, mu.Owner())
		}
		if ttl := pttl(t, admin, name); ttl <= 0 || ttl > 30000 {
			t.Fatalf("PTTL %d, want the 30000 ms watchdog lease", ttl)
		}
		fairNoPlaces(t, admin, name, "after our waiter took the lock")

		// (b) A Java waiter queues (a deadline far ahead); our release tells it on its own
		// channel, and publishes nothing on the plain lock channel.
		fairRawPlace(t, admin, name, java, time.Now().Add(10*time.Minute).UnixMilli())
		head := rawSubscribe(t, ctx, admin, "redisson_lock__channel:{fair:orders}:"+java)
		plain := rawSubscribe(t, ctx, admin, "redisson_lock__channel:{fair:orders}")
		if err := mu.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if got := head.published(t, ctx); !slices.Equal(got, []string{"0"}) {
			t.Fatalf("the Java head waiter's channel got %q, want [\"0\"]", got)
		}
		plain.quiet(t, ctx, "the plain lock channel after a fair release")
		if exists(t, admin, name) {
			t.Fatal("lock key alive after the unlock")
		}
		if q := fairQueue(t, admin, name); !slices.Equal(q, []string{java}) {
			t.Fatalf("queue %v after our release, want the Java waiter still at the head", q)
		}
	})
}

// Bad input is refused before any network call.
func TestFairLockInvalidArguments(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Client(t)
		for _, d := range []time.Duration{time.Millisecond, 0, -time.Second} {
			_, err := New(rdb, WithFairLockWaitTimeout(d))
			if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "fair lock wait timeout") {
				t.Errorf("WithFairLockWaitTimeout(%v): %v, want ErrInvalidArgument naming it", d, err)
			}
		}
		c, _ := newClient(t, b.Addr, WithFairLockWaitTimeout(3*time.Millisecond)) // the smallest
		ctx := testCtx(t, 5*time.Second)
		empty := c.FairLock("", Reentrant())
		mu := c.FairLock("fair:args", Reentrant())
		var nilCtx context.Context
		for _, tc := range []struct {
			arg string
			err error
		}{
			{"name", empty.Lock(ctx)},
			{"name", second(empty.TryLock(ctx))},
			{"name", second(empty.TryLock(ctx, WaitTime(time.Second)))},
			{"name", empty.Unlock(ctx)},
			{"name", second(empty.ForceUnlock(ctx))},
			{"name", second(empty.IsLocked(ctx))},
			{"name", second(empty.HoldCount(ctx))},
			{"lease", mu.Lock(ctx, Lease(0))},
			{"wait time", second(mu.TryLock(ctx, WaitTime(-1)))},
			{"ctx", mu.Lock(nilCtx)},
			{"option", mu.Lock(ctx, nil)},
		} {
			if !errors.Is(tc.err, ErrInvalidArgument) || !strings.Contains(tc.err.Error(), tc.arg) {
				t.Errorf("bad %s: got %v", tc.arg, tc.err)
			}
		}
		if n := dbsize(t, rdb); n != 0 {
			t.Errorf("a rejected call wrote %d keys", n)
		}
	})
}
