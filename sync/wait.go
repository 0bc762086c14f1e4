package sync

import (
	"context"
	"fmt"
	"time"

	"github.com/latchkey/latchkey/pubsub"
)

// A wait describes one blocking acquisition: what to attempt, which channel's messages mean
// it may now succeed, and how long to wait.
type wait struct {
	channel string
	policy  pubsub.Policy
	limit   time.Duration // > 0: that long; < 0: no limit (a single attempt, 0, is the caller's)
	// join lets the waiter queue behind the channel's other local waiters without attempting
	// first: only for waiters that all want the same thing, and only when the caller holds
	// nothing a waiter ahead could need.
	join    bool
	attempt attempter
	// heir, if not nil (a nil interface, never a nil pointer of a kind), is queued while
	// waiting, to be served by a local release.
	heir heirKind
	// ordered serves the channel's local waiters in arrival order: only the first attempts,
	// and a wake-up that reaches another is left to it (a semaphore's waiters, where a later,
	// smaller request could succeed where the first cannot). Every ordered waiter joins.
	ordered bool
	// over, if not nil, tells a message that ends the wait by itself, with no attempt (a
	// latch's 0: its count reached zero).
	over func(msg string) bool
}

// An attempter makes one attempt. ttl is in ms, negative when unknown: on failure, when the
// state may next change with no message (the holder's lease); on success, the lease just
// taken, which tells waiters that join later when to re-check.
type attempter interface {
	attempt(ctx context.Context) (ttl int64, ok bool, err error)
}

// acquire is how every blocking primitive takes what it waits for (docs/redisson-interop.md):
// attempt; on failure register on the channel (before the attempt, if it is subscribed
// already) and alternate waiting and attempting.
//
// A waiter that may join and finds other local waiters already on the channel queues behind
// them without attempting: a release wakes the longest-waiting one, so an attempt of its own
// could only fail — or barge ahead of waiters that came first. Within a Client, waiters are
// served in arrival order, and a contended acquisition costs one script, not three. A joined
// waiter still re-checks by the channel's hint (when the holder's lease runs out, which no
// message announces) and makes at least one attempt before a deadline ends its wait.
func (c *Client) acquire(ctx context.Context, w wait) (bool, error) {
	start := time.Now()
	deadline := w.deadline(start)
	if w.join {
		if sub, hint := c.mux.Join(w.channel); sub != nil {
			ttl := int64(-1)
			if !hint.IsZero() {
				ttl = max(time.Until(hint).Milliseconds(), 0)
			}
			return c.await(ctx, w, sub, deadline, ttl, false)
		}
	}
	var sub *pubsub.Waiter
	if c.mux.Subscribed(w.channel) {
		// Subscribed already (channels linger subscribed between waits), the waiter
		// registers before it attempts and misses nothing from here on, so a waiter coming
		// back needs no second attempt for a message it might have missed while subscribing
		// (should the channel be left meanwhile, it is signalled when it is subscribed
		// again, and attempts again).
		var err error
		if sub, _, err = c.mux.Listen(w.channel, w.policy); err != nil {
			return false, c.waitEnded(err)
		}
		if w.ordered && !sub.First() {
			return c.await(ctx, w, sub, deadline, -1, false) // others came meanwhile
		}
	}
	ttl, ok, err := w.attempt.attempt(ctx)
	if ok || err != nil {
		if sub != nil {
			sub.Close()
		}
		return ok, err
	}
	if sub == nil {
		return c.waitAfter(ctx, w, start, ttl)
	}
	hint(sub, ttl)
	return c.await(ctx, w, sub, deadline, ttl, true)
}

// waitAfter is acquire for a wait whose first attempt, made at start on a channel not yet
// subscribed, failed with ttl: it subscribes and waits.
func (c *Client) waitAfter(ctx context.Context, w wait, start time.Time, ttl int64) (bool, error) {
	sub, err := c.mux.Subscribe(w.channel, w.policy)
	if err != nil {
		return false, c.waitEnded(err)
	}
	hint(sub, ttl)
	return c.await(ctx, w, sub, w.deadline(start), ttl, true)
}

// deadline is when a wait begun at start ends by its limit (the zero time: none).
func (w *wait) deadline(start time.Time) time.Time {
	if w.limit <= 0 {
		return time.Time{}
	}
	return start.Add(w.limit)
}

// hint passes an attempt's ttl on to the waiters that join after it.
func hint(sub *pubsub.Waiter, ttlMs int64) {
	if ttlMs >= 0 {
		sub.Hint(time.Now().Add(time.Duration(ttlMs) * time.Millisecond))
	}
}

