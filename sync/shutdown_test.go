package sync

import (
	"context"
	"errors"
	"fmt"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/lua"
	"github.com/redis/rueidis"
)

// Shutdown gives back every hold and permit the Client has, so that other processes take
// them at once, not a lease later; then the Client is closed.
func TestShutdownGivesEverythingBack(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		c, admin := newClient(t, b.Addr) // holds kept by the watchdog: a 30 s lease each
		other, _ := newClient(t, b.Addr)
		must(t, c.Lock("shutdown:lock").Lock(ctx))
		must(t, c.FairLock("shutdown:fair").Lock(ctx))
		re := c.Lock("shutdown:reentrant", Reentrant())
		must(t, re.Lock(ctx))
		must(t, re.Lock(ctx))
		must(t, c.RWLock("shutdown:read").RLock(ctx))
		must(t, c.RWLock("shutdown:write").Lock(ctx))
		sem := c.PermitSemaphore("shutdown:permits")
		if _, err := sem.TrySetPermits(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := sem.Acquire(ctx, 1); err != nil {
			t.Fatal(err)
		}
		waiting := lockAsync(ctx, other.Lock("shutdown:lock"))

		start := time.Now()
		if err := c.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		wantResult(t, "the other Client's waiter", waiting, 5*time.Second)
		t.Logf("the waiter got the lock %v after Shutdown began (its lease: 30 s)", time.Since(start).Round(time.Millisecond))
		for _, name := range []string{"shutdown:fair", "shutdown:reentrant", "shutdown:read", "shutdown:write"} {
			if exists(t, admin, name) {
				t.Errorf("%s still held after Shutdown", name)
			}
		}
		if n, err := other.PermitSemaphore("shutdown:permits").AvailablePermits(ctx); n != 1 || err != nil {
			t.Errorf("available permits after Shutdown: %d, %v; want 1", n, err)
		}
		if err := c.Lock("shutdown:after").Lock(ctx); !errors.Is(err, ErrClosed) {
			t.Errorf("Lock after Shutdown: %v, want ErrClosed", err)
		}
	})
}

// A Shutdown whose context ends before Redis answers returns, and leaves what it could not
// give back to lapse with its lease.
func TestShutdownIsBoundedByItsContext(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		proxy := redistest.NewProxy(t, b.Addr)
		c, _ := newClient(t, proxy.Addr())
		must(t, c.Lock("shutdown:bounded").Lock(ctx))
		proxy.Blackhole(true)
		sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := c.Shutdown(sctx)
		if took := time.Since(start); took > 300*time.Millisecond+2*time.Second {
			t.Fatalf("Shutdown with Redis unreachable took %v against a 300 ms context", took)
		}
		if err == nil {
			t.Fatal("Shutdown that could not give the hold back reported nothing")
		}
		if !c.isClosed() {
			t.Fatal("the Client is not closed after Shutdown")
		}
	})
}

// A waiter of the Client that a Shutdown's release would hand the lock to, or wake, does not
// take it: Shutdown ends waits as Close does, and a hold taken meanwhile goes back.
func TestShutdownWithALocalWaiterFreesTheLock(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		c, admin := newClient(t, b.Addr)
		other, _ := newClient(t, b.Addr)
		const name = "shutdown:local-waiter"
		must(t, c.Lock(name).Lock(ctx))
		waiter := c.Lock(name)
		waited := make(chan error, 1)
		go func() { waited <- waiter.Lock(ctx) }()
		eventually(t, 5*time.Second, "the waiter waits", func() bool { return c.mux.Waiters(waiter.plain().clientCh) > 0 })
		if err := c.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if err := <-waited; !errors.Is(err, ErrClosed) {
			t.Fatalf("the local waiter's Lock: %v, want ErrClosed", err)
		}
		if ok, err := other.Lock(name).TryLock(ctx); !ok || err != nil {
			t.Fatalf("another Client's TryLock after Shutdown: %v, %v (PTTL %d ms); want the lock free", ok, err, pttl(t, admin, name))
		}
	})
}

// Shutdown awaits the withdrawals under way in the background: a fair lock's place, which a
// waiter whose context ended leaves while the call returns, is gone when Shutdown returns —
// a process that exits then leaves no place to hold the queue up for a wait time.
func TestShutdownAwaitsWithdrawals(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "shutdown:withdrawal"
		holder, admin := newClient(t, b.Addr)
		must(t, holder.FairLock(name).Lock(ctx))
		leaving, release := make(chan struct{}), make(chan struct{})
		var once gosync.Once
		rdb := newHookedRDB(t, b.Addr)
		rdb.hook = func(_ context.Context, cmd rueidis.Completed) (rueidis.RedisResult, bool) {
			if sha(cmd) == shaOf(lua.FairLeave{}) {
				once.Do(func() { close(leaving) })
				<-release // the withdrawal is slow to reach Redis
			}
			return rueidis.RedisResult{}, false
		}
		c, err := New(rdb)
		must(t, err)
		t.Cleanup(func() { c.Close() })

		wctx, cancel := context.WithCancel(ctx)
		waiting := lockAsync(wctx, c.FairLock(name))
		eventually(t, waitFor, "the waiter queued", func() bool { q, _ := fairPlaces(t, admin, name); return q == 1 })
		cancel()
		if err := <-waiting; !errors.Is(err, context.Canceled) {
			t.Fatalf("the waiter, its context cancelled: %v, want context.Canceled", err)
		}
		signalled(t, ctx, leaving, "the waiter's leave held")
		shut := make(chan error, 1)
		go func() { shut <- c.Shutdown(ctx) }()
		select {
		case err := <-shut:
			t.Fatalf("Shutdown returned (%v) while the withdrawal of a place was under way", err)
		case <-time.After(200 * time.Millisecond):
		}
		close(release)
		if err := <-shut; err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		fairNoPlaces(t, admin, name, "after Shutdown")
	})
}

