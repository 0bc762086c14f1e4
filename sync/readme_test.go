package sync_test

// The README's quick start, kept here so that it compiles and runs; TestReadmeQuickStart
// checks that the README shows exactly this code.

// README:begin
import (
	"context"
	"errors"
	"time"

	dsync "github.com/latchkey/latchkey/sync"
	"github.com/redis/rueidis"
)

func sellOne(ctx context.Context, addr string) (err error) {
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return err
	}
	defer rdb.Close()
	c, err := dsync.New(rdb) // one Client per process: it runs the watchdog and the subscriptions
	if err != nil {
		return err
	}
	defer c.Close()

	mu := c.Lock("stock:42") // one handle per goroutine or request: the handle is the owner
	if err := mu.Lock(ctx); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, mu.Unlock(ctx)) }()
	// The critical section. Check mu.Valid() right before each step that must not run
	// unprotected; <-mu.Lost() closes once the lease is found lost.

	report := c.Lock("report:daily")
	ok, err := report.TryLock(ctx, dsync.WaitTime(200*time.Millisecond), dsync.Lease(10*time.Second))
	if err != nil || !ok {
		return err // busy: someone else is writing the report
	}
	return report.Unlock(ctx)
}

// README:end
