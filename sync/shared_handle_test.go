package sync

import (
	"context"
	"errors"
	"strconv"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/names"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/rueidis"
)

// A mutex is a handle's Lock and Unlock, as a sync.Mutex's.
type mutex struct {
	lock, unlock func(context.Context) error
}

// mutexKinds make, on a Client, one handle of each kind that excludes like a sync.Mutex.
var mutexKinds = []struct {
	name string
	make func(c *Client, name string) mutex
}{
	{"Lock", func(c *Client, name string) mutex {
		l := c.Lock(name)
		return mutex{func(ctx context.Context) error { return l.Lock(ctx) }, l.Unlock}
	}},
	{"FairLock", func(c *Client, name string) mutex {
		l := c.FairLock(name)
		return mutex{func(ctx context.Context) error { return l.Lock(ctx) }, l.Unlock}
	}},
	{"FencedLock", func(c *Client, name string) mutex {
		l := c.FencedLock(name)
		return mutex{func(ctx context.Context) error { return l.Lock(ctx) }, l.Unlock}
	}},
	{"RWLock write", func(c *Client, name string) mutex {
		l := c.RWLock(name)
		return mutex{func(ctx context.Context) error { return l.Lock(ctx) }, l.Unlock}
	}},
}

// One handle per Client, shared by all its goroutines as a sync.Mutex would be, sells a stock
// exactly once through a non-atomic GET → decide → SET: 3 Clients × 50 buyers, a stock of 100.
func TestSharedHandleNeverOversells(t *testing.T) {
	t.Parallel()
	for _, kind := range mutexKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
				cpuBound(t)
				sellStock(t, b, "shared:"+kind.name, 3, 50, func(c *Client) func() mutex {
					mu := kind.make(c, "shared:"+kind.name) // one handle for every buyer of the Client
					return func() mutex { return mu }
				})
			})
		})
	}
}

// sellStock races buyers on clients instances for a stock of 100 through a non-atomic
// GET → decide → SET under the lock called name, each buyer locking the mutex that the
// instance's handles gives it, and checks that exactly the stock is sold, never by two
// buyers inside at once, and that the lock is free at the end.
func sellStock(t *testing.T, b *redistest.Backend, name string, clients, buyers int, handles func(*Client) func() mutex) {
	const stock = 100
	ctx := testCtx(t, 60*time.Second)
	admin := b.Client(t)
	key := "stock:" + name
	must(t, admin.Do(ctx, admin.B().Set().Key(key).Value(strconv.Itoa(stock)).Build()).Error())
	var sold, inside, maxInside atomic.Int64
	var wg gosync.WaitGroup
	errs := make(chan error, clients*buyers*2)
	for range clients {
		c, rdb := newClientOn(t, b)
		next := handles(c)
		for range buyers {
			mu := next()
			wg.Go(func() {
				if err := mu.lock(ctx); err != nil {
					errs <- err
					return
				}
				n := inside.Add(1)
				for m := maxInside.Load(); n > m && !maxInside.CompareAndSwap(m, n); m = maxInside.Load() {
				}
				left, err := rdb.Do(ctx, rdb.B().Get().Key(key).Build()).AsInt64()
				if err == nil && left > 0 {
					err = rdb.Do(ctx, rdb.B().Set().Key(key).Value(strconv.FormatInt(left-1, 10)).Build()).Error()
					if err == nil {
						sold.Add(1)
					}
				}
				inside.Add(-1)
				if err != nil {
					errs <- err
				}
				if err := mu.unlock(ctx); err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if sold.Load() != stock || maxInside.Load() != 1 {
		t.Fatalf("sold %d with up to %d buyers inside at once; want exactly %d, one at a time", sold.Load(), maxInside.Load(), stock)
	}
	if left := mustInt(t, admin.Do(ctx, admin.B().Get().Key(key).Build())); left != 0 {
		t.Fatalf("stock left %d, want 0", left)
	}
	if exists(t, admin, name) {
		t.Fatal("the lock is still held after every buyer unlocked")
	}
}

// A second Lock through a handle that holds the lock waits for its Unlock, which another
// goroutine may make, as with sync.Mutex; TryLock through it reports the lock busy.
func TestSharedHandleIsAMutex(t *testing.T) {
	t.Parallel()
	for _, kind := range mutexKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
				ctx := testCtx(t, 20*time.Second)
				c, _ := newClient(t, b.Addr)
				name := "mutex:" + kind.name
				mu := kind.make(c, name)
				must(t, mu.lock(ctx))
				short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
				if err := mu.lock(short); !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("a second Lock through the holding handle: %v, want it to wait until its context ends", err)
				}
				second := make(chan error, 1)
				go func() { second <- mu.lock(ctx) }()
				unlocked := make(chan error, 1)
				go func() { unlocked <- mu.unlock(ctx) }() // another goroutine ends the first hold
				if err := <-unlocked; err != nil {
					t.Fatalf("Unlock from another goroutine: %v", err)
				}
				if err := <-second; err != nil {
					t.Fatalf("the waiting Lock after the Unlock: %v", err)
				}
				must(t, mu.unlock(ctx))
				if err := mu.unlock(ctx); !errors.Is(err, ErrNotHeld) {
					t.Fatalf("Unlock of a handle holding nothing: %v, want ErrNotHeld", err)
				}
			})
		})
	}
}

