package sync

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/names"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/lua"
	"github.com/redis/rueidis"
)

// Tests of the fair lock's queue. A release (a force release, a leave that finds the lock
// free) tells the head waiter alone, "0" on its own channel, as Redisson does, and the head
// attempts: only the head can take a free lock. {name}:fair_waiters marks the latchkey
// waiters in the queue (value "1"), so that an attempt can count the Java waiters ahead of
// it for its deadline.

const fairJavaOwner = "9c345276-aa6e-44c1-b478-bf4b14ba1498:805"

// fairWaitersKey is the hash that marks the latchkey waiters in the lock's queue.
func fairWaitersKey(name string) string { return names.Suffix(name, "fair_waiters") }

// fairNothingLeft fails if the fair lock name has a place, a hold or a waiter's mark left.
func fairNothingLeft(t *testing.T, rdb rueidis.Client, name, when string) {
	t.Helper()
	fairNoPlaces(t, rdb, name, when)
	for _, key := range []string{name, fairWaitersKey(name)} {
		if exists(t, rdb, key) {
			t.Fatalf("%s: %s alive", when, key)
		}
	}
}

// fairOwnChannel is the waiter's own channel, redisson_lock__channel:{name}:<owner>.
func fairOwnChannel(l *FairLock) string { return lockChannel(l.Name()) + ":" + l.Owner() }

// fairSubscribeAll subscribes to the lock channel and to every waiter's own channel of the
// lock name: what its published returns, a "0" told to owner is fairWoken(name, owner).
// (One subscription for them all: the fence messages of several would mix.)
func fairSubscribeAll(t *testing.T, ctx context.Context, rdb rueidis.Client, name string) *rawSub {
	t.Helper()
	return rawSubscribeAlso(t, ctx, rdb, lockChannel(name), lockChannel(name)+":*")
}

// fairWoken is how a fairSubscribeAll subscription shows the "0" published on owner's own
// channel.
func fairWoken(name, owner string) string { return lockChannel(name) + ":" + owner + " 0" }

// hgetField returns field of the hash key, and false when there is none.
func hgetField(t *testing.T, rdb rueidis.Client, key, field string) (string, bool) {
	t.Helper()
	s, err := rdb.Do(context.Background(), rdb.B().Hget().Key(key).Field(field).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", false
	}
	if err != nil {
		t.Fatalf("HGET %s %s: %v", key, field, err)
	}
	return s, true
}

// fairStartLockOpts runs mu.Lock(ctx, opts...) in a goroutine and returns its result.
func fairStartLockOpts(ctx context.Context, mu *FairLock, opts ...LockOption) <-chan error {
	done := make(chan error, 1)
	go func() { done <- mu.Lock(ctx, opts...) }()
	return done
}

// fairPending fails if done has a result already: the waiter must still be waiting.
func fairPending(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s returned (%v), want it still waiting", what, err)
	default:
	}
}

// fairRaw runs one command built by cmd on rdb and fails the test on an error.
func fairRaw(t *testing.T, rdb rueidis.Client, cmd func(b rueidis.Builder) rueidis.Completed) rueidis.RedisResult {
	t.Helper()
	r := rdb.Do(context.Background(), cmd(rdb.B()))
	must(t, r.Error())
	return r
}

// fairNoMark fails if owner is marked as a latchkey waiter of the lock.
func fairNoMark(t *testing.T, rdb rueidis.Client, name, owner, when string) {
	t.Helper()
	if v, ok := hgetField(t, rdb, fairWaitersKey(name), owner); ok {
		t.Fatalf("%s: %s is still marked (%q) in %s", when, owner, v, fairWaitersKey(name))
	}
}

