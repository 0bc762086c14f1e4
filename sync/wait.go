package sync

import (
	"context"
	"time"

	"github.com/latchkey/latchkey/pubsub"
)

// An attempter makes one attempt. ok reports success. ttl is in ms, negative when unknown:
// on failure, the holder's remaining lease, which bounds how long the next wait may last; on
// success, the lease just taken, which tells later waiters when to re-check.
type attempter interface {
	attempt(ctx context.Context) (ttl int64, ok bool, err error)
}

// attemptFunc adapts a function to attempter.
type attemptFunc func(ctx context.Context) (ttl int64, ok bool, err error)

func (f attemptFunc) attempt(ctx context.Context) (int64, bool, error) { return f(ctx) }

// acquire is how every blocking primitive takes what it waits for (REDISSON-LAYOUT §2.3):
// attempt; on failure register on channel and alternate waiting and attempting. wait 0 makes
// one attempt, a negative wait has no limit.
//
// A caller that may join (join: it holds nothing a waiter ahead could need) and finds other
// local waiters already on the channel queues behind them without attempting: a release
// wakes the longest-waiting one, so an attempt of its own could only fail — or barge ahead
// of waiters that came first. Within a Client, waiters are served in arrival order, and a
// contended acquisition costs one script, not three. A joined waiter still re-checks by the
// channel's hint (when the holder's lease runs out, which no message announces) and makes at
// least one attempt before a deadline ends its wait.
//
// A non-nil heir is queued, while the caller waits, for a local release to hand the lock to
// (see handoff.go).
func (c *Client) acquire(ctx context.Context, channel string, policy pubsub.Policy, wait time.Duration, join bool, a attempter, h *heir) (bool, error) {
	var deadline time.Time
	if wait > 0 {
		deadline = time.Now().Add(wait)
	}
	if wait != 0 && join {
		if w, hint := c.mux.Join(channel); w != nil {
			ttl := int64(-1)
			if !hint.IsZero() {
				ttl = max(time.Until(hint).Milliseconds(), 0)
			}
			return c.await(ctx, w, deadline, ttl, false, a, h)
		}
	}
	ttl, ok, err := a.attempt(ctx)
	if ok || err != nil || wait == 0 {
		return ok, err
	}
	w, err := c.mux.Subscribe(channel, policy)
	if err != nil {
		return false, ErrClosed
	}
	hint(w, ttl)
	return c.await(ctx, w, deadline, ttl, true, a, h)
}

// hint passes an attempt's ttl on to the waiters that join after it.
func hint(w *pubsub.Waiter, ttlMs int64) {
	if ttlMs >= 0 {
		w.Hint(time.Now().Add(time.Duration(ttlMs) * time.Millisecond))
	}
}

// await alternates waiting on w and attempting. A wait ends at the first of: a wake-up from
// the channel (a release message, or the subscription being confirmed, so nothing published
// before the subscription is missed), the holder's TTL (a lost message costs latency, never
// liveness), the deadline, ctx, Close — or, for an heir, a release handing it the lock. A
// zero deadline waits without limit. ttl is the last attempt's reply (negative: unknown);
// attempted says whether there was one, since a wait that reaches its deadline makes one
// attempt if it had none.
//
// An heir handed the lock as its wait ends holds it, and acquire succeeds, as a semaphore in
// golang.org/x/sync does when it is granted as its context ends.
func (c *Client) await(ctx context.Context, w *pubsub.Waiter, deadline time.Time, ttl int64, attempted bool, a attempter, h *heir) (bool, error) {
	defer w.Close()
	var handed <-chan struct{}
	if h != nil {
		c.heirs.add(h.l.name, h)
		defer c.heirs.remove(h.l.name, h)
		handed = h.handed
	}
	// quit ends the wait with err unless a release has handed the lock over meanwhile.
	quit := func(err error) (bool, error) {
		if h != nil && h.leave() {
			return h.took(w)
		}
		return false, err
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d := c.recheckAfter(ttl)
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 && attempted {
				return quit(nil)
			}
			d = max(min(d, left), 0)
		}
		timer.Reset(d)
		woken := false
		select {
		case <-w.C():
			woken = true
		case <-timer.C:
		case <-handed:
			return h.took(w)
		case <-ctx.Done():
			return quit(ctx.Err())
		case <-c.closed:
			return quit(ErrClosed)
		}
		if h != nil && !h.state.CompareAndSwap(heirParked, heirBusy) {
			// Handed the lock since the select.
			<-h.handed
			if woken {
				w.Requeue() // the wake-up was for someone else
			}
			return h.took(w)
		}
		var ok bool
		var err error
		ttl, ok, err = a.attempt(ctx)
		attempted = true
		if err != nil && woken {
			// The wake-up may have been the only one a release sent this Client: it goes to
			// another waiter rather than dying with this one.
			w.Requeue()
		}
		if err == nil {
			hint(w, ttl)
		}
		if ok || err != nil {
			return ok, err
		}
		if h != nil {
			h.state.Store(heirParked)
		}
	}
}

// recheckAfter is how long a waiter may go without a message before it checks again: the
// holder's TTL, capped by the watchdog timeout so that a lock with a long lease, or no
// expiry at all, still gets re-checked now and then should a release message be lost.
func (c *Client) recheckAfter(ttlMs int64) time.Duration {
	if ttlMs < 0 {
		return c.wdTimeout
	}
	d := time.Duration(ttlMs)*time.Millisecond + time.Millisecond
	return min(d, c.wdTimeout)
}
