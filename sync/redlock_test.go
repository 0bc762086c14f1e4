package sync

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

// masters starts n independent servers of b's kind, each behind a fault proxy, with a
// Client on each, whose retry budget is budget.
func masters(t *testing.T, b *redistest.Backend, n int, budget time.Duration) ([]*redistest.Proxy, []*Client) {
	t.Helper()
	var proxies []*redistest.Proxy
	var cs []*Client
	for range n {
		srv := redistest.Miniredis(t)
		if b.Name == redistest.NameRedis {
			srv = redistest.Redis(t)
		}
		p := redistest.NewProxy(t, srv.Addr)
		c, _ := newClient(t, p.Addr(), WithRetryBudget(budget))
		proxies = append(proxies, p)
		cs = append(cs, c)
	}
	return proxies, cs
}

// redLock is a red lock on name over one lock per Client.
func redLock(cs []*Client, name string) *Multi {
	var ls []Locker
	for _, c := range cs {
		ls = append(ls, c.Lock(name))
	}
	return RedLock(ls...)
}

// A red lock over 5 masters holds with 2 of them down, not with 3; a second red lock on the
// same masters never holds with the first.
func TestRedLockQuorum(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "red"
		// A live master's requests are awaited shortBudget (2 s, with 100 ms, was not
		// enough for a loaded machine's Unlock); a dead one's end with the red round anyway.
		proxies, cs := masters(t, b, 5, shortBudget)
		proxies[0].Blackhole(true)
		proxies[3].Blackhole(true)
		first := redLock(cs, name)
		const lease = 10 * time.Second
		start := time.Now()
		// With a wait, each master gets its share of it to answer (3 s), not the least a red
		// lock gives one (1 s): a loaded machine's live masters took longer than a second, and
		// a red lock without a wait counted them as down.
		if ok, err := first.TryLock(ctx, Lease(lease), WaitTime(15*time.Second)); !ok || err != nil {
			t.Fatalf("TryLock with 2 of 5 masters down: %v, %v", ok, err)
		}
		// At most the lease less the drift (1 % + 2 ms), at least that less the time the
		// acquisition took, however long that was.
		d, ok := first.Deadline()
		drift := lease/100 + 2*time.Millisecond
		if left := time.Until(d); !ok || left > lease-drift || left < lease-drift-time.Since(start) {
			t.Fatalf("validity %v (%v), want the lease less the acquisition and the drift", left, ok)
		}
		if ok, err := redLock(cs, name).TryLock(ctx); ok || err != nil {
			t.Fatalf("a second red lock on held masters: %v, %v; want false, nil", ok, err)
		}
		must(t, first.Unlock(ctx))

		proxies[4].Blackhole(true) // 3 of 5 down
		if ok, err := redLock(cs, name).TryLock(ctx); ok || err != nil {
			t.Fatalf("TryLock with 3 of 5 masters down: %v, %v; want false, nil", ok, err)
		}
		for _, i := range []int{1, 2} {
			if held, err := cs[i].Lock(name).IsLocked(ctx); held || err != nil {
				t.Fatalf("master %d holds the lock after a red lock that failed: %v, %v", i, held, err)
			}
		}
	})
}

func TestRedLockBadInput(t *testing.T) {
	t.Parallel()
	b := redistest.Miniredis(t)
	ctx := testCtx(t, 5*time.Second)
	c, _ := newClient(t, b.Addr)
	if _, err := RedLock(c.Lock("a"), c.Lock("b")).TryLock(ctx); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("a red lock of 2: %v, want ErrInvalidArgument", err)
	}
	if _, err := RedLock().TryLock(ctx); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("a red lock of none: %v, want ErrInvalidArgument", err)
	}
}

