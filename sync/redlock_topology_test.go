package sync

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

// A red lock whose 3 masters are 3 topologies — a redis-server of the test's own (behind a
// fault proxy), the shared Cluster and the shared Sentinel set — excludes: 2 instances × 4
// goroutines taking turns never have two inside, and no update is lost. With the own server
// cut off, a red lock still holds on the other 2 (a majority), and a second one then does
// not.
func TestRedLockAcrossTopologies(t *testing.T) {
	t.Parallel()
	cl, se := topologies.Cluster(t), topologies.Sentinel(t)
	own := redistest.NewProxy(t, redistest.Redis(t).Addr)
	ctx := testCtx(t, time.Minute)
	name := topoName(t, "red")
	// instance is one service instance: a Client on each master, the own server's with a
	// budget that ends its requests soon once it is cut off.
	instance := func() []*Client {
		c0, _ := newClient(t, own.Addr(), WithRetryBudget(shortBudget))
		c1, _ := newClientOn(t, cl)
		c2, _ := newClientOn(t, se)
		return []*Client{c0, c1, c2}
	}
	// All connected before the own server is cut off: a new client's first dial to it fails.
	racers, a, b := [][]*Client{instance(), instance()}, instance(), instance()
	const goroutines, rounds = 4, 4
	var inside, maxInside, count atomic.Int64
	done := make(chan error, 2*goroutines)
	start := time.Now()
	for _, cs := range racers {
		for range goroutines {
			go func() {
				m := redLock(cs, name)
				for range rounds {
					if err := m.Lock(ctx, Lease(time.Minute)); err != nil {
						done <- err
						return
					}
					n := inside.Add(1)
					for v := maxInside.Load(); n > v && !maxInside.CompareAndSwap(v, n); v = maxInside.Load() {
					}
					count.Store(count.Load() + 1) // a read-modify-write only exclusion makes exact
					inside.Add(-1)
					if err := m.Unlock(ctx); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
		}
	}
	for range 2 * goroutines {
		select {
		case err := <-done:
			must(t, err)
		case <-ctx.Done():
			t.Fatal("the red-lock workers did not finish")
		}
	}
	if maxInside.Load() != 1 || count.Load() != 2*goroutines*rounds {
		t.Fatalf("up to %d inside at once, %d updates; want 1 at a time, exactly %d", maxInside.Load(), count.Load(), 2*goroutines*rounds)
	}

	t.Logf("%d red-lock cycles in %v", count.Load(), time.Since(start))
	own.Blackhole(true)
	first := redLock(a, name)
	// With a wait, each master gets its share of it to answer, not the least a red lock
	// gives one (1 s): a loaded machine's live masters took longer than a second.
	if ok, err := first.TryLock(ctx, Lease(time.Minute), WaitTime(15*time.Second)); !ok || err != nil {
		t.Fatalf("TryLock with the own server cut off, the Cluster and the Sentinel set up: %v, %v", ok, err)
	}
	for i, c := range a[1:] {
		if held, err := c.Lock(name).IsLocked(ctx); !held || err != nil {
			t.Fatalf("topology %d does not hold the red lock: %v, %v", i+1, held, err)
		}
	}
	if ok, err := redLock(b, name).TryLock(ctx); ok || err != nil {
		t.Fatalf("a second red lock on the held majority: %v, %v; want false, nil", ok, err)
	}
	t.Logf("cut off, taken by the majority in %v", time.Since(start))
	must(t, first.Unlock(ctx))
	t.Logf("and given back in %v", time.Since(start))
	for i, c := range a[1:] {
		if held, err := c.Lock(name).IsLocked(ctx); held || err != nil {
			t.Fatalf("topology %d holds the red lock after its Unlock: %v, %v", i+1, held, err)
		}
	}
}
