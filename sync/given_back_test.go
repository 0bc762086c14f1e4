package sync

import (
	"context"
	"errors"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

// An acquire whose first run took the lock but whose reply was lost, repeated only once an
// outage longer than its lease is over, sets a full lease again: its hold outlives the lease
// the caller could be given, timed from the first run. The acquisition fails with
// ErrLockLost — and gives the hold back, rather than leave the lock blocked for a lease with
// no holder.
func TestAcquireRepeatedPastItsLeaseGivesTheHoldBack(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		// Long enough that half of it, the bound of the give-back below, holds a loaded
		// machine's delays (a 2 s lease's second was nearly used up under two CPU hogs).
		const lease = 5 * time.Second
		ctx := testCtx(t, 30*time.Second)
		proxy := redistest.NewProxy(t, b.Addr)
		c, _ := newClient(t, proxy.Addr())
		admin := b.Client(t)
		warmScripts(t, ctx, c)
		const name = "given-back:repeated"
		proxy.DropReplyAndBlackhole([]byte(name))
		go func() {
			// The first run acted and its reply was dropped: Redis is now away for longer
			// than the lease, so the repeat that follows sets the TTL anew.
			for proxy.Dropped() == 0 {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(lease + lease/2)
			proxy.Blackhole(false)
		}()
		mu := c.Lock(name)
		err := mu.Lock(ctx, Lease(lease))
		returned := time.Now()
		if !errors.Is(err, ErrLockLost) {
			t.Fatalf("Lock repeated past its lease: %v, want ErrLockLost", err)
		}
		if proxy.Dropped() != 1 {
			t.Fatalf("the proxy dropped %d replies, want 1", proxy.Dropped())
		}
		// Left alone, the hold would stay until the repeat's TTL ran out: a lease after the
		// outage. Given back, it goes at once.
		eventually(t, lease/2, "the hold given back", func() bool { return !exists(t, admin, name) })
		t.Logf("given back %v after Lock returned", time.Since(returned).Round(time.Millisecond))
	})
}

// A Reentrant handle's acquire whose hold was taken too late gives it back as soon as the
// owner is free: also when the withdrawal that follows the failed acquire still holds the
// owner as the call returns — not at the handle's next call, which may never come.
func TestReentrantHoldTakenTooLateGivenBackAfterItsWithdrawal(t *testing.T) {
	t.Parallel()
	kinds := []struct {
		kind string
		lock func(ctx context.Context, c *Client, name string, opts ...LockOption) error
	}{
		{"lock", func(ctx context.Context, c *Client, name string, opts ...LockOption) error {
			return c.Lock(name, Reentrant()).Lock(ctx, opts...)
		}},
		{"write lock", func(ctx context.Context, c *Client, name string, opts ...LockOption) error {
			return c.RWLock(name, Reentrant()).Lock(ctx, opts...)
		}},
	}
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		for _, k := range kinds {
			t.Run(k.kind, func(t *testing.T) {
				t.Parallel()
				name := "given-back:reentrant:" + k.kind
				const lease = time.Second
				ctx := testCtx(t, 30*time.Second)
				admin := b.Client(t)
				// The Lock awaits its withdrawal for the retry budget at most: a reply delayed
				// by half a lease stays well within it.
				c, _ := newClient(t, b.Addr, WithRetryBudget(3*time.Second))
				// The acquire's reply comes after its lease ran out, and the hold outlives the
				// lease in Redis, as an acquire repeated after an outage leaves it (see
				// TestAcquireRepeatedPastItsLeaseGivesTheHoldBack).
				var paused atomic.Bool
				hooks(c).afterAcquire.set(func([]string) {
					if paused.CompareAndSwap(false, true) {
						must(t, admin.Do(ctx, admin.B().Pexpire().Key(name).Milliseconds(time.Minute.Milliseconds()).Build()).Error())
						time.Sleep(lease + lease/2)
					}
				})
				leaving, leaveGo := make(chan struct{}), make(chan struct{})
				letLeave := gosync.OnceFunc(func() { close(leaveGo) })
				t.Cleanup(letLeave)
				var once gosync.Once
				hooks(c).beforeLeave.set(func([]string) {
					once.Do(func() {
						close(leaving)
						<-leaveGo
					})
				})
				if err := k.lock(ctx, c, name, Lease(lease)); !errors.Is(err, ErrLockLost) {
					t.Fatalf("Lock whose reply came after its lease: %v, want ErrLockLost", err)
				}
				signalled(t, ctx, leaving, "the withdrawal")
				if !exists(t, admin, name) {
					t.Fatal("the hold is gone while the withdrawal holds the owner: the situation this test is about did not arise")
				}
				letLeave()
				eventually(t, waitFor, "the hold given back", func() bool { return !exists(t, admin, name) })
			})
		}
	})
}

// A Close that lands while an acquire is on its way gives the hold back: the script took it,
// but nobody would renew or release it, and it would block every other process for its
// lease. (A wait that a wake-up and Close end at the same moment may pick the wake-up —
// select chooses at random — and attempt after Close: the same case.)
func TestCloseDuringAcquireGivesTheHoldBack(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		admin := b.Client(t)
		t.Run("lock", func(t *testing.T) {
			const name = "close-during-acquire"
			c, _ := newClient(t, b.Addr)
			hooks(c).afterAcquire.set(func([]string) { c.Close() }) // the script ran; Close comes before its reply is read
			if err := c.Lock(name).Lock(ctx); !errors.Is(err, ErrClosed) {
				t.Fatalf("Lock closed during its acquire: %v, want ErrClosed", err)
			}
			if exists(t, admin, name) {
				t.Fatalf("the hold taken as the Client closed is still there (PTTL %d ms)", pttl(t, admin, name))
			}
		})
	})
}
