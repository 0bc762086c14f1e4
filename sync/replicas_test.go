package sync

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/names"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/rueidis"
)

// replicaBehindProxy starts a real Redis master and a replica of it that reaches it through
// a fault proxy, the link: blackholed, it cuts the replica off.
func replicaBehindProxy(t *testing.T) (*redistest.Backend, *redistest.Proxy, *redistest.Replica) {
	t.Helper()
	master := redistest.Redis(t)
	link := redistest.NewProxy(t, master.Addr)
	return master, link, redistest.StartReplica(t, &redistest.Backend{Name: redistest.NameRedis, Addr: link.Addr()})
}

// keysBut lists the server's keys, unlock latches aside, less those named.
func keysBut(t *testing.T, rdb rueidis.Client, but ...string) []string {
	t.Helper()
	keys, err := rdb.Do(context.Background(), rdb.B().Keys().Pattern("*").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	keys = slices.DeleteFunc(keys, func(k string) bool {
		return strings.HasPrefix(k, unlockLatchPrefix) || slices.Contains(but, k)
	})
	slices.Sort(keys)
	return keys
}

// checkUnconfirmed checks, on a Client whose replicas do not confirm (fewer than
// WithSyncReplicas asks), that every acquisition fails with ErrNotReplicated and leaves
// nothing held, and that every other change stands on the master and says it was not
// confirmed.
func checkUnconfirmed(t *testing.T, ctx context.Context, c *Client, rdb rueidis.Client) {
	t.Helper()
	nr := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrNotReplicated) {
			t.Fatalf("%s: %v, want ErrNotReplicated", what, err)
		}
	}
	nr("Lock", c.Lock("plain").Lock(ctx))
	ok, err := c.FairLock("fair").TryLock(ctx, WaitTime(time.Second))
	nr("FairLock.TryLock", err)
	if ok {
		t.Fatal("FairLock.TryLock took an unconfirmed lock")
	}
	_, _, err = c.FencedLock("fenced").TryLockToken(ctx)
	nr("FencedLock.TryLockToken", err)
	rw := c.RWLock("rw")
	nr("RWLock.RLock", rw.RLock(ctx))
	nr("RWLock.Lock", rw.Lock(ctx))

	sem := c.Semaphore("sem")
	ok, err = sem.TrySetPermits(ctx, 3)
	nr("Semaphore.TrySetPermits", err)
	if !ok {
		t.Fatal("Semaphore.TrySetPermits reported the permits not set, though they stand")
	}
	nr("Semaphore.Acquire", sem.Acquire(ctx, 2))
	if n, err := sem.AvailablePermits(ctx); n != 3 || err != nil {
		t.Fatalf("Semaphore.AvailablePermits after an unconfirmed acquire: %d, %v; want 3", n, err)
	}
	perm := c.PermitSemaphore("perm")
	_, err = perm.TrySetPermits(ctx, 3)
	nr("PermitSemaphore.TrySetPermits", err)
	p, err := perm.Acquire(ctx, 2)
	nr("PermitSemaphore.Acquire", err)
	if p != nil {
		t.Fatal("PermitSemaphore.Acquire returned unconfirmed permits")
	}
	if n, err := perm.AcquiredPermits(ctx); n != 0 || err != nil {
		t.Fatalf("PermitSemaphore.AcquiredPermits after an unconfirmed acquire: %d, %v; want 0", n, err)
	}
	latch := c.CountDownLatch("latch")
	_, err = latch.TrySetCount(ctx, 2)
	nr("CountDownLatch.TrySetCount", err)
	nr("CountDownLatch.CountDown", latch.CountDown(ctx))
	if n, err := latch.Count(ctx); n != 1 || err != nil {
		t.Fatalf("CountDownLatch.Count after an unconfirmed count-down: %d, %v; want 1 (it stands)", n, err)
	}
	// What stands: the counters' keys, and the fenced lock's token counter, which only grows.
	if left := keysBut(t, rdb, "sem", "perm", "latch", "sem-held", "redisson_lock_token:{fenced}"); len(left) > 0 {
		t.Fatalf("keys left by unconfirmed acquisitions: %q", left)
	}
}

// Without replicas to confirm them, every acquisition fails and leaves nothing held: on
// miniredis, whose WAIT always counts 0, and on a Redis without replicas.
func TestSyncReplicasNoReplica(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		c, rdb := newClient(t, b.Addr, WithSyncReplicas(1, 20*time.Millisecond))
		checkUnconfirmed(t, ctx, c, rdb)
	})
}

