package sync_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/latchkey/latchkey/internal/embedredis"
	dsync "github.com/latchkey/latchkey/sync"
	"github.com/redis/rueidis"
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
	n, _ := mu.HoldCount(ctx)
	fmt.Println("held, hold count", n)
	if err := mu.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	locked, _ := mu.IsLocked(ctx)
	fmt.Println("locked after unlock:", locked)
	// Output:
	// held, hold count 1
	// locked after unlock: false
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
	ok, _ := holder.TryLock(ctx, dsync.Lease(10*time.Second))
	fmt.Println("holder:", ok)
	ok, _ = other.TryLock(ctx, dsync.WaitTime(50*time.Millisecond))
	fmt.Println("other, while held:", ok)
	_ = holder.Unlock(ctx)
	ok, _ = other.TryLock(ctx)
	fmt.Println("other, after unlock:", ok)
	_ = other.Unlock(ctx)
	// Output:
	// holder: true
	// other, while held: false
	// other, after unlock: true
}

// Lost tells a holder at once that its lease is gone, here because someone deleted the lock;
// work that must not run unprotected should stop.
func ExampleLock_Lost() {
	rdb, stop := newRedis()
	defer stop()
	c, err := dsync.New(rdb, dsync.WithWatchdogTimeout(300*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	mu := c.Lock("job:nightly")
	if err := mu.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	rdb.Do(ctx, rdb.B().Del().Key("job:nightly").Build()) // an operator's mistake
	select {
	case <-mu.Lost():
		fmt.Println("lease lost; stopping the job")
	case <-time.After(5 * time.Second):
		fmt.Println("still held")
	}
	// Output:
	// lease lost; stopping the job
}
