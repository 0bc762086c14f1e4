package sync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

// An acquisition of more permits than a permit semaphore has in all, available and
// acquired, could only wait for ever: it is ErrInvalidArgument at once, with or without a
// wait. One that fits the total waits as before, and so does one on a semaphore not set yet.
func TestPermitAcquireMoreThanTotalIsInvalid(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		c, _ := newClient(t, b.Addr)
		s := c.PermitSemaphore("total")
		must(t, s.SetPermits(ctx, 3))
		held, err := s.Acquire(ctx, 2)
		must(t, err)
		// Long waits, which only an answer at once beats.
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		start := time.Now()
		if _, err := s.Acquire(wctx, 4); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("Acquire(4) of 3 in all: %v, want ErrInvalidArgument", err)
		}
		if _, _, err := s.TryAcquire(wctx, 4, WaitTime(15*time.Second)); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("TryAcquire(4, 15s) of 3 in all: %v, want ErrInvalidArgument", err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("the refusals took %v", took)
		}
		// 3 fit the total, though only 1 is available: a wait, ended by the wait time.
		if p, ok, err := s.TryAcquire(ctx, 3, WaitTime(50*time.Millisecond)); p != nil || ok || err != nil {
			t.Fatalf("TryAcquire(3) with 1 available: %v, %v, %v; want a wait that ends with nothing", p, ok, err)
		}
		must(t, held.Release(ctx))
		// Not set yet: no total, and the wait is for the permits to be set.
		unset := c.PermitSemaphore("unset")
		got := make(chan error, 1)
		go func() {
			p, err := unset.Acquire(ctx, 2)
			if err == nil {
				err = p.Release(ctx)
			}
			got <- err
		}()
		select {
		case err := <-got:
			t.Fatalf("Acquire on a semaphore not set returned at once: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		must(t, unset.SetPermits(ctx, 2))
		if err := <-got; err != nil {
			t.Fatalf("Acquire once the permits were set: %v", err)
		}
	})
}