// Shutdown awaits the acquisitions it ends: a fair waiter whose attempt is on its way as
// Shutdown begins withdraws its place before Shutdown returns — and so before the rueidis
// client is closed, as it may be at once.
func TestShutdownAwaitsTheWaitsItEnds(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "shutdown:ended-wait"
		holder, admin := newClient(t, b.Addr)
		must(t, holder.FairLock(name).Lock(ctx))
		var acquires atomic.Int32
		entered, proceed := make(chan struct{}), make(chan struct{})
		rdb := newHookedRDB(t, b.Addr)
		rdb.hook = func(_ context.Context, cmd rueidis.Completed) (rueidis.RedisResult, bool) {
			if sha(cmd) == shaOf(lua.FairAcquire{}) && acquires.Add(1) == 2 {
				close(entered) // the waiter's second attempt is on its way
				<-proceed
			}
			return rueidis.RedisResult{}, false
		}
		c, err := New(rdb, WithFairLockWaitTimeout(time.Minute))
		must(t, err)
		t.Cleanup(func() { c.Close() })
		waiting := lockAsync(ctx, c.FairLock(name))
		signalled(t, ctx, entered, "the waiter's second attempt held")
		shut := make(chan error, 1)
		go func() { shut <- c.Shutdown(ctx) }()
		select {
		case err := <-shut:
			t.Fatalf("Shutdown returned (%v) while a wait it ends was still attempting", err)
		case <-time.After(200 * time.Millisecond):
		}
		close(proceed)
		if err := <-shut; err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		rdb.Close()
		if err := <-waiting; !errors.Is(err, ErrClosed) {
			t.Errorf("the waiter: %v, want ErrClosed", err)
		}
		fairNoPlaces(t, admin, name, "after Shutdown")
	})
}

// Permits that a Release handed to a waiter busy attempting, which its attempt did not need,
// reach Redis though the Client is shut down or closed meanwhile: the Release returned nil.
func TestSemaphoreHandedPermitsSurviveClose(t *testing.T) {
	t.Parallel()
	for _, shutdown := range []bool{true, false} {
		redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
			ctx := testCtx(t, 10*time.Second)
			name := fmt.Sprintf("handed-close-%v", shutdown)
			w := newBusyWaiter(t, ctx, b, name, 1) // the attempt takes Redis's permit
			must(t, w.s.Release(ctx, 1))           // handed to the waiter
			closed := make(chan error, 1)
			go func() {
				if shutdown {
					closed <- w.c.Shutdown(ctx)
				} else {
					closed <- w.c.Close()
				}
			}()
			w.proceed()
			waitErr := <-w.got
			if err := <-closed; err != nil {
				t.Fatalf("shutdown %v: %v", shutdown, err)
			}
			// Two permits in all: the waiter's, if it was given one (a closed Client gives
			// back what its attempt took), and Redis's.
			want := int64(2)
			if waitErr == nil {
				want = 1
			}
			w.permits(t, ctx, name, want, fmt.Sprintf("the waiter: %v", waitErr))
		})
	}
}

// A Shutdown without a deadline still has a bound while Redis is unreachable: a request of
// unknown outcome being settled in the background, which it awaits, has one retry budget
// more, not the minutes its mark lasts.
func TestShutdownWithUnsettledRequestIsBounded(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "shutdown:unsettled"
		proxy := redistest.NewProxy(t, b.Addr)
		c, _ := newClient(t, proxy.Addr(), WithRetryBudget(shortBudget))
		s := c.Semaphore(name)
		must(t, s.SetPermits(ctx, 1))
		done := lostThenUnreachable(t, proxy, name, func() error { return s.Acquire(ctx, 1) })
		if err := <-done; !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("Acquire with its reply lost and Redis gone: %v, want ErrOutcomeUnknown", err)
		}
		shut := make(chan error, 1)
		go func() { shut <- c.Shutdown(context.Background()) }()
		select {
		case <-shut:
		case <-time.After(waitFor): // the budget is 5 s; the request's mark lasts minutes
			t.Fatalf("Shutdown without a deadline still waiting after %v, with a %v retry budget", waitFor, shortBudget)
		}
	})
}
