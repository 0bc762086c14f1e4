package sync

import (
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/lua"
	"github.com/redis/rueidis"
)

// warmCounters runs every semaphore and latch script once, so that a fault armed next hits
// the request under test, not a NOSCRIPT fallback.
func warmCounters(t *testing.T, c *Client) {
	t.Helper()
	ctx := testCtx(t, 5*time.Second)
	s, l := c.Semaphore("warm-up:sem"), c.CountDownLatch("warm-up:latch")
	must(t, s.SetPermits(ctx, 1))
	must(t, s.Release(ctx, 1))
	_, err := s.TryAcquire(ctx, 1)
	must(t, err)
	_, err = l.TrySetCount(ctx, 1)
	must(t, err)
	must(t, l.CountDown(ctx))
	ps := c.PermitSemaphore("warm-up:permits")
	must(t, ps.SetPermits(ctx, 1))
	p, err := ps.Acquire(ctx, 1)
	must(t, err)
	must(t, p.Release(ctx))
	_, err = ps.AvailablePermits(ctx)
	must(t, err)
}

// lostThenUnreachable starts call, whose first request containing marker runs but loses its
// reply, and makes Redis unreachable then, so that its repeats get none either: call ends
// with its outcome unknown, delivered on the channel returned.
func lostThenUnreachable(t *testing.T, proxy *redistest.Proxy, marker string, call func() error) <-chan error {
	t.Helper()
	dropped := proxy.Dropped()
	proxy.DropReplyAndBlackhole([]byte(marker))
	done := make(chan error, 1)
	go func() { done <- call() }()
	eventually(t, waitFor, "the reply dropped", func() bool { return proxy.Dropped() == dropped+1 })
	return done
}

// A request whose reply is lost is repeated, and acts once: a release gives its permits
// once, an acquire takes them once, a count-down counts once.
func TestCountersLostReplyActsOnce(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		const name = "lossy-counter"
		proxy := redistest.NewProxy(t, b.Addr)
		c, _ := newClient(t, proxy.Addr())
		warmCounters(t, c)
		s := c.Semaphore(name)
		must(t, s.SetPermits(ctx, 5))

		proxy.DropReplyAfter([]byte(name))
		must(t, s.Release(ctx, 2))
		if n := available(t, ctx, s); n != 7 || proxy.Dropped() != 1 {
			t.Fatalf("after a release of 2 with its reply lost: %d permits (replies dropped: %d), want 7", n, proxy.Dropped())
		}
		proxy.DropReplyAfter([]byte(name))
		if ok, err := s.TryAcquire(ctx, 3); !ok || err != nil {
			t.Fatalf("TryAcquire with its reply lost: %v, %v", ok, err)
		}
		if n := available(t, ctx, s); n != 4 || proxy.Dropped() != 2 {
			t.Fatalf("after an acquire of 3 with its reply lost: %d permits (replies dropped: %d), want 4", n, proxy.Dropped())
		}

		ps := c.PermitSemaphore(name + ":permits")
		must(t, ps.SetPermits(ctx, 3))
		proxy.DropReplyAfter([]byte(name + ":permits"))
		p, err := ps.Acquire(ctx, 2)
		must(t, err)
		if got := permitCounts(t, ctx, ps); got != [3]int{1, 2, 3} || proxy.Dropped() != 3 {
			t.Fatalf("after an acquire of 2 permits with its reply lost: %v (replies dropped: %d), want [1 2 3]", got, proxy.Dropped())
		}
		proxy.DropReplyAfter([]byte(name + ":permits"))
		must(t, p.Release(ctx))
		if got := permitCounts(t, ctx, ps); got != [3]int{3, 0, 3} || proxy.Dropped() != 4 {
			t.Fatalf("after their release with its reply lost: %v (replies dropped: %d), want [3 0 3]", got, proxy.Dropped())
		}

		l := c.CountDownLatch(name + ":latch")
		must(t, func() error { _, err := l.TrySetCount(ctx, 3); return err }())
		proxy.DropReplyAfter([]byte(name + ":latch"))
		must(t, l.CountDown(ctx))
		if n := count(t, ctx, l); n != 2 || proxy.Dropped() != 5 {
			t.Fatalf("after a count-down with its reply lost: count %d (replies dropped: %d), want 2", n, proxy.Dropped())
		}
	})
}

