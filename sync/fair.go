package sync

import (
	"context"
	"time"

	"github.com/latchkey/latchkey/internal/names"
	"github.com/latchkey/latchkey/lua"
	"github.com/latchkey/latchkey/pubsub"
)

// FairLock is a handle on a fair reentrant lock, wire-compatible with Redisson's fair lock
// (RedissonFairLock): the lock hash is Lock's, and waiters queue in Redis, in the list
// redisson_lock_queue:{name} with their deadlines in the zset redisson_lock_timeout:{name}.
// It has Lock's methods and guarantees; what differs is who gets the lock.
//
// Waiters get the lock in the order they first attempted it, across every Client and every
// Java process on the same name: a free lock can be taken only by the head of the queue. A
// release wakes the head alone, on its own channel (redisson_lock__channel:{name}:<owner
// ID>), as Redisson does, and the head attempts; nobody else does. A TryLock without wait
// time takes the lock only when nobody is queued, and never queues. A waiter whose wait ends
// (its context, its wait time) leaves the queue, in the background — unless another
// goroutine of the same Reentrant handle still waits in that place.
//
// A waiter keeps its place alive by attempting again at least every third of the Client's
// fair wait time (WithFairLockWaitTimeout, by default the watchdog timeout). A waiter that
// stops — its process died, or Redis was unreachable for that long — loses its place once
// it reaches the head, one wait time after its last attempt; should it still be waiting,
// its next attempt queues it again at the tail. So a crashed waiter holds up the queue for
// one wait time, not Redisson's default of 5 minutes. Java processes sharing the lock must
// use the same wait time (docs/redisson-interop.md).
//
// Choose it over Lock when many instances contend for one lock: a Lock's release wakes a
// waiter in every Client (Redisson's protocol), which all attempt; a FairLock's wakes one.
// Within one Client, Lock's local hand-off is faster.
type FairLock struct{ exclusive }

// FairLock returns a handle on the fair lock called name (the Redis key of its hash). It
// makes no network call; an empty name or a bad option is reported by the handle's methods.
func (c *Client) FairLock(name string, opts ...HandleOption) *FairLock {
	l := &FairLock{}
	l.init(c, name, "fair lock", "", c.lockKind, &fairLock{
		channel:  names.Prefix(lockChannelPrefix, name),
		queue:    names.Prefix("redisson_lock_queue", name),
		timeouts: names.Prefix("redisson_lock_timeout", name),
		waiters:  names.Suffix(name, "fair_waiters"),
	}, opts)
	return l
}

// fairLock is FairLock's variant: its keys besides the hash are the queue of waiting owners,
// the zset of their deadlines, and the hash that marks latchkey waiters among them.
type fairLock struct{ channel, queue, timeouts, waiters string }

// keys are the fair lock's keys, then more.
func (f *fairLock) keys(o *holder) lua.FairKeys {
	return lua.FairKeys{Lock: o.name, Queue: f.queue, Timeouts: f.timeouts, Waiters: f.waiters}
}

// wakeCh is the waiter's own channel: a release that frees the lock while it is the head
// tells it to attempt.
func (f *fairLock) wakeCh(o *holder) string { return f.channel + ":" + o.id }

// prepare: a fair lock's waiters never join (Redis keeps the order), and the head's 0 wakes
// every wait of its owner (a Reentrant handle's goroutines share it), each of which may take
// or re-enter the lock.
func (f *fairLock) prepare(_ *lockAttempt, w *wait) { w.join, w.policy = false, pubsub.AllPolicy }

// request takes the lock, or takes or keeps the waiter's place in the queue.
func (f *fairLock) request(o *holder, leaseMs string, a *lockAttempt) lua.Acquire {
	return lua.FairAcquire{FairKeys: f.keys(o), LeaseMs: leaseMs, Owner: o.id, WaitMs: o.c.fairWaitMs, NowMs: nowMs(),
		Waiting: a != nil}
}

// replied tells a waiter to attempt again within a third of its place's wait time.
func (f *fairLock) replied(o *holder, _ *lockAttempt, ttl int64, ok bool, err error) (int64, bool, error) {
	return o.c.keepAlive(ttl), ok, err
}

func (f *fairLock) release(o *holder, holds int, num lua.Numbered) lua.Request {
	return lua.FairRelease{FairKeys: f.keys(o), Channel: f.channel, Numbered: num, LeaseMs: msOf(o.ttl()), Owner: o.id,
		Publish: o.c.publishCmd, Holds: holds, NowMs: nowMs()}
}

func (f *fairLock) unlock(ctx context.Context, o *holder) error { return releaseOne(ctx, o, f) }

func (f *fairLock) forceRelease(o *holder) lua.Request {
	return lua.FairForceRelease{FairKeys: f.keys(o), Channel: f.channel, Publish: o.c.publishCmd, NowMs: nowMs()}
}

// left takes the owner's place out of the queue after a wait that did not end in the lock,
// in the background (see holder.withdraw), awaited until until at most — unless another wait
// of the owner's (a Reentrant handle's goroutines share it) still waits in that place: the
// channel is the owner's, and the ended wait has left it. (A sibling yet to subscribe
// queues again, at the tail, at the attempt its subscription's confirmation makes.)
func (f *fairLock) left(ctx context.Context, o *holder, _ *lockAttempt, until time.Time) {
	if o.c.mux.Waiters(f.wakeCh(o)) > 0 {
		return
	}
	o.withdraw(ctx, until, lua.FairLeave{FairKeys: f.keys(o), Channel: f.channel, Owner: o.id, Publish: o.c.publishCmd, NowMs: nowMs()}, nil)
}
