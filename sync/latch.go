package sync

import (
	"context"

	"github.com/latchkey/latchkey/internal/keyslot"
	"github.com/latchkey/latchkey/internal/names"
	"github.com/latchkey/latchkey/lua"
	"github.com/latchkey/latchkey/pubsub"
)

// CountDownLatch is a handle on a countdown latch, wire-compatible with Redisson's
// RCountDownLatch: the Redis key name holds the count as a decimal integer, and the channel
// redisson_countdownlatch__channel__{name} carries 0 when the count reaches zero and 1 when
// a count is set or the latch deleted.
//
// Await returns once the count is zero: at once if the latch does not exist (a count of
// zero), or when a count-down brings it there. Every awaiter of every Client wakes on the
// one message; a latch set again before an awaiter saw it at zero keeps that awaiter waiting.
// Counting down past zero changes nothing, as in Redisson.
//
// A latch counts count-downs, not workers: a worker that dies before its CountDown keeps
// every awaiter waiting. Bound Await with a context deadline, or count down for the worker
// that replaces it.
//
// Every change a handle makes is safe to repeat: it is numbered on the handle's request key
// (redisson_unlock_latch:{name}:<32 hex>, as a lock handle's; it expires 5 minutes after the
// handle's last change, or goes when the handle is garbage-collected or its Client closed),
// so a CountDown whose reply was lost is repeated within the retry budget without counting
// down twice (Redisson never repeats one, so a lost reply leaves it unknown). A zero message
// that never arrives (a Java process publishing with another pub/sub mode, a failover)
// costs each awaiter at most the watchdog timeout, when it checks the count again by itself.
// A handle is safe for concurrent use, and concurrent calls on it do not wait for each
// other: share one per process.
type CountDownLatch struct {
	p       pool
	channel string
}

// CountDownLatch returns a handle on the countdown latch called name (its Redis key). It
// makes no network call; an empty name is reported by the handle's methods.
func (c *Client) CountDownLatch(name string) *CountDownLatch {
	l := &CountDownLatch{channel: names.LatchChannel(name)}
	l.p.init(c, name, "countdown latch")
	if l.p.err == nil && c.cluster && c.publishCmd == "SPUBLISH" && keyslot.Of(l.channel) != keyslot.Of(name) {
		// A script may only SPUBLISH on a channel of its own node's slots.
		l.p.err = invalid("name", "%q has a hash tag of its own, so Redisson's channel for it (%s) is in another "+
			"slot, which a Cluster's sharded pub/sub cannot publish on from the latch's scripts: use a name without "+
			"a hash tag, or WithPubSubMode(PubSubPlain)", name, l.channel)
	}
	return l
}

// Name returns the latch's name, which is its Redis key.
func (l *CountDownLatch) Name() string { return l.p.name }

// TrySetCount sets the count to n if the latch does not exist (its count is zero), and
// reports whether it did. n must be at least 1.
func (l *CountDownLatch) TrySetCount(ctx context.Context, n int) (bool, error) {
	if n < 1 {
		return false, invalid("count", "must be >= 1, got %d", n)
	}
	msg, err := l.p.request(ctx, l.request(func(r lua.LatchRequest) lua.Call { return r.Set(n) }))
	return replied(err) && !msg.IsNil(), err
}

// CountDown decrements the count, and at zero deletes the latch and wakes every awaiter.
// Like a lock's Unlock it runs, and is repeated within the retry budget, even when ctx is
// already cancelled (a deferred CountDown after the request ended still counts); an error
// wrapping ErrOutcomeUnknown means it may or may not have counted yet, and the Client
// repeats it in the background until Redis answers (so do not call CountDown again for it).
func (l *CountDownLatch) CountDown(ctx context.Context) error {
	_, err := l.p.release(ctx, l.request(lua.LatchRequest.CountDown))
	return err
}

// Delete deletes the latch, whatever its count, and reports whether there was one. A latch
// that does not exist counts zero: its awaiters return. (Redisson's delete publishes 1, a
// new count, which Java awaiters take as a reason to keep waiting; latchkey's check the
// count on it, and find none.)
func (l *CountDownLatch) Delete(ctx context.Context) (bool, error) {
	msg, err := l.p.request(ctx, l.request(lua.LatchRequest.Delete))
	return replied(err) && !msg.IsNil(), err
}

// request is one of the latch's numbered requests, which call makes.
func (l *CountDownLatch) request(call func(lua.LatchRequest) lua.Call) func(lua.Numbered) lua.Request {
	o := &l.p.owner
	return func(num lua.Numbered) lua.Request {
		return call(lua.LatchRequest{CountDownLatch: o.name, Numbered: num, Publish: o.c.publishCmd, Channel: l.channel})
	}
}

// Count returns the count now: 0 when the latch does not exist. It waits for Redis while ctx
// lasts, and without a deadline for the retry budget at most.
func (l *CountDownLatch) Count(ctx context.Context) (int, error) {
	o := &l.p.owner
	if err := o.check(ctx); err != nil {
		return 0, err
	}
	return l.count(ctx)
}

// count reads the count: 0 when the latch does not exist.
func (l *CountDownLatch) count(ctx context.Context) (int, error) {
	n, err := l.p.get(ctx)
	return max(n, 0), err
}

// Await waits until the count is zero, as long as ctx allows; it returns nil at once if it
// is zero already, and an error wrapping ctx.Err() if ctx ends first. A zero message wakes
// every awaiter without a further request. A read of the count that Redis does not answer
// (unreachable, hung) ends the wait with an error: at ctx's end, or without a deadline
// within the retry budget.
func (l *CountDownLatch) Await(ctx context.Context) error {
	o := &l.p.owner
	if err := o.check(ctx); err != nil {
		return err
	}
	a := attemptFunc(func(ctx context.Context) (int64, bool, error) {
		n, err := l.count(ctx)
		return -1, n == 0 && err == nil, err
	})
	// Every message wakes every awaiter: a 1 may be a Delete, after which the latch counts
	// zero. A 0 received since the wait registered is proof that the count reached zero
	// meanwhile: the wait ends without reading it.
	_, err := o.c.acquire(ctx, wait{channel: l.channel, policy: pubsub.AllPolicy, limit: -1, attempt: a,
		over: func(msg string) bool { return msg == "0" }})
	return err
}