// A release tells the head waiter alone — "0" on its own channel, Redisson's message — and
// the head attempts; nobody else is told, and no waiter behind attempts. The head is a Java
// waiter first: the release leaves the lock free for it, and our waiters keep their places
// until it has taken and released the lock (Redisson's scripts, written raw). Then each
// latchkey waiter in turn is woken by the release before it and takes the lock with one
// attempt, with the lease it asks for (each asks for a different one), its place and its
// mark gone. Nothing of the lock is left at the end.
func TestFairReleaseWakesOnlyTheHead(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name = "fair:wake-head"
		ctx := testCtx(t, 30*time.Second)
		admin := b.Client(t)
		// Waiters re-check by themselves only a minute apart (fairSlowRechecks), so every
		// attempt counted here is one a message caused, and a result within waitFor is a
		// message's (every 10 s, a loaded run saw one more).
		hc, _ := newClient(t, b.Addr, fairSlowRechecks...)
		holder := hc.FairLock(name, Reentrant())
		must(t, holder.Lock(ctx))
		sub := fairSubscribeAll(t, ctx, admin, name)
		fairRawPlace(t, admin, name, fairJavaOwner, time.Now().Add(10*time.Minute).UnixMilli())
		type waiter struct {
			l        *FairLock
			attempts *atomic.Int64
			lease    time.Duration
			done     <-chan error
		}
		ws := make([]*waiter, 3)
		owners := []string{fairJavaOwner} // the queue
		for i := range ws {
			c, _ := newClient(t, b.Addr, fairSlowRechecks...)
			w := &waiter{l: c.FairLock(name, Reentrant()), attempts: fairCountAttempts(c), lease: time.Duration(40+i) * time.Second}
			w.done = fairStartLockOpts(ctx, w.l, Lease(w.lease))
			owners = append(owners, w.l.Owner())
			fairAwaitQueue(t, admin, name, owners...)
			fairAwaitSettled(t, w.attempts)
			// A latchkey waiter is marked as one, a Java waiter not (docs/redisson-interop.md).
			if v, ok := hgetField(t, admin, fairWaitersKey(name), w.l.Owner()); !ok || v != "1" {
				t.Fatalf("waiter %d: mark %q (%v) in %s, want 1", i, v, ok, fairWaitersKey(name))
			}
			ws[i] = w
		}
		fairNoMark(t, admin, name, fairJavaOwner, "a Java waiter queued")
		sub.quiet(t, ctx, "the lock's channels while the waiters queued")
		before := make([]int64, len(ws))
		for i, w := range ws {
			before[i] = w.attempts.Load()
		}
		// untouched fails unless the waiters from the from-th on still wait, with no attempt
		// since they queued.
		untouched := func(from int, when string) {
			t.Helper()
			for j := from; j < len(ws); j++ {
				fairPending(t, ws[j].done, "waiter "+strconv.Itoa(j)+" "+when)
				if n := ws[j].attempts.Load(); n != before[j] {
					t.Errorf("waiter %d made %d attempts %s, want none: only the head is woken", j, n-before[j], when)
				}
			}
		}

		// The release tells the Java head, and nobody else; the lock stays free for it.
		must(t, holder.Unlock(ctx))
		if got := sub.published(t, ctx); !slices.Equal(got, []string{fairWoken(name, fairJavaOwner)}) {
			t.Fatalf("the release published %q, want only \"0\" on the Java head's channel", got)
		}
		if exists(t, admin, name) {
			t.Fatal("the lock is held after a release with a Java head: only the head may take it")
		}
		if q := fairQueue(t, admin, name); !slices.Equal(q, owners) {
			t.Fatalf("queue %v after the release, want %v: the Java waiter still at the head", q, owners)
		}
		untouched(0, "behind a Java head")

		// The Java waiter attempts and takes the free lock at the head, as Redisson's acquire
		// does, and releases it as Redisson's release does: DEL, "0" on the next head's channel.
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed { return b.Lpop().Key(fairQueueKey(name)).Build() })
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed {
			return b.Zrem().Key(fairTimeoutKey(name)).Member(fairJavaOwner).Build()
		})
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed {
			return b.Hset().Key(name).FieldValue().FieldValue(fairJavaOwner, "1").Build()
		})
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed { return b.Pexpire().Key(name).Milliseconds(180000).Build() })
		untouched(0, "while the Java waiter holds the lock")
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed { return b.Del().Key(name).Build() })
		released := time.Now()
		if n := mustInt(t, admin.Do(ctx, admin.B().Publish().Channel(fairOwnChannel(ws[0].l)).Message("0").Build())); n != 2 {
			t.Fatalf("the Java release reached %d subscribers, want the head's Client and the test's", n)
		}
		if got := sub.published(t, ctx); !slices.Equal(got, []string{fairWoken(name, ws[0].l.Owner())}) {
			t.Fatalf("the Java release published %q, want only \"0\" on our head's channel", got)
		}

		// Each latchkey waiter in turn is woken by the release before it, begun at released,
		// and takes the lock with an attempt of its own made since: the lock's TTL is its
		// lease less the time since at most, and its hold ends a lease after released at the
		// earliest. (Bounds by the time since, not by a fixed margin: a loaded machine took
		// over 3 s between a release and the checks.)
		for i, w := range ws {
			if err := fairAwait(t, w.done, waitFor, "waiter "+strconv.Itoa(i)); err != nil {
				t.Fatalf("waiter %d after the release before it: %v", i, err)
			}
			if n := w.attempts.Load(); n != before[i]+1 {
				t.Errorf("waiter %d made %d attempts once woken, want 1: a 0 means attempt", i, n-before[i])
			}
			untouched(i+1, "while waiter "+strconv.Itoa(i)+" took the lock")
			fields, err := admin.Do(ctx, admin.B().Hgetall().Key(name).Build()).AsStrMap()
			if err != nil || len(fields) != 1 || fields[w.l.Owner()] != "1" {
				t.Fatalf("waiter %d woken: lock hash %v (%v), want {%s: 1}", i, fields, err, w.l.Owner())
			}
			if ttl := pttl(t, admin, name); ttl > w.lease.Milliseconds() || ttl < (w.lease-time.Since(released)).Milliseconds() {
				t.Fatalf("waiter %d woken: PTTL %d, want its lease %d less the %v since the release before it began at most",
					i, ttl, w.lease.Milliseconds(), time.Since(released))
			}
			fairNoMark(t, admin, name, w.l.Owner(), "waiter "+strconv.Itoa(i)+" took the lock")
			if _, ok := fairDeadline(t, admin, name, w.l.Owner()); ok {
				t.Fatalf("waiter %d took the lock: its deadline is still in the zset", i)
			}
			if q := fairQueue(t, admin, name); !slices.Equal(q, owners[i+2:]) {
				t.Fatalf("waiter %d took the lock: queue %v, want %v", i, q, owners[i+2:])
			}
			if !w.l.Valid() {
				t.Fatalf("waiter %d: hold not valid", i)
			}
			if d, ok := w.l.Deadline(); !ok || time.Until(d) > w.lease || d.Before(released.Add(w.lease)) {
				t.Fatalf("waiter %d: hold deadline in %v (%v), want its lease %v at most, and at least its lease after the release before it began (%v ago)",
					i, time.Until(d), ok, w.lease, time.Since(released))
			}
			if n, err := w.l.HoldCount(ctx); n != 1 || err != nil {
				t.Fatalf("waiter %d: HoldCount %d, %v; want 1", i, n, err)
			}
			released = time.Now()
			if err := w.l.Unlock(ctx); err != nil {
				t.Fatalf("waiter %d: Unlock: %v", i, err)
			}
			var want []string // the last release: nobody to tell, and nothing on the lock channel
			if i+1 < len(ws) {
				want = []string{fairWoken(name, ws[i+1].l.Owner())}
			}
			if got := sub.published(t, ctx); !slices.Equal(got, want) {
				t.Fatalf("waiter %d's release published %q, want %q", i, got, want)
			}
		}
		fairNothingLeft(t, admin, name, "after the last unlock")
	})
}

