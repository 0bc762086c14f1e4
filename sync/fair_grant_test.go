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

// Tests of the fair lock's grant: a release (force release, leave of a free lock) writes the
// head latchkey waiter's hold with the lease it recorded in {name}:fair_leases and tells it
// its latest attempt's token on its own channel; a Java head (no lease entry) is told "0" and attempts itself.

const fairJavaOwner = "9c345276-aa6e-44c1-b478-bf4b14ba1498:805"

func fairLeasesKey(name string) string { return names.Suffix(name, "fair_leases") }

// fairOwnChannel is the waiter's own channel, redisson_lock__channel:{name}:<owner>.
func fairOwnChannel(l *FairLock) string { return lockChannel(l.Name()) + ":" + l.Owner() }

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

// fairNoLeaseEntry fails if owner has an entry in the lock's lease hash.
func fairNoLeaseEntry(t *testing.T, rdb rueidis.Client, name, owner, when string) {
	t.Helper()
	if v, ok := hgetField(t, rdb, fairLeasesKey(name), owner); ok {
		t.Fatalf("%s: %s still has lease entry %q in %s", when, owner, v, fairLeasesKey(name))
	}
}

// A release grants the lock to the head latchkey waiter in its own script: each waiter in
// turn returns from Lock having made no attempt after the grant, holding the lock once with
// the lease it recorded (each waiter asks for a different one), its place and lease entry
// gone; the waiters behind are not touched.
func TestFairGrantWithoutAttempt(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name = "fair:grant"
		ctx := testCtx(t, 20*time.Second)
		admin := b.Client(t)
		hc, _ := newClient(t, b.Addr, fairSlowRechecks...)
		holder := hc.FairLock(name, Reentrant())
		if err := holder.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		type waiter struct {
			l        *FairLock
			attempts *atomic.Int64
			lease    time.Duration
			started  time.Time // before Lock: its attempts, and the hold they time, came after
			done     <-chan error
		}
		// A waiter re-attempts by itself only a minute apart (fairSlowRechecks), so every
		// attempt counted here is one the protocol made (every 10 s, a loaded run saw one more).
		ws := make([]*waiter, 3)
		var owners []string
		for i := range ws {
			c, _ := newClient(t, b.Addr, fairSlowRechecks...)
			w := &waiter{l: c.FairLock(name, Reentrant()), attempts: fairCountAttempts(c), lease: time.Duration(40+i) * time.Second}
			w.started = time.Now()
			w.done = fairStartLockOpts(ctx, w.l, Lease(w.lease))
			owners = append(owners, w.l.Owner())
			fairAwaitQueue(t, admin, name, owners...)
			fairAwaitSettled(t, w.attempts)
			// The entry is the lease the waiter asks for (docs/redisson-interop.md).
			ms := strconv.FormatInt(w.lease.Milliseconds(), 10)
			if v, ok := hgetField(t, admin, fairLeasesKey(name), w.l.Owner()); !ok || (v != ms && !strings.HasPrefix(v, ms+":")) {
				t.Fatalf("waiter %d: lease entry %q (%v), want %s", i, v, ok, ms)
			}
			ws[i] = w
		}
		before := make([]int64, len(ws))
		for i, w := range ws {
			before[i] = w.attempts.Load()
		}

		// Each grant is made by the release before it, begun at released: the lock's TTL is
		// the lease less the time since at most, and the hold, timed from the waiter's last
		// attempt, ends at its lease after the waiter started at the earliest. (Bounds by the
		// time since, not by a fixed margin: a loaded machine took over 3 s between a grant
		// and the checks.)
		released := time.Now()
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		for i, w := range ws {
			if err := fairAwait(t, w.done, waitFor, "waiter "+strconv.Itoa(i)); err != nil {
				t.Fatalf("waiter %d after the release before it: %v", i, err)
			}
			if n := w.attempts.Load(); n != before[i] {
				t.Errorf("waiter %d made %d attempts, %d before the grant: a granted waiter must make none", i, n, before[i])
			}
			for j := i + 1; j < len(ws); j++ {
				fairPending(t, ws[j].done, "waiter "+strconv.Itoa(j))
				if n := ws[j].attempts.Load(); n != before[j] {
					t.Errorf("waiter %d, still queued, made %d attempts, %d before: a grant wakes only the head", j, n, before[j])
				}
			}
			fields, err := admin.Do(ctx, admin.B().Hgetall().Key(name).Build()).AsStrMap()
			if err != nil || len(fields) != 1 || fields[w.l.Owner()] != "1" {
				t.Fatalf("waiter %d granted: lock hash %v (%v), want {%s: 1}", i, fields, err, w.l.Owner())
			}
			if ttl := pttl(t, admin, name); ttl > w.lease.Milliseconds() || ttl < (w.lease-time.Since(released)).Milliseconds() {
				t.Fatalf("waiter %d granted: PTTL %d, want its lease %d less the %v since the release began at most",
					i, ttl, w.lease.Milliseconds(), time.Since(released))
			}
			fairNoLeaseEntry(t, admin, name, w.l.Owner(), "granted")
			if _, ok := fairDeadline(t, admin, name, w.l.Owner()); ok {
				t.Fatalf("waiter %d granted: its deadline is still in the zset", i)
			}
			if q := fairQueue(t, admin, name); !slices.Equal(q, owners[i+1:]) {
				t.Fatalf("waiter %d granted: queue %v, want %v", i, q, owners[i+1:])
			}
			if !w.l.Valid() {
				t.Fatalf("waiter %d: granted hold not valid", i)
			}
			if d, ok := w.l.Deadline(); !ok || time.Until(d) > w.lease || d.Before(w.started.Add(w.lease)) {
				t.Fatalf("waiter %d: hold deadline in %v (%v), want its lease %v at most, and at least its lease after it started (%v ago)",
					i, time.Until(d), ok, w.lease, time.Since(w.started))
			}
			if n, err := w.l.HoldCount(ctx); n != 1 || err != nil {
				t.Fatalf("waiter %d: HoldCount %d, %v; want 1", i, n, err)
			}
			released = time.Now()
			if err := w.l.Unlock(ctx); err != nil {
				t.Fatalf("waiter %d: Unlock: %v", i, err)
			}
		}
		fairNoPlaces(t, admin, name, "after every waiter")
		for _, key := range []string{name, fairLeasesKey(name)} {
			if exists(t, admin, key) {
				t.Fatalf("%s alive after the last unlock", key)
			}
		}
	})
}