// A mutex handle's TryLock reports a lock it holds busy, as sync.Mutex.TryLock does.
func TestSharedHandleTryLockIsNotReentry(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		c, _ := newClient(t, b.Addr)
		mu := c.Lock("mutex:try")
		must(t, mu.Lock(ctx))
		if ok, err := mu.TryLock(ctx); ok || err != nil {
			t.Fatalf("TryLock through the holding handle: %v, %v; want false, nil", ok, err)
		}
		if n, err := mu.HoldCount(ctx); n != 1 || err != nil {
			t.Fatalf("HoldCount: %d, %v; want 1", n, err)
		}
		must(t, mu.Unlock(ctx))
		if mu.Valid() || mu.Owner() != "" {
			t.Fatalf("after Unlock: Valid %v, Owner %q; want false, \"\"", mu.Valid(), mu.Owner())
		}
	})
}

// Readers sharing an RWLock handle hold the read lock together, as with sync.RWMutex, and a
// writer through the same handle waits for both RUnlocks, whichever goroutine makes them.
func TestSharedRWLockHandle(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		c, admin := newClient(t, b.Addr)
		rw := c.RWLock("shared:rw")
		must(t, rw.RLock(ctx))
		must(t, rw.RLock(ctx)) // a second reader: shares the lock
		if n := mustInt(t, admin.Do(ctx, admin.B().Hlen().Key("shared:rw").Build())); n != 3 {
			t.Fatalf("the lock hash has %d fields, want mode and two readers", n)
		}
		if ok, err := rw.TryLock(ctx); ok || err != nil {
			t.Fatalf("TryLock of the write lock under two readers: %v, %v; want false, nil", ok, err)
		}
		writer := make(chan error, 1)
		go func() { writer <- rw.Lock(ctx) }()
		for range 2 {
			go func() { must(t, rw.RUnlock(ctx)) }()
		}
		if err := <-writer; err != nil {
			t.Fatalf("the writer after both readers left: %v", err)
		}
		must(t, rw.Unlock(ctx))
		if exists(t, admin, "shared:rw") {
			t.Fatal("the lock is still there after every hold ended")
		}
	})
}

// A handle made per request costs Redis no more than a reused one: the Client lends each
// acquisition an idle owner of the name, so successive handles reuse one unlock latch (and
// for a fair lock one channel) instead of making a latch per handle.
func TestHandlePerRequestReusesOwners(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		c, admin := newClient(t, b.Addr)
		for _, kind := range mutexKinds {
			name := "per-request:" + kind.name
			for range 20 {
				mu := kind.make(c, name)
				must(t, mu.lock(ctx))
				must(t, mu.unlock(ctx))
			}
			pattern := names.Prefix(unlockLatchPrefix, name) + ":*"
			if n := len(keys(t, admin, pattern)); n != 1 {
				t.Errorf("%s: %d unlock latches after 20 handles, each locked and unlocked once; want 1", kind.name, n)
			}
		}
	})
}

// keys lists the keys matching pattern.
func keys(t *testing.T, rdb rueidis.Client, pattern string) []string {
	t.Helper()
	ks, err := rdb.Do(context.Background(), rdb.B().Keys().Pattern(pattern).Build()).AsStrSlice()
	must(t, err)
	return ks
}

