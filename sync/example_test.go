package sync_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/latchkey/latchkey/internal/embedredis"
	dsync "github.com/latchkey/latchkey/sync"
	"github.com/redis/rueidis"
	"go.uber.org/zap"
)

// newRedis starts the embedded Redis the examples run on; a service would connect to its
// own Redis, Sentinel or Cluster instead.
func newRedis() (rueidis.Client, func()) {
	srv, err := embedredis.Start()
	if err != nil {
		log.Fatal(err)
	}
	rdb, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{srv.Addr()},
		DisableCache:      true, // the embedded server has no client tracking
		ForceSingleClient: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	return rdb, func() { rdb.Close(); srv.Close() }
}

// The classic: guard a read-modify-write of shared state. Each goroutine (or request) takes
// its own handle; the watchdog keeps the lock until Unlock.
func ExampleClient_Lock() {
	rdb, stop := newRedis()
	defer stop()
	c, err := dsync.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	mu := c.Lock("orders:42")
	if err := mu.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	n, err := mu.HoldCount(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held, hold count", n)
	if err := mu.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	locked, err := mu.IsLocked(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("locked after unlock:", locked)
	// Output:
	// held, hold count 1
	// locked after unlock: false
}

// New takes functional options; a bad one is an error that names it.
func ExampleNew() {
	rdb, stop := newRedis()
	defer stop()
	c, err := dsync.New(rdb,
		dsync.WithWatchdogTimeout(10*time.Second), // lease 10 s, renewed every 3.3 s
		dsync.WithRetryBudget(5*time.Second),      // how long a request whose reply is lost is repeated
		dsync.WithLocalHandoff(4),                 // at most 4 local hand-offs before other Clients get a turn
		dsync.WithLogger(zap.NewNop()),            // lost leases and outages go here
	)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	_, err = dsync.New(rdb, dsync.WithWatchdogTimeout(time.Microsecond))
	fmt.Println(errors.Is(err, dsync.ErrInvalidArgument), err)
	// Output:
	// true dsync: invalid argument: watchdog timeout must be >= 3ms, got 1µs
}

// TryLock reports a busy lock as false, not as an error; WaitTime lets it wait a while, and
// Lease gives the hold a fixed lease instead of the watchdog.
func ExampleLock_TryLock() {
	rdb, stop := newRedis()
	defer stop()
	c, err := dsync.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	holder, other := c.Lock("report"), c.Lock("report")
	ok, err := holder.TryLock(ctx, dsync.Lease(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holder:", ok)
	ok, err = other.TryLock(ctx, dsync.WaitTime(50*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("other, while held:", ok)
	if err := holder.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	ok, err = other.TryLock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("other, after unlock:", ok)
	if ok {
		if err := other.Unlock(ctx); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// holder: true
	// other, while held: false
	// other, after unlock: true
}

// Lost tells a holder that its lease is gone, here because someone deleted the lock; the
// watchdog notices at its next renewal (within a third of its timeout). Work that must not
// run unprotected should stop.
func ExampleLock_Lost() {
	rdb, stop := newRedis()
	defer stop()
	c, err := dsync.New(rdb, dsync.WithWatchdogTimeout(3*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	mu := c.Lock("job:nightly")
	if err := mu.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	if err := rdb.Do(ctx, rdb.B().Del().Key("job:nightly").Build()).Error(); err != nil { // an operator's mistake
		log.Fatal(err)
	}
	select {
	case <-mu.Lost():
		fmt.Println("lease lost; stopping the job")
	case <-time.After(20 * time.Second):
		fmt.Println("still held")
	}
	// Output:
	// lease lost; stopping the job
}

// A holder checks Valid right before each step that needs the lock: it is true at the moment
// it is checked, by the monotonic clock, even after a pause that Lost has not caught up with.
// An Unlock that finds the lock gone says so with ErrLockLost.
func ExampleLock_Valid() {
	rdb, stop := newRedis()
	defer stop()
	c, err := dsync.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	mu := c.Lock("ledger")
	if err := mu.Lock(ctx, dsync.Lease(2*time.Second)); err != nil {
		log.Fatal(err)
	}
	fmt.Println("valid while held:", mu.Valid())
	time.Sleep(2 * time.Second) // a stall as long as the lease, which began before Lock returned
	fmt.Println("valid after the lease ran out:", mu.Valid())
	err = mu.Unlock(ctx)
	fmt.Println("unlock:", errors.Is(err, dsync.ErrLockLost))
	// Output:
	// valid while held: true
	// valid after the lease ran out: false
	// unlock: true
}

// ForceUnlock deletes a lock whoever holds it — an operator's tool for a lock left by a
// process that is gone — and wakes a waiter.
func ExampleLock_ForceUnlock() {
	rdb, stop := newRedis()
	defer stop()
	c, err := dsync.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	if err := c.Lock("import").Lock(ctx, dsync.Lease(time.Hour)); err != nil { // left behind
		log.Fatal(err)
	}
	deleted, err := c.Lock("import").ForceUnlock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("deleted:", deleted)
	// Output:
	// deleted: true
}

// An Unlock whose reply is lost is repeated; when Redis stays unreachable for the whole
// retry budget the error wraps ErrOutcomeUnknown. The hold then counts as released: do not
// call Unlock again for it. It is no longer renewed, and the handle's next call settles it.
func ExampleLock_Unlock() {
	rdb, stop := newRedis()
	defer stop()
	c, err := dsync.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	mu := c.Lock("orders:7")
	if err := mu.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	switch err := mu.Unlock(ctx); {
	case err == nil:
		fmt.Println("released")
	case errors.Is(err, dsync.ErrLockLost):
		fmt.Println("the lock was lost before the release: the critical section was not protected to its end")
	case errors.Is(err, dsync.ErrOutcomeUnknown):
		fmt.Println("Redis unreachable: the lock is freed by its lease at the latest")
	default:
		fmt.Println("Redis refused the release:", err)
	}
	// Output:
	// released
}