// A Java head waiter (no lease entry) is told "0", Redisson's message, and keeps its
// place; the latchkey waiter behind it is untouched, and gets the lock in its turn when the
// Java thread has taken and released it (Redisson's scripts, written raw).
func TestFairGrantJavaHeadGetsZero(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name = "fair:java-head"
		ctx := testCtx(t, 20*time.Second)
		admin := b.Client(t)
		// Re-checks a minute apart: a result within waitFor is the Java release's doing.
		hc, _ := newClient(t, b.Addr, fairSlowRechecks...)
		wc, _ := newClient(t, b.Addr, fairSlowRechecks...)
		wn := fairCountAttempts(wc)
		holder, w := hc.FairLock(name, Reentrant()), wc.FairLock(name, Reentrant())
		if err := holder.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		fairRawPlace(t, admin, name, fairJavaOwner, time.Now().Add(10*time.Minute).UnixMilli())
		javaSub := rawSubscribe(t, ctx, admin, lockChannel(name)+":"+fairJavaOwner)
		ownSub := rawSubscribe(t, ctx, admin, fairOwnChannel(w))
		done := fairStartLock(ctx, w)
		fairAwaitQueue(t, admin, name, fairJavaOwner, w.Owner())
		fairAwaitSettled(t, wn)
		before := wn.Load()

		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if got := javaSub.published(t, ctx); !slices.Equal(got, []string{"0"}) {
			t.Fatalf("the Java head's channel got %q, want [\"0\"]", got)
		}
		ownSub.quiet(t, ctx, "the latchkey waiter's channel, behind a Java head")
		if exists(t, admin, name) {
			t.Fatal("the lock is held after a release to a Java head: nothing may be granted to it")
		}
		if q := fairQueue(t, admin, name); !slices.Equal(q, []string{fairJavaOwner, w.Owner()}) {
			t.Fatalf("queue %v, want the Java waiter still at the head, then ours", q)
		}
		fairPending(t, done, "the latchkey waiter behind the Java head")
		if n := wn.Load(); n != before {
			t.Fatalf("the latchkey waiter behind made %d attempts, %d before the release", n, before)
		}

		// The Java waiter attempts and takes the free lock at the head, as Redisson's acquire does...
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed { return b.Lpop().Key(fairQueueKey(name)).Build() })
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed {
			return b.Zrem().Key(fairTimeoutKey(name)).Member(fairJavaOwner).Build()
		})
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed {
			return b.Hset().Key(name).FieldValue().FieldValue(fairJavaOwner, "1").Build()
		})
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed { return b.Pexpire().Key(name).Milliseconds(180000).Build() })
		// ...and releases it: DEL, "0" on the next head's channel.
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed { return b.Del().Key(name).Build() })
		released := time.Now()
		if n := mustInt(t, admin.Do(ctx, admin.B().Publish().Channel(fairOwnChannel(w)).Message("0").Build())); n != 2 {
			t.Fatalf("the Java release reached %d subscribers, want our waiter's Client and the test's", n)
		}
		if err := fairAwait(t, done, waitFor, "our waiter after the Java release"); err != nil {
			t.Fatalf("our waiter after the Java waiter's turn: %v", err)
		}
		if d := time.Since(released); d > waitFor {
			t.Fatalf("our waiter got the lock %v after the Java release (its own re-check is a minute away)", d)
		}
		if n := wn.Load(); n != before+1 {
			t.Errorf("our waiter made %d attempts after the Java release, want 1: a 0 means attempt", n-before)
		}
		if v, ok := hgetField(t, admin, name, w.Owner()); !ok || v != "1" {
			t.Fatalf("HGET %s %s = %q (%v), want 1", name, w.Owner(), v, ok)
		}
		fairNoPlaces(t, admin, name, "after our waiter took the lock")
		fairNoLeaseEntry(t, admin, name, w.Owner(), "after our waiter took the lock")
		if err := w.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A grant the waiter never learned of (its message lost) is found by the leave its ended