// Two latchkey waiters crash (their Clients' connections go dark: no more attempts, no
// leave, no unlock) while queued ahead of a live one. The holder's release tells the first
// dead one, the head, and nobody else; it never attempts, and the free lock can be taken by
// the head alone. The queue is not stranded: once both dead places have lapsed (one wait
// after their last attempts) — not before — the live waiter's own re-check drops them and
// takes the lock, and nothing is left in Redis.
func TestFairCrashedWaitersDoNotStrand(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		// The dead places must outlive the few commands between the dead waiters' last
		// attempts and the release on a loaded machine (300 ms places lapsed first, and 2 s ones
		// under two CPU hogs and -race).
		const name, wait = "fair:crashed", 6 * time.Second
		ctx := testCtx(t, 60*time.Second)
		admin := b.Client(t)
		hc, _ := newClient(t, b.Addr)
		holder := hc.FairLock(name, Reentrant())
		if err := holder.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		sub := fairSubscribeAll(t, ctx, admin, name)
		deadCtx := testCtx(t, 60*time.Second)
		var proxies []*redistest.Proxy
		var dead []*FairLock
		for range 2 {
			p := redistest.NewProxy(t, b.Addr)
			c, _ := newClient(t, p.Addr(), WithFairLockWaitTimeout(wait))
			l := c.FairLock(name, Reentrant())
			fairStartLock(deadCtx, l) // never returns a result we read
			dead = append(dead, l)
			proxies = append(proxies, p)
			fairAwaitQueue(t, admin, name, fairOwners(dead)...)
		}
		lc, _ := newClient(t, b.Addr, WithFairLockWaitTimeout(wait))
		live := lc.FairLock(name, Reentrant())
		liveCtx := testCtx(t, 60*time.Second)
		liveDone := fairStartLock(liveCtx, live)
		want := append(fairOwners(dead), live.Owner())
		fairAwaitQueue(t, admin, name, want...)

		for _, p := range proxies {
			p.Blackhole(true) // the processes die
		}
		// The dead places are live for at most one wait after the dead waiters' last attempts:
		// the release must run before, so that it finds them queued ahead. (A deadline read
		// here is the place's at the latest: deadlines only grow.)
		lapse, lapsed := int64(1<<62-1), int64(0) // the first dead place's lapse, the last one's
		for _, l := range dead {
			d, ok := fairDeadline(t, admin, name, l.Owner())
			if !ok {
				t.Fatalf("dead waiter %s has no deadline right after dying", l.Owner())
			}
			lapse, lapsed = min(lapse, d), max(lapsed, d)
		}
		if q := fairQueue(t, admin, name); !slices.Equal(q, want) {
			t.Fatalf("queue %v right before the release, want %v", q, want)
		}
		sub.quiet(t, ctx, "the lock's channels while the waiters queued")
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		unlocked := time.Now()
		if unlocked.UnixMilli() >= lapse {
			t.Fatalf("the release ended %d ms after the first dead place lapsed: the test did not produce dead waiters queued ahead", unlocked.UnixMilli()-lapse+1)
		}
		if got := sub.published(t, ctx); !slices.Equal(got, []string{fairWoken(name, dead[0].Owner())}) {
			t.Fatalf("the release published %q, want only \"0\" on the first dead waiter's channel: it is the head", got)
		}

		if err := fairAwait(t, liveDone, waitFor, "the live waiter behind two dead ones"); err != nil {
			t.Fatalf("the live waiter behind two crashed waiters: %v", err)
		}
		// Its attempt was sent once both dead places had lapsed, by the clock the scripts are
		// given (this process's).
		if now := time.Now().UnixMilli(); now < lapsed {
			t.Fatalf("the live waiter got the lock %d ms before the last dead place ahead of it lapsed", lapsed-now)
		}
		t.Logf("%s: the live waiter got the lock %v after the release", b.Name, time.Since(unlocked))
		sub.quiet(t, ctx, "the lock's channels once the release told the head: the live waiter's own re-check took the lock")
		if v, ok := hgetField(t, admin, name, live.Owner()); !ok || v != "1" {
			t.Fatalf("HGET %s %s = %q (%v), want 1", name, live.Owner(), v, ok)
		}
		fairNoPlaces(t, admin, name, "after the live waiter took the lock")
		if err := live.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// The live Clients' unlock latches go with them. The dead Clients leave nothing: they
		// never released (no latch), and their places and marks were dropped as stale by the
		// live waiter's attempt. (Without a live waiter behind, the dead places would stay in
		// the queue and the zset, which have no TTL, until the next script on the lock; only
		// the marks lapse, three waits after the last attempt.)
		lc.Close()
		hc.Close()
		eventually(t, waitFor, "nothing left in Redis", func() bool { return dbsize(t, admin) == 0 })
	})
}

// fairOwners returns the owners of ls, in order.
func fairOwners(ls []*FairLock) []string {
	var s []string
	for _, l := range ls {
		s = append(s, l.Owner())
	}
	return s
}

