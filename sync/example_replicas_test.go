package sync_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	dsync "github.com/latchkey/latchkey/sync"
)

// Acquisitions confirmed by a replica: with WithSyncReplicas, a lock is held only once a
// replica has it, so a failover to that replica cannot give the lock to someone else. The
// embedded Redis here has no replica, so the acquisition is refused — and given back: the
// lock is left free.
func ExampleWithSyncReplicas() {
	rdb, stop := newRedis()
	defer stop()
	c, err := dsync.New(rdb, dsync.WithSyncReplicas(1, 100*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	l := c.Lock("orders:42")
	err = l.Lock(ctx)
	switch {
	case errors.Is(err, dsync.ErrNotReplicated):
		fmt.Println("not confirmed by a replica: not held")
	case err != nil:
		log.Fatal(err)
	default:
		defer func() {
			if err := l.Unlock(ctx); err != nil {
				log.Print(err) // ErrNotReplicated here: released on the master, not yet on a replica
			}
		}()
		fmt.Println("held, and a replica has it")
	}
	locked, err := l.IsLocked(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("locked:", locked)
	// Output:
	// not confirmed by a replica: not held
	// locked: false
}