// wait runs, and taken: the call succeeds. Its release then grants the waiter behind in turn.
func TestFairGrantUnlearnedTakenByLeave(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name = "fair:unlearned"
		ctx := testCtx(t, 20*time.Second)
		admin := b.Client(t)
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed {
			return b.Hset().Key(name).FieldValue().FieldValue(fairJavaOwner, "1").Build()
		})
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed { return b.Pexpire().Key(name).Milliseconds(180000).Build() })
		// withLeaveGrace: the leave's reply, however slow, decides the wait
		wc, _ := newClient(t, b.Addr, append(slices.Clip(fairSlowRechecks), withLeaveGrace(time.Minute))...)
		nc, _ := newClient(t, b.Addr, fairSlowRechecks...)
		wn, nn := fairCountAttempts(wc), fairCountAttempts(nc)
		w, next := wc.FairLock(name, Reentrant()), nc.FairLock(name, Reentrant())
		wCtx, cancelW := context.WithCancel(ctx)
		defer cancelW()
		wDone := fairStartLock(wCtx, w)
		fairAwaitQueue(t, admin, name, w.Owner())
		fairAwaitSettled(t, wn)
		nextDone := fairStartLock(ctx, next)
		fairAwaitQueue(t, admin, name, w.Owner(), next.Owner())
		fairAwaitSettled(t, nn)
		nextBefore := nn.Load()

		// The Java holder releases, and the release grants w as hand_on does — but its
		// message never arrives.
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed { return b.Del().Key(name).Build() })
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed { return b.Lpop().Key(fairQueueKey(name)).Build() })
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed {
			return b.Zrem().Key(fairTimeoutKey(name)).Member(w.Owner()).Build()
		})
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed {
			return b.Hdel().Key(fairLeasesKey(name)).Field(w.Owner()).Build()
		})
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed {
			return b.Hset().Key(name).FieldValue().FieldValue(w.Owner(), "1").Build()
		})
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed { return b.Pexpire().Key(name).Milliseconds(30000).Build() })
		fairPending(t, wDone, "the waiter whose grant message was lost")

		// Its wait ends: the leave finds the hold and the wait takes it, as a heir handed the
		// lock as its context ends does (a leave that released it could, run late, release a
		// hold taken since). It then releases it as usual, to the waiter behind.
		cancelW()
		if err := fairAwait(t, wDone, waitFor, "the cancelled waiter"); err != nil {
			t.Fatalf("Lock of the waiter granted without a message, ctx cancelled: %v, want nil (the grant taken)", err)
		}
		if !w.Valid() {
			t.Fatal("the waiter took the grant but its hold is not valid")
		}
		if n, err := w.HoldCount(ctx); n != 1 || err != nil {
			t.Fatalf("HoldCount %d, %v; want 1", n, err)
		}
		must(t, w.Unlock(ctx))
		if err := fairAwait(t, nextDone, waitFor, "the waiter behind"); err != nil {
			t.Fatalf("the waiter behind, after the leave freed the lock: %v", err)
		}
		if n := nn.Load(); n != nextBefore {
			t.Errorf("the waiter behind made %d attempts after the leave: it must be granted the lock", n-nextBefore)
		}
		if v, ok := hgetField(t, admin, name, next.Owner()); !ok || v != "1" {
			t.Fatalf("HGET %s %s = %q (%v), want 1", name, next.Owner(), v, ok)
		}
		fairNoPlaces(t, admin, name, "after the leave and the grant")
		if err := next.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if exists(t, admin, name) || exists(t, admin, fairLeasesKey(name)) {
			t.Fatal("lock or lease hash alive at the end")
		}
	})
}

