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

// Shop is one service instance: its request goroutines share one lock handle, which
// excludes them as a sync.Mutex would, and excludes every other instance's too.
type Shop struct {
	locks *dsync.Client
	stock *dsync.Lock
}

func NewShop(rdb rueidis.Client) (*Shop, error) {
	c, err := dsync.New(rdb) // one Client per process: it runs the watchdog and the subscriptions
	if err != nil {
		return nil, err
	}
	return &Shop{locks: c, stock: c.Lock("stock:42")}, nil
}

func (s *Shop) SellOne(ctx context.Context) (err error) {
	if err := s.stock.Lock(ctx); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.stock.Unlock(ctx)) }()
	// The critical section: read the stock, decide, write it. Check s.stock.Valid() right
	// before each step that must not run unprotected; <-s.stock.Lost() closes once the
	// lease is found lost.
	return nil
}

func (s *Shop) WriteReport(ctx context.Context) error {
	report := s.locks.Lock("report:daily")
	ok, err := report.TryLock(ctx, dsync.WaitTime(200*time.Millisecond), dsync.Lease(10*time.Second))
	if err != nil || !ok {
		return err // busy: another instance is writing the report
	}
	return report.Unlock(ctx)
}

// README:end
