package sync

import (
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/lua"
	"github.com/redis/rueidis"
)

// The most permits one call may take are taken and released: the scripts copy their IDs
// without unpack, which Redis's Lua 5.1 refuses beyond its C stack (LUAI_MAXCSTACK = 8000).
func TestPermitAcquireMostPermits(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 2*time.Minute)
		// Miniredis runs the 4096-permit scripts in seconds, more on a loaded machine: past
		// rueidis's default 10 s read timeout there.
		opt := b.ClientOption()
		opt.ConnWriteTimeout = time.Minute
		rdb, err := rueidis.NewClient(opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rdb.Close)
		c, err := New(rdb)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		s := c.PermitSemaphore("review-many")
		const n = maxPermitsPerCall // beyond what Lua's unpack takes on a small stack
		must(t, s.SetPermits(ctx, n))
		p, err := s.Acquire(ctx, n)
		if err != nil {
			t.Fatalf("Acquire(%d) of %d (documented limit %d): %v", n, n, maxPermitsPerCall, err)
		}
		if err := p.Release(ctx); err != nil {
			t.Fatalf("Release of %d permits: %v", n, err)
		}
	})
}

// scriptSHA is the SHA1 script s is sent under: a marker for the fault proxy that matches
// one script and nothing else.
func scriptSHA(s *lua.Script) string { return s.SHA() }

// An acquire of unknown outcome is cancelled whatever the handle does next: G1's acquire runs
// and loses its reply, Redis becomes unreachable, G2's TryAcquire starts meanwhile on a
// second owner, both end with ErrOutcomeUnknown, and the handle is then used one call at a
// time. (With "settled before the handle's next request", G1's owner lay buried under G2's
// in the pool and its 3 permits stayed taken for good.)
func TestSemaphoreUnknownAcquireOfBusyHandleIsCancelled(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "review-buried"
		proxy := redistest.NewProxy(t, b.Addr)
		c, _ := newClient(t, proxy.Addr(), WithRetryBudget(600*time.Millisecond))
		warmCounters(t, c)
		s := c.Semaphore(name)
		must(t, s.SetPermits(ctx, 5))

		g1 := lostThenUnreachable(t, proxy, scriptSHA(lua.SemAcquire), func() error {
			_, err := s.TryAcquire(ctx, 3) // takes 3
			return err
		})
		time.Sleep(100 * time.Millisecond)
		g2 := make(chan error, 1)
		go func() {
			_, err := s.TryAcquire(ctx, 1) // a concurrent call: a second owner of the pool
			g2 <- err
		}()
		if err := <-g1; !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("G1: %v, want ErrOutcomeUnknown", err)
		}
		if err := <-g2; !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("G2: %v, want ErrOutcomeUnknown", err)
		}
		proxy.Blackhole(false)

		// The handle is used one call at a time from now on.
		for range 5 {
			if ok, err := s.TryAcquire(ctx, 1); !ok || err != nil {
				t.Fatalf("TryAcquire: %v, %v", ok, err)
			}
			must(t, s.Release(ctx, 1))
		}
		eventually(t, waitFor, "the unknown acquire's 3 permits given back", func() bool {
			return available(t, ctx, s) == 5
		})
	})
}

