package sync_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	dsync "github.com/latchkey/latchkey/sync"
	"github.com/redis/rueidis"
)

// A cache that many read and few refresh: readers share the read lock, a refresh takes the
// write lock and excludes them. Each request takes its own handle.
func ExampleClient_RWLock() {
	rdb, stop := newRedis()
	defer stop()
	c, err := dsync.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	read := func() string {
		rw := c.RWLock("prices:lock")
		if err := rw.RLock(ctx); err != nil {
			log.Fatal(err)
		}
		defer func() {
			if err := rw.RUnlock(ctx); err != nil {
				log.Fatal(err)
			}
		}()
		v, err := rdb.Do(ctx, rdb.B().Get().Key("prices").Build()).ToString()
		if rueidis.IsRedisNil(err) {
			return "(empty)"
		} else if err != nil {
			log.Fatal(err)
		}
		return v
	}
	refresh := func(v string) {
		rw := c.RWLock("prices:lock")
		if err := rw.Lock(ctx); err != nil {
			log.Fatal(err)
		}
		defer func() {
			if err := rw.Unlock(ctx); err != nil {
				log.Fatal(err)
			}
		}()
		if err := rdb.Do(ctx, rdb.B().Set().Key("prices").Value(v).Build()).Error(); err != nil {
			log.Fatal(err)
		}
	}

	fmt.Println("before:", read())
	refresh("apple=3")
	fmt.Println("after:", read())

	// Readers share the lock; a writer is kept out while they hold it.
	r1, r2, w := c.RWLock("prices:lock"), c.RWLock("prices:lock"), c.RWLock("prices:lock")
	try := func(f func(context.Context, ...dsync.TryLockOption) (bool, error)) bool {
		ok, err := f(ctx)
		if err != nil {
			log.Fatal(err)
		}
		return ok
	}
	fmt.Println("two readers:", try(r1.TryRLock), try(r2.TryRLock), "writer:", try(w.TryLock))
	for _, r := range []*dsync.RWLock{r1, r2} {
		if err := r.RUnlock(ctx); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// before: (empty)
	// after: apple=3
	// two readers: true true writer: false
}

// A Reentrant handle holding the write lock may take the read lock and keep it past Unlock
// (a downgrade); one holding only read locks may not take the write lock (an upgrade): that
// could only wait for ever, so it fails at once.
func ExampleRWLock_Lock() {
	rdb, stop := newRedis()
	defer stop()
	c, err := dsync.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	rw := c.RWLock("report", dsync.Reentrant())
	if err := rw.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	if err := rw.RLock(ctx); err != nil { // downgrade: write, then read, then drop the write
		log.Fatal(err)
	}
	if err := rw.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	other := c.RWLock("report")
	ok, err := other.TryRLock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("another reader after the downgrade:", ok)
	if err := other.RUnlock(ctx); err != nil {
		log.Fatal(err)
	}

	err = rw.Lock(ctx) // upgrade: refused
	fmt.Println("upgrade:", errors.Is(err, dsync.ErrWouldDeadlock))
	if err := rw.RUnlock(ctx); err != nil {
		log.Fatal(err)
	}
	locked, err := rw.IsLocked(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("locked at the end:", locked)
	// Output:
	// another reader after the downgrade: true
	// upgrade: true
	// locked at the end: false
}
