package sync

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/latchkey/latchkey/lua"
	"github.com/latchkey/latchkey/watchdog"
)

// ErrHoldEnded is the cause (context.Cause) of a HoldContext cancelled because its hold was
// released (or its release asked for: one Redis refused leaves the hold to lapse with its
// lease). A hold lost instead gives ErrLockLost.
var ErrHoldEnded = errors.New("dsync: the hold was released")

// holdContext returns a copy of parent cancelled when the hold whose lease is lease ends:
// released, with the cause ErrHoldEnded, or lost, with ErrLockLost. With no hold (lease nil,
// or ended already) it is cancelled at once, with ErrNotHeld for none.
func holdContext(parent context.Context, lease *watchdog.Lease, o *holder) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	stop := func() { cancel(context.Canceled) }
	if lease == nil {
		cancel(o.wrap(fmt.Errorf("%w: the handle holds nothing", ErrNotHeld)))
		return ctx, stop
	}
	ended := lease.Ended()
	if _, ok := lease.Deadline(); !ok { // released or lost before the call
		cancel(holdEnd(lease))
		return ctx, stop
	}
	go func() {
		select {
		case <-ended:
			cancel(holdEnd(lease))
		case <-ctx.Done():
		}
	}()
	return ctx, stop
}

// holdEnd is why a hold whose lease ended is over.
func holdEnd(lease *watchdog.Lease) error {
	if done(lease.Lost()) {
		return ErrLockLost
	}
	return ErrHoldEnded
}

// extend makes o's hold whose lease is hold last at least lease from now, by the script renew
// makes for the lease in ms (a renewal script, which sets the TTL to the larger of what is
// left and the lease, and replies [1] while o holds). It is repeated while its reply is lost,
// as a renewal may be: it only ever lengthens a hold.
func (o *holder) extend(ctx context.Context, hold *watchdog.Lease, lease time.Duration, renew func(ms string) lua.Request) error {
	if err := o.check(ctx); err != nil {
		return err
	}
	if lease < time.Millisecond {
		return invalid("lease", "must be >= 1ms, got %v", lease)
	}
	lease = lease.Truncate(time.Millisecond)
	if err := o.lock(ctx); err != nil {
		return err
	}
	defer o.unlock()
	if o.count == 0 || o.lease.Load() != hold { // none, or it ended and o went on
		return o.wrap(fmt.Errorf("%w: the handle holds nothing", ErrNotHeld))
	}
	if o.leaseLost() {
		return o.lost("extended after the lease was lost")
	}
	sent := time.Now()
	msg, err := o.c.exec(ctx, renew(msOf(lease)).Call())
	if err != nil {
		return o.wrap(err) // unconfirmed too: the lease it set is not one a failover keeps
	}
	held, err := msg.AsIntSlice()
	if err != nil || len(held) != 1 {
		return o.wrap(fmt.Errorf("unexpected renewal reply %v: %w", msg, err))
	}
	if held[0] != 1 {
		return o.lost("the hold was gone when extended")
	}
	if l := o.lease.Load(); l == nil || !l.Hold(sent, lease, false) {
		return o.lostErr("the lease was lost while it was extended")
	}
	return nil
}

// HoldContext returns a copy of parent that is cancelled when the handle's hold ends —
// released by Unlock, or lost (see Lost) — so that work started under the lock stops by
// itself once the lock no longer covers it. context.Cause tells which: ErrHoldEnded or
// ErrLockLost. When the handle holds nothing, the context is cancelled already (ErrNotHeld).
// The hold is the one the next Unlock ends (on a handle shared by goroutines, the oldest).
// Call cancel once the work is done, as with context.WithCancel.
func (l *exclusive) HoldContext(parent context.Context) (context.Context, context.CancelFunc) {
	_, lease := l.current()
	return holdContext(parent, lease, &l.o)
}

// Extend makes the handle's hold (the one the next Unlock ends) last at least lease from
// now: the lock's TTL becomes the larger of what it has left and lease. Leases only grow, so
// Extend never shortens a hold, and a hold the watchdog keeps stays kept. It returns
// ErrNotHeld when the handle holds nothing, and ErrLockLost when the hold is gone from Redis.
// lease must be at least 1 ms and is truncated to whole milliseconds.
func (l *exclusive) Extend(ctx context.Context, lease time.Duration) error {
	o, hold := l.current()
	if o == nil {
		o = &l.o // holds nothing
	}
	return o.extend(ctx, hold, lease, func(ms string) lua.Request {
		return lua.LockRenew{Locks: []string{o.name}, LeaseMs: ms, Owners: []string{o.id}}
	})
}
