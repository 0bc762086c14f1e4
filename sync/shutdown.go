package sync

import (
	"context"
	"errors"
	"fmt"
	gosync "sync"

	"github.com/latchkey/latchkey/lua"
)

// A registry is a set of what a Client's handles hold, for Shutdown to give back.
type registry[T comparable] struct {
	mu  gosync.Mutex
	set map[T]struct{}
}

func (r *registry[T]) add(x T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.set == nil {
		r.set = make(map[T]struct{})
	}
	r.set[x] = struct{}{}
}

func (r *registry[T]) remove(x T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.set, x)
}

func (r *registry[T]) all() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	xs := make([]T, 0, len(r.set))
	for x := range r.set {
		xs = append(xs, x)
	}
	return xs
}

// begin registers work under way that may leave something in Redis — an acquisition, a
// clean-up in the background — for Shutdown to await, and end unregisters it. An
// acquisition begun once Shutdown or Close has begun is refused (ok false): either Shutdown
// sees the registration, or the acquisition sees Shutdown.
func (c *Client) begin() (end func(), ok bool) {
	done := make(chan struct{})
	c.underway.add(done)
	end = func() {
		c.underway.remove(done)
		close(done)
	}
	if c.closing() {
		return end, false
	}
	return end, true
}

// background runs f, a clean-up — a waiter's claim withdrawn, a hold the caller was not
// given handed back, a request of unknown outcome settled — in its own goroutine, which
// Shutdown awaits (see begin): a process that exits after Shutdown leaves no claim or hold
// to lapse.
func (c *Client) background(f func()) {
	end, _ := c.begin()
	go func() {
		defer end()
		f()
	}()
}

// setCount sets how many holds the owner knows it has, keeping the Client's registry of
// owners that hold something. Caller holds op.
func (o *holder) setCount(n int) {
	if (o.count == 0) != (n == 0) && o.releaser != nil {
		if n == 0 {
			o.c.holders.remove(o)
		} else {
			o.c.holders.add(o)
		}
	}
	o.count = n
	o.holding.Store(n > 0)
}

// Shutdown gives back everything the Client's handles hold — every lock hold, read or write,
// and every PermitSemaphore acquisition — and awaits the acquisitions it ends and the
// clean-ups under way in the background (waiters' claims being withdrawn, such as a fair
// lock's place), so that other processes need not wait for leases to run out; then it
// closes the Client as Close does. It gives back at most until
// ctx ends; what it could not give back by then lapses with its lease, as at Close, and the
// error says why. Acquisitions asked for once Shutdown has begun fail with ErrClosed. A
// Semaphore's permits are counted, not owned: Release them before Shutdown.
func (c *Client) Shutdown(ctx context.Context) error {
	if ctx == nil {
		return invalid("ctx", "must not be nil")
	}
	if c.isClosed() {
		return nil
	}
	c.stopAcquiring()
	var errs []error
	done := make(chan struct{})
	go func() { // a release runs on within the retry budget whatever ctx says: ctx bounds the wait
		defer close(done)
		// Again until nothing is left: a hold an acquisition took as Shutdown began (a local
		// hand-off) registers once the snapshot was taken.
		for ctx.Err() == nil {
			underway := c.underway.all()
			for _, done := range underway {
				select {
				case <-done:
				case <-ctx.Done():
					return
				}
			}
			holders, permits := c.holders.all(), c.permitsHeld.all()
			if len(holders)+len(permits) == 0 {
				if len(underway) == 0 {
					return
				}
				continue // what ended may have left a hold to give back, or started a clean-up
			}
			round := make([]error, len(holders)+len(permits))
			all(len(holders), func(i int) { round[i] = holders[i].releaseAll(ctx) })
			all(len(permits), func(i int) {
				if err := permits[i].Release(ctx); err != nil && !errors.Is(err, ErrNotHeld) {
					round[len(holders)+i] = err
				}
				c.permitsHeld.remove(permits[i])
			})
			if err := errors.Join(round...); err != nil {
				errs = append(errs, err)
				return
			}
		}
	}()
	select {
	case <-done:
		return errors.Join(append(errs, c.Close())...)
	case <-ctx.Done():
		c.Close()
		return fmt.Errorf("dsync: shutdown: holds not all given back; they lapse with their leases: %w", ctx.Err())
	}
}

// releaseAll releases every hold the owner knows it has, one numbered release each.
func (o *holder) releaseAll(ctx context.Context) error {
	for {
		n, err := o.holds(ctx)
		if err != nil || n == 0 {
			return err
		}
		err = o.release(ctx, func(_ bool, num lua.Numbered) (lua.Request, *lockHeir) { return o.releaser(o.count, num), nil })
		if err != nil && !errors.Is(err, ErrNotHeld) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// all runs f(0) … f(n-1) at once, the last on the calling goroutine, and returns when all
// have.
func all(n int, f func(i int)) {
	var wg gosync.WaitGroup
	for i := range n - 1 {
		wg.Go(func() { f(i) })
	}
	if n > 0 {
		f(n - 1)
	}
	wg.Wait()
}
