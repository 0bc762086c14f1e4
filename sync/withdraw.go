package sync

import (
	"context"
	"errors"
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
// RWLock for when). after, if not nil, runs last in the background, whatever came of it.
func (o *holder) withdraw(ctx context.Context, until time.Time, s lua.Request, after func()) {
	held := o.tryLock() // in the caller's order, if op is free
	o.c.backgroundUntil(until, func() {
		if after != nil {
			defer after()
		}
		ctx := context.WithoutCancel(ctx)
		if !held {
			_ = o.lock(ctx)
		}
		defer o.unlock()
		if o.count > 0 {
			return // a re-entry, which never claims
		}
		if _, err := o.c.exec(ctx, s.Call()); err != nil && !errors.Is(err, ErrNotReplicated) {
			o.c.log.Debug("waiter's claim not withdrawn; it lapses by itself", o.fields(zap.Error(o.wrap(err)))...)
		}
	})
}

// backgroundUntil runs f in the background (see background), and awaits it until until at
// most (the zero time: not at all).
func (c *Client) backgroundUntil(until time.Time, f func()) {
	done := make(chan struct{})
	c.background(func() {
		defer close(done)
		f()
	})
	if d := time.Until(until); d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-done:
		case <-timer.C:
		}
	}
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