func TestSyncReplicasBadInput(t *testing.T) {
	t.Parallel()
	b := redistest.Miniredis(t)
	rdb := redistest.ClientFor(t, b.Addr)
	for _, tc := range []struct {
		n       int
		timeout time.Duration
		names   string
	}{
		{-1, time.Second, "replicas"},
		{1, 0, "replica timeout"},
		{1, 999 * time.Microsecond, "replica timeout"},
		{0, -time.Second, "replica timeout"},
	} {
		_, err := New(rdb, WithSyncReplicas(tc.n, tc.timeout))
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("WithSyncReplicas(%d, %v): %v, want ErrInvalidArgument naming %q", tc.n, tc.timeout, err, tc.names)
		}
	}
	// 0 replicas waits for none: the default.
	c, err := New(rdb, WithSyncReplicas(0, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testCtx(t, 5*time.Second)
	l := c.Lock("zero")
	must(t, l.Lock(ctx))
	must(t, l.Unlock(ctx))
}

// With a replica confirming, every primitive works and the replica has each hold by the time
// its acquisition returns; once the replica is stopped, acquisitions fail and are given back,
// a release stands unconfirmed, and a lease kept by the watchdog is lost when its renewals
// go unconfirmed.
func TestSyncReplicasReplicaStopped(t *testing.T) {
	t.Parallel()
	master := redistest.Redis(t)
	replica := redistest.StartReplica(t, master)
	ctx := testCtx(t, 60*time.Second)
	// A healthy replica confirms within a second on a loaded machine (200 ms was too short);
	// the lease outlives the waits for it.
	c, rdb := newClient(t, master.Addr, WithSyncReplicas(1, time.Second), WithWatchdogTimeout(3*time.Second))
	rep := redistest.ClientFor(t, replica.Addr)
	onReplica := func(name, field string) bool {
		t.Helper()
		n, err := rep.Do(ctx, rep.B().Hexists().Key(name).Field(field).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}

	held := c.Lock("held", Reentrant())
	must(t, held.Lock(ctx, Lease(time.Minute)))
	if !onReplica("held", held.Owner()) {
		t.Fatal("Lock returned before the replica had the hold")
	}
	fair := c.FairLock("fair-held", Reentrant())
	must(t, fair.Lock(ctx))
	if !onReplica("fair-held", fair.Owner()) {
		t.Fatal("FairLock.Lock returned before the replica had the hold")
	}
	// A fair lock's waiter, woken by the release, takes the lock by its own attempt, which
	// WAIT confirms like any other.
	c2, _ := newClient(t, master.Addr, WithSyncReplicas(1, time.Second))
	next := c2.FairLock("fair-held")
	took := make(chan error, 1)
	go func() { took <- next.Lock(ctx) }()
	eventually(t, waitFor, "the second fair handle queues", func() bool {
		n, err := rdb.Do(ctx, rdb.B().Llen().Key("redisson_lock_queue:{fair-held}").Build()).AsInt64()
		return err == nil && n == 1
	})
	must(t, fair.Unlock(ctx))
	must(t, <-took)
	if !onReplica("fair-held", next.Owner()) {
		t.Fatal("a woken FairLock.Lock returned before the replica had the hold")
	}
	must(t, next.Unlock(ctx))
	rw := c.RWLock("rw-held", Reentrant())
	must(t, rw.RLock(ctx))
	if !onReplica("rw-held", rw.Owner()) {
		t.Fatal("RLock returned before the replica had the hold")
	}
	must(t, rw.RUnlock(ctx))
	sem := c.Semaphore("sem-held")
	must(t, sem.SetPermits(ctx, 2))
	must(t, sem.Acquire(ctx, 1))
	if n, err := rep.Do(ctx, rep.B().Get().Key("sem-held").Build()).AsInt64(); n != 1 || err != nil {
		t.Fatalf("the replica's permits after a confirmed Acquire: %d, %v; want 1", n, err)
	}
	must(t, sem.Release(ctx, 1))
	kept := c.Lock("kept", Reentrant()) // by the watchdog, whose renewals go unconfirmed below
	must(t, kept.Lock(ctx))

	replica.Stop()

	// A re-entry unconfirmed is given back: the hold it re-entered stays, once.
	if err := held.Lock(ctx, Lease(time.Minute)); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("re-entry with the replica stopped: %v, want ErrNotReplicated", err)
	}
	if n, err := held.HoldCount(ctx); n != 1 || err != nil {
		t.Fatalf("HoldCount after an unconfirmed re-entry: %d, %v; want 1", n, err)
	}
	if v, err := rdb.Do(ctx, rdb.B().Hget().Key("held").Field(held.Owner()).Build()).AsInt64(); v != 1 || err != nil {
		t.Fatalf("the hold's count on the master after an unconfirmed re-entry: %d, %v; want 1", v, err)
	}
	// A release stands on the master, and says it was not confirmed.
	if err := held.Unlock(ctx); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("Unlock with the replica stopped: %v, want ErrNotReplicated", err)
	}
	if exists(t, rdb, "held") {
		t.Fatal("an unconfirmed Unlock left the lock on the master")
	}
	select {
	case <-kept.Lost():
	case <-ctx.Done():
		t.Fatal("a lease whose renewals went unconfirmed was never lost")
	}
	if kept.Valid() {
		t.Fatal("Valid after the lease was lost")
	}
	_ = kept.Unlock(ctx)
	// With the replica gone nothing confirms, however long the wait: a short one keeps the
	// test quick.
	quick, _ := newClient(t, master.Addr, WithSyncReplicas(1, 100*time.Millisecond))
	checkUnconfirmed(t, ctx, quick, rdb)
}