// Each attempt of a queued latchkey waiter sets its deadline to now + wait × (1 + the Java
// waiters ahead of it).
func TestFairDeadlineFormula(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name, wait = "fair:deadline", 20 * time.Second
		ctx := testCtx(t, 20*time.Second)
		admin := b.Client(t)
		hc, _ := newClient(t, b.Addr)
		holder := hc.FairLock(name, Reentrant())
		if err := holder.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		var queue []string
		started := make(map[*FairLock]int64) // epoch ms before each waiter's first attempt
		start := func() *FairLock {
			c, _ := newClient(t, b.Addr, WithFairLockWaitTimeout(wait))
			n := fairCountAttempts(c)
			l := c.FairLock(name, Reentrant())
			started[l] = time.Now().UnixMilli()
			fairStartLock(ctx, l)
			queue = append(queue, l.Owner())
			fairAwaitQueue(t, admin, name, queue...)
			fairAwaitSettled(t, n)
			return l
		}
		// The deadline is set by the waiter's last attempt, which came between its start and
		// now, however slowly the test ran: it lies in [start, now] + the waits (and 100 ms of
		// clock and rounding).
		check := func(l *FairLock, what string, waits int64) {
			t.Helper()
			d, ok := fairDeadline(t, admin, name, l.Owner())
			now, add := time.Now().UnixMilli(), waits*wait.Milliseconds()
			if !ok || d < started[l]+add-100 || d > now+add+100 {
				t.Errorf("%s: deadline now%+d ms (%v), want between start + %d ms (now%+d ms) and now + %d ms",
					what, d-now, ok, add, started[l]+add-now, add)
			}
		}
		head := start()
		second := start()
		fairRawPlace(t, admin, name, fairJavaOwner, time.Now().Add(10*time.Minute).UnixMilli())
		queue = append(queue, fairJavaOwner)
		behindJava := start()
		check(head, "the head", 1)
		check(second, "behind one latchkey waiter", 1)
		check(behindJava, "behind two latchkey waiters and a Java one", 2)
	})
}

// A mark left behind by a Java script (Redisson's stale-drop of a dead latchkey waiter
// removes its place, not its mark in {name}:fair_waiters) can hide a Java waiter from a
// latchkey waiter's count of Java waiters ahead (a documented cost of counting them only
// when marks are fewer than places): the waiter's deadline is then one wait short, and the
// Java waiter's taking the lock — which moves every deadline one wait earlier — makes it
// stale at the head. It must lose no more than its place: it queues again and gets the lock.
func TestFairHiddenJavaWaiterCostsOnlyThePlace(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// Places outlive the steps between them on a loaded machine (a 300 ms one lapsed, and
		// took the dead waiter's mark with it).
		const name, wait = "fair:deadline-ghost", 2 * time.Second
		ctx := testCtx(t, 60*time.Second)
		admin := b.Client(t)
		hc, _ := newClient(t, b.Addr)
		holder := hc.FairLock(name, Reentrant())
		if err := holder.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		// A latchkey waiter dies queued, and a Java script removes its place as Redisson's
		// stale-drop does (LPOP / ZREM): its mark stays.
		p := redistest.NewProxy(t, b.Addr)
		gc, _ := newClient(t, p.Addr(), WithFairLockWaitTimeout(wait))
		ghost := gc.FairLock(name, Reentrant())
		fairStartLock(testCtx(t, 60*time.Second), ghost)
		fairAwaitQueue(t, admin, name, ghost.Owner())
		p.Blackhole(true)
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed { return b.Lpop().Key(fairQueueKey(name)).Build() })
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed {
			return b.Zrem().Key(fairTimeoutKey(name)).Member(ghost.Owner()).Build()
		})
		if v, ok := hgetField(t, admin, fairWaitersKey(name), ghost.Owner()); !ok || v != "1" {
			t.Fatalf("the dead waiter's mark is %q (%v), want 1: the test assumes Redisson's scripts leave it", v, ok)
		}

		fairRawPlace(t, admin, name, fairJavaOwner, time.Now().Add(10*time.Minute).UnixMilli())
		c, _ := newClient(t, b.Addr, WithFairLockWaitTimeout(wait))
		w := c.FairLock(name, Reentrant())
		done := fairStartLock(ctx, w)
		fairAwaitQueue(t, admin, name, fairJavaOwner, w.Owner())
		d, _ := fairDeadline(t, admin, name, w.Owner())
		if left := d - time.Now().UnixMilli(); left > wait.Milliseconds()+200 {
			t.Fatalf("deadline now + %d ms: the Java waiter was counted, so the situation this test is about did not arise", left)
		}

		// The holder leaves; the Java waiter takes the lock as Redisson's script does — moving
		// every deadline one wait earlier — and releases it, telling the head.
		must(t, holder.Unlock(ctx))
		javaTakes := `redis.call('lpop', KEYS[2]); redis.call('zrem', KEYS[3], ARGV[1])
			for _, m in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do redis.call('zincrby', KEYS[3], -tonumber(ARGV[2]), m) end
			redis.call('hset', KEYS[1], ARGV[1], 1); redis.call('pexpire', KEYS[1], 30000)`
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed {
			return b.Eval().Script(javaTakes).Numkeys(3).Key(name, fairQueueKey(name), fairTimeoutKey(name)).
				Arg(fairJavaOwner, strconv.FormatInt(wait.Milliseconds(), 10)).Build()
		})
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed { return b.Del().Key(name).Build() })
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed {
			return b.Publish().Channel(lockChannel(name) + ":" + w.Owner()).Message("0").Build()
		})
		if err := fairAwait(t, done, waitFor, "the waiter whose deadline was short"); err != nil {
			t.Fatalf("Lock: %v", err)
		}
		must(t, w.Unlock(ctx))
	})
}