// Two red locks on the same 5 masters contend while masters drop off the network and come
// back: never both hold within their validity.
func TestRedLockExclusionUnderPartitions(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		cpuBound(t)
		ctx := testCtx(t, 60*time.Second)
		const name = "red-partitions"
		proxies, cs := masters(t, b, 5, 100*time.Millisecond)
		var other []*Client // the second contender's Client on every master
		for _, p := range proxies {
			c, _ := newClient(t, p.Addr(), WithRetryBudget(100*time.Millisecond))
			other = append(other, c)
		}
		reds := []*Multi{redLock(cs, name), redLock(other, name)}
		type hold struct{ from, until time.Time }
		holds := make(chan [2]hold, 1)
		holds <- [2]hold{}
		// At least 1.5 s, and until each has held (at most 30 s: a slow machine).
		minEnd, maxEnd := time.Now().Add(1500*time.Millisecond), time.Now().Add(30*time.Second)
		var taken [2]atomic.Int64
		running := func() bool {
			now := time.Now()
			return now.Before(maxEnd) && (now.Before(minEnd) || taken[0].Load() == 0 || taken[1].Load() == 0)
		}
		done := make(chan struct{})
		go func() { // the partitions
			defer close(done)
			for i := 0; running(); i++ {
				p := proxies[i%5]
				p.Blackhole(true)
				time.Sleep(60 * time.Millisecond)
				p.Blackhole(false)
			}
		}()
		errs := make(chan error, 2)
		for k, m := range reds {
			go func() {
				for running() {
					// A lease that outlasts an acquisition on five masters on a loaded machine
					// (with 300 ms no validity was left, and neither ever held).
					ok, err := m.TryLock(ctx, Lease(1500*time.Millisecond), WaitTime(500*time.Millisecond))
					if err != nil {
						errs <- err
						return
					}
					if !ok {
						continue
					}
					taken[k].Add(1)
					until, _ := m.Deadline()
					h := <-holds
					mine, theirs := hold{time.Now(), until}, h[1-k]
					if theirs.until.After(mine.from) {
						errs <- errors.New("both red locks held within their validity")
					}
					h[k] = mine
					holds <- h
					time.Sleep(10 * time.Millisecond) // the work
					h = <-holds
					h[k].until = time.Now() // released: its validity ends here
					holds <- h
					_ = m.Unlock(ctx) // a master down may refuse: it lapses with its lease
				}
				errs <- nil
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		<-done
		if taken[0].Load() == 0 || taken[1].Load() == 0 {
			t.Fatalf("acquisitions %d and %d in 30 s: both red locks must have held for the test to mean anything",
				taken[0].Load(), taken[1].Load())
		}
	})
}

// A red lock is for masters that fail: with 2 of 5 real redis-servers killed, or paused
// (SIGSTOP, a hung host), an acquisition with a wait succeeds within its wait time — each
// master gets its share of it, a dead or hung one no more — and its Deadline is honest: in
// the future, within the lease. With 3 of 5 down it fails within its wait time, and leaves
// nothing held on the live masters. The Clients keep the default retry budget (10 s), which
// no master may take.
func TestRedLockMastersKilledOrPaused(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"killed", "paused"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			// A wait whose share (a fifth each) gives a live master on a loaded machine time to
			// answer: with 2 s, 400 ms each, two of three live masters were taken for dead under
			// two CPU hogs.
			const name, wait, lease = "red-down", 10 * time.Second, 10 * time.Second
			const slack = 300 * time.Millisecond // past the wait (a timer set for it): a send's grace
			ctx := testCtx(t, 30*time.Second)
			var servers []*redistest.Server
			var cs []*Client
			for range 5 {
				s := redistest.RedisServer(t)
				c, _ := newClient(t, s.Addr)
				servers = append(servers, s)
				cs = append(cs, c)
			}
			down := func(i int) {
				if how == "killed" {
					servers[i].Kill()
				} else {
					servers[i].Pause()
					t.Cleanup(servers[i].Resume) // before the Clients close (cleanups run last first)
				}
			}
			down(0)
			down(3)

			m := redLock(cs, name)
			start := time.Now()
			ok, err := m.TryLock(ctx, WaitTime(wait), Lease(lease))
			took := time.Since(start)
			if !ok || err != nil {
				t.Fatalf("TryLock with 2 of 5 masters %s: %v, %v after %v", how, ok, err, took)
			}
			if took > wait {
				t.Errorf("TryLock with 2 of 5 masters %s took %v, more than its wait time %v", how, took, wait)
			}
			d, held := m.Deadline()
			if now := time.Now(); !held || !d.After(now) || d.After(start.Add(lease)) {
				t.Errorf("Deadline %v (%v): want in the future and within the lease from the start (%v)",
					d.Sub(now), held, start.Add(lease).Sub(now))
			}
			t.Logf("%s: taken in %v, valid for %v", how, took.Round(time.Millisecond), time.Until(d).Round(time.Millisecond))
			for _, i := range []int{1, 2, 4} {
				if held, err := cs[i].Lock(name).IsLocked(ctx); !held || err != nil {
					t.Errorf("live master %d: IsLocked %v, %v; want held", i, held, err)
				}
			}
			_ = m.Unlock(ctx) // the masters down cannot answer: their holds lapse with the lease

			down(4) // 3 of 5 down
			start = time.Now()
			woke := wokenAt(start.Add(wait))
			ok, err = redLock(cs, name).TryLock(ctx, WaitTime(wait), Lease(lease))
			took = time.Since(start)
			if ok || err != nil {
				t.Fatalf("TryLock with 3 of 5 masters %s: %v, %v; want false, nil", how, ok, err)
			}
			if late := took - wait - max((<-woke).Sub(start.Add(wait)), 0); late > slack {
				t.Errorf("TryLock with 3 of 5 masters %s took %v, %v more than its wait time %v past a timer set for its end", how, took, late, wait)
			}
			for _, i := range []int{1, 2} {
				if held, err := cs[i].Lock(name).IsLocked(ctx); held || err != nil {
					t.Errorf("live master %d holds the lock after a red lock that failed: %v, %v", i, held, err)
				}
			}
			t.Logf("%s, 3 of 5: failed in %v", how, took.Round(time.Millisecond))
		})
	}
}