// With WAIT, an acquisition returns only once the replica has it: while the replica cannot
// be reached, the script has run on the master but Lock has not returned; once it can,
// Lock returns holding, and the replica has the hold.
func TestSyncReplicasWaitForTheReplica(t *testing.T) {
	t.Parallel()
	master, link, replica := replicaBehindProxy(t)
	ctx := testCtx(t, 30*time.Second)
	c, rdb := newClient(t, master.Addr, WithSyncReplicas(1, 20*time.Second))
	rep := redistest.ClientFor(t, replica.Addr)

	link.Blackhole(true) // the replica loses its master
	l := c.Lock("await")
	done := make(chan error, 1)
	go func() { done <- l.Lock(ctx) }()
	eventually(t, 10*time.Second, "the acquire runs on the master", func() bool { return exists(t, rdb, "await") })
	select {
	case err := <-done:
		t.Fatalf("Lock returned (%v) while the replica could not have the hold", err)
	default:
	}
	link.Blackhole(false) // the replica reconnects, and catches up
	if err := <-done; err != nil {
		t.Fatalf("Lock once the replica is back: %v", err)
	}
	n, err := rep.Do(ctx, rep.B().Hexists().Key("await").Field(l.Owner()).Build()).AsInt64()
	if n != 1 || err != nil {
		t.Fatalf("the replica's hold when Lock returned: %d, %v; want 1", n, err)
	}
	must(t, l.Unlock(ctx))
}

// An unconfirmed re-entry or inner release changes nothing the handle believes: its deadline
// stays what the replica has, so that after a failover to the replica no other holder's
// hold can begin while the handle still calls its own valid.
func TestSyncReplicasFailoverNeverOutlivesTheReplica(t *testing.T) {
	t.Parallel()
	master, link, replica := replicaBehindProxy(t)
	ctx := testCtx(t, 30*time.Second)
	// A healthy replica confirms within a second on a loaded machine (50 ms was too short).
	c, _ := newClient(t, master.Addr, WithSyncReplicas(1, time.Second))
	l := c.Lock("failover", Reentrant())
	// The lease outlives the two unconfirmed requests below, each waiting a second for the
	// replica.
	const lease = 5 * time.Second
	must(t, l.Lock(ctx, Lease(lease)))
	must(t, l.Lock(ctx, Lease(lease)))
	d0, _ := l.Deadline()

	link.Blackhole(true) // the replica keeps what it has: two holds, a 5 s lease
	if err := l.Lock(ctx, Lease(time.Minute)); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("re-entry with the replica away: %v, want ErrNotReplicated", err)
	}
	if d, ok := l.Deadline(); !ok || !d.Equal(d0) {
		t.Fatalf("an unconfirmed re-entry moved the deadline by %v (%v)", d.Sub(d0), ok)
	}
	if err := l.Unlock(ctx); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("inner Unlock with the replica away: %v, want ErrNotReplicated", err)
	}
	if d, ok := l.Deadline(); !ok || !d.Equal(d0) {
		t.Fatalf("an unconfirmed inner release moved the deadline by %v (%v)", d.Sub(d0), ok)
	}

	rep := redistest.ClientFor(t, replica.Addr)
	must(t, rep.Do(ctx, rep.B().Replicaof().No().One().Build()).Error()) // the failover
	c2, _ := newClient(t, replica.Addr)
	other := c2.Lock("failover")
	eventually(t, waitFor, "another client takes the lock on the promoted replica", func() bool {
		ok, err := other.TryLock(ctx)
		return err == nil && ok
	})
	if l.Valid() {
		t.Fatalf("another client holds the lock while the first handle is valid for %v more", time.Until(d0))
	}
}

