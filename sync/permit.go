package sync

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/latchkey/latchkey/watchdog"
)

// Permits are the permits one acquisition took: their IDs and their lease.
//
// A nil *Permits — what a failed Acquire returns — holds nothing: its Release returns
// ErrNotHeld, so that the usual order
//
//	p, err := s.Acquire(ctx, 1)
//	defer p.Release(ctx)
//	if err != nil { ... }
//
// does not panic; IDs is empty, Valid false, Deadline false and Lost nil (never closed), as
// for a zero Permits.
type Permits struct {
	s        *PermitSemaphore
	ids      []string
	since    time.Time // when they were taken: the acquire's send
	lease    *watchdog.Lease
	released atomic.Bool
}

// IDs returns the permits' IDs, 32 lowercase hex characters each, as Redisson shows them.
func (p *Permits) IDs() []string {
	if p == nil {
		return nil
	}
	return append([]string(nil), p.ids...)
}

// held reports whether p is the result of an acquisition (not nil, not a zero Permits).
func (p *Permits) held() bool { return p != nil && p.s != nil && p.lease != nil }

// Lost returns a channel closed when the permits' lease is lost while held: the watchdog
// found a permit gone or expired, no renewal succeeded before the lease ran out, an explicit
// Lease ran out, or Release found a permit expired. What it can and cannot promise is as for
// Lock.Lost: check Valid right before acting.
func (p *Permits) Lost() <-chan struct{} {
	if !p.held() {
		return nil
	}
	return p.lease.Lost()
}

// Valid reports whether the permits' lease is ahead now by the monotonic clock, as last
// confirmed by Redis, and no loss is known. After Release it is false.
func (p *Permits) Valid() bool { return p.held() && live(p.lease) }

// Deadline returns when the permits' lease ends unless renewed, as last confirmed by Redis,
// and false once they are released or their lease is lost.
func (p *Permits) Deadline() (time.Time, bool) {
	if !p.held() {
		return time.Time{}, false
	}
	return p.lease.Deadline()
}

// Release gives the permits back. It returns nil when every one of them was still acquired
// and unexpired; an error wrapping ErrLockLost (and ErrNotHeld) when some had expired (they
// are given back all the same, and Lost closes); ErrNotHeld after a Release that got a reply
// or whose outcome is unknown. Its repeats and unknown outcomes are as for
// Semaphore.Release. Refused by Redis, it did nothing: the permits are held, no longer
// renewed, until Release is called again or their lease ends. On a nil (or zero) Permits,
// which hold nothing, it returns an error wrapping ErrNotHeld and sends nothing.
func (p *Permits) Release(ctx context.Context) error {
	if !p.held() {
		return fmt.Errorf("%w: no permits (a nil Permits, as a failed Acquire returns)", ErrNotHeld)
	}
	if err := p.s.p.check(ctx); err != nil {
		return err
	}
	if p.released.Swap(true) {
		return p.s.p.wrap(fmt.Errorf("%w: the permits were released already", ErrNotHeld))
	}
	if round := p.lease.Stop(); round != nil {
		<-round // a renewal on its way lands before the release, never after
	}
	live, err := p.s.release(ctx, p.ids)
	defer func() { p.s.p.c.obs.released(p.s.p.what, p.s.p.name, len(p.ids), p.since, false, err) }()
	if !replied(err) && !errors.Is(err, ErrOutcomeUnknown) {
		// Refused: nothing ran, and the permits are still held, no longer renewed: they lapse
		// with their lease unless Release is called again.
		p.lease.Lapse()
		p.released.Store(false)
		return err
	}
	p.s.p.c.permitsHeld.remove(p)
	if replied(err) && live >= 0 && live < len(p.ids) {
		// Expired (and maybe reclaimed), or released by ID by another handle or process: the
		// script cannot tell a reclaimed permit from a released one.
		reason := fmt.Sprintf("%d of %d permits were no longer acquired (expired, or released by ID elsewhere)",
			len(p.ids)-live, len(p.ids))
		p.lease.Lose(reason)
		err = p.s.p.wrap(errors.Join(tag("lease lost: "+reason, ErrLockLost, ErrNotHeld), err))
	}
	return err
}
