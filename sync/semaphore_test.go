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
)

// available reads a semaphore's permits, failing the test on an error.
func available(t *testing.T, ctx context.Context, s *Semaphore) int {
	t.Helper()
	n, err := s.AvailablePermits(ctx)
	must(t, err)
	return n
}

func TestSemaphoreSetAddDrain(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		c, _ := newClient(t, b.Addr)
		s := c.Semaphore("sem-basics")
		if n := available(t, ctx, s); n != 0 {
			t.Fatalf("a missing semaphore has %d permits, want 0", n)
		}
		if ok, err := s.TryAcquire(ctx, 1); ok || err != nil {
			t.Fatalf("TryAcquire on a missing semaphore: %v, %v; want false, nil", ok, err)
		}
		if ok, err := s.TrySetPermits(ctx, 3); !ok || err != nil {
			t.Fatalf("first TrySetPermits: %v, %v", ok, err)
		}
		if ok, err := c.Semaphore("sem-basics").TrySetPermits(ctx, 7); ok || err != nil {
			t.Fatalf("second TrySetPermits: %v, %v; want false, nil", ok, err)
		}
		if ok, err := s.TryAcquire(ctx, 2); !ok || err != nil {
			t.Fatalf("TryAcquire(2) of 3: %v, %v", ok, err)
		}
		if ok, err := s.TryAcquire(ctx, 2); ok || err != nil {
			t.Fatalf("TryAcquire(2) of 1: %v, %v; want false, nil", ok, err)
		}
		must(t, s.Release(ctx, 2))
		must(t, s.AddPermits(ctx, -5))
		if n := available(t, ctx, s); n != -2 {
			t.Fatalf("after AddPermits(-5) of 3: %d, want -2", n)
		}
		must(t, s.AddPermits(ctx, 4))
		if n, err := s.DrainPermits(ctx); n != 2 || err != nil {
			t.Fatalf("DrainPermits: %d, %v; want 2", n, err)
		}
		must(t, s.SetPermits(ctx, 9))
		if n := available(t, ctx, s); n != 9 {
			t.Fatalf("after SetPermits(9): %d", n)
		}
		if n, err := c.Semaphore("sem-missing").DrainPermits(ctx); n != 0 || err != nil {
			t.Fatalf("DrainPermits of a missing semaphore: %d, %v", n, err)
		}
	})
}