// A handle that waits again and again, within the linger of its own channel, subscribes
// once: the first wait makes three attempts (queueing, again at the subscription's
// confirmation, and once the release wakes it), every later one two (queueing, woken).
// Real Redis only: miniredis keeps no command statistics.
//
// The linger is a second of real time. A wait that may have come later than that after the
// one before (the steps between them, on a loaded machine, took longer) may subscribe again,
// as it should; it is not counted, and the handle waits on until ten waits came within the
// linger, each of which must subscribe nothing.
func TestFairLoopingWaiterSubscribesOnce(t *testing.T) {
	t.Parallel()
	b := redistest.Redis(t)
	const name, waits, maxWaits = "fair:loop", 10, 60
	ctx := testCtx(t, 60*time.Second)
	admin := b.Client(t)
	wc, _ := newClient(t, b.Addr, fairSlowRechecks...)
	wn := fairCountAttempts(wc)
	hc, _ := newClient(t, b.Addr, fairSlowRechecks...)
	w, h := wc.FairLock(name, Reentrant()), hc.FairLock(name, Reentrant())
	channel := fairOwnChannel(w)
	must(t, admin.Do(ctx, admin.B().ConfigResetstat().Build()).Error())
	within := 0            // waits that came within the linger of the one before
	var released time.Time // when the release that ended the wait before began
	for i := 0; within < waits-1; i++ {
		if i == maxWaits {
			t.Fatalf("%d waits, %d of which came within the linger (%v) of the one before, want %d: the situation did not arise",
				i, within, subscriptionLinger, waits-1)
		}
		// The other handle takes the free lock with TryLock, which never waits and so never
		// listens: every SUBSCRIBE counted is the waiter's.
		if ok, err := h.TryLock(ctx); !ok || err != nil {
			t.Fatalf("wait %d: the other handle's TryLock on a free lock: %v, %v", i, ok, err)
		}
		before, subs, unsubs := wn.Load(), commandCalls(t, admin, "subscribe"), commandCalls(t, admin, "unsubscribe")
		done := fairStartLock(ctx, w)
		fairAwaitQueue(t, admin, name, w.Owner())
		// The wait before ended (the linger began) after its release began; this one was
		// queued, its waiter on the channel, by now.
		counted := i > 0 && time.Since(released) < subscriptionLinger
		queued := int64(1)
		if i == 0 {
			queued = 2 // queued, then confirmed
		}
		want := queued + 1 // and woken by the release
		eventually(t, waitFor, "the waiter's attempts before the release", func() bool { return wn.Load()-before >= queued })
		released = time.Now()
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := fairAwait(t, done, waitFor, "the waiter"); err != nil {
			t.Fatalf("wait %d: %v", i, err)
		}
		if i == 0 || counted {
			if got := wn.Load() - before; got != want {
				t.Errorf("wait %d: %d attempts, want %d", i, got, want)
			}
			wantSubs := int64(0)
			if i == 0 {
				wantSubs = 1
			}
			if s, u := commandCalls(t, admin, "subscribe")-subs, commandCalls(t, admin, "unsubscribe")-unsubs; s != wantSubs || u != 0 {
				t.Errorf("wait %d: %d SUBSCRIBE and %d UNSUBSCRIBE calls, want %d and 0", i, s, u, wantSubs)
			}
		}
		if counted {
			within++
		}
		if err := w.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d waits within the linger of the one before, %d SUBSCRIBE, %d UNSUBSCRIBE in all",
		within, commandCalls(t, admin, "subscribe"), commandCalls(t, admin, "unsubscribe"))
	if !wc.mux.Subscribed(channel) {
		t.Fatal("the waiter's channel is not subscribed right after its last wait: it must linger")
	}
	unsubs := commandCalls(t, admin, "unsubscribe")
	// (UNSUBSCRIBE is counted per call: another channel of the Client's may be left in the
	// same while, so only that the count moved is asked.)
	eventually(t, waitFor, "the channel left after the linger", func() bool {
		return commandCalls(t, admin, "unsubscribe") > unsubs && numsub(t, b, hc, channel) == 0
	})
}

// commandCalls returns how many times cmd ran since the last CONFIG RESETSTAT.
func commandCalls(t *testing.T, rdb rueidis.Client, cmd string) int64 {
	t.Helper()
	info, err := rdb.Do(context.Background(), rdb.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	prefix := "cmdstat_" + cmd + ":calls="
	for line := range strings.SplitSeq(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			n, err := strconv.ParseInt(rest[:strings.IndexByte(rest+",", ',')], 10, 64)
			if err != nil {
				t.Fatalf("INFO commandstats line %q: %v", line, err)
			}
			return n
		}
	}
	return 0
}