// Two latchkey waiters crash (their Clients' connections go dark: no more attempts, no
// leave, no unlock) while queued ahead of a live one; the holder's release grants the lock
// to the first dead one, which never takes it. The live waiter still gets the lock — once the
// dead one's lease has run out and the second dead place has lapsed — and nothing is left in
// Redis.
func TestFairGrantCrashedWaitersDoNotStrand(t *testing.T) {
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
		deadCtx := testCtx(t, 60*time.Second)
		var proxies []*redistest.Proxy
		var dead []*FairLock
		var subs []*rawSub
		for range 2 {
			p := redistest.NewProxy(t, b.Addr)
			c, _ := newClient(t, p.Addr(), WithFairLockWaitTimeout(wait))
			l := c.FairLock(name, Reentrant())
			fairStartLockOpts(deadCtx, l, Lease(wait)) // never returns a result we read
			dead = append(dead, l)
			proxies = append(proxies, p)
			fairAwaitQueue(t, admin, name, fairOwners(dead)...)
			subs = append(subs, rawSubscribe(t, ctx, admin, fairOwnChannel(l)))
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
		// the release must run before, so that it finds them queued ahead.
		lapse := int64(1<<62 - 1)
		for _, l := range dead {
			d, ok := fairDeadline(t, admin, name, l.Owner())
			if !ok {
				t.Fatalf("dead waiter %s has no deadline right after dying", l.Owner())
			}
			lapse = min(lapse, d)
		}
		if q := fairQueue(t, admin, name); !slices.Equal(q, want) {
			t.Fatalf("queue %v right before the release, want %v", q, want)
		}
		// The grant's message is the token of the first dead waiter's latest attempt, which its
		// lease entry carries.
		entry, _ := hgetField(t, admin, names.Suffix(name, "fair_leases"), dead[0].Owner())
		_, token, _ := strings.Cut(entry, ":")
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		unlocked := time.Now()
		if unlocked.UnixMilli() >= lapse {
			t.Fatalf("the release ended %d ms after the first dead place lapsed: the test did not produce dead waiters queued ahead", unlocked.UnixMilli()-lapse+1)
		}
		if got := subs[0].published(t, ctx); !slices.Equal(got, []string{token}) || token == "" {
			t.Fatalf("the first dead waiter's channel got %q, want [%q]: the release must grant it the lock", got, token)
		}
		subs[1].quiet(t, ctx, "the second dead waiter's channel")

		if err := fairAwait(t, liveDone, waitFor, "the live waiter behind two dead ones"); err != nil {
			t.Fatalf("the live waiter behind two crashed waiters: %v", err)
		}
		t.Logf("%s: the live waiter got the lock %v after the release", b.Name, time.Since(unlocked))
		if v, ok := hgetField(t, admin, name, live.Owner()); !ok || v != "1" {
			t.Fatalf("HGET %s %s = %q (%v), want 1", name, live.Owner(), v, ok)
		}
		fairNoPlaces(t, admin, name, "after the live waiter took the lock")
		if err := live.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// The live Clients' unlock latches go with them. The dead Clients leave nothing: they
		// never released (no latch), the first one's place and lease entry went with the grant
		// and its hold lapsed with its lease (one wait), the second one's were dropped as stale by
		// the live waiter's attempt. (Without a live waiter behind, that second place would
		// stay in the queue and the zset, which have no TTL, until the next script on the lock;
		// only the lease hash lapses, three waits after the last attempt.)
		lc.Close()
		hc.Close()
		eventually(t, waitFor, "nothing left in Redis", func() bool { return dbsize(t, admin) == 0 })
	})
}

func fairOwners(ls []*FairLock) []string {
	var s []string
	for _, l := range ls {
		s = append(s, l.Owner())
	}
	return s
}