func TestSemaphoreBadInput(t *testing.T) {
	t.Parallel()
	b := redistest.Miniredis(t)
	ctx := testCtx(t, 5*time.Second)
	c, _ := newClient(t, b.Addr)
	s := c.Semaphore("sem-bad")
	var nilCtx context.Context
	for name, err := range map[string]error{
		"Acquire(0)":                 s.Acquire(ctx, 0),
		"Acquire(-1)":                s.Acquire(ctx, -1),
		"Acquire(2^31)":              s.Acquire(ctx, 1<<31),
		"Release(0)":                 s.Release(ctx, 0),
		"SetPermits(-1)":             s.SetPermits(ctx, -1),
		"AddPermits(-2^31)":          s.AddPermits(ctx, -(1 << 31)),
		"TryAcquire(0)":              func() error { _, err := s.TryAcquire(ctx, 0); return err }(),
		"TryAcquire(-wait)":          func() error { _, err := s.TryAcquire(ctx, 1, WaitTime(-time.Second)); return err }(),
		"TrySetPermits(-1)":          func() error { _, err := s.TrySetPermits(ctx, -1); return err }(),
		"empty name":                 c.Semaphore("").Release(ctx, 1),
		"TrySetCount(0)":             func() error { _, err := c.CountDownLatch("l").TrySetCount(ctx, 0); return err }(),
		"latch empty name":           c.CountDownLatch("").CountDown(ctx),
		"nil ctx (Acquire)":          s.Acquire(nilCtx, 1),
		"nil ctx (Release)":          s.Release(nilCtx, 1),
		"nil ctx (Await)":            c.CountDownLatch("l").Await(nilCtx),
		"nil ctx (AddPermits)":       s.AddPermits(nilCtx, 1),
		"nil ctx (SetPermits)":       s.SetPermits(nilCtx, 1),
		"nil ctx (TrySetPermits)":    func() error { _, err := s.TrySetPermits(nilCtx, 1); return err }(),
		"nil ctx (DrainPermits)":     func() error { _, err := s.DrainPermits(nilCtx); return err }(),
		"nil ctx (AvailablePermits)": func() error { _, err := s.AvailablePermits(nilCtx); return err }(),
		"nil ctx (TryAcquire)":       func() error { _, err := s.TryAcquire(nilCtx, 1); return err }(),
		"nil ctx (TrySetCount)":      func() error { _, err := c.CountDownLatch("l").TrySetCount(nilCtx, 1); return err }(),
		"nil ctx (CountDown)":        c.CountDownLatch("l").CountDown(nilCtx),
		"nil ctx (Delete)":           func() error { _, err := c.CountDownLatch("l").Delete(nilCtx); return err }(),
		"nil ctx (Count)":            func() error { _, err := c.CountDownLatch("l").Count(nilCtx); return err }(),
	} {
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if n := dbsize(t, c.rdb); n != 0 {
		t.Fatalf("bad input wrote %d keys", n)
	}
}

// Permits in use never exceed the limit with 64 goroutines on 4 Clients, and every permit
// comes back, on every topology.
func TestSemaphoreNeverOverLimit(t *testing.T) {
	t.Parallel()
	topologies.Each(t, func(t *testing.T, b *redistest.Backend) {
		cpuBound(t)
		ctx := testCtx(t, 2*time.Minute)
		const limit, clients, workers, rounds = 5, 4, 16, 8
		name := topoName(t, "sem-limit")
		var cs []*Client
		for range clients {
			c, _ := newClientOn(t, b)
			cs = append(cs, c)
		}
		if ok, err := cs[0].Semaphore(name).TrySetPermits(ctx, limit); !ok || err != nil {
			t.Fatalf("TrySetPermits: %v, %v", ok, err)
		}
		var inUse, peak, served atomic.Int64
		var wg gosync.WaitGroup
		errs := make(chan error, clients*workers)
		for _, c := range cs {
			s := c.Semaphore(name) // one handle shared by the Client's goroutines
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n := 1 + w%2 // a mix of one- and two-permit requests
					for range rounds {
						if err := s.Acquire(ctx, n); err != nil {
							errs <- err
							return
						}
						now := inUse.Add(int64(n))
						for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
						}
						time.Sleep(200 * time.Microsecond) // the guarded work
						inUse.Add(-int64(n))
						if err := s.Release(ctx, n); err != nil {
							errs <- err
							return
						}
						served.Add(1)
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if p := peak.Load(); p > limit {
			t.Fatalf("%d permits in use at once, limit %d", p, limit)
		}
		if n := served.Load(); n != clients*workers*rounds {
			t.Fatalf("%d acquisitions served, want %d", n, clients*workers*rounds)
		}
		if n := available(t, ctx, cs[0].Semaphore(name)); n != limit {
			t.Fatalf("%d permits available at the end, want %d", n, limit)
		}
		// Nothing is left but the semaphore once the Clients are closed: their handles'
		// request keys go with them.
		admin := b.Client(t)
		for _, c := range cs {
			c.Close()
		}
		if !ownServer(b) { // a shared topology's other keys are other tests'
			return
		}
		keys, err := admin.Do(ctx, admin.B().Keys().Pattern("*").Build()).AsStrSlice()
		must(t, err)
		if len(keys) != 1 || keys[0] != name {
			t.Fatalf("keys left after the Clients closed: %q, want only %q", keys, name)
		}
	})
}

// waitersOn waits until c has n local waiters on channel.
func waitersOn(t *testing.T, c *Client, channel string, n int) {
	t.Helper()
	eventually(t, waitFor, fmt.Sprintf("%d waiters on %s", n, channel), func() bool {
		return c.mux.Waiters(channel) == n
	})
}

// listeningOn waits until c has n local waiters on channel and the channel is subscribed:
// a message published from then on reaches them.
func listeningOn(t *testing.T, c *Client, channel string, n int) {
	t.Helper()
	waitersOn(t, c, channel, n)
	eventually(t, waitFor, "subscribed to "+channel, func() bool { return c.mux.Subscribed(channel) })
}

// Within a Client, waiters are served in arrival order: a small request does not overtake
// a large one ahead of it, and the large one is served as soon as its permits are there.
func TestSemaphoreServesClientWaitersInArrivalOrder(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		const name = "sem-order"
		c, _ := newClient(t, b.Addr)
		s := c.Semaphore(name)
		must(t, s.SetPermits(ctx, 0))
		done := make(chan string, 8)
		start := func(who string, n int) {
			go func() {
				if err := c.Semaphore(name).Acquire(ctx, n); err != nil {
					done <- who + ": " + err.Error()
					return
				}
				done <- who
			}()
		}
		start("large", 3)
		waitersOn(t, c, s.q.clientCh, 1)
		for i, who := range []string{"small1", "small2", "small3"} {
			start(who, 1)
			waitersOn(t, c, s.q.clientCh, i+2)
		}
		must(t, s.Release(ctx, 1)) // not enough for the large request: nobody is served
		must(t, s.Release(ctx, 2)) // now it is
		if got := <-done; got != "large" {
			t.Fatalf("first served: %s, want large", got)
		}
		if n := available(t, ctx, s); n != 0 {
			t.Fatalf("%d permits left after the large request, want 0 (a small one overtook it?)", n)
		}
		{
			rdb := b.Client(t)
			z, _ := rdb.Do(ctx, rdb.B().Zrange().Key(s.q.clients).Min("0").Max("-1").Withscores().Build()).ToAny()
			w, _ := rdb.Do(ctx, rdb.B().Hgetall().Key(s.wants).Build()).AsStrMap()
			t.Logf("DBG clients %v wants %v waiters %d pending %d", z, w, c.mux.Waiters(s.q.clientCh), c.mux.Pending(s.q.clientCh))
		}
		must(t, s.Release(ctx, 3)) // the three small ones, in order
		for _, want := range []string{"small1", "small2", "small3"} {
			if got := <-done; got != want {
				t.Fatalf("served %s, want %s", got, want)
			}
		}
	})
}