// waitEnded is the error of a wait the Client's shutdown, or its rueidis client's, ended.
func (c *Client) waitEnded(err error) error {
	if c.closing() {
		return ErrClosed
	}
	return fmt.Errorf("dsync: waiting stopped: %w", err)
}

// await alternates waiting on sub and attempting. A wait ends at the first of: a wake-up
// from a channel (a release message, or the subscription being confirmed, so nothing
// published before the subscription is missed), the holder's TTL (a lost message costs
// latency, never liveness), the deadline, ctx, Close or the rueidis client closing — or, for
// an heir, a release serving it. ttl is the last attempt's reply (negative: unknown);
// attempted says whether there was one, since a wait that reaches its deadline makes one
// attempt if it had none.
func (c *Client) await(ctx context.Context, w wait, sub *pubsub.Waiter, deadline time.Time, ttl int64, attempted bool) (bool, error) {
	defer sub.Close()
	h := w.heir
	var b *heir // h's state, if any
	var verdicts <-chan verdict
	if h != nil {
		b = h.base()
		b.sub, b.attempt = sub, w.attempt
		h.enqueue(c)
		defer h.dequeue(c)
		verdicts = b.verdict
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d := c.recheckAfter(ttl)
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 && attempted {
				return leave(ctx, h, nil)
			}
			d = max(min(d, left), 0)
		}
		timer.Reset(d)
		var woken *pubsub.Waiter // the registration whose signal woke the waiter
		var v *verdict           // what a release that reserved the heir did
		select {
		case <-sub.C():
			woken = sub
			if w.over != nil && w.over(sub.Last()) {
				return true, nil
			}
		case <-timer.C:
		case got := <-verdicts:
			v = &got
		case <-ctx.Done():
			return leave(ctx, h, ctx.Err())
		case <-c.shut:
			return leave(ctx, h, ErrClosed)
		case <-c.mux.Done():
			return leave(ctx, h, c.waitEnded(c.mux.Err()))
		}
		if b != nil && v == nil && !b.state.CompareAndSwap(heirParked, heirBusy) {
			got := <-b.verdict // a release is serving it: its verdict decides
			v = &got
		}
		if v != nil && v.handed {
			if woken != nil {
				woken.Requeue() // the wake-up was for someone else
			}
			return h.took(*v)
		}
		if w.ordered && !sub.First() {
			// Not its turn: the waiter ahead attempts, and wakes the next when it leaves (see
			// the semaphores). Nor does it time re-checks by a hint, which only the first
			// keeps fresh.
			if b != nil && !b.park() {
				return h.took(<-b.verdict)
			}
			if !deadline.IsZero() && time.Until(deadline) <= 0 {
				return leave(ctx, h, nil)
			}
			ttl = -1
			continue
		}
		actx := ctx
		if v != nil {
			// Not handed over: the heir attempts itself. If the release may have handed the
			// lock over, this attempt must run whatever ctx says, and take over what it wrote.
			b.state.Store(heirBusy)
			if v.unknown {
				actx = context.WithoutCancel(ctx)
			}
		}
		var ok bool
		var err error
		ttl, ok, err = w.attempt.attempt(actx)
		attempted = true
		if err != nil && woken != nil {
			// The wake-up may have been the only one a release sent this Client: it goes to
			// another waiter rather than dying with this one.
			woken.Requeue()
		}
		if err == nil {
			hint(sub, ttl)
		}
		if ok || err != nil {
			return ok, err // with h reserved meanwhile, the caller passes on what it was handed
		}
		if b != nil && !b.park() {
			return h.took(<-b.verdict) // handed permits during its attempt, which found too few
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
	return min(time.Duration(ttlMs)*time.Millisecond+time.Millisecond, c.wdTimeout)
}

// attemptFunc adapts a function to attempter.
type attemptFunc func(ctx context.Context) (int64, bool, error)

func (f attemptFunc) attempt(ctx context.Context) (int64, bool, error) { return f(ctx) }

// keepAlive shortens a waiter's wait hint (ms, negative: unknown) so that it attempts
// again within a third of the fair wait time: a place in a fair lock's queue, or a waiting
// writer's claim, lapses a wait time after its last attempt.
func (c *Client) keepAlive(ttl int64) int64 {
	if every := c.fairWait.Milliseconds() / 3; ttl < 0 || ttl > every {
		return every
	}
	return ttl
}