// A wake-up only tells a waiter to attempt. A release's "0" held back in transit until the
// wait it was for has ended reaches the handle's next wait while another handle holds the
// lock: that wait attempts, finds the lock held, and waits on — Lock must not return (two
// holders). The proxy holds the message back to make the order certain.
func TestFairStaleWakeTakesNothing(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name = "fair:stale-wake"
		ctx := testCtx(t, 20*time.Second)
		admin := b.Client(t)
		gate := newGateProxy(t, b.Addr)
		// withLeaveGrace: the cancelled wait returns once its leave has run, however slow
		wc, _ := newClient(t, gate.addr(), append(slices.Clip(fairSlowRechecks), withLeaveGrace(time.Minute))...)
		wn := fairCountAttempts(wc)
		hc, _ := newClient(t, b.Addr, fairSlowRechecks...)
		w, holder, other := wc.FairLock(name, Reentrant()), hc.FairLock(name, Reentrant()), hc.FairLock(name, Reentrant())
		if err := holder.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		ctx1, cancel1 := context.WithCancel(ctx)
		defer cancel1()
		first := fairStartLock(ctx1, w)
		fairAwaitQueue(t, admin, name, w.Owner())
		fairAwaitSettled(t, wn)

		gate.arm([]byte(fairOwnChannel(w)))
		if err := holder.Unlock(ctx); err != nil { // wakes w, the head; its "0" is held back
			t.Fatal(err)
		}
		eventually(t, waitFor, "the wake-up held back", gate.holding)
		if exists(t, admin, name) {
			t.Fatal("the lock is held after the release: only the head's own attempt may take it")
		}
		// The wait ends before it could attempt (its re-check is a minute away): its leave
		// takes its place, and the free lock goes to the next to ask.
		cancel1()
		if err := fairAwait(t, first, waitFor, "the cancelled wait"); !errors.Is(err, context.Canceled) {
			t.Fatalf("the first wait: %v, want context.Canceled (it was never woken)", err)
		}
		fairNoPlaces(t, admin, name, "after the cancelled wait")
		if err := other.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		before := wn.Load()
		second := fairStartLock(ctx, w)
		fairAwaitQueue(t, admin, name, w.Owner())
		eventually(t, waitFor, "the second wait's first attempt", func() bool { return wn.Load() > before })
		gate.open() // the first wait's "0" arrives now
		// It makes the second wait attempt (or, had the channel lapsed in between, the
		// subscription's confirmation does), and the attempt finds the lock held.
		eventually(t, waitFor, "the second wait's attempt once the message arrived", func() bool { return wn.Load() > before+1 })
		select {
		case err := <-second:
			if err == nil {
				_, inRedis := hgetField(t, admin, name, w.Owner())
				t.Fatalf("two holders: the second wait returned on the first wait's message (w.Valid %v, w in the lock hash %v) while %s holds the lock",
					w.Valid(), inRedis, other.Owner())
			}
			t.Fatalf("the second wait: %v", err)
		case <-time.After(time.Second): // bounded: showing that it does NOT return
		}
		if v, ok := hgetField(t, admin, name, other.Owner()); !ok || v != "1" {
			t.Fatalf("HGET %s %s = %q (%v), want 1: the other handle still holds the lock", name, other.Owner(), v, ok)
		}
		if err := other.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := fairAwait(t, second, waitFor, "the second wait after the release"); err != nil {
			t.Fatal(err)
		}
		if err := w.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A wait cancelled as the release wakes it, and the handle's next Lock at once while another
// handle holds the lock, round after round with no proxy: whichever wins — the wake-up's
// attempt or the cancel — there are never two holders, and a cancelled wait leaves no place
// behind (it would hold up the next holder's Lock). The wake-up reaches the Client's
// subscriber connection a little after the command connection's replies, so on a loopback
// redis-server it may land in the next wait. Up to 500 rounds or a second.
func TestFairCancelledWaitsUnderRaces(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name, maxRounds = "fair:cancel-race", 500
		ctx := testCtx(t, 20*time.Second)
		admin := b.Client(t)
		// withLeaveGrace: a cancelled wait returns once its leave has run, however slow
		wc, _ := newClient(t, b.Addr, withLeaveGrace(time.Minute))
		hc, _ := newClient(t, b.Addr)
		w, holder := wc.FairLock(name, Reentrant()), hc.FairLock(name, Reentrant())
		cancelled, took, unknown, rounds := 0, 0, 0, 0
		for end := time.Now().Add(time.Second); rounds < maxRounds && time.Now().Before(end); rounds++ {
			i := rounds
			if err := holder.Lock(ctx); err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
			ctx1, cancel1 := context.WithCancel(ctx)
			first := fairStartLock(ctx1, w)
			fairAwaitQueue(t, admin, name, w.Owner())
			// The cancel comes beside the release (even rounds) or after it (odd ones: the wake-up
			// is on its way, and its attempt may be too).
			if i%2 == 0 {
				go cancel1()
			}
			if err := holder.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if i%2 == 1 {
				go cancel1()
			}
			err := <-first
			cancel1()
			if err == nil { // the wake-up's attempt won
				took++
				fairNoPlaces(t, admin, name, "round "+strconv.Itoa(i)+": the woken wait took the lock")
				if err := w.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("round %d: the first wait: %v", i, err)
			}
			cancelled++
			// The lock is free and nobody queued — unless the wait's attempt was on its way as it
			// ended and got no reply within its grace (a loaded machine): its outcome is unknown,
			// and a hold it took is given back in the background, which the holder then waits
			// for.
			var wait time.Duration
			if errors.Is(err, ErrOutcomeUnknown) {
				unknown++
				wait = waitFor
			} else {
				fairNoPlaces(t, admin, name, "round "+strconv.Itoa(i)+": the cancelled wait returned")
			}
			if ok, terr := holder.TryLock(ctx, WaitTime(wait)); !ok || terr != nil {
				t.Fatalf("round %d: TryLock of the free lock (the first wait ended with %v): %v, %v; queue %v",
					i, err, ok, terr, fairQueue(t, admin, name))
			}
			ctx2, cancel2 := context.WithTimeout(ctx, 20*time.Millisecond)
			err = w.Lock(ctx2) // must time out: holder holds the lock throughout
			cancel2()
			if err == nil {
				fields, _ := admin.Do(ctx, admin.B().Hgetall().Key(name).Build()).AsStrMap()
				t.Fatalf("round %d (%d waits cancelled): two holders: Lock returned nil (Valid %v) while the lock hash is %v (holder %s); queue %v",
					i, cancelled, w.Valid(), fields, holder.Owner(), fairQueue(t, admin, name))
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("round %d: the second wait: %v", i, err)
			}
			if errors.Is(err, ErrOutcomeUnknown) {
				unknown++
			}
			if err := holder.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("%s: %d rounds: %d first waits took the lock, %d were cancelled; %d waits of unknown outcome",
			b.Name, rounds, took, cancelled, unknown)
		if unknown == 0 {
			fairNothingLeft(t, admin, name, "after the last round")
		}
	})
}