// A waiter whose wait ends hands its turn on: the request behind it is served if it can be.
func TestSemaphoreWaiterThatLeavesPassesItsTurn(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		const name = "sem-leave"
		c, _ := newClient(t, b.Addr)
		s := c.Semaphore(name)
		must(t, s.SetPermits(ctx, 0))
		bigCtx, cancelBig := context.WithCancel(ctx)
		big := make(chan error, 1)
		go func() { big <- c.Semaphore(name).Acquire(bigCtx, 5) }()
		waitersOn(t, c, s.q.clientCh, 1)
		small := make(chan error, 1)
		go func() { small <- c.Semaphore(name).Acquire(ctx, 1) }()
		listeningOn(t, c, s.q.clientCh, 2)
		must(t, s.Release(ctx, 1)) // not enough for the large request: nobody is served
		select {
		case err := <-small:
			t.Fatalf("the small request overtook the large one ahead of it: %v", err)
		case err := <-big:
			t.Fatalf("the large request ended with 1 permit for 5: %v", err)
		default:
		}
		cancelBig()
		if err := <-big; !errors.Is(err, context.Canceled) {
			t.Fatalf("large request: %v, want context.Canceled", err)
		}
		if err := <-small; err != nil {
			t.Fatalf("small request behind it: %v", err)
		}
	})
}

// A TryAcquire with WaitTime gives up at its wait time with (false, nil), holding nothing.
func TestSemaphoreTryAcquireWaitTime(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		c, _ := newClient(t, b.Addr)
		s := c.Semaphore("sem-wait")
		must(t, s.SetPermits(ctx, 1))
		if ok, err := s.TryAcquire(ctx, 2, WaitTime(50*time.Millisecond)); ok || err != nil {
			t.Fatalf("TryAcquire(2) of 1 with a wait: %v, %v; want false, nil", ok, err)
		}
		got := make(chan error, 1)
		go func() {
			ok, err := c.Semaphore("sem-wait").TryAcquire(ctx, 2, WaitTime(5*time.Second))
			if err == nil && !ok {
				err = errors.New("not acquired")
			}
			got <- err
		}()
		waitersOn(t, c, s.q.clientCh, 1)
		must(t, s.Release(ctx, 1))
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if n := available(t, ctx, s); n != 0 {
			t.Fatalf("%d permits left, want 0", n)
		}
	})
}

