package sync

import (
	"context"
	"strconv"
	"time"

	"github.com/latchkey/latchkey/internal/names"
	"github.com/latchkey/latchkey/lua"
	"github.com/latchkey/latchkey/pubsub"
	"github.com/redis/rueidis"
)

// FairLock is a handle on a fair reentrant lock, wire-compatible with Redisson's fair lock
// (RedissonFairLock): the lock hash is Lock's, and waiters queue in Redis, in the list
// redisson_lock_queue:{name} with their deadlines in the zset redisson_lock_timeout:{name}.
// It has Lock's methods and guarantees; what differs is who gets the lock.
//
// Waiters get the lock in the order they first attempted it, across every Client and every
// Java process on the same name. A release hands the lock to the head waiter and tells only
// it, on its own channel (redisson_lock__channel:{name}:<owner ID>): a latchkey waiter is
// granted the lock by the release itself and returns from Lock with no request of its own;
// a Java waiter is told to attempt, as Redisson does. Nobody else attempts. A TryLock
// without wait time takes the lock only when nobody is queued, and never queues. A waiter
// whose wait ends (its context, its wait time) leaves the queue, in the background; if a
// release granted it the lock at that moment, the call returns nil, holding it (as a local
// hand-off's heir does) — when the leave's reply shows the grant while the call still waits
// for it (25 ms past its context's end at most). A grant the leave finds later is given
// back. A call whose context ends before it could attempt (its handle busy) leaves too: its
// handle's place may be an earlier wait's, granted the lock meanwhile.
//
// A waiter keeps its place alive by attempting again at least every third of the Client's
// fair wait time (WithFairLockWaitTimeout, by default the watchdog timeout). A waiter that
// stops — its process died, or Redis was unreachable for that long — loses its place once
// it reaches the head, one wait time after its last attempt; should it still be waiting,
// its next attempt queues it again at the tail. So a crashed waiter holds up the queue for
// one wait time, not Redisson's default of 5 minutes — or, when a release hands it the lock
// within that time, until the lease it asked for runs out (by default the watchdog timeout,
// as long as the wait time). Java processes sharing the lock must use the same wait time
// (docs/redisson-interop.md).
//
// Choose it over Lock when many instances contend for one lock: a Lock's release wakes a
// waiter in every Client (Redisson's protocol), which all attempt; a FairLock's wakes one.
// Within one Client, Lock's local hand-off is faster.
type FairLock struct{ exclusive }

// FairLock returns a handle on the fair lock called name (the Redis key of its hash). It
// makes no network call; an empty name or a bad option is reported by the handle's methods.
func (c *Client) FairLock(name string, opts ...HandleOption) *FairLock {
	l := &FairLock{}
	l.init(c, name, "fair lock", &fairLock{
		channel:  names.Prefix(lockChannelPrefix, name),
		queue:    names.Prefix("redisson_lock_queue", name),
		timeouts: names.Prefix("redisson_lock_timeout", name),
		leases:   names.Suffix(name, "fair_leases"),
	}, opts)
	return l
}

// fairLock is FairLock's variant: its keys besides the hash are the queue of waiting owners,
// the zset of their deadlines, and the hash of latchkey waiters' leases, which lets a release
// grant a waiter the lock.
type fairLock struct{ channel, queue, timeouts, leases string }

// keys are the fair lock's keys, then more.
func (f *fairLock) keys(o *holder) lua.FairKeys {
	return lua.FairKeys{Lock: o.name, Queue: f.queue, Timeouts: f.timeouts, Leases: f.leases}
}

// wakeCh is the waiter's own channel: a release may grant it the lock (the token of its
// latest attempt) rather than tell it to attempt (0).
func (f *fairLock) wakeCh(o *holder) string { return f.channel + ":" + o.id }