// The leave script drops stale heads before it wakes the head of a free lock, as every other
// fair script does. Were it not to, it would tell a dead latchkey waiter whose place has
// lapsed but which no script has dropped yet, which never attempts, and the live waiter
// behind would wait for its own re-check — past the "one wait" a crashed waiter may cost.
// Here the dead waiter's place and mark are written as a latchkey waiter's attempt leaves
// them, and its lapse by moving its deadline into the past (standing for the time in which
// nobody attempted: the lock's holder died too, and the waiter behind leaves before its next
// re-check).
func TestFairLeaveSkipsLapsedHead(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name, deadOwner = "fair:leave-lapsed", "0b0e3f5e-2d5e-4f57-9d0e-6f6a1c2e9a11:7"
		ctx := testCtx(t, 20*time.Second)
		admin := b.Client(t)
		fairRawPlace(t, admin, name, deadOwner, time.Now().Add(time.Minute).UnixMilli()) // lapsed below, not before
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed {
			return b.Hset().Key(fairWaitersKey(name)).FieldValue().FieldValue(deadOwner, "1").Build()
		})
		// Re-checks a minute apart: only the leave's wake-up can have x attempt within waitFor.
		wc, _ := newClient(t, b.Addr, fairSlowRechecks...)
		xc, _ := newClient(t, b.Addr, fairSlowRechecks...)
		wn, xn := fairCountAttempts(wc), fairCountAttempts(xc)
		w, x := wc.FairLock(name, Reentrant()), xc.FairLock(name, Reentrant())
		sub := fairSubscribeAll(t, ctx, admin, name)
		wCtx, cancelW := context.WithCancel(ctx)
		defer cancelW()
		wDone := fairStartLock(wCtx, w)
		fairAwaitQueue(t, admin, name, deadOwner, w.Owner())
		fairAwaitSettled(t, wn)
		xDone := fairStartLock(ctx, x)
		fairAwaitQueue(t, admin, name, deadOwner, w.Owner(), x.Owner())
		fairAwaitSettled(t, xn)
		xBefore := xn.Load()
		// The dead waiter's place lapses.
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed {
			return b.Zadd().Key(fairTimeoutKey(name)).ScoreMember().ScoreMember(float64(time.Now().Add(-time.Second).UnixMilli()), deadOwner).Build()
		})
		cancelW()
		if err := fairAwait(t, wDone, waitFor, "the leaving waiter"); !errors.Is(err, context.Canceled) {
			t.Fatalf("the leaving waiter: %v, want context.Canceled", err)
		}
		if err := fairAwait(t, xDone, waitFor, "the live waiter behind"); err != nil {
			t.Fatal(err)
		}
		if got := sub.published(t, ctx); !slices.Equal(got, []string{fairWoken(name, x.Owner())}) {
			t.Fatalf("published %q, want only \"0\" on the live head's channel: the leave must wake it, not the lapsed dead waiter", got)
		}
		if n := xn.Load(); n != xBefore+1 {
			t.Errorf("the live waiter made %d attempts after the leave, want 1: the one its wake-up asked for", n-xBefore)
		}
		fairNoPlaces(t, admin, name, "after the live waiter took the lock")
		fairNoMark(t, admin, name, deadOwner, "the lapsed dead waiter dropped")
		if err := x.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// gateProxy is a TCP proxy between a Client and Redis that, once armed with a marker, holds
// back everything the server sends on the first connection whose data contains the marker,
// from that chunk on, until opened: a message delayed in transit on the subscriber
// connection while the command connection goes on.
type gateProxy struct {
	ln     net.Listener
	target string

	mu     gosync.Mutex
	marker []byte        // armed when not nil
	gate   chan struct{} // closed by open
	held   bool          // a connection is held back
	conns  []net.Conn
	opened bool
}

func newGateProxy(t *testing.T, target string) *gateProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &gateProxy{ln: ln, target: target, gate: make(chan struct{})}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *gateProxy) addr() string { return p.ln.Addr().String() }

func (p *gateProxy) arm(marker []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marker = bytes.Clone(marker)
}

func (p *gateProxy) holding() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

func (p *gateProxy) open() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.opened {
		p.opened = true
		close(p.gate)
	}
}

func (p *gateProxy) close() {
	p.open()
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

func (p *gateProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		go func() {
			_, _ = io.Copy(server, client)
			server.Close()
		}()
		go p.serverToClient(server, client)
	}
}