// A Release hands its permits straight to its Client's longest-waiting waiter, with no
// request to Redis and no message, up to WithLocalHandoff times in a row; the next release
// goes to Redis, for every Client's waiters.
func TestSemaphoreLocalHandoff(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		const name = "sem-handoff"
		c, rdb := newClient(t, b.Addr, WithLocalHandoff(2))
		sub := rawSubscribe(t, ctx, rdb, "redisson_sc:{"+name+"}")
		s := c.Semaphore(name)
		must(t, s.SetPermits(ctx, 1))
		if ok, err := s.TryAcquire(ctx, 1); !ok || err != nil {
			t.Fatalf("TryAcquire: %v, %v", ok, err)
		}
		served := make(chan int, 4)
		for i := range 4 {
			go func() {
				if err := c.Semaphore(name).Acquire(ctx, 1); err != nil {
					t.Error(err)
					return
				}
				served <- i
			}()
			waitersOn(t, c, s.q.clientCh, i+1)
		}
		sub.published(t, ctx) // the SetPermits
		for i, handed := range []bool{true, true, false, true} {
			// Every waiter is parked: none is attempting, woken by the subscription's
			// confirmation, which may come late.
			parked(t, c, s, 4-i)
			must(t, s.Release(ctx, 1))
			if got := <-served; got != i {
				t.Fatalf("release %d served waiter %d, want %d (arrival order)", i+1, got, i)
			}
			got := sub.published(t, ctx)
			if handed && (len(got) != 0 || available(t, ctx, s) != 0) {
				t.Fatalf("release %d: published %q, %d available; want a hand-off: nothing", i+1, got, available(t, ctx, s))
			}
			if !handed && len(got) != 1 {
				t.Fatalf("release %d: published %q; want the permit back in Redis after 2 hand-offs in a row", i+1, got)
			}
		}
		must(t, s.Release(ctx, 1))
		if n := available(t, ctx, s); n != 1 {
			t.Fatalf("%d permits at the end, want 1", n)
		}
	})
}

// A waiter that wants more than a release gives is not handed part of it: the permits go to
// Redis, and the waiter takes them all there once enough are back.
func TestSemaphoreNoHandoffOfTooFewPermits(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		const name = "sem-handoff-few"
		c, _ := newClient(t, b.Addr)
		s := c.Semaphore(name)
		must(t, s.SetPermits(ctx, 0))
		done := make(chan error, 1)
		go func() { done <- c.Semaphore(name).Acquire(ctx, 2) }()
		waitersOn(t, c, s.q.clientCh, 1)
		must(t, s.Release(ctx, 1))
		if n := available(t, ctx, s); n != 1 {
			t.Fatalf("%d available after releasing 1 to a waiter of 2, want 1", n)
		}
		must(t, s.Release(ctx, 1))
		must(t, <-done)
		if n := available(t, ctx, s); n != 0 {
			t.Fatalf("%d available, want 0", n)
		}

		// All or nothing: a release of 2 to a waiter of 1 goes to Redis whole, so that a
		// release is never half done here and half refused there.
		go func() { done <- c.Semaphore(name).Acquire(ctx, 1) }()
		listeningOn(t, c, s.q.clientCh, 1)
		sub := rawSubscribe(t, ctx, b.Client(t), s.q.channel)
		must(t, s.Release(ctx, 2))
		must(t, <-done)
		if got := sub.published(t, ctx); len(got) != 1 || got[0] != "02" {
			t.Fatalf("a release of 2 to a waiter of 1 published %q, want [02]: it goes to Redis whole", got)
		}
		if n := available(t, ctx, s); n != 1 {
			t.Fatalf("%d available, want 1", n)
		}
	})
}
