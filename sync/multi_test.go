package sync

import (
	"context"
	"errors"
	gosync "sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

var (
	_ Locker = (*Lock)(nil)
	_ Locker = (*FairLock)(nil)
	_ Locker = (*FencedLock)(nil)
	_ Locker = (*RWLock)(nil)
)

// A multi-lock over every kind of lock, on two Clients, takes them all and gives them all
// back; when one is held elsewhere it takes none. On every topology: on a Cluster, its
// locks are on different masters.
func TestMultiLockAllOrNothing(t *testing.T) {
	t.Parallel()
	topologies.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		c1, rdb := newClientOn(t, b)
		c2, _ := newClientOn(t, b)
		names := namesOnShards(t, b, "multi", 4)
		m := MultiLock(c1.Lock(names[0]), c2.FairLock(names[1]), c1.FencedLock(names[2]), c2.RWLock(names[3]).Reader())
		must(t, m.Lock(ctx))
		masters := map[string]bool{}
		for _, n := range names {
			if !exists(t, rdb, n) {
				t.Fatalf("%s not held after Lock", n)
			}
			// Held on the master that serves it, asked directly.
			master := b.ShardOf(n).Master
			if !exists(t, redistest.ClientFor(t, master), n) {
				t.Fatalf("%s not on its master %s", n, master)
			}
			masters[master] = true
		}
		if len(masters) != len(b.Shards()) {
			t.Fatalf("the locks are on %d masters, want every one of the %d", len(masters), len(b.Shards()))
		}
		// A mutex: a second acquisition through the same Multi waits for the first's Unlock.
		if ok, err := m.TryLock(ctx); ok || err != nil {
			t.Fatalf("TryLock of a held multi-lock: %v, %v; want false, nil", ok, err)
		}
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		if err := m.Lock(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock of a held multi-lock: %v, want it to wait until its context ends", err)
		}
		must(t, m.Unlock(ctx))
		for _, n := range names {
			if exists(t, rdb, n) {
				t.Fatalf("%s still there after Unlock", n)
			}
		}
		if err := m.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("second Unlock: %v, want ErrNotHeld", err)
		}

		other := c2.Lock(names[2])
		must(t, other.Lock(ctx))
		if ok, err := m.TryLock(ctx); ok || err != nil {
			t.Fatalf("TryLock with one lock held elsewhere: %v, %v; want false, nil", ok, err)
		}
		for _, n := range []string{names[0], names[1], names[3]} {
			if exists(t, rdb, n) {
				t.Fatalf("%s held after a TryLock that failed: not all or nothing", n)
			}
		}
		go func() {
			time.Sleep(100 * time.Millisecond) // the other holder's work
			must(t, other.Unlock(ctx))
		}()
		if ok, err := m.TryLock(ctx, WaitTime(5*time.Second)); !ok || err != nil {
			t.Fatalf("TryLock with a wait, the lock freed meanwhile: %v, %v", ok, err)
		}
		must(t, m.Unlock(ctx))
	})
}

// barrier is a Locker whose first successful TryLock waits until every party's has
// happened: it makes two multi-locks hold their first locks at once.
type barrier struct {
	Locker
	once  gosync.Once
	here  *gosync.WaitGroup
	ctx   context.Context
	ready chan struct{}
}

func (b *barrier) TryLock(ctx context.Context, opts ...TryLockOption) (bool, error) {
	ok, err := b.Locker.TryLock(ctx, opts...)
	if ok {
		b.once.Do(func() {
			b.here.Done()
			select {
			case <-b.ready:
			case <-b.ctx.Done():
			}
		})
	}
	return ok, err
}

// The classic deadlock: two goroutines take the same two locks in opposite order through
// multi-locks, each holding its first when the other asks for it; both finish, never both
// holding. (The collision costs the round wait of the side whose wait ends first: up to 3 s.)
func TestMultiLockOppositeOrderNoDeadlock(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		// A wake lost as a round ends costs a keep-alive attempt (a third of the fair wait
		// time, 10 s by default): short here, so that the test measures rounds.
		c1, _ := newClient(t, b.Addr, WithFairLockWaitTimeout(300*time.Millisecond))
		c2, _ := newClient(t, b.Addr, WithFairLockWaitTimeout(300*time.Millisecond))
		var inside gosync.Mutex
		var here, wg gosync.WaitGroup
		ready := make(chan struct{})
		here.Add(2)
		go func() { here.Wait(); close(ready) }()
		for i, c := range []*Client{c1, c2} {
			wg.Go(func() {
				first, second := "dl-a", "dl-b"
				if i == 1 {
					first, second = second, first
				}
				m := MultiLock(&barrier{Locker: c.Lock(first), here: &here, ctx: ctx, ready: ready}, c.Lock(second))
				if err := m.Lock(ctx); err != nil {
					t.Error(err)
					return
				}
				if !inside.TryLock() {
					t.Error("both multi-locks held at once")
				} else {
					inside.Unlock()
				}
				if err := m.Unlock(ctx); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	})
}

func TestMultiLockBadInput(t *testing.T) {
	t.Parallel()
	b := redistest.Miniredis(t)
	ctx := testCtx(t, 5*time.Second)
	c, _ := newClient(t, b.Addr)
	var nilCtx context.Context
	var nilLock *Lock
	for name, err := range map[string]error{
		"no locks":     MultiLock().Lock(ctx),
		"a nil lock":   MultiLock(c.Lock("x"), nil).Lock(ctx),
		"a nil *Lock":  MultiLock(c.Lock("x"), nilLock).Lock(ctx),
		"a nil reader": MultiLock(c.Lock("x"), (*RWLock)(nil).Reader()).Lock(ctx),
		"a name twice": MultiLock(c.Lock("x"), c.FairLock("x")).Lock(ctx),
		"nil ctx":      MultiLock(c.Lock("x")).Lock(nilCtx),
		"negative wait": func() error {
			_, err := MultiLock(c.Lock("x")).TryLock(ctx, WaitTime(-time.Second))
			return err
		}(),
		"lease under 1ms": MultiLock(c.Lock("x")).Lock(ctx, Lease(time.Microsecond)),
	} {
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}

// With Lease, a lock taken first whose lease runs out while the multi-lock waits for the
// next fails the round, and the multi-lock starts again from the first: when it returns
// holding them, every hold is live.
func TestMultiLockLeaseRunsOutDuringWait(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		ctx := testCtx(t, 60*time.Second)
		c, _ := newClient(t, b.Addr)
		// Long enough for a round to take both locks on a loaded machine (150 ms was not,
		// and every round failed), and the other holder's work outlasts it.
		const lease, work = time.Second, 2500 * time.Millisecond
		other := c.Lock("lease-b")
		must(t, other.Lock(ctx))
		go func() {
			time.Sleep(work) // the other holder's work, past a's lease
			must(t, other.Unlock(ctx))
		}()
		a, bl := c.Lock("lease-a"), c.Lock("lease-b")
		m := MultiLock(a, bl)
		ok, err := m.TryLock(ctx, Lease(lease), WaitTime(waitFor))
		if !ok || err != nil {
			t.Fatalf("TryLock: %v, %v", ok, err)
		}
		if !a.Valid() || !bl.Valid() {
			t.Fatalf("the multi-lock returned holding a lock whose lease ran out: a %v, b %v", a.Valid(), bl.Valid())
		}
		if err := m.Unlock(ctx); err != nil && !errors.Is(err, ErrLockLost) {
			t.Fatal(err)
		}
	})
}
