package sync

import (
	"context"
	"time"

	"github.com/latchkey/latchkey/internal/names"
	"github.com/latchkey/latchkey/lua"
	"github.com/latchkey/latchkey/pubsub"
)

// Lock is a handle on a lock, wire-compatible with Redisson's RLock: Redis hash name →
// {owner ID: hold count}, releases published on redisson_lock__channel:{name}.
//
// A handle is a mutex: it is safe for concurrent use, and goroutines sharing it exclude each
// other as they would through one sync.Mutex, and so do handles on the same name in other
// goroutines, Clients and processes. Each Lock (or TryLock that took it) is matched by one
// Unlock, which may come from another goroutine; an Unlock ends the oldest hold the handle
// took. Each acquisition takes the lock as an owner of its own (a hash field), so a second
// Lock through the same handle waits for the first hold's Unlock, as with sync.Mutex. Made
// with Reentrant, the handle is instead one owner, as a Java thread is to Redisson: its holds
// nest.
//
// Without an explicit Lease the lock is kept by the Client's watchdog until Unlock; with
// one it expires when the lease runs out. Valid and Lost report a lease lost while held.
//
// A context bounds how long a call waits for the lock, and every call returns at the latest
// 25 ms after its context's deadline, or without one within the retry budget
// (WithRetryBudget), even while Redis is unreachable or hangs. A script already sent to
// Redis is awaited those 25 ms after the context ended: only its reply tells what it did. A
// reply that comes later still is read in the background, and a hold it shows, which the
// caller was told it has not, is given back; the handle's next call waits for that. A
// waiter's claim (a plain lock's registration, a fair lock's place) is withdrawn in the
// background too. A waiter being handed the lock by a local release as its context ends
// waits for that release's reply (within the retry budget) and, handed, succeeds.
//
// Who gets the lock: Lock is Redisson's non-fair lock. A release that frees it wakes one
// waiting Client, on a channel of that Client's own, while Java waiters race it; within a
// Client the local hand-off serves waiters in arrival order, and after WithLocalHandoff
// hand-offs in a row the lock goes to the next Client. A wake lost to the network costs the
// others at most a third of the fair wait time (WithFairLockWaitTimeout), or the watchdog
// timeout if that is shorter. Choose FairLock for the lock in strict arrival order across
// every Client and Java process (docs/design.md compares the two).
type Lock struct{ exclusive }

// Lock returns a handle on the lock called name (the Redis key). It makes no network call;
// an empty name or a bad option is reported by the handle's methods.
func (c *Client) Lock(name string, opts ...HandleOption) *Lock {
	l := &Lock{}
	p := newPlainLock(c, name, "")
	l.init(c, name, "lock", "", c.lockKind, &p, opts)
	return l
}

// plainLock is Lock's variant: Redisson's non-fair lock. A Client with waiters registers in
// the zset clients (see lib.lua), and its waiters listen on a channel of its own, clientCh:
// a release that frees the lock wakes one Client there, and within a Client waiters queue
// behind each other and may be handed the lock by a local release (see lockHeirs). One waiting
// Client, the listener, also hears the lock's Redisson channel for the others.
type plainLock struct {
	waitingClients
	// token is a FencedLock's token counter: every acquisition takes a token, and no release
	// hands the lock on (each holder must take a token of its own).
	token string
}

func newPlainLock(c *Client, name, token string) plainLock {
	return plainLock{newWaitingClients(c, names.Prefix(lockChannelPrefix, name), names.Suffix(name, "lock_clients"), pubsub.LockPolicy), token}
}

func (p *plainLock) wakeCh(*holder) string { return p.clientCh }

// prepare queues a waiter that may join to be handed the lock by a local release.
func (p *plainLock) prepare(a *lockAttempt, w *wait) {
	if w.join && a.o.c.maxHandoff > 0 && p.token == "" {
		a.heir = lockHeir{heir: heir{key: a.o.name}, o: a.o, lease: a.lease, leaseMs: a.leaseMs}
		w.heir = &a.heir
	}
}

// request is the request of an attempt for the waiting acquisition a (nil: a single
// attempt). A waiting attempt registers the Client, once its channel is subscribed (a wake
// sent to a Client not yet subscribed would reach nobody).
func (p *plainLock) request(o *holder, leaseMs string, a *lockAttempt) lua.Acquire {
	r := lua.LockAcquire{Lock: o.name, Clients: p.clients, Listener: p.listener, TokenKey: p.token, LeaseMs: leaseMs,
		Owner: o.id, Publish: o.c.publishCmd}
	if a != nil {
		a.registered = o.c.mux.Subscribed(p.clientCh)
	}
	if a != nil && a.registered {
		a.others = o.c.mux.Waiters(p.clientCh) > 1
		r.Wait = &lua.Registration{Token: o.c.lockToken, Ms: o.c.fairWaitMs, Others: a.others}
	}
	return r
}