func (p *gateProxy) serverToClient(server, client net.Conn) {
	defer client.Close()
	buf := make([]byte, 32<<10)
	var gate chan struct{}
	// The end of what was passed on, so that a marker split across two reads is found (a
	// loaded machine splits writes at any point): the message's first part has reached the
	// client then, which cannot read it without the rest, held back.
	var tail []byte
	for {
		n, err := server.Read(buf)
		if n > 0 {
			p.mu.Lock()
			if gate == nil && p.marker != nil && bytes.Contains(append(tail, buf[:n]...), p.marker) {
				gate, p.marker, p.held = p.gate, nil, true
			}
			if keep := len(p.marker) - 1; keep > 0 {
				tail = append(tail, buf[:n]...)
				tail = bytes.Clone(tail[max(len(tail)-keep, 0):])
			} else {
				tail = nil
			}
			p.mu.Unlock()
			if gate != nil {
				<-gate
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
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
		// withLeaveGrace: the wait returns once its leave has run (its repeat)
		wc, _ := newClient(t, p.addr(), withLeaveGrace(time.Minute))
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
// unknown, the release not yet run) must take nothing: the owner's old field in the lock,
// which the release will still drop, is no hold (and the leave that follows never touches
// the lock). Lock fails, holding nothing; once the release runs, the lock is free.
func TestFairLockAfterUnsettledReleaseTakesNothing(t *testing.T) {
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

// A fair Lock whose context ends while its handle's owner is still busy with an earlier
// wait's clean-up leaves nothing behind: no hold the caller is not told of, no place once
// that clean-up has run. The earlier wait's attempt got no reply in time
// (ErrOutcomeUnknown); its late reply queued the owner, and its withdrawal, which holds the
// owner, is held back before it is sent. The next Lock cannot attempt (the owner is busy); a
// release wakes the owner's place, the head, and the Lock's context ends: it returns
// context.Canceled, its owner holding nothing in Redis. Once the withdrawal runs, the queue
// is empty and the free lock goes to the next to ask.
func TestFairLockEndedWhileOwnerBusyLeavesNothing(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name = "fair:ended-while-busy"
		ctx := testCtx(t, 20*time.Second)
		admin := b.Client(t)
		var owner atomic.Pointer[string]       // w's owner, once the hooks are armed
		var holdAcquire, holdLeave atomic.Bool // hold back w's next acquire, its next leave
		acquireHeld, leaveHeld := make(chan struct{}), make(chan struct{})
		acquireGo, leaveGo := make(chan struct{}), make(chan struct{})
		letAcquire := gosync.OnceFunc(func() { close(acquireGo) })
		letLeave := gosync.OnceFunc(func() { close(leaveGo) })
		t.Cleanup(func() { letAcquire(); letLeave() })
		rdb := newHookedRDB(t, b.Addr)
		rdb.hook = func(ctx context.Context, cmd rueidis.Completed) (rueidis.RedisResult, bool) {
			gate := func(armed *atomic.Bool, held, open chan struct{}) {
				if armed.CompareAndSwap(true, false) {
					close(held)
					select {
					case <-open:
					case <-ctx.Done():
					}
				}
			}
			if o := owner.Load(); o != nil && slices.Contains(cmd.Commands(), *o) {
				switch sha(cmd) {
				case shaOf(lua.FairAcquire{}):
					gate(&holdAcquire, acquireHeld, acquireGo)
				case shaOf(lua.FairLeave{}):
					gate(&holdLeave, leaveHeld, leaveGo)
				}
			}
			return rueidis.RedisResult{}, false
		}
		// withLeaveGrace: a wait whose context ended returns once its leave has run. And a
		// send lives as long as the retry budget: a minute, so that the gates above hold
		// whatever the machine's load.
		wc, err := New(rdb, withLeaveGrace(time.Minute), WithRetryBudget(time.Minute))
		must(t, err)
		t.Cleanup(func() { wc.Close() })
		hc, _ := newClient(t, b.Addr)
		w, holder := wc.FairLock(name, Reentrant()), hc.FairLock(name, Reentrant())
		id := w.Owner()
		owner.Store(&id)
		must(t, holder.Lock(ctx))

		// The earlier wait: its attempt is held back until its context has ended.
		holdAcquire.Store(true)
		ctx0, cancel0 := context.WithCancel(ctx)
		defer cancel0()
		earlier := fairStartLock(ctx0, w)
		signalled(t, ctx, acquireHeld, "the earlier wait's attempt held back")
		cancel0()
		if err := fairAwait(t, earlier, waitFor, "the earlier wait"); !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("the earlier wait, its attempt held back: %v, want ErrOutcomeUnknown", err)
		}
		// Its attempt now queues the owner; its withdrawal takes the owner and is held back.
		holdLeave.Store(true)
		letAcquire()
		signalled(t, ctx, leaveHeld, "the earlier wait's withdrawal held back")
		fairAwaitQueue(t, admin, name, w.Owner())

		ctx1, cancel1 := context.WithCancel(ctx)
		defer cancel1()
		sub := fairSubscribeAll(t, ctx, admin, name)
		next := fairStartLock(ctx1, w) // the owner is busy: it cannot attempt
		must(t, holder.Unlock(ctx))    // wakes the owner's place, the head
		if got := sub.published(t, ctx); !slices.Equal(got, []string{fairWoken(name, w.Owner())}) {
			t.Fatalf("the release published %q, want only \"0\" on the head's channel", got)
		}
		if exists(t, admin, name) {
			t.Fatal("the lock is held after the release: only the head's own attempt may take it")
		}
		cancel1()
		// The Lock returns while the earlier wait's withdrawal still holds the owner: only then
		// is that withdrawal let go.
		if err := fairAwait(t, next, waitFor, "the Lock whose owner is busy"); !errors.Is(err, context.Canceled) {
			t.Fatalf("the Lock: %v, want context.Canceled", err)
		}
		if v, ok := hgetField(t, admin, name, w.Owner()); ok {
			t.Fatalf("the Lock returned context.Canceled while its owner holds the lock in Redis (count %s): "+
				"a hold the caller is not told of", v)
		}
		letLeave()
		fairAwaitQueue(t, admin, name) // the earlier wait's withdrawal took the place
		if ok, err := hc.FairLock(name, Reentrant()).TryLock(ctx); !ok || err != nil {
			t.Fatalf("TryLock of the free lock: %v, %v (queue %v)", ok, err, fairQueue(t, admin, name))
		}
	})
}
