package sync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

// Every acquisition takes a new token, re-entries included, across handles and Clients, and
// Token reads the newest; the counter is Redisson's key and outlives the lock. On every
// topology.
func TestFencedLockTokensOnlyGrow(t *testing.T) {
	t.Parallel()
	topologies.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		name := topoName(t, "fenced-grow")
		c1, rdb := newClientOn(t, b)
		c2, _ := newClientOn(t, b)
		a, other := c1.FencedLock(name, Reentrant()), c2.FencedLock(name, Reentrant())
		if n, err := a.Token(ctx); n != 0 || err != nil {
			t.Fatalf("Token before any acquisition: %d, %v; want 0", n, err)
		}
		t1, err := a.LockToken(ctx)
		must(t, err)
		t2, ok, err := a.TryLockToken(ctx) // a re-entry
		if !ok || err != nil || t2 <= t1 {
			t.Fatalf("re-entry: token %d, %v, %v; want above %d", t2, ok, err, t1)
		}
		if n, ok, err := other.TryLockToken(ctx); ok || n != 0 || err != nil {
			t.Fatalf("TryLockToken of a held lock: %d, %v, %v; want 0, false, nil", n, ok, err)
		}
		got := make(chan int64, 1)
		go func() {
			n, err := other.LockToken(ctx)
			must(t, err)
			got <- n
		}()
		listeningOn(t, c2, waitChannel(c2, name), 1)
		must(t, a.Unlock(ctx))
		must(t, a.Unlock(ctx))
		t3 := <-got
		if t3 <= t2 {
			t.Fatalf("the next holder's token %d, want above %d", t3, t2)
		}
		if n, err := a.Token(ctx); n != t3 || err != nil {
			t.Fatalf("Token: %d, %v; want %d, the newest", n, err, t3)
		}
		must(t, other.Lock(ctx)) // Lock takes a token too
		if n, _ := a.Token(ctx); n != t3+1 {
			t.Fatalf("Token after a Lock: %d, want %d", n, t3+1)
		}
		must(t, other.Unlock(ctx))
		must(t, other.Unlock(ctx))
		if v, err := rdb.Do(ctx, rdb.B().Get().Key("redisson_lock_token:{"+name+"}").Build()).AsInt64(); v != t3+1 || err != nil {
			t.Fatalf("redisson_lock_token:{%s} = %d (%v), want %d, kept after the lock is free", name, v, err, t3+1)
		}
		if exists(t, rdb, name) {
			t.Fatal("the lock is still there after the last unlock")
		}
	})
}

// A fenced lock's release never hands the lock to a waiter of its own Client: each holder
// must take a token of its own.
func TestFencedLockNoLocalHandoff(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		const name = "fenced-handoff"
		c, _ := newClient(t, b.Addr)
		holder, waiter := c.FencedLock(name, Reentrant()), c.FencedLock(name, Reentrant())
		t1, err := holder.LockToken(ctx)
		must(t, err)
		replies := make(chan struct{}, 8)
		hooks(c).afterAcquire.set(func([]string) { replies <- struct{}{} })
		got := make(chan int64, 1)
		go func() {
			n, err := waiter.LockToken(ctx)
			must(t, err)
			got <- n
		}()
		// The waiter's attempt, then its attempt once subscribed: it is parked after both,
		// where a plain lock's release would hand it the lock.
		for range 2 {
			select {
			case <-replies:
			case <-ctx.Done():
				t.Fatal("the waiter did not attempt twice")
			}
		}
		listeningOn(t, c, waitChannel(c, name), 1)
		must(t, holder.Unlock(ctx))
		if t2 := <-got; t2 != t1+1 {
			t.Fatalf("the waiter's token %d, want %d: it took the lock with an acquire of its own", t2, t1+1)
		}
		must(t, waiter.Unlock(ctx))
	})
}

// Wire level: a Redisson holder excludes a fenced lock's acquisition, and so does a lock
// hash without TTL (Redisson's [-1, -1] quirk, docs/redisson-interop.md): never read as taken.
func TestFencedLockWire(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		const name = "fenced-wire"
		c, rdb := newClient(t, b.Addr)
		l := c.FencedLock(name, Reentrant())
		redissonHolds(t, ctx, rdb, name)
		if n, ok, err := l.TryLockToken(ctx); ok || n != 0 || err != nil {
			t.Fatalf("TryLockToken of a Redisson-held lock: %d, %v, %v", n, ok, err)
		}
		must(t, rdb.Do(ctx, rdb.B().Persist().Key(name).Build()).Error()) // no TTL: PTTL -1
		if n, ok, err := l.TryLockToken(ctx); ok || n != 0 || err != nil {
			t.Fatalf("TryLockToken of a lock without TTL: %d, %v, %v; want not taken", n, ok, err)
		}
		if n, _ := l.Token(ctx); n != 0 {
			t.Fatalf("a failed acquisition took token %d", n)
		}
		var nilCtx context.Context
		if _, err := l.LockToken(nilCtx); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("LockToken(nil): %v, want ErrInvalidArgument", err)
		}
		if _, _, err := c.FencedLock("", Reentrant()).TryLockToken(ctx); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("an empty name: %v, want ErrInvalidArgument", err)
		}
	})
}