// replied follows what a waiting attempt's reply says of the Client's listening, and tells
// the waiter to attempt again within a third of the registration's wait time.
func (p *plainLock) replied(o *holder, a *lockAttempt, ttl int64, ok bool, err error) (int64, bool, error) {
	if a == nil {
		return ttl, ok, err
	}
	if a.registered && err == nil {
		p.heard(o.c, a.out.Listener, ok, a.others)
	}
	return o.c.keepAlive(ttl), ok, err
}

func (p *plainLock) release(o *holder, holds int, num lua.Numbered) lua.Request {
	r, _ := p.releaseTo(o, holds, num, nil)
	return r
}

// releaseTo makes o's numbered release of one of holds it has in Redis, handing the lock to
// h if not nil, and reports whether, at the last hold, it registers the Client again for
// waiters it has left.
func (p *plainLock) releaseTo(o *holder, holds int, num lua.Numbered, h *lockHeir) (lua.Request, bool) {
	heirs := 0 // whether the Client has waiters left: besides the heir, if it hands the lock on
	if h != nil {
		heirs = 1
	}
	left := o.c.mux.Waiters(p.clientCh) > heirs
	r := lua.LockRelease{Lock: o.name, Channel: p.channel, Numbered: num, Clients: p.clients, Listener: p.listener,
		LeaseMs: msOf(o.ttl()), Owner: o.id, Publish: o.c.publishCmd, Holds: holds, Token: o.c.lockToken, Left: left,
		RegMs: o.c.fairWaitMs}
	if h != nil {
		r.Heir, r.HeirLeaseMs = h.o.id, h.leaseMs
	}
	if !left {
		o.c.mux.Unforward(p.channel) // the release ends the Client's listening
	}
	return r, h == nil && left
}

// unlock releases one hold of o's, handing a last one to the Client's longest-waiting waiter,
// if any, unless WithLocalHandoff's run is over.
func (p *plainLock) unlock(ctx context.Context, o *holder) error {
	registered := false // the release registers the Client again, for its waiters left
	err := o.release(ctx, func(last bool, num lua.Numbered) (lua.Request, *lockHeir) {
		var h *lockHeir
		if last && o.run < o.c.maxHandoff && p.token == "" && !o.c.closing() {
			h = o.c.lockHeirs.reserve(o.name)
		}
		var r lua.Request
		r, registered = p.releaseTo(o, o.count, num, h)
		registered = registered && last
		return r, h
	})
	if registered && o.c.mux.Waiters(p.clientCh) == 0 && !o.c.isClosed() {
		// The waiters it registered for left while it was on its way.
		p.waitLeft(ctx, o, o.c.bound(context.WithoutCancel(ctx)).Add(replyGrace))
	}
	return err
}

func (p *plainLock) forceRelease(o *holder) lua.Request {
	return lua.LockForceRelease{Lock: o.name, Channel: p.channel, Clients: p.clients, Publish: o.c.publishCmd}
}

// left is waitLeft, after a wait that ended without the lock (also when Close ended it: the
// rueidis client is still open then, as Close's doc asks, and a registration left behind
// would take a wake from others). No release gives the lock to a waiter that left.
func (p *plainLock) left(ctx context.Context, o *holder, _ *lockAttempt, until time.Time) {
	p.waitLeft(ctx, o, until)
}

// waitLeft keeps the Client's registration in step with its waiters after a wait ended
// without the lock, or after a release that registered the Client for waiters that have
// left since. The Client's last waiter drops the registration and its listening (or, if a
// release woke this Client as the wait ended, wakes the next Client: lock_leave.lua). And
// one waiter still there attempts again: one that came meanwhile may have registered just
// before the leave dropped it, and one that queued behind this wait never attempted. The
// leave runs in the background, as o, awaited until until at most (see owner.withdraw).
func (p *plainLock) waitLeft(ctx context.Context, o *holder, until time.Time) {
	if o.c.mux.Waiters(p.clientCh) != 0 {
		o.c.mux.Wake(p.clientCh)
		return
	}
	o.withdraw(ctx, until, lua.LockLeave{Lock: o.name, Clients: p.clients, Channel: p.channel, Listener: p.listener,
		Leaving: o.c.leaving()}, func() { p.afterLeave(o.c) })
}
