package sync

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

// On a Cluster, a name with its own hash tag works for every primitive: all its keys share
// the tag's slot, and a countdown latch's channel — Redisson's, in another slot — is no key
// of its scripts.
func TestClusterNameWithHashTagWorks(t *testing.T) {
	t.Parallel()
	b := redistest.Cluster(t)
	c, err := New(redistest.ClusterClient(t, b.Addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := testCtx(t, 20*time.Second)

	latch := c.CountDownLatch("{job}:latch")
	if ok, err := latch.TrySetCount(ctx, 2); !ok || err != nil {
		t.Fatalf("TrySetCount: %v, %v", ok, err)
	}
	done := make(chan error, 1)
	go func() { done <- c.CountDownLatch("{job}:latch").Await(ctx) }()
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

// Sharded pub/sub is refused on a Cluster client (one subscriber connection cannot
// subscribe on every slot's node), with an error naming the option.
func TestClusterShardedPubSubRefused(t *testing.T) {
	t.Parallel()
	b := redistest.Cluster(t)
	_, err := New(redistest.ClusterClient(t, b.Addr), WithPubSubMode(PubSubSharded))
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "pub/sub mode") {
		t.Fatalf("New with PubSubSharded on a Cluster client: %v, want ErrInvalidArgument naming the pub/sub mode", err)
	}
}