// A shared handle cannot tell which goroutine calls Unlock. When a hold's lease runs out and
// another goroutine of the handle takes the lock, neither may be told it held the lock
// throughout: Valid is false, and both Unlocks report ErrLockLost (the lock is released).
func TestSharedHandleLostHoldIsReportedToBoth(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		ctx := testCtx(t, 20*time.Second)
		c, admin := newClient(t, b.Addr)
		const name = "mutex:lost"
		mu := c.Lock(name)
		// G1, which pauses past its lease: long enough to outlast its acquisition on a loaded
		// machine (1 s did not under two CPU hogs).
		const lease = 5 * time.Second
		must(t, mu.Lock(ctx, Lease(lease)))
		// Both by the handle's clock and by Redis's (miniredis' moves in ticks, and may be ahead).
		eventually(t, lease+waitFor, "G1's lease ran out", func() bool { return !mu.Valid() && !exists(t, admin, name) })
		must(t, mu.Lock(ctx)) // G2, through the same handle
		if mu.Valid() {
			t.Fatal("Valid after one of the handle's holds was lost: G1 would act on it")
		}
		for _, who := range []string{"first", "second"} {
			if err := mu.Unlock(ctx); !errors.Is(err, ErrLockLost) {
				t.Fatalf("%s Unlock: %v, want ErrLockLost (either may be G1's)", who, err)
			}
		}
		if exists(t, admin, name) {
			t.Fatal("the lock is still held after both Unlocks")
		}
	})
}

// Readers sharing an RWLock handle: an RUnlock ends the read hold whose lease ends first, so
// the holds left cover at least as long as before — a reader with a long lease is not left
// under a short one, which would let a writer in while it reads.
func TestSharedRWLockRUnlockEndsTheShortestHold(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		ctx := testCtx(t, 20*time.Second)
		c, _ := newClient(t, b.Addr)
		other, _ := newClient(t, b.Addr)
		const name = "shared:rw-leases"
		rw := c.RWLock(name)
		// G2's lease is short, but outlasts its acquisition on a loaded machine (500 ms did
		// not under two CPU hogs).
		const short = 3 * time.Second
		must(t, rw.RLock(ctx, Lease(time.Hour))) // G1: a long read
		must(t, rw.RLock(ctx, Lease(short)))     // G2: a short one
		must(t, rw.RUnlock(ctx))                 // G2 is done
		// Past the short lease: had G1's hold been released, the short one would be gone too.
		time.Sleep(short + time.Second) // how long to wait, not a synchronisation
		if ok, err := other.RWLock(name).TryLock(ctx); ok || err != nil {
			t.Fatalf("a writer took the lock while G1's one-hour read hold stands: %v, %v", ok, err)
		}
		must(t, rw.RUnlock(ctx))
	})
}

// Goroutines sharing a handle: G2 locks while G1's final Unlock is in flight (slowed by a lost
// reply). G2's hold must end up kept by the watchdog, not orphaned by G1's bookkeeping.
func TestSharedHandleUnlockRacesLock(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		ctx := testCtx(t, 60*time.Second)
		proxy := redistest.NewProxy(t, b.Addr)
		// Renewals every 2 s keep a 6 s lease with 4 s to spare on a loaded machine (1.5 s
		// renewed every 500 ms was lost under two CPU hogs).
		const timeout = 6 * time.Second
		c, _ := newClient(t, proxy.Addr(), WithWatchdogTimeout(timeout))
		admin := b.Client(t)
		warmScripts(t, ctx, c)
		mu := c.Lock("shared-handle")
		if err := mu.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		proxy.DropReplyAfter([]byte(unlockLatchPrefix))
		unlocked := make(chan error, 1)
		go func() { unlocked <- mu.Unlock(ctx) }() // G1
		eventually(t, waitFor, "release ran", func() bool { return !exists(t, admin, "shared-handle") })
		if err := mu.Lock(ctx); err != nil { // G2, same handle
			t.Fatal(err)
		}
		if err := <-unlocked; err != nil {
			t.Fatalf("G1 Unlock: %v", err)
		}
		if proxy.Dropped() != 1 {
			t.Fatalf("the proxy dropped %d replies, want 1", proxy.Dropped())
		}
		held := time.Now()
		for time.Since(held) < timeout+timeout/3 { // past the TTL G2's acquisition set
			if !exists(t, admin, "shared-handle") {
				t.Fatalf("G2's hold expired %v after it was taken: nothing renewed it", time.Since(held))
			}
			time.Sleep(100 * time.Millisecond) // an expired key stays gone: no need to look more often
		}
		if closed(mu.Lost()) {
			t.Fatal("Lost closed while G2's hold was kept")
		}
		if err := mu.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