// Permits taken unconfirmed are given back even when the Client closes while the acquire
// waits for its replicas: a plain semaphore's permits have no lease to end, so permits not
// given back would be gone for good.
func TestSyncReplicasSemaphoreGivenBackOnClose(t *testing.T) {
	t.Parallel()
	b := redistest.Redis(t) // no replica: WAIT 1 waits its whole timeout, and counts 0
	ctx := testCtx(t, 20*time.Second)
	c, rdb := newClient(t, b.Addr, WithSyncReplicas(1, 3*time.Second))
	s := c.Semaphore("close")
	if _, err := s.TrySetPermits(ctx, 3); !errors.Is(err, ErrNotReplicated) {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Acquire(ctx, 2) }()
	eventually(t, 10*time.Second, "the acquire runs, and waits for its replica", func() bool {
		n, err := rdb.Do(ctx, rdb.B().Get().Key("close").Build()).AsInt64()
		return err == nil && n == 1
	})
	c.Close()
	if err := <-done; !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("Acquire: %v, want ErrNotReplicated", err)
	}
	if n, err := rdb.Do(ctx, rdb.B().Get().Key("close").Build()).AsInt64(); n != 3 || err != nil {
		t.Fatalf("permits on the master: %d, %v; want 3, all given back", n, err)
	}
}

// A semaphore's unconfirmed acquisition whose give-back Redis refuses keeps the give-back
// unsettled: the Client repeats it until Redis runs it, and the permits come back (they have
// no lease that would bring them back otherwise). The refusal: the handle's latch key, whose
// mark the give-back reads, has the wrong type until the test puts the mark back.
func TestSyncReplicasRefusedGiveBackIsRepeated(t *testing.T) {
	t.Parallel()
	b := redistest.Redis(t) // no replica: WAIT 1 waits its whole timeout, and counts 0
	ctx := testCtx(t, 30*time.Second)
	c, rdb := newClient(t, b.Addr, WithSyncReplicas(1, time.Second))
	const name = "refused-give-back"
	permits := func() int64 {
		n, err := rdb.Do(ctx, rdb.B().Get().Key(name).Build()).AsInt64()
		must(t, err)
		return n
	}
	s := c.Semaphore(name)
	if _, err := s.TrySetPermits(ctx, 3); !errors.Is(err, ErrNotReplicated) {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Acquire(ctx, 2) }()
	eventually(t, 10*time.Second, "the acquire runs, and waits for its replica", func() bool { return permits() == 1 })
	latches, err := rdb.Do(ctx, rdb.B().Keys().Pattern(names.Prefix(unlockLatchPrefix, name)+":*").Build()).AsStrSlice()
	must(t, err)
	if len(latches) != 1 {
		t.Fatalf("latch keys %q, want the handle's one", latches)
	}
	latch := latches[0]
	mark, err := rdb.Do(ctx, rdb.B().Get().Key(latch).Build()).ToString()
	must(t, err)
	// At once: a give-back finding no mark at all would be taken as one that never acted.
	must(t, rdb.Do(ctx, rdb.B().Eval().Script("redis.call('del', KEYS[1]); redis.call('rpush', KEYS[1], 'wrong type')").
		Numkeys(1).Key(latch).Build()).Error())
	if err := <-done; !errors.Is(err, ErrNotReplicated) || !errors.Is(err, ErrWrongType) {
		t.Fatalf("Acquire: %v, want ErrNotReplicated and the give-back's refusal (ErrWrongType)", err)
	}
	if n := permits(); n != 1 {
		t.Fatalf("%d permits after the refused give-back, want 1: the situation this test is about did not arise", n)
	}
	must(t, rdb.Do(ctx, rdb.B().Set().Key(latch).Value(mark).PxMilliseconds(300000).Build()).Error()) // whatever the type
	eventually(t, 15*time.Second, "the refused give-back is repeated, and the permits come back", func() bool { return permits() == 3 })
}
