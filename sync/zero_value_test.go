package sync

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

// A handle's zero value (not made by a Client method) is reported by every call as a bad
// handle, never a panic.
func TestZeroValueHandlesAreInvalid(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 5*time.Second)
	var (
		l     Lock
		fl    FairLock
		fen   FencedLock
		rw    RWLock
		sem   Semaphore
		perm  PermitSemaphore
		latch CountDownLatch
		multi Multi
	)
	calls := map[string]func() error{
		"Lock.Lock":         func() error { return l.Lock(ctx) },
		"Lock.TryLock":      func() error { _, err := l.TryLock(ctx); return err },
		"Lock.Unlock":       func() error { return l.Unlock(ctx) },
		"Lock.ForceUnlock":  func() error { _, err := l.ForceUnlock(ctx); return err },
		"Lock.IsLocked":     func() error { _, err := l.IsLocked(ctx); return err },
		"Lock.HoldCount":    func() error { _, err := l.HoldCount(ctx); return err },
		"Lock.RemainingTTL": func() error { _, err := l.RemainingTTL(ctx); return err },
		"Lock.Extend":       func() error { return l.Extend(ctx, time.Second) },
		"RWLock.Extend":     func() error { return rw.Extend(ctx, time.Second) },
		"FairLock.Lock":     func() error { return fl.Lock(ctx) },
		"FencedLock.Token":  func() error { _, err := fen.Token(ctx); return err },
		"FencedLock.LockToken": func() error {
			_, err := fen.LockToken(ctx)
			return err
		},
		"RWLock.RLock":      func() error { return rw.RLock(ctx) },
		"RWLock.Lock":       func() error { return rw.Lock(ctx) },
		"RWLock.RUnlock":    func() error { return rw.RUnlock(ctx) },
		"RWLock.Unlock":     func() error { return rw.Unlock(ctx) },
		"Semaphore.Acquire": func() error { return sem.Acquire(ctx, 1) },
		"Semaphore.TryAcquire": func() error {
			_, err := sem.TryAcquire(ctx, 1)
			return err
		},
		"Semaphore.Release":          func() error { return sem.Release(ctx, 1) },
		"Semaphore.AvailablePermits": func() error { _, err := sem.AvailablePermits(ctx); return err },
		"Semaphore.SetPermits":       func() error { return sem.SetPermits(ctx, 1) },
		"Semaphore.DrainPermits":     func() error { _, err := sem.DrainPermits(ctx); return err },
		"PermitSemaphore.Acquire":    func() error { _, err := perm.Acquire(ctx, 1); return err },
		"PermitSemaphore.Release":    func() error { return perm.Release(ctx, strings.Repeat("0", 32)) },
		"PermitSemaphore.Permits":    func() error { _, err := perm.Permits(ctx); return err },
		"PermitSemaphore.TrySetPermits": func() error {
			_, err := perm.TrySetPermits(ctx, 1)
			return err
		},
		"CountDownLatch.TrySetCount": func() error { _, err := latch.TrySetCount(ctx, 1); return err },
		"CountDownLatch.CountDown":   func() error { return latch.CountDown(ctx) },
		"CountDownLatch.Await":       func() error { return latch.Await(ctx) },
		"CountDownLatch.Count":       func() error { _, err := latch.Count(ctx); return err },
		"CountDownLatch.Delete":      func() error { _, err := latch.Delete(ctx); return err },
		"Multi.Lock":                 func() error { return multi.Lock(ctx) },
		"Multi.TryLock":              func() error { _, err := multi.TryLock(ctx); return err },
		"Multi.Unlock":               func() error { return multi.Unlock(ctx) },
		"MultiLock of zero handles": func() error {
			_, err := MultiLock(&l, &rw).TryLock(ctx)
			return err
		},
	}
	// Methods without an error answer for a zero value too, without a panic: no owner, no
	// hold, a hold context that ends at once.
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("a method without an error on a zero value panicked: %v", r)
			}
		}()
		_, _ = l.Owner(), rw.Owner()
		_, _ = l.Valid(), rw.Valid()
		hctx, cancel := l.HoldContext(ctx)
		defer cancel()
		select {
		case <-hctx.Done():
		case <-time.After(time.Second):
			t.Error("the HoldContext of a zero value did not end at once")
		}
	}()
	for what, call := range calls {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s on a zero value panicked: %v", what, r)
				}
			}()
			if err := call(); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("%s on a zero value: %v, want ErrInvalidArgument", what, err)
			} else if !strings.Contains(err.Error(), "handle") && !strings.Contains(err.Error(), "multi-lock") {
				t.Errorf("%s on a zero value: %q does not name the handle", what, err)
			}
		}()
	}
}

// A nil *Permits — what a failed Acquire returns — holds nothing: Release says so
// (ErrNotHeld) rather than panic, so that `p, err := Acquire(); defer p.Release()` is safe,
// and the other methods report nothing held.
func TestNilPermitsHoldNothing(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 5*time.Second)
	for _, p := range []*Permits{nil, {}} {
		if err := p.Release(ctx); !errors.Is(err, ErrNotHeld) {
			t.Errorf("Release of %#v: %v, want ErrNotHeld", p, err)
		}
		if p.Valid() || len(p.IDs()) != 0 || p.Lost() != nil {
			t.Errorf("%#v: Valid %v, IDs %v, Lost %v; want false, none, nil", p, p.Valid(), p.IDs(), p.Lost())
		}
		if _, ok := p.Deadline(); ok {
			t.Errorf("%#v has a deadline", p)
		}
	}
	// The usual order, with an Acquire that fails (ctx ended) and returns nil.
	b := redistest.Miniredis(t)
	c, _ := newClient(t, b.Addr)
	done, cancel := context.WithCancel(ctx)
	cancel()
	p, err := c.PermitSemaphore("nil-permits").Acquire(done, 1)
	if p != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with an ended ctx: %v, %v", p, err)
	}
	if err := p.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("deferred Release after a failed Acquire: %v, want ErrNotHeld", err)
	}
}
