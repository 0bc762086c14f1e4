package sync

import (
	"context"
	"errors"
	gosync "sync"
	"time"

	"github.com/latchkey/latchkey/lua"
	"github.com/redis/rueidis"
	"go.uber.org/zap"
)

// withdraw runs s, which withdraws a waiter's claim on the object (a fair lock's place, a
// writer's claim, a plain lock's Client registration) after a wait that did not end in a
// hold — whatever ctx says: a claim left behind would hold others up until it lapsed. It
// runs in the background, holding op (so that the owner's next request waits for it, or
// settles it), within the retry budget; the caller waits for it until until at most (the
// zero time: not at all), so that neither a Redis that is unreachable nor one that hangs
// delays the caller. If Redis cannot be told, the claim lapses by itself (see FairLock and
// RWLock for when).
//
// then, if not nil, is given the reply, under op — a request of unknown outcome is settled
// first, or the reply could show a hold that request will still drop — and late, whether
// the caller has stopped waiting: a hold the reply shows, which a release granted as the
// wait ended, the caller takes when it still waits (then's result is withdraw's), and
// then gives back when it does not (late): a hold the caller is not told of must not be
// kept. after, if not nil, runs last in the background, whatever came of the withdrawal.
func (o *holder) withdraw(ctx context.Context, until time.Time, s lua.Request,
	then func(msg rueidis.RedisMessage, late bool) (bool, error), after func()) (bool, error) {
	w := &withdrawal{done: make(chan struct{})}
	held := o.tryLock() // in the caller's order, if op is free
	o.c.background(func() {
		defer close(w.done)
		if after != nil {
			defer after()
		}
		ctx := context.WithoutCancel(ctx)
		if !held {
			_ = o.lock(ctx)
		}
		defer o.unlock()
		w.ok, w.err = o.withdrawing(ctx, s, then, w)
	})
	if d := time.Until(until); d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-w.done:
		case <-timer.C:
		}
	}
	w.mu.Lock()
	taken := w.taken
	w.abandoned = !taken
	w.mu.Unlock()
	if !taken {
		select {
		case <-w.done: // over, with no hold found
			return w.ok, w.err
		default:
			return false, nil // what it finds is its own business
		}
	}
	<-w.done // then is taking the hold for the caller: no request is left
	return w.ok, w.err
}

// A withdrawal is the state a withdraw shares with its caller.
type withdrawal struct {
	mu        gosync.Mutex
	taken     bool // the reply came while the caller waited: then takes what it shows, for it
	abandoned bool // the caller stopped waiting first: then gives back what the reply shows
	ok        bool
	err       error
	done      chan struct{}
}

// withdrawing is withdraw's background part. Caller holds op.
func (o *holder) withdrawing(ctx context.Context, s lua.Request, then func(rueidis.RedisMessage, bool) (bool, error), w *withdrawal) (bool, error) {
	if o.count > 0 {
		return false, nil // a re-entry, which never claims
	}
	if then != nil {
		if err := o.settle(ctx); err != nil {
			o.c.log.Debug("waiter's claim not withdrawn; it lapses by itself", o.fields(zap.Error(err))...)
			return false, nil
		}
	}
	msg, err := o.exec(ctx, s.Call())
	if err != nil && !errors.Is(err, ErrNotReplicated) {
		o.unsure = o.unsure || errors.Is(err, ErrOutcomeUnknown)
		o.c.log.Debug("waiter's claim not withdrawn; it lapses by itself", o.fields(zap.Error(o.wrap(err)))...)
		return false, nil
	}
	if then == nil {
		return false, nil
	}
	w.mu.Lock()
	late := w.abandoned
	w.taken = !late
	w.mu.Unlock()
	ok, err := then(msg, late)
	if late && err != nil {
		o.c.log.Warn("a hold granted as a wait ended was not given back; it lapses with its lease",
			o.fields(zap.Error(err))...)
	}
	return ok, err
}

// leaveGrace is how long past its context's end a call awaits the withdrawal of its waiter's
// claim (see Client.leaveBy): as long as a reply to a request already sent.
const leaveGrace = replyGrace

// leaveBy is until when a call whose wait ended with err (nil: its wait time ran out) waits
// for the withdrawal of its claim (see withdraw): not at all when err says that Redis did not
// answer, or refused to run a script, within the retry budget (the withdrawal would most
// likely fare no better); leaveGrace past ctx's end; and while ctx lasts, as a request would
// (its deadline or the retry budget, and replyGrace).
func (c *Client) leaveBy(ctx context.Context, err error) time.Time {
	var rerr *rueidis.RedisError
	switch {
	case errors.Is(err, ErrOutcomeUnknown) || errors.As(err, &rerr) && notRun(rerr):
		return time.Time{}
	case ctx.Err() != nil:
		if d, ok := ctx.Deadline(); ok && !d.After(time.Now()) {
			return d.Add(c.leaveGrace)
		}
		return time.Now().Add(c.leaveGrace)
	}
	return c.bound(ctx).Add(replyGrace)
}
