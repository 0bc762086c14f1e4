package sync_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	gosync "sync"
	"sync/atomic"
	"time"

	dsync "github.com/latchkey/latchkey/sync"
)

// Rate gating: at most 3 calls to a downstream service at once, across every instance
// sharing the semaphore's name. Each instance sets the permits once (only the first one
// does); every call acquires a permit and releases it when done.
func ExampleClient_Semaphore() {
	rdb, stop := newRedis()
	defer stop()
	c, err := dsync.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	gate := c.Semaphore("downstream:gate")
	if _, err := gate.TrySetPermits(ctx, 3); err != nil {
		log.Fatal(err)
	}
	var inFlight, peak atomic.Int32
	call := func() error {
		if err := gate.Acquire(ctx, 1); err != nil {
			return err
		}
		defer func() {
			if err := gate.Release(ctx, 1); err != nil {
				log.Print(err)
			}
		}()
		n := inFlight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(5 * time.Millisecond) // the downstream call
		inFlight.Add(-1)
		return nil
	}
	var wg gosync.WaitGroup
	for range 10 {
		wg.Go(func() {
			if err := call(); err != nil {
				log.Print(err)
			}
		})
	}
	wg.Wait()
	left, err := gate.AvailablePermits(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("never more than 3 calls in flight:", peak.Load() <= 3)
	fmt.Println("permits available:", left)
	// Output:
	// never more than 3 calls in flight: true
	// permits available: 3
}

// A TryAcquire with a wait time gives up with false, not an error, when the permits do not
// come in time.
func ExampleSemaphore_TryAcquire() {
	rdb, stop := newRedis()
	defer stop()
	c, err := dsync.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	s := c.Semaphore("exports")
	if err := s.SetPermits(ctx, 1); err != nil {
		log.Fatal(err)
	}
	ok, err := s.TryAcquire(ctx, 2, dsync.WaitTime(20*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("two permits of one:", ok)
	ok, err = s.TryAcquire(ctx, 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("one permit of one:", ok)
	// Output:
	// two permits of one: false
	// one permit of one: true
}

// Permits that expire: a worker that crashes while holding one gives it back when its lease
// ends. Without a Lease the watchdog keeps the permits while the process lives.
func ExampleClient_PermitSemaphore() {
	rdb, stop := newRedis()
	defer stop()
	c, err := dsync.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	slots := c.PermitSemaphore("render:slots")
	if _, err := slots.TrySetPermits(ctx, 2); err != nil {
		log.Fatal(err)
	}
	p, err := slots.Acquire(ctx, 1, dsync.Lease(2*time.Second)) // a worker that will "crash"
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("permit IDs:", len(p.IDs()), "of", len(p.IDs()[0]), "hex characters")

	// Both slots, waiting for the crashed worker's to come back at the end of its lease.
	both, ok, err := slots.TryAcquire(ctx, 2, dsync.WaitTime(20*time.Second))
	if err != nil || !ok {
		log.Fatal("both slots: ", ok, err)
	}
	fmt.Println("got both slots:", ok)
	<-p.Lost()
	fmt.Println("the crashed worker's lease is lost; valid:", p.Valid())
	if err := both.Release(ctx); err != nil {
		log.Fatal(err)
	}
	if err := p.Release(ctx); errors.Is(err, dsync.ErrLockLost) {
		fmt.Println("its late release:", "lease lost")
	}
	// Output:
	// permit IDs: 1 of 32 hex characters
	// got both slots: true
	// the crashed worker's lease is lost; valid: false
	// its late release: lease lost
}

// Job coordination: a coordinator waits for three workers, on any instance, to finish.
func ExampleClient_CountDownLatch() {
	rdb, stop := newRedis()
	defer stop()
	c, err := dsync.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	done := c.CountDownLatch("job:7:done")
	if _, err := done.TrySetCount(ctx, 3); err != nil {
		log.Fatal(err)
	}
	for w := range 3 {
		go func() {
			time.Sleep(time.Duration(w) * time.Millisecond) // the work
			if err := c.CountDownLatch("job:7:done").CountDown(ctx); err != nil {
				log.Print(err)
			}
		}()
	}
	if err := done.Await(ctx); err != nil {
		log.Fatal(err)
	}
	n, err := done.Count(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("all workers done; count", n)
	// Output:
	// all workers done; count 0
}

// Fencing: a store that accepts a write only with a token at least as new as the newest it
// has seen rejects the late write of a holder that paused past its lease, whatever its
// clocks believed — which no lease alone can do.
func ExampleClient_FencedLock() {
	rdb, stop := newRedis()
	defer stop()
	c, err := dsync.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	var newest int64 // the store's newest token
	write := func(token int64, what string) {
		if token < newest {
			fmt.Println("rejected:", what)
			return
		}
		newest = token
		fmt.Println("written:", what)
	}

	slow := c.FencedLock("report")
	t1, err := slow.LockToken(ctx, dsync.Lease(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	time.Sleep(2 * time.Second) // a pause past the lease: the lock expires

	fast := c.FencedLock("report")
	t2, err := fast.LockToken(ctx)
	if err != nil {
		log.Fatal(err)
	}
	write(t2, "the new holder's")
	write(t1, "the paused holder's, late")
	if err := fast.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	if err := slow.Unlock(ctx); errors.Is(err, dsync.ErrLockLost) {
		fmt.Println("the paused holder learns it lost the lock")
	}
	// Output:
	// written: the new holder's
	// rejected: the paused holder's, late
	// the paused holder learns it lost the lock
}

// A transfer between two accounts takes both accounts' locks as one: all or none, and two
// transfers in opposite directions do not deadlock.
func ExampleMultiLock() {
	rdb, stop := newRedis()
	defer stop()
	c, err := dsync.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	both := dsync.MultiLock(c.Lock("account:alice"), c.Lock("account:bob"))
	if err := both.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("both accounts locked")
	// Meanwhile, bob's lock alone cannot be taken.
	ok, err := c.Lock("account:bob").TryLock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("bob's lock free:", ok)
	if err := both.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// both accounts locked
	// bob's lock free: false
}

// A red lock over three independent masters holds with a majority of them; with a lease it
// tells how long it stays valid.
func ExampleRedLock() {
	var locks []dsync.Locker
	for range 3 {
		rdb, stop := newRedis() // a master of its own
		defer stop()
		c, err := dsync.New(rdb)
		if err != nil {
			log.Fatal(err)
		}
		defer c.Close()
		locks = append(locks, c.Lock("nightly-job"))
	}
	ctx := context.Background()

	red := dsync.RedLock(locks...)
	ok, err := red.TryLock(ctx, dsync.Lease(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	until, valid := red.Deadline()
	fmt.Println("held:", ok, "valid for about 10 s:", valid && time.Until(until) > 9*time.Second)
	if err := red.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// held: true valid for about 10 s: true
}