// A Release that ran but whose reply was lost, with Redis then unreachable past the retry
// budget, is repeated in the background as soon as Redis answers again — not at the
// handle's next call, which could come after the request's mark expired (5 minutes) and
// release twice.
func TestSettleUnknownReleaseInBackground(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "settle-background"
		proxy := redistest.NewProxy(t, b.Addr)
		c, _ := newClient(t, proxy.Addr(), WithRetryBudget(300*time.Millisecond))
		warmCounters(t, c)
		admin := b.Client(t)
		s := c.Semaphore(name)
		must(t, s.SetPermits(ctx, 5))
		if ok, err := s.TryAcquire(ctx, 1); !ok || err != nil {
			t.Fatalf("TryAcquire: %v, %v", ok, err)
		}

		rel := lostThenUnreachable(t, proxy, scriptSHA(lua.SemRelease), func() error {
			return s.Release(ctx, 1) // 5 available again
		})
		if err := <-rel; !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("Release: %v, want ErrOutcomeUnknown", err)
		}
		settled := func() bool {
			s.p.mu.Lock()
			defer s.p.mu.Unlock()
			return len(s.p.idle) == 1
		}
		if settled() {
			t.Fatal("the unknown release's owner is back in the pool before Redis answered")
		}
		proxy.Blackhole(false)
		eventually(t, waitFor, "the release settled in the background", settled)
		if n, err := admin.Do(ctx, admin.B().Get().Key(name).Build()).AsInt64(); n != 5 || err != nil {
			t.Fatalf("%d permits (%v) after the release and its repeat, want 5", n, err)
		}

		// Five minutes pass before the handle's next call: its request key expires.
		keys, err := admin.Do(ctx, admin.B().Keys().Pattern("redisson_unlock_latch:{"+name+"}:*").Build()).AsStrSlice()
		must(t, err)
		for _, k := range keys {
			must(t, admin.Do(ctx, admin.B().Del().Key(k).Build()).Error())
		}
		if ok, err := s.TryAcquire(ctx, 1); !ok || err != nil {
			t.Fatalf("TryAcquire: %v, %v", ok, err)
		}
		if n := available(t, ctx, s); n != 4 {
			t.Fatalf("%d permits available with 1 of 5 taken, want 4: the release was run again", n)
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

// UpdateLeaseTime never shortens a lease: were it to, Redis would give the permit back while
// its Permits still say Valid, and another process would take it.
func TestPermitUpdateLeaseTimeOnlyGrows(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "review-update-lease"
		c1, _ := newClient(t, b.Addr)
		c2, _ := newClient(t, b.Addr)
		s := c1.PermitSemaphore(name)
		must(t, s.SetPermits(ctx, 1))
		p, err := s.Acquire(ctx, 1) // kept by the watchdog
		must(t, err)
		ok, err := s.UpdateLeaseTime(ctx, p.IDs()[0], 20*time.Millisecond)
		if !ok || err != nil {
			t.Fatalf("UpdateLeaseTime: %v, %v", ok, err)
		}
		time.Sleep(50 * time.Millisecond)
		_, ok, err = c2.PermitSemaphore(name).TryAcquire(ctx, 1)
		must(t, err)
		if ok && p.Valid() {
			t.Fatalf("another Client took the only permit while the holder's Permits are Valid (deadline %v)", func() time.Time { d, _ := p.Deadline(); return d }())
		}
	})
}

// A PermitSemaphore waiter that becomes first re-checks when the permit the waiter ahead took
// expires: the served waiter wakes it, and its attempt learns the nearest expiry. (It used
// to wait for its old timer, the watchdog timeout, though the permit came back after 200 ms.)
func TestPermitWaiterBecomingFirstSeesShortLease(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "review-first-stale"
		c, _ := newClient(t, b.Addr)
		s := c.PermitSemaphore(name)
		must(t, s.SetPermits(ctx, 1))
		held, err := s.Acquire(ctx, 1) // kept by the watchdog: it expires 30 s ahead
		must(t, err)

		a := make(chan error, 1)
		go func() {
			// Then never released. Long enough for the acquire to return within it on a loaded
			// machine (200 ms was not), far shorter than B's 30 s timer.
			_, err := c.PermitSemaphore(name).Acquire(ctx, 1, Lease(1500*time.Millisecond))
			a <- err
		}()
		listeningOn(t, c, s.channel, 1)
		time.Sleep(50 * time.Millisecond)
		bDone := make(chan time.Time, 1)
		go func() {
			if _, err := c.PermitSemaphore(name).Acquire(ctx, 1); err == nil {
				bDone <- time.Now()
			}
		}()
		waitersOn(t, c, s.channel, 2)
		must(t, held.Release(ctx)) // A is served; its permit's lease ends 1.5 s later
		must(t, <-a)
		expired := time.Now().Add(1500 * time.Millisecond)
		select {
		case at := <-bDone:
			t.Logf("B served %v after A's permit expired", at.Sub(expired))
		case <-time.After(10 * time.Second):
			t.Fatalf("B not served 8.5 s after A's 1.5 s permit expired (waits for its 30 s timer)")
		}
	})
}