// Each attempt of a queued latchkey waiter sets its deadline to now + wait × (1 + the Java
// waiters ahead of it).
func TestFairGrantDeadlineFormula(t *testing.T) {
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

// A lease entry left behind by a Java script (Redisson's stale-drop of a dead latchkey
// waiter) can hide a Java waiter from a latchkey waiter's count of Java waiters ahead (a
// documented cost of counting them only when lease entries are fewer than places): the
// waiter's deadline is then one wait short, and the Java waiter's grant — which moves every
// deadline one wait earlier — makes it stale at the head. It must lose no more than its
// place: it queues again and gets the lock.
func TestFairGrantHiddenJavaWaiterCostsOnlyThePlace(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// Places outlive the steps between them on a loaded machine (a 300 ms one lapsed, and
		// took the dead waiter's lease entry with it).
		const name, wait = "fair:deadline-ghost", 2 * time.Second
		ctx := testCtx(t, 60*time.Second)
		admin := b.Client(t)
		hc, _ := newClient(t, b.Addr)
		holder := hc.FairLock(name, Reentrant())
		if err := holder.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		// A latchkey waiter dies queued, and a Java script removes its place as Redisson's
		// stale-drop does (LPOP / ZREM): its lease entry stays.
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
		if _, ok := hgetField(t, admin, fairLeasesKey(name), ghost.Owner()); !ok {
			t.Fatal("the dead waiter's lease entry is gone: the test assumes Redisson's scripts leave it")
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
// once: the first wait makes two attempts (queueing, and again at the subscription's
// confirmation), every later one one (queueing), the grant none. Real Redis only: miniredis
// keeps no command statistics.
//
// The linger is a second of real time. A wait that may have come later than that after the
// one before (the steps between them, on a loaded machine, took longer) may subscribe again,
// as it should; it is not counted, and the handle waits on until ten waits came within the
// linger, each of which must subscribe nothing.
func TestFairGrantLoopingWaiterSubscribesOnce(t *testing.T) {
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
		want := int64(1)
		if i == 0 {
			want = 2 // queued, then confirmed
		}
		eventually(t, waitFor, "the waiter's attempts", func() bool { return wn.Load()-before >= want })
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

// A grant's message, held back, reaching a later wait of the same handle is not taken for a
// grant of that wait (Lock would return nil while another handle holds the lock): a grant
// carries the token of the wait it answers. The proxy holds the message back to make the
// order certain.
func TestFairGrantStaleMessageIsNotAGrant(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name = "fair:stale-grant"
		ctx := testCtx(t, 20*time.Second)
		admin := b.Client(t)
		gate := newGateProxy(t, b.Addr)
		// withLeaveGrace: the leave's reply, however slow, decides the wait
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
		if err := holder.Unlock(ctx); err != nil { // grants w; its "2" is held back
			t.Fatal(err)
		}
		eventually(t, waitFor, "the grant message held back", gate.holding)
		if v, ok := hgetField(t, admin, name, w.Owner()); !ok || v != "1" {
			t.Fatalf("HGET %s %s = %q (%v) after the release, want the grant", name, w.Owner(), v, ok)
		}
		// The wait ends: its leave finds the grant, and the wait takes it (a leave never
		// releases a hold). The handle releases it at once.
		cancel1()
		if err := fairAwait(t, first, waitFor, "the cancelled wait"); err != nil {
			t.Fatalf("the first wait: %v, want nil (the grant taken as the wait ended)", err)
		}
		must(t, w.Unlock(ctx))
		if err := other.Lock(ctx); err != nil { // another handle takes the free lock
			t.Fatal(err)
		}
		second := fairStartLock(ctx, w)
		fairAwaitQueue(t, admin, name, w.Owner())
		gate.open() // the first wait's "2" arrives now

		select {
		case err := <-second:
			if err == nil {
				_, inRedis := hgetField(t, admin, name, w.Owner())
				t.Fatalf("two holders: the second wait took the first wait's grant message (w.Valid %v, w in the lock hash %v) while %s holds the lock",
					w.Valid(), inRedis, other.Owner())
			}
			t.Fatalf("the second wait: %v", err)
		case <-time.After(time.Second): // bounded: showing that it does NOT return
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

// The test above with no proxy: a wait cancelled as the release grants it the lock, and the
// handle's next Lock at once while another handle holds the lock. The grant's message
// reaches the Client's subscriber connection a little after the command connection's
// replies; on a loopback redis-server it lands in the next wait, which returns nil, within
// a few dozen rounds. (miniredis delivers it before its reply: that half shows nothing.) Up
// to 500 rounds or 3 s.
func TestFairGrantStaleMessageUnderRaces(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name, maxRounds = "fair:stale-race", 500
		ctx := testCtx(t, 20*time.Second)
		admin := b.Client(t)
		// withLeaveGrace: a cancelled wait returns once its leave has run, however slow
		wc, _ := newClient(t, b.Addr, withLeaveGrace(time.Minute))
		hc, _ := newClient(t, b.Addr)
		w, holder := wc.FairLock(name, Reentrant()), hc.FairLock(name, Reentrant())
		cancelled, rounds := 0, 0
		for end := time.Now().Add(time.Second); rounds < maxRounds && time.Now().Before(end); rounds++ {
			i := rounds
			if err := holder.Lock(ctx); err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
			ctx1, cancel1 := context.WithCancel(ctx)
			first := fairStartLock(ctx1, w)
			fairAwaitQueue(t, admin, name, w.Owner())
			go cancel1()
			if err := holder.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			err := <-first
			cancel1()
			if err == nil { // the grant won
				if err := w.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("round %d: the first wait: %v", i, err)
			}
			cancelled++
			// The lock is free — unless the wait's attempt was on its way as it ended and got no
			// reply within its grace (a loaded machine): its outcome is unknown, and a hold it
			// took is given back in the background, which the holder then waits for.
			var wait time.Duration
			if errors.Is(err, ErrOutcomeUnknown) {
				wait = waitFor
			}
			if ok, terr := holder.TryLock(ctx, WaitTime(wait)); !ok || terr != nil {
				t.Fatalf("round %d: TryLock of the free lock (the first wait ended with %v): %v, %v", i, err, ok, terr)
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
			if err := holder.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("%s: %d rounds, %d first waits cancelled, no stale grant taken", b.Name, rounds, cancelled)
	})
}

// Two goroutines sharing a handle wait on its one place and its one channel. A release
// grants the handle; one goroutine's wait ends (its context). The leave takes the grant for
// the handle (were it to release the grant and hand the lock on, the other goroutine could
// take the grant's message and hold the lock beside the waiter it went to), the other
// goroutine re-enters, and the waiter behind waits for the handle's releases. The proxy
// holds the message back to make the order certain.
func TestFairGrantSharedHandleLeaveTakesGrant(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name = "fair:shared-handle"
		ctx := testCtx(t, 20*time.Second)
		admin := b.Client(t)
		gate := newGateProxy(t, b.Addr)
		// withLeaveGrace: the leave's reply, however slow, decides the wait
		wc, _ := newClient(t, gate.addr(), append(slices.Clip(fairSlowRechecks), withLeaveGrace(time.Minute))...)
		wn := fairCountAttempts(wc)
		hc, _ := newClient(t, b.Addr, fairSlowRechecks...)
		xc, _ := newClient(t, b.Addr, fairSlowRechecks...)
		xn := fairCountAttempts(xc)
		w, holder, x := wc.FairLock(name, Reentrant()), hc.FairLock(name, Reentrant()), xc.FairLock(name, Reentrant())
		if err := holder.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		g1 := fairStartLock(ctx, w)
		fairAwaitQueue(t, admin, name, w.Owner())
		fairAwaitSettled(t, wn)
		ctx2, cancel2 := context.WithCancel(ctx)
		defer cancel2()
		g2 := fairStartLock(ctx2, w)
		eventually(t, waitFor, "the second goroutine waiting", func() bool {
			return wc.mux.Waiters(fairOwnChannel(w)) == 2 && wn.Load() >= 3
		})
		xDone := fairStartLock(ctx, x)
		fairAwaitQueue(t, admin, name, w.Owner(), x.Owner())
		fairAwaitSettled(t, xn)

		gate.arm([]byte(fairOwnChannel(w)))
		if err := holder.Unlock(ctx); err != nil { // grants w
			t.Fatal(err)
		}
		eventually(t, waitFor, "the grant message held back", gate.holding)
		// One goroutine's wait ends: its leave finds the handle's grant and takes it. The other
		// goroutine shares the handle, so it shares the hold: when the grant message arrives
		// it takes no second grant, and its attempt re-enters. x waits throughout.
		cancel2()
		if err := fairAwait(t, g2, waitFor, "the cancelled goroutine"); err != nil {
			t.Fatalf("the cancelled goroutine: %v, want nil (the grant taken as its wait ended)", err)
		}
		gate.open()
		if err := fairAwait(t, g1, waitFor, "the other goroutine"); err != nil {
			t.Fatalf("the other goroutine: %v", err)
		}
		if n, err := w.HoldCount(ctx); n != 2 || err != nil {
			t.Fatalf("HoldCount %d, %v; want 2: the grant, and the other goroutine's re-entry", n, err)
		}
		fairPending(t, xDone, "the waiter behind, while the handle holds the lock")
		must(t, w.Unlock(ctx))
		must(t, w.Unlock(ctx))
		if err := fairAwait(t, xDone, waitFor, "the waiter behind"); err != nil {
			t.Fatalf("the waiter behind, after the handle's releases: %v", err)
		}
		must(t, x.Unlock(ctx))
	})
}

// The leave script drops stale heads before it hands a free lock on, as every other fair
// script does. Were it not to, a dead latchkey waiter whose place has lapsed but which no
// script has dropped yet would be granted the lock, and hold it for its whole lease — past
// the "one wait" a crashed waiter may cost — while the live waiters behind wait. Here the dead waiter's place is
// written as a latchkey waiter's attempt leaves it, and its lapse by moving its deadline
// into the past (standing for the time in which nobody attempted: the lock's holder died
// too, and the waiter behind leaves before its next re-check).
func TestFairGrantLeaveSkipsLapsedHead(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name, deadOwner = "fair:leave-lapsed", "0b0e3f5e-2d5e-4f57-9d0e-6f6a1c2e9a11:7"
		ctx := testCtx(t, 20*time.Second)
		admin := b.Client(t)
		fairRawPlace(t, admin, name, deadOwner, time.Now().Add(time.Minute).UnixMilli()) // lapsed below, not before
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed {
			return b.Hset().Key(fairLeasesKey(name)).FieldValue().FieldValue(deadOwner, "30000").Build()
		})
		// Re-checks a minute apart: only the leave can hand x the lock within waitFor.
		wc, _ := newClient(t, b.Addr, fairSlowRechecks...)
		xc, _ := newClient(t, b.Addr, fairSlowRechecks...)
		wn, xn := fairCountAttempts(wc), fairCountAttempts(xc)
		w, x := wc.FairLock(name, Reentrant()), xc.FairLock(name, Reentrant())
		wCtx, cancelW := context.WithCancel(ctx)
		defer cancelW()
		wDone := fairStartLock(wCtx, w)
		fairAwaitQueue(t, admin, name, deadOwner, w.Owner())
		fairAwaitSettled(t, wn)
		xDone := fairStartLock(ctx, x)
		fairAwaitQueue(t, admin, name, deadOwner, w.Owner(), x.Owner())
		fairAwaitSettled(t, xn)
		// The dead waiter's place lapses.
		fairRaw(t, admin, func(b rueidis.Builder) rueidis.Completed {
			return b.Zadd().Key(fairTimeoutKey(name)).ScoreMember().ScoreMember(float64(time.Now().Add(-time.Second).UnixMilli()), deadOwner).Build()
		})
		cancelW()
		if err := fairAwait(t, wDone, waitFor, "the leaving waiter"); !errors.Is(err, context.Canceled) {
			t.Fatalf("the leaving waiter: %v, want context.Canceled", err)
		}
		if v, ok := hgetField(t, admin, name, deadOwner); ok {
			t.Fatalf("the leave granted the lock to a waiter whose place had lapsed (HGET = %q, PTTL %d ms): the live waiter behind waits out that lease",
				v, pttl(t, admin, name))
		}
		if err := fairAwait(t, xDone, waitFor, "the live waiter behind"); err != nil {
			t.Fatal(err)
		}
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

// A grant counts only for the attempt it answered: a waiter granted the lock while it was
// paused, whose grant lapsed and went to another meanwhile, attempts again as it resumes
// (re-queued) before it reads the old grant's message; that message must not be taken for a
// grant of the new attempt (Lock returned nil while another held the lock). The proxy holds
// the message back, and a wake-up with no message makes the attempt come first.
func TestFairGrantOfAnEarlierAttemptIsStale(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		// The grant's lease outlasts a slow acquisition on a loaded machine (1 s ran out before
		// the last grant's acquire returned under two CPU hogs); w re-checks by itself only a
		// minute apart, so that it attempts only when the test wakes it.
		const name, lease = "fair:stale-attempt", 5 * time.Second
		ctx := testCtx(t, 20*time.Second)
		admin := b.Client(t)
		gate := newGateProxy(t, b.Addr)
		wc, _ := newClient(t, gate.addr(), fairSlowRechecks...)
		wn := fairCountAttempts(wc)
		hc, _ := newClient(t, b.Addr, fairSlowRechecks...)
		w, holder, other := wc.FairLock(name, Reentrant()), hc.FairLock(name), hc.FairLock(name)
		must(t, holder.Lock(ctx))
		waited := fairStartLockOpts(ctx, w, Lease(lease))
		fairAwaitQueue(t, admin, name, w.Owner())
		fairAwaitSettled(t, wn)

		gate.arm([]byte(fairOwnChannel(w)))
		must(t, holder.Unlock(ctx)) // grants w, for a lease; the message is held back
		eventually(t, waitFor, "the grant message held back", gate.holding)
		eventually(t, lease+waitFor, "the grant lapsed", func() bool { return !exists(t, admin, name) })
		must(t, other.Lock(ctx)) // the lapsed grant's lock goes to another
		attempts := wn.Load()
		wc.mux.WakeAll() // w resumes: it attempts, and is queued again behind the holder
		fairAwaitQueue(t, admin, name, w.Owner())
		eventually(t, waitFor, "w's attempt", func() bool { return wn.Load() > attempts })
		gate.open() // the old grant's message arrives now

		select {
		case err := <-waited:
			t.Fatalf("w's Lock returned %v (Valid %v) while %s holds the lock: it took a stale grant", err, w.Valid(), other.Owner())
		case <-time.After(time.Second): // bounded: showing that it does NOT return
		}
		must(t, other.Unlock(ctx)) // now w is granted the lock for real
		if err := fairAwait(t, waited, waitFor, "w after the holder's release"); err != nil {
			t.Fatal(err)
		}
		must(t, w.Unlock(ctx))
	})
}

// A goroutine of a shared handle adopts the grant (TryLock), releases it (the lock goes to x);
// the held-back grant message then reaches the still-waiting goroutine, whose token it is. It
// must not take it: the owner made requests since the attempt the grant answered.
func TestFairGrantAdoptedBySiblingIsNotTakenAgain(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name = "fair:grant-adopted-by-sibling"
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

// A fair Lock whose context ends while its handle's owner is still busy with an earlier
// wait's clean-up must not return while the place that wait left in the queue holds a grant
// of its owner's: a hold the caller is not told of. The earlier wait's attempt got no reply
// in time (ErrOutcomeUnknown); its late reply queued the owner, and its withdrawal, which
// holds the owner, is held back before it is sent. The next Lock cannot attempt (the owner
// is busy); a release grants the place the lock, and the Lock's context ends. It returns
// nil holding the lock, or an error with the grant given back — not an error while the
// grant is still there.
func TestFairLockEndedWhileOwnerBusyLeavesNoGrant(t *testing.T) {
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
		// withLeaveGrace: a wait whose context ended returns once its leave has run
		wc, err := New(rdb, withLeaveGrace(time.Minute))
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
		<-acquireHeld
		cancel0()
		if err := fairAwait(t, earlier, waitFor, "the earlier wait"); !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("the earlier wait, its attempt held back: %v, want ErrOutcomeUnknown", err)
		}
		// Its attempt now queues the owner; its withdrawal takes the owner and is held back.
		holdLeave.Store(true)
		letAcquire()
		<-leaveHeld
		fairAwaitQueue(t, admin, name, w.Owner())

		ctx1, cancel1 := context.WithCancel(ctx)
		defer cancel1()
		next := fairStartLock(ctx1, w) // the owner is busy: it cannot attempt
		must(t, holder.Unlock(ctx))    // grants the owner's place the lock
		if v, ok := hgetField(t, admin, name, w.Owner()); !ok || v != "1" {
			t.Fatalf("HGET %s %s = %q (%v) after the release, want the grant", name, w.Owner(), v, ok)
		}
		cancel1()
		// The Lock returns at once, or withdraws (a clean-up beside the earlier wait's and the
		// Lock itself, both under way); only then is the earlier wait's withdrawal let go.
		eventually(t, waitFor, "the Lock returned or withdrawing", func() bool {
			return len(next) > 0 || len(wc.underway.all()) > 2
		})
		var nextErr error
		select {
		case nextErr = <-next:
		default:
			letLeave()
			nextErr = fairAwait(t, next, waitFor, "the Lock after the earlier withdrawal")
		}
		if nextErr == nil {
			must(t, w.Unlock(ctx)) // the grant taken: the caller holds it
		} else {
			if !errors.Is(nextErr, context.Canceled) {
				t.Fatalf("the Lock: %v, want context.Canceled", nextErr)
			}
			if v, ok := hgetField(t, admin, name, w.Owner()); ok {
				t.Fatalf("the Lock returned %v while its owner holds the lock in Redis (count %s): "+
					"a grant the caller is not told of", nextErr, v)
			}
		}
		letLeave()
		if ok, err := hc.FairLock(name, Reentrant()).TryLock(ctx); !ok || err != nil {
			t.Fatalf("TryLock of the free lock: %v, %v (queue %v)", ok, err, fairQueue(t, admin, name))
		}
	})
}
