package sync_test

import (
	"context"
	"fmt"
	"log"
	gosync "sync"
	"time"

	dsync "github.com/latchkey/latchkey/sync"
)

// A fair lock is granted in the order its waiters first asked for it, across every Client
// and Java process: here three workers queue behind a holder, one after the other, and get
// the lock in that order. The queue is Redisson's, a Redis list.
func ExampleClient_FairLock() {
	rdb, stop := newRedis()
	defer stop()
	c, err := dsync.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	holder := c.FairLock("printer")
	if err := holder.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	queued := func() int64 {
		n, err := rdb.Do(ctx, rdb.B().Llen().Key("redisson_lock_queue:{printer}").Build()).AsInt64()
		if err != nil {
			log.Fatal(err)
		}
		return n
	}
	var wg gosync.WaitGroup
	for i := 1; i <= 3; i++ {
		mu := c.FairLock("printer") // each worker its own handle
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := mu.Lock(ctx); err != nil {
				log.Fatal(err)
			}
			fmt.Println("worker", i, "prints")
			if err := mu.Unlock(ctx); err != nil {
				log.Fatal(err)
			}
		}()
		for queued() < int64(i) { // let it take its place before the next one comes
			time.Sleep(time.Millisecond)
		}
	}

	// A TryLock without wait time never jumps the queue.
	ok, err := c.FairLock("printer").TryLock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("newcomer's TryLock:", ok)

	if err := holder.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	wg.Wait()
	// Output:
	// newcomer's TryLock: false
	// worker 1 prints
	// worker 2 prints
	// worker 3 prints
}
