package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	dsync "github.com/latchkey/latchkey/sync"
	"github.com/redis/rueidis"
)

const (
	stockKey     = "demo:stock"
	stockLockKey = "stock:lock"
)

// instance is one simulated service instance: its own Redis connection and its own
// dsync.Client, as separate processes would have.
type instance struct {
	rdb   rueidis.Client
	dc    *dsync.Client
	stock *dsync.Lock // the stock's lock, one handle shared by the instance's buyers
}

// buyFunc makes one purchase attempt for a buyer of inst, spending pause on the business
// logic between reading and writing the stock, and reports whether it sold.
type buyFunc func(ctx context.Context, inst instance, pause time.Duration) (bool, error)

// saleResult is what a sale ended with.
type saleResult struct {
	sold    int
	left    int64 // the stock Redis holds afterwards
	elapsed time.Duration
}

func (r saleResult) oversold(stock int) int { return max(r.sold-stock, 0) }

func (d *demo) saleWithoutLock(ctx context.Context) error {
	d.printf("Stock %d in Redis; %d instances x %d buyers each run GET -> (stock > 0?) -> %v of work -> SET stock-1.\n",
		d.cfg.stock, d.cfg.instances, d.cfg.buyers, d.cfg.pause)
	r, err := d.sale(ctx, buyUnguarded)
	if err != nil {
		return err
	}
	d.report(r)
	if r.oversold(d.cfg.stock) > 0 {
		d.printf("Buyers read the same stock before any of them wrote it back, so decrements were lost\n")
		d.printf("and more items were sold than there were.\n")
	} else {
		d.printf("No oversell this time (too few buyers, or the race did not strike); the code is still wrong.\n")
	}
	return nil
}

func (d *demo) saleWithLock(ctx context.Context) error {
	d.printf("The same sale, but each buyer takes the lock around GET/decide/SET, through one handle\n")
	d.printf("c.Lock(%q) per instance that its buyers share, as they would share a sync.Mutex.\n", stockLockKey)
	r, err := d.sale(ctx, buyLocked)
	if err != nil {
		return err
	}
	d.report(r)
	d.printf("Slower, as the critical sections now run one at a time, but:\n")
	want := min(d.cfg.stock, d.cfg.instances*d.cfg.buyers)
	switch {
	case r.oversold(d.cfg.stock) != 0:
		return fmt.Errorf("oversold %d with the lock held", r.oversold(d.cfg.stock))
	case r.sold != want:
		return fmt.Errorf("sold %d, want %d", r.sold, want)
	case r.left != int64(d.cfg.stock-r.sold):
		return fmt.Errorf("sold %d of %d but Redis has %d left: an update was lost", r.sold, d.cfg.stock, r.left)
	}
	d.printf("no item sold twice, no decrement lost.\n")
	return nil
}

func (d *demo) report(r saleResult) {
	d.printf("sold %d, stock left in Redis %d, oversold %d, elapsed %v\n",
		r.sold, r.left, r.oversold(d.cfg.stock), r.elapsed.Round(time.Millisecond))
}

// openInstances opens n service instances on the embedded server. closeAll closes them,
// each dsync Client before the rueidis client it uses.
func (d *demo) openInstances(n int) (insts []instance, closeAll func(), err error) {
	closeAll = func() {
		for _, in := range insts {
			_ = in.dc.Close()
			in.rdb.Close()
		}
	}
	for range n {
		rdb, err := d.connect()
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		dc, err := dsync.New(rdb)
		if err != nil {
			rdb.Close()
			closeAll()
			return nil, nil, err
		}
		insts = append(insts, instance{rdb: rdb, dc: dc, stock: dc.Lock(stockLockKey)})
	}
	return insts, closeAll, nil
}

// sale sets the stock, lets every buyer of every instance run buy at once, and counts the
// sales.
func (d *demo) sale(ctx context.Context, buy buyFunc) (saleResult, error) {
	insts, closeAll, err := d.openInstances(d.cfg.instances)
	if err != nil {
		return saleResult{}, err
	}
	defer closeAll()
	rdb := insts[0].rdb
	if err := rdb.Do(ctx, rdb.B().Set().Key(stockKey).Value(strconv.Itoa(d.cfg.stock)).Build()).Error(); err != nil {
		return saleResult{}, err
	}

	var sold atomic.Int64
	elapsed, err := together(ctx, insts, d.cfg.buyers, func(ctx context.Context, in instance) error {
		ok, err := buy(ctx, in, d.cfg.pause)
		if ok {
			sold.Add(1)
		}
		return err
	})
	if err != nil {
		return saleResult{}, err
	}
	left, err := rdb.Do(ctx, rdb.B().Get().Key(stockKey).Build()).AsInt64()
	if err != nil {
		return saleResult{}, err
	}
	return saleResult{sold: int(sold.Load()), left: left, elapsed: elapsed}, nil
}

// together runs fn in perInstance goroutines of every instance, all started at once, as at
// the opening of a sale, so they really contend. It returns how long they took, or the first
// error: that one cancels the others, which need not wait their turn for nothing.
func together(ctx context.Context, insts []instance, perInstance int, fn func(context.Context, instance) error) (time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	open := make(chan struct{})
	for _, in := range insts {
		for range perInstance {
			wg.Go(func() {
				<-open
				if err := fn(ctx, in); err != nil {
					// The first error is the cause; later ones are mostly cancellations it set off.
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
				}
			})
		}
	}
	start := time.Now()
	close(open)
	wg.Wait()
	return time.Since(start), firstErr
}

// buyUnguarded is the check-then-act every buyer runs: correct in one process with a
// mutex, wrong across processes without one.
func buyUnguarded(ctx context.Context, inst instance, pause time.Duration) (bool, error) {
	rdb := inst.rdb
	n, err := rdb.Do(ctx, rdb.B().Get().Key(stockKey).Build()).AsInt64()
	if err != nil {
		return false, err
	}
	if n <= 0 {
		return false, nil
	}
	if err := sleep(ctx, pause); err != nil {
		return false, err
	}
	err = rdb.Do(ctx, rdb.B().Set().Key(stockKey).Value(strconv.FormatInt(n-1, 10)).Build()).Error()
	return err == nil, err
}

// buyLocked runs the same purchase under the distributed lock, with a handle of its own.
func buyLocked(ctx context.Context, inst instance, pause time.Duration) (sold bool, err error) {
	l := inst.stock
	if err := l.Lock(ctx); err != nil {
		return false, err
	}
	defer func() {
		// A failed unlock may mean the lease was lost mid-purchase, so exclusion is no
		// longer guaranteed: that must fail the demo, not pass silently.
		if uerr := l.Unlock(context.WithoutCancel(ctx)); uerr != nil {
			err = errors.Join(err, uerr)
		}
	}()
	return buyUnguarded(ctx, inst, pause)
}
