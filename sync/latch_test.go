package sync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/names"
	"github.com/latchkey/latchkey/internal/redistest"
)

func count(t *testing.T, ctx context.Context, l *CountDownLatch) int {
	t.Helper()
	n, err := l.Count(ctx)
	must(t, err)
	return n
}

// Await returns for every awaiter of every Client when the count reaches zero, and not
// before, on every topology (on a Cluster the latch's channel is in another slot than its
// key).
func TestLatchAwaitReturnsOnZeroForEveryAwaiter(t *testing.T) {
	t.Parallel()
	topologies.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		const clients, awaiters = 3, 10
		name := topoName(t, "latch-zero")
		var cs []*Client
		for range clients {
			c, _ := newClientOn(t, b)
			cs = append(cs, c)
		}
		if ok, err := cs[0].CountDownLatch(name).TrySetCount(ctx, 3); !ok || err != nil {
			t.Fatalf("TrySetCount: %v, %v", ok, err)
		}
		done := make(chan error, clients*awaiters)
		for _, c := range cs {
			for range awaiters {
				go func() { done <- c.CountDownLatch(name).Await(ctx) }()
			}
		}
		for _, c := range cs {
			waitersOn(t, c, names.LatchChannel(name), awaiters)
		}
		for i, c := range cs {
			must(t, c.CountDownLatch(name).CountDown(ctx))
			if want := 2 - i; count(t, ctx, cs[0].CountDownLatch(name)) != want {
				t.Fatalf("count after %d count-downs: want %d", i+1, want)
			}
			if i < 2 && len(done) > 0 {
				t.Fatalf("an awaiter returned at count %d: %v", 2-i, <-done)
			}
		}
		for range clients * awaiters {
			select {
			case err := <-done:
				must(t, err)
			case <-ctx.Done():
				t.Fatal("not every awaiter returned")
			}
		}
		if exists(t, cs[0].rdb, name) {
			t.Fatal("the latch key is still there at zero")
		}
	})
}

func TestLatchAwaitHonoursContext(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		c, _ := newClient(t, b.Addr)
		l := c.CountDownLatch("latch-ctx")
		if err := l.Await(ctx); err != nil {
			t.Fatalf("Await on a latch that does not exist: %v, want nil at once", err)
		}
		must(t, func() error { _, err := l.TrySetCount(ctx, 1); return err }())
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if err := l.Await(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Await with a short deadline: %v, want DeadlineExceeded", err)
		}
		if c.mux.Waiters(names.LatchChannel("latch-ctx")) != 0 {
			t.Fatal("the awaiter whose ctx ended is still registered")
		}
	})
}

// Counting down past zero changes nothing, as in Redisson; a deleted latch can be set
// again, and Delete reports whether there was one.
func TestLatchCountDownPastZeroAndDelete(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		c, rdb := newClient(t, b.Addr)
		l := c.CountDownLatch("latch-past")
		must(t, l.CountDown(ctx))
		if n := count(t, ctx, l); n != 0 || exists(t, rdb, l.Name()) {
			t.Fatalf("a count-down of a missing latch left count %d", n)
		}
		if ok, err := l.TrySetCount(ctx, 2); !ok || err != nil {
			t.Fatalf("TrySetCount: %v, %v", ok, err)
		}
		if ok, err := l.TrySetCount(ctx, 5); ok || err != nil {
			t.Fatalf("TrySetCount of a set latch: %v, %v; want false", ok, err)
		}
		for range 3 {
			must(t, l.CountDown(ctx))
		}
		if n := count(t, ctx, l); n != 0 || exists(t, rdb, l.Name()) {
			t.Fatalf("three count-downs of 2 left count %d", n)
		}
		if ok, err := l.TrySetCount(ctx, 4); !ok || err != nil {
			t.Fatalf("TrySetCount after zero: %v, %v", ok, err)
		}
		if ok, err := l.Delete(ctx); !ok || err != nil {
			t.Fatalf("Delete: %v, %v", ok, err)
		}
		if ok, err := l.Delete(ctx); ok || err != nil {
			t.Fatalf("Delete of a deleted latch: %v, %v; want false", ok, err)
		}
	})
}

