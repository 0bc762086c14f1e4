package sync

import (
	"context"
	"errors"
	"time"

	"github.com/latchkey/latchkey/lua"
	"go.uber.org/zap"
)

// How a Semaphore's waiters wait: their attempts, registering their Client as a waiting one,
// the leave of its last waiter, and permits a local release handed a wait that did not take
// them.

// acquire takes n permits, waiting up to limit (0: one attempt; negative: no limit).
func (s *Semaphore) acquire(ctx context.Context, n int, limit time.Duration) (ok bool, err error) {
	end, open := s.p.c.begin() // Shutdown awaits the acquisition, and what it leaves to clean up
	defer end()
	if !open {
		return false, s.p.wrap(ErrClosed)
	}
	c := s.p.c
	start := time.Now()
	defer func() { c.obs.acquired(ctx, s.p.what, s.p.name, n, start, ok, err) }()
	var h *permitsHeir
	if limit != 0 && c.maxHandoff > 0 {
		h = &permitsHeir{heir: heir{key: s.q.channel}, permits: n}
	}
	var reg registration // what the last attempt did to the Client's registration
	attempts, first := 0, false
	a := attemptFunc(func(ctx context.Context) (int64, bool, error) {
		ok, more, r, err := s.attempt(ctx, n, limit != 0)
		reg, attempts = r, attempts+1
		first = first || attempts == 1 && ok
		if h != nil {
			h.more.Store(more)
		}
		return c.keepAlive(-1), ok, err
	})
	ok, err = c.acquirePermits(ctx, s.q.clientCh, limit, h, a)
	if h != nil && h.state.Load() == heirReserved {
		// A release handed the wait permits as its own attempt ended, in success or error:
		// they are not the caller's, and go on.
		<-h.verdict
		h.state.Store(heirGone)
		if _, err := s.handOn(ctx, n); err != nil {
			c.log.Warn("permits handed to a wait that had ended were not given back", s.p.fields(zap.Error(err))...)
		}
	}
	// A wait that waited may have had the Client registered, by its attempts or others'; and
	// an attempt that took, registered, kept the registration for waiters that may have gone
	// since.
	waited := limit != 0 && !first || reg == registrationKept
	switch waiters := c.mux.Waiters(s.q.clientCh); {
	case waited && reg != registrationDropped && waiters == 0:
		s.leave(ctx, c.leaveBy(ctx, err))
	case reg == registrationDropped && waiters > 0:
		// The take dropped it, counting no other waiter: one came meanwhile, and attempts
		// to register the Client again.
		c.mux.Wake(s.q.clientCh)
	}
	return ok, err
}

// handOn gives n permits to the Client's next waiter for them (permitHeirs.give), or else
// back to Redis, whatever ctx says — also once the Client is closed: a Release that handed
// them to a wait that did not take them returned nil — and reports whether they stayed local.
func (s *Semaphore) handOn(ctx context.Context, n int) (local bool, err error) {
	c := s.p.c
	if c.permitHeirs.give(s.q.channel, n, c.maxHandoff) {
		return true, nil
	}
	_, err = s.p.run(context.WithoutCancel(ctx), s.release(n))
	return false, err
}

// leave drops the Client's registration, and its listening, once its last waiter is gone
// with the registration kept (see lib.lua's sem_leave); then a waiter that came meanwhile
// attempts, to register again. It runs in the background, within the retry budget, awaited
// until until at most (see Client.leaveBy); if Redis cannot be told, the registration lapses.
func (s *Semaphore) leave(ctx context.Context, until time.Time) {
	c := s.p.c
	r := lua.SemLeave{Semaphore: s.p.name, Clients: s.q.clients, Wants: s.wants, Listener: s.q.listener,
		Leaving: c.leaving()}.Call()
	c.backgroundUntil(until, func() {
		if _, err := c.exec(context.WithoutCancel(ctx), r); err != nil && !errors.Is(err, ErrNotReplicated) {
			c.log.Debug("waiter's claim not withdrawn; it lapses by itself", s.p.fields(zap.Error(s.p.wrap(err)))...)
		}
		s.q.afterLeave(c)
	})
}

// attempt makes one acquisition of n permits, and reports when it fails whether it found
// some permits (or cannot tell). One that leaves permits (or cannot tell) wakes the
// Client's next waiter: its turn. One that leaves none does not: with no lease to end, only
// a release, whose message wakes the next waiter, can serve it. Permits taken that too few
// replicas confirmed (WithSyncReplicas) are given back, and the error says so.
func (s *Semaphore) attempt(ctx context.Context, n int, waiting bool) (ok, more bool, reg registration, err error) {
	o := &s.p.owner
	registers, others, listens := false, false, false
	defer func() {
		switch {
		case !registers || err != nil:
			return
		case !ok || others:
			reg = registrationKept
		default:
			reg = registrationDropped
		}
		s.q.heard(o.c, listens, ok, others)
	}()
	msg, err := s.p.request(ctx, func(num lua.Numbered) lua.Request {
		r := lua.SemAcquire{SemKeys: s.keys(), Numbered: num, Listener: s.q.listener, Permits: n, Publish: o.c.publishCmd}
		// Registered only once its channel is subscribed: a wake sent to a Client not
		// subscribed yet would reach nobody.
		if registers = waiting && o.c.mux.Subscribed(s.q.clientCh); registers {
			others = o.c.mux.Waiters(s.q.clientCh) > 1
			r.Wait = &lua.Registration{Token: o.c.lockToken, Ms: o.c.fairWaitMs, Others: others}
		}
		return r // repeated as its cancel when its outcome is unknown: the caller is told the permits are not its
	})
	if errors.Is(err, ErrNotReplicated) {
		return false, true, 0, err // withdrawn: whatever it took is given back
	}
	if err != nil {
		return false, false, 0, err
	}
	if msg.IsNil() {
		return false, true, 0, nil // a repeat of an attempt that failed: what it found is not known
	}
	if arr, aerr := msg.ToArray(); aerr == nil && len(arr) > 0 {
		listens = len(arr) == 2
		avail, err := arr[0].AsInt64()
		return false, avail > 0, 0, o.wrap(err)
	}
	left, err := msg.AsInt64()
	if err != nil {
		return false, false, 0, o.wrap(err)
	}
	if left != 0 {
		o.c.mux.Wake(s.q.clientCh)
	}
	return true, false, 0, nil
}