// prepare: a fair lock's waiters never join (Redis keeps the order), and a grant for an
// earlier attempt is stale: the lock it gave may have lapsed, and gone to another, since.
func (f *fairLock) prepare(a *lockAttempt, w *wait) {
	w.join, w.policy = false, pubsub.AllPolicy
	w.granted = func(msg string) (bool, error, bool) {
		if msg != a.token {
			return false, nil, false
		}
		return a.o.takeGrant(a.lease, &a.out)
	}
}

// request takes the lock, or takes or keeps the waiter's place in the queue, with a token
// of its own: the message with which a release grants this attempt the lock.
func (f *fairLock) request(o *holder, leaseMs string, a *lockAttempt) lua.Acquire {
	token := "0"
	if a != nil {
		a.token = o.c.newToken()
		token = a.token
	}
	return lua.FairAcquire{FairKeys: f.keys(o), LeaseMs: leaseMs, Owner: o.id, WaitMs: o.c.fairWaitMs, NowMs: nowMs(),
		Waiting: a != nil, Token: token}
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
// in the background (see owner.withdraw), awaited until until at most, and reports whether
// a release granted the owner the lock meanwhile: the wait then takes it (as a local
// hand-off's heir does when its context ends), since the leave cannot hand it back safely —
// a late run of a leave that released the owner's hold could release a hold the owner took
// since. A grant the leave finds once the caller has stopped waiting is given back
// (giveBack), as is one that answers no attempt of the wait's (its owner's place was an
// earlier wait's) and one that cannot be kept (WithSyncReplicas, a closed Client).
func (f *fairLock) left(ctx context.Context, a *lockAttempt, until time.Time) (bool, error) {
	o := a.o
	return o.withdraw(ctx, until, lua.FairLeave{FairKeys: f.keys(o), Channel: f.channel, Owner: o.id, Publish: o.c.publishCmd, NowMs: nowMs()},
		func(msg rueidis.RedisMessage, late bool) (bool, error) {
			if n, _ := msg.AsInt64(); n != 1 || o.unsure {
				return false, nil
			}
			if late || a.out.sent.IsZero() || o.c.replicas > 0 || o.c.closing() {
				// Granted as the caller stopped waiting, or to no attempt of the wait's, whose
				// lease it cannot time, or by the releaser's script, which only an attempt of
				// the owner's own could confirm (WithSyncReplicas), or to a Client closed
				// since, whose hold nobody would renew or release: it goes back.
				return false, o.giveBack(ctx, 1)
			}
			err := o.took(a.out.sent, a.lease, 0)
			return err == nil, err
		}, nil)
}

// newToken returns a token for one waiting acquisition of a fair lock: the message with
// which a release grants it the lock. Tokens are decimal integers (payloads on Redisson's
// channels must be) above 1, so that none is Redisson's 0 or 1.
func (c *Client) newToken() string { return strconv.FormatUint(c.waits.Add(1)+1, 10) }

// takeGrant records the hold of a waiter granted the lock, if the owner has made no request
// since the attempt that asked for it (whose outcome is attempt): the grant came after that attempt, and
// nothing of the owner's since can have taken or released it, so the hold is there, timed
// from that attempt. Otherwise — or if the lease, so timed, has less than half left — it
// reports the grant not taken, and the waiter attempts, which adopts and renews whatever
// hold of its owner's is there.
func (o *holder) takeGrant(lease time.Duration, attempt *acquireOut) (ok bool, err error, taken bool) {
	_ = o.lock(context.Background())
	defer o.unlock()
	requests, sent := attempt.requests, attempt.sent
	ttl := o.c.leaseOr(lease)
	// With WithSyncReplicas, only the owner's own script can have its hold confirmed; once
	// the Client is closed, the wait's leave gives the grant back.
	if o.requests != requests || o.count != 0 || o.unsure || o.c.replicas > 0 || o.c.closing() || time.Until(sent.Add(ttl)) < ttl/2 {
		return false, nil, false
	}
	err = o.took(sent, lease, 0)
	return err == nil, err, true
}