// Wire level: the latch's messages are Redisson's, and an awaiter wakes on a count-down made
// the way Redisson's script makes it.
func TestLatchWire(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		const name = "latch-wire"
		c, rdb := newClient(t, b.Addr)
		sub := rawSubscribe(t, ctx, rdb, "redisson_countdownlatch__channel__{"+name+"}")
		l := c.CountDownLatch(name)
		must(t, func() error { _, err := l.TrySetCount(ctx, 2); return err }())
		if v, err := rdb.Do(ctx, rdb.B().Get().Key(name).Build()).ToString(); v != "2" || err != nil {
			t.Fatalf("latch key %q (%v), want \"2\"", v, err)
		}
		must(t, l.CountDown(ctx))
		must(t, l.CountDown(ctx))
		if got := sub.published(t, ctx); len(got) != 2 || got[0] != "1" || got[1] != "0" {
			t.Fatalf("published %q, want [1 0] (NEW_COUNT, ZERO_COUNT)", got)
		}

		// A Java count-down to zero: DECR, DEL, PUBLISH 0, in one script as Redisson's.
		must(t, func() error { _, err := l.TrySetCount(ctx, 1); return err }())
		done := make(chan error, 1)
		go func() { done <- c.CountDownLatch(name).Await(ctx) }()
		listeningOn(t, c, l.channel, 1)
		javaCountDown := "local v = redis.call('decr', KEYS[1]); if v <= 0 then redis.call('del', KEYS[1]) end; " +
			"if v == 0 then redis.call('publish', KEYS[2], 0) end"
		must(t, rdb.Do(ctx, rdb.B().Eval().Script(javaCountDown).Numkeys(2).Key(name, l.channel).Build()).Error())
		select {
		case err := <-done:
			must(t, err)
		case <-ctx.Done():
			t.Fatal("the awaiter did not wake on Redisson's zero message")
		}
	})
}

// Wire level: a release publishes the new total on redisson_sc:{name}, and a waiter wakes on
// a release made the way Redisson's script makes it (INCRBY, PUBLISH the total).
func TestSemaphoreWire(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		const name = "sem-wire"
		c, rdb := newClient(t, b.Addr)
		sub := rawSubscribe(t, ctx, rdb, "redisson_sc:{"+name+"}")
		s := c.Semaphore(name)
		must(t, s.SetPermits(ctx, 2))
		must(t, s.Release(ctx, 3))
		if v, err := rdb.Do(ctx, rdb.B().Get().Key(name).Build()).ToString(); v != "5" || err != nil {
			t.Fatalf("semaphore key %q (%v), want \"5\"", v, err)
		}
		if n, err := s.DrainPermits(ctx); n != 5 || err != nil {
			t.Fatalf("DrainPermits: %d, %v", n, err)
		}
		if got := sub.published(t, ctx); len(got) != 2 || got[0] != "02" || got[1] != "05" {
			t.Fatalf("published %q, want [02 05] (the totals, which Java reads as 2 and 5; a drain publishes nothing)", got)
		}

		done := make(chan error, 1)
		go func() { done <- c.Semaphore(name).Acquire(ctx, 2) }()
		listeningOn(t, c, s.q.clientCh, 1)
		must(t, rdb.Do(ctx, rdb.B().Incrby().Key(name).Increment(2).Build()).Error())
		must(t, rdb.Do(ctx, rdb.B().Publish().Channel(s.q.channel).Message("2").Build()).Error())
		select {
		case err := <-done:
			must(t, err)
		case <-ctx.Done():
			t.Fatal("the waiter did not wake on Redisson's release message")
		}
		if n := available(t, ctx, s); n != 0 {
			t.Fatalf("%d permits left, want 0", n)
		}
	})
}

// A deleted latch counts zero: its awaiters return on Delete's message, not at a re-check.
func TestLatchDeleteReleasesAwaiters(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second) // the re-check is 30 s away
		c, _ := newClient(t, b.Addr)
		l := c.CountDownLatch("latch-delete")
		must(t, func() error { _, err := l.TrySetCount(ctx, 1); return err }())
		done := make(chan error, 1)
		go func() { done <- c.CountDownLatch("latch-delete").Await(ctx) }()
		listeningOn(t, c, l.channel, 1)
		if ok, err := l.Delete(ctx); !ok || err != nil {
			t.Fatalf("Delete: %v, %v", ok, err)
		}
		if err := <-done; err != nil {
			t.Fatalf("Await after Delete: %v", err)
		}
	})
}