// An acquire whose outcome stays unknown took its permits (its first run acted), and the
// caller was told it does not know: the Client gives them back in the background as soon as
// Redis answers, and a late run of the acquire could take nothing.
func TestSemaphoreUnknownAcquireIsCancelled(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		const name = "unknown-acquire"
		proxy := redistest.NewProxy(t, b.Addr)
		c, _ := newClient(t, proxy.Addr(), WithRetryBudget(shortBudget))
		warmCounters(t, c)
		admin := b.Client(t)
		s := c.Semaphore(name)
		must(t, s.SetPermits(ctx, 5))
		acq := lostThenUnreachable(t, proxy, name, func() error { return s.Acquire(ctx, 3) }) // takes 3
		if err := <-acq; !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("Acquire with a lost reply and Redis then unreachable: %v, want ErrOutcomeUnknown", err)
		}
		if n, err := admin.Do(ctx, admin.B().Get().Key(name).Build()).AsInt64(); n != 2 || err != nil {
			t.Fatalf("%d permits (%v) while Redis is unreachable, want 2: the first run took 3", n, err)
		}
		// The Client cancels it in the background, once Redis answers again.
		proxy.Blackhole(false)
		eventually(t, waitFor, "the unknown acquire's 3 permits given back", func() bool {
			return available(t, ctx, s) == 5
		})
		must(t, s.p.lock(ctx))
		latch, req := s.p.latch, s.p.reqs
		s.p.unlock()
		if ok, err := s.TryAcquire(ctx, 1); !ok || err != nil {
			t.Fatalf("next TryAcquire: %v, %v", ok, err)
		}
		if n := available(t, ctx, s); n != 4 {
			t.Fatalf("%d permits after the next acquire, want 4", n)
		}
		// The cancel marked the request stale: a late run of it changes nothing.
		late := lua.SemAcquire{SemKeys: s.keys(), Numbered: lua.Numbered{Latch: latch, N: req, LatchMs: unlockLatchMs},
			Listener: s.q.listener, Permits: 3, Publish: c.publishCmd} // the acquire, as its first run sent it
		if v, err := late.Call().Exec(ctx, admin).ToMessage(); !v.IsNil() || (err != nil && !rueidis.IsRedisNil(err)) {
			t.Fatalf("a late run of the cancelled acquire replied %v, %v; want nil", v, err)
		}
		if n := available(t, ctx, s); n != 4 {
			t.Fatalf("%d permits after a late run of the cancelled acquire, want 4", n)
		}
		must(t, s.Release(ctx, 1))
		if n := available(t, ctx, s); n != 5 {
			t.Fatalf("%d permits at the end, want 5", n)
		}
	})
}

// An acquire of unknown outcome is cancelled whatever the handle does next: G1's acquire runs
// and loses its reply, Redis becomes unreachable, G2's TryAcquire starts meanwhile on a
// second owner, both end with ErrOutcomeUnknown, and the handle is then used one call at a
// time. G1's request is settled by the Client, not at its owner's next request: that owner
// may lie under G2's in the pool, unused, and its 3 permits would stay taken for good.
func TestSemaphoreUnknownAcquireOfBusyHandleIsCancelled(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "sem-unknown-acquire-busy"
		proxy := redistest.NewProxy(t, b.Addr)
		c, _ := newClient(t, proxy.Addr(), WithRetryBudget(shortBudget))
		warmCounters(t, c)
		s := c.Semaphore(name)
		must(t, s.SetPermits(ctx, 5))

		g1 := lostThenUnreachable(t, proxy, shaOf(lua.SemAcquire{}), func() error {
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
		c, _ := newClient(t, proxy.Addr(), WithRetryBudget(shortBudget))
		warmCounters(t, c)
		admin := b.Client(t)
		s := c.Semaphore(name)
		must(t, s.SetPermits(ctx, 5))
		if ok, err := s.TryAcquire(ctx, 1); !ok || err != nil {
			t.Fatalf("TryAcquire: %v, %v", ok, err)
		}

		rel := lostThenUnreachable(t, proxy, shaOf(lua.SemRelease{}), func() error {
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
