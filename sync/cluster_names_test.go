package sync

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/rueidis"
)

// On a Cluster, a name with its own hash tag works for every primitive: all its keys share
// the tag's slot, and a countdown latch's channel — Redisson's, in another slot — is no key
// of its scripts. With sharded pub/sub (the default on a Cluster), that channel cannot be
// published on from the latch's scripts: such a latch is refused before any call, with an
// error saying why.
func TestClusterNameWithHashTagWorks(t *testing.T) {
	t.Parallel()
	b := redistest.Cluster(t)
	c, err := New(redistest.ClusterClient(t, b.Addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := testCtx(t, 20*time.Second)
	if _, err := c.CountDownLatch("{job}:latch").TrySetCount(ctx, 1); !errors.Is(err, ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "PubSubPlain") {
		t.Errorf("a latch whose channel is in another slot, with sharded pub/sub: %v, want ErrInvalidArgument saying why", err)
	}
	plain, err := New(redistest.ClusterClient(t, b.Addr), WithPubSubMode(PubSubPlain))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plain.Close() })

	latch := plain.CountDownLatch("{job}:latch")
	if ok, err := latch.TrySetCount(ctx, 2); !ok || err != nil {
		t.Fatalf("TrySetCount: %v, %v", ok, err)
	}
	done := make(chan error, 1)
	go func() { done <- plain.CountDownLatch("{job}:latch").Await(ctx) }()
	must(t, latch.CountDown(ctx))
	must(t, latch.CountDown(ctx))
	if err := <-done; err != nil {
		t.Fatalf("Await: %v", err)
	}
	if ok, err := latch.TrySetCount(ctx, 1); !ok || err != nil {
		t.Fatalf("TrySetCount again: %v, %v", ok, err)
	}
	if ok, err := latch.Delete(ctx); !ok || err != nil {
		t.Fatalf("Delete: %v, %v", ok, err)
	}

	for _, l := range []interface {
		Lock(context.Context, ...LockOption) error
		Unlock(context.Context) error
	}{c.Lock("{job}:lock"), c.FairLock("{job}:fair"), c.FencedLock("{job}:fenced"), c.RWLock("{job}:rw")} {
		must(t, l.Lock(ctx))
		must(t, l.Unlock(ctx))
	}
	sem := c.Semaphore("{job}:sem")
	must(t, sem.SetPermits(ctx, 1))
	must(t, sem.Acquire(ctx, 1))
	must(t, sem.Release(ctx, 1))
	perm := c.PermitSemaphore("{job}:perm")
	must(t, perm.SetPermits(ctx, 1))
	p, err := perm.Acquire(ctx, 1)
	must(t, err)
	must(t, p.Release(ctx))
}

// On a Cluster, a name with a '{' but no hash tag cannot have its keys in one slot: every
// call reports it as a bad name, before any request, rather than panic in rueidis (or be
// refused as CROSSSLOT).
func TestClusterNameWithoutHashTagIsInvalid(t *testing.T) {
	t.Parallel()
	b := redistest.Cluster(t)
	c, err := New(redistest.ClusterClient(t, b.Addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := testCtx(t, 20*time.Second)
	for _, name := range []string{"a{b", "x{}y", "}{"} {
		calls := map[string]error{}
		l := c.Lock(name)
		calls["Lock.Lock"] = l.Lock(ctx)
		calls["Lock.Unlock"] = l.Unlock(ctx)
		_, calls["Lock.IsLocked"] = l.IsLocked(ctx)
		calls["FairLock.Lock"] = c.FairLock(name).Lock(ctx)
		calls["FencedLock.Lock"] = c.FencedLock(name).Lock(ctx)
		calls["RWLock.RLock"] = c.RWLock(name).RLock(ctx)
		calls["Semaphore.Release"] = c.Semaphore(name).Release(ctx, 1)
		_, _, calls["PermitSemaphore.TryAcquire"] = c.PermitSemaphore(name).TryAcquire(ctx, 1)
		calls["CountDownLatch.CountDown"] = c.CountDownLatch(name).CountDown(ctx)
		_, calls["CountDownLatch.TrySetCount"] = c.CountDownLatch(name).TrySetCount(ctx, 1)
		for what, err := range calls {
			if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "name") {
				t.Errorf("%s of %q on a Cluster: %v, want ErrInvalidArgument naming the name", what, name, err)
			}
		}
	}
}

// PubSubAuto, the default, is sharded pub/sub on a Cluster of Redis 7 (Redisson's default
// there), and plain on a single server — and on a Cluster that does not say its version
// (miniredis, which rueidis takes for a Cluster as it answers CLUSTER SLOTS).
func TestPubSubAuto(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		b    *redistest.Backend
		rdb  func(*redistest.Backend) rueidis.Client
		want string
	}{
		{redistest.Cluster(t), func(b *redistest.Backend) rueidis.Client { return redistest.ClusterClient(t, b.Addr) }, "SPUBLISH"},
		{redistest.Redis(t), func(b *redistest.Backend) rueidis.Client { return b.Client(t) }, "PUBLISH"},
		{redistest.Miniredis(t), func(b *redistest.Backend) rueidis.Client {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{b.Addr}, DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			if c.Mode() != rueidis.ClientModeCluster {
				t.Fatalf("rueidis made a %s client of miniredis, not a Cluster one", c.Mode())
			}
			t.Cleanup(c.Close)
			return c
		}, "PUBLISH"},
	} {
		c, err := New(tt.rdb(tt.b))
		if err != nil {
			t.Fatal(err)
		}
		if c.publishCmd != tt.want {
			t.Errorf("%s: publishes with %s, want %s", tt.b.Addr, c.publishCmd, tt.want)
		}
		c.Close()
	}
}

// On the shared Cluster (3 masters), the default is sharded pub/sub: a waiter's channel is
// subscribed on the master serving its name, with SSUBSCRIBE, and a release there wakes it.
func TestClusterShardedWaitersOnEveryMaster(t *testing.T) {
	t.Parallel()
	b := topologies.Cluster(t)
	holder, rdb := newClientOn(t, b)
	waiter, _ := newClientOn(t, b)
	ctx := testCtx(t, 20*time.Second)
	for _, name := range namesOnShards(t, b, "sharded", len(b.Shards())) {
		l := holder.Lock(name)
		must(t, l.Lock(ctx))
		got := lockAsync(ctx, waiter.Lock(name))
		ch := waitChannel(waiter, name)
		eventually(t, 10*time.Second, "the waiter's channel subscribed", func() bool { return waiter.mux.Subscribed(ch) })
		shard, err := rdb.Do(ctx, rdb.B().PubsubShardnumsub().Channel(ch).Build()).AsIntMap()
		if err != nil || shard[ch] != 1 {
			t.Fatalf("%s: SHARDNUMSUB %v, %v; want 1", name, shard, err)
		}
		must(t, l.Unlock(ctx))
		wantResult(t, name+": the waiter", got, 10*time.Second)
		if _, err := waiter.Lock(name).ForceUnlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
