package sync

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/latchkey/latchkey/lua"
	"github.com/latchkey/latchkey/pubsub"
	"github.com/latchkey/latchkey/watchdog"
	"github.com/redis/rueidis"
)

// exclusive is what Lock, FairLock, FencedLock and each side of an RWLock share: one method
// set, whose scripts and waiting follow the handle's variant. (A read side's holds do not
// exclude each other: its held is not exclusive.)
type exclusive struct {
	// o names the handle and checks its calls; made Reentrant, it is the handle's one owner.
	o         holder
	reentrant bool
	key       ownerKey       // the Client's idle owners of this handle's kind and name (see lender)
	side      string         // what its owners' IDs end with: ":write" for a read-write lock's writer
	kind      *watchdog.Kind // how its holds' leases are renewed
	held      holds          // a mutex handle's holds
	nothing   string         // what an Unlock of a mutex handle that holds nothing says
	v         variant
}

// A variant is what a kind of lock does its own way: its scripts, how its waiters wait, are
// woken and leave. Lock's and FencedLock's is plainLock (lock.go), FairLock's fairLock
// (fair.go), an RWLock's readSide and writeSide (rwlock_sides.go).
type variant interface {
	// wakeCh is the channel o's waits listen on.
	wakeCh(o *holder) string
	// prepare readies the wait w of the waiting acquisition a (whether it may join, and be
	// handed the lock by a local release).
	prepare(a *lockAttempt, w *wait)
	// request is o's acquire request, for the waiting acquisition a (nil: a single attempt).
	request(o *holder, leaseMs string, a *lockAttempt) lua.Acquire
	// replied is what the wait of a (nil: a single attempt) makes of an attempt's outcome.
	replied(o *holder, a *lockAttempt, ttl int64, ok bool, err error) (int64, bool, error)
	// left withdraws o's claim after the wait of a ended without the lock, awaited until
	// until at most.
	left(ctx context.Context, o *holder, a *lockAttempt, until time.Time)
	// release is o's numbered release of one of holds it has in Redis (see owner.releaser).
	release(o *holder, holds int, num lua.Numbered) lua.Request
	// unlock releases one hold of o's (see Lock.Unlock).
	unlock(ctx context.Context, o *holder) error
	// forceRelease deletes the lock whoever holds it, and wakes a waiter.
	forceRelease(o *holder) lua.Request
}

// releaseOne releases one hold of o's with v's release.
func releaseOne(ctx context.Context, o *holder, v variant) error {
	return o.release(ctx, func(_ bool, num lua.Numbered) (lua.Request, *lockHeir) { return v.release(o, o.count, num), nil })
}

// init makes l a handle of c on the what called name, whose holds are leased as kind and
// whose owners' IDs end with side.
func (l *exclusive) init(c *Client, name, what, side string, kind *watchdog.Kind, v variant, opts []HandleOption) {
	cfg, err := handleOptions(opts)
	l.reentrant, l.key, l.side, l.kind, l.v = cfg.reentrant, ownerKey{what + side, name}, side, kind, v
	l.held.exclusive, l.nothing = true, "the handle holds nothing"
	l.own(&l.o, c, name, what)
	if l.o.err == nil {
		l.o.err = err
	}
}

// own makes o a fresh owner of the handle's: its holds leased as l.kind, its ID ending with
// l.side, its releases l's variant's.
func (l *exclusive) own(o *holder, c *Client, name, what string) {
	o.init(c, name, what, l.kind)
	o.id += l.side
	o.releaser = l.releaser(o)
}

// releaser makes o's numbered release of a hold it does not count (see owner.releaser).
func (l *exclusive) releaser(o *holder) func(holds int, num lua.Numbered) lua.Request {
	return func(holds int, num lua.Numbered) lua.Request { return l.v.release(o, holds, num) }
}

// borrow returns the owner an acquisition takes the lock as: a Reentrant handle's own, or
// else an idle owner of the Client's for the name (see lender).
func (l *exclusive) borrow() *holder {
	if l.reentrant {
		return &l.o
	}
	c := l.o.c
	if o, ok := c.lockOwners.take(l.key); ok {
		return o
	}
	o := &holder{}
	l.own(o, c, l.o.name, l.o.what)
	return o
}

// returnOwner returns a borrowed owner to the Client's idle owners once it holds nothing
// (see Client.returnOwner).
func (l *exclusive) returnOwner(o *holder) {
	c := l.o.c
	c.returnOwner(o, func() { c.lockOwners.put(l.key, o) })
}

// current is the owner and lease of the hold the next Unlock ends: a Reentrant handle's own
// owner (its lease nil before its first hold), or nil when a mutex handle holds nothing.
func (l *exclusive) current() (*holder, *watchdog.Lease) {
	if l.reentrant {
		return &l.o, l.o.lease.Load()
	}
	h, ok := l.held.peek()
	if !ok {
		return nil, nil
	}
	return h.o, h.lease
}

// Name returns the lock's name, which is its Redis key.
func (l *exclusive) Name() string { return l.o.name }

// overlapped is the error of a release of h: err, or, for a hold another hold of the handle
// overlapped, ErrLockLost — one of them was lost, and the handle cannot tell whose.
func overlapped(err error, h hold, o *holder) error {
	if err != nil || !h.overlapped {
		return err
	}
	const reason = "another hold of the handle began while it was held: one of them was lost"
	h.lease.Lose(reason)
	return o.lostErr(reason)
}

// Owner returns the owner ID, "<client UUID>:<n>", that the hold the next Unlock ends is the
// hash field of ("" when the handle holds nothing); a Reentrant handle's is always its one
// owner.
func (l *exclusive) Owner() string {
	if o, _ := l.current(); o != nil {
		return o.id
	}
	return ""
}

// Lock takes the lock, waiting as long as ctx allows. Waiters are woken by the release message
// and re-check at the holder's lease expiry. When ctx ends first, Lock returns ctx.Err() and
// does not hold the lock — unless a local release handed it the lock at that moment: then it
// returns nil, holding it. Re-entering (a Reentrant handle) a hold that is gone from Redis or
// whose lease was lost fails with ErrLockLost. An error wrapping ErrOutcomeUnknown means no
// reply came back: either for the acquire, which may have run — the hold it may have taken is
// not counted, not renewed, and lapses with its lease, or its owner's next acquire adopts it —
// or for an earlier release of a Reentrant handle's, repeated first, in which case nothing was
// acquired.
func (l *exclusive) Lock(ctx context.Context, opts ...LockOption) error {
	cfg, err := configure(ctx, &l.o.owner, opts, LockOption.applyLock)
	if err != nil {
		return err
	}
	_, err = l.acquire(ctx, cfg.lease, -1, nil)
	return err
}

// TryLock takes the lock if it is free (or already a Reentrant handle's) and reports whether
// it did.
// With WaitTime it waits up to that long; a busy lock is (false, nil), not an error. When ctx
// ends before the wait time, TryLock returns ctx.Err(). Errors are as for Lock.
func (l *exclusive) TryLock(ctx context.Context, opts ...TryLockOption) (bool, error) {
	cfg, err := configure(ctx, &l.o.owner, opts, TryLockOption.applyTry)
	if err != nil {
		return false, err
	}
	return l.acquire(ctx, cfg.lease, cfg.wait, nil)
}

// acquire attempts, and waits up to limit (negative: without limit) for the lock; out, if
// not nil, is given what the acquire that took it replied besides (a fenced lock's token).
// An acquisition that may wait attempts at once when no waiter of the Client is ahead of it
// and its channel is not subscribed (the lock is most likely free), and waits only if that
// fails (see Client.acquire).
func (l *exclusive) acquire(ctx context.Context, lease, limit time.Duration, out *lua.Acquired) (ok bool, err error) {
	end, open := l.o.c.begin() // Shutdown awaits the acquisition, and what it leaves to clean up
	defer end()
	if !open {
		return false, l.o.wrap(ErrClosed)
	}
	o := l.borrow()
	leaseMs := o.c.leaseMs(lease)
	start := time.Now()
	defer func() { o.c.obs.acquired(ctx, o.what, o.name, 1, start, ok, err) }()
	var a *lockAttempt
	attemptOut := out
	if limit != 0 {
		a = &lockAttempt{l: l, o: o, lease: lease, leaseMs: leaseMs} // one allocation for the whole wait
		attemptOut = &a.out
	}
	ttl, ok, err, tried, join := int64(-1), false, error(nil), false, false
	if a != nil {
		// A handle that holds the lock re-enters at once: queued behind waiters, it would
		// wait for a release only it can make. Nor may a handle queue whose last acquire's
		// outcome is unknown: it may hold the lock without knowing, and its attempt adopts
		// such a hold.
		if err = o.lock(ctx); err == nil {
			join = o.count == 0 && !o.doubtful()
			o.unlock()
		}
	}
	if ch := l.v.wakeCh(o); err == nil && (a == nil || !o.c.mux.Subscribed(ch) && o.c.mux.Waiters(ch) == 0) {
		ttl, ok, err = l.attempt(ctx, o, lease, leaseMs, a, attemptOut)
		tried = true
	}
	if a != nil && !ok && (err == nil || tried) { // an error before any attempt: a made no claim
		ok, err = l.wait(ctx, a, limit, join, start, tried, ttl, err)
	}
	if a != nil && out != nil {
		*out = a.out
	}
	switch {
	case o == &l.o:
		// A hold it was not given (taken too late: ErrLockLost), queued to be given back, goes
		// now, not at the handle's next call, which may be long in coming — or, if op is busy
		// (a withdrawal), after it.
		switch {
		case ok:
		case o.tryLock():
			unsettled := o.unsettled != nil
			o.unlock()
			if unsettled {
				o.c.settleLater(&o.owner, func() {})
			}
		case errors.Is(err, ErrLockLost):
			o.c.settleLater(&o.owner, func() {})
		}
	case ok:
		l.held.push(o, o.lease.Load())
	default:
		l.returnOwner(o)
	}
	return ok, err
}

// wait waits up to limit, from start, for the lock, for a, which may join the Client's other
// waiters; tried says whether a's first attempt was made already, which replied ttl or err
// (then a withdraws whatever claim it made).
func (l *exclusive) wait(ctx context.Context, a *lockAttempt, limit time.Duration, join bool, start time.Time, tried bool, ttl int64, err error) (bool, error) {
	o := a.o
	w := wait{channel: l.v.wakeCh(o), policy: pubsub.LockPolicy, limit: limit, join: join, attempt: a}
	l.v.prepare(a, &w)
	var ok bool
	switch {
	case err != nil:
	case tried:
		ok, err = o.c.waitAfter(ctx, w, start, ttl)
	default:
		ok, err = o.c.acquire(ctx, w)
	}
	switch {
	case ok:
	case errors.Is(err, ErrNotReplicated):
		// Taken, unconfirmed and given back (see owner.attempt): the take dropped the
		// waiter's claim (its place, its Client's registration), and the give-back freed the
		// lock and woke the next — what a leave would do, at the cost of a third WAIT.
		o.c.mux.Wake(w.channel)
	default:
		l.v.left(ctx, o, a, o.c.leaveBy(ctx, err))
	}
	return ok, err
}

// A lockAttempt is one waiting acquisition of a Lock: its attempt, and its place in the
// hand-off queue.
type lockAttempt struct {
	l       *exclusive
	o       *holder
	lease   time.Duration
	leaseMs string
	// a plain lock's: its latest attempt registered the Client, which has others waiting
	registered, others bool
	// a read-write lock writer's: its wait is counted (see writeSide)
	counted bool
	// out.Listener: a plain lock's Client is the listener (see listen);
	// out.Token: a fenced lock's token, once taken.
	out  lua.Acquired
	heir lockHeir
}

func (a *lockAttempt) attempt(ctx context.Context) (int64, bool, error) {
	return a.l.attempt(ctx, a.o, a.lease, a.leaseMs, a, &a.out)
}

// attempt makes one attempt as o, for the waiting acquisition a (nil: a single attempt).
func (l *exclusive) attempt(ctx context.Context, o *holder, lease time.Duration, leaseMs string, a *lockAttempt, out *lua.Acquired) (int64, bool, error) {
	ttl, ok, err := o.attempt(ctx, lease, l.v.request(o, leaseMs, a), out)
	return l.v.replied(o, a, ttl, ok, err)
}

// Unlock releases one hold. When Unlock returns nil, the hold is released: the lock is freed
// (or handed to a waiting handle of this Client) at the last hold, and a repeat of the request
// after a lost reply never released twice. A release whose reply is lost is repeated with the
// same request number within the retry budget (WithRetryBudget, 10 s by default), whatever
// ctx says.
//
//   - ErrNotHeld: the handle held nothing, and Redis had no hold of its owner. (A hold it did
//     not know of — left by an acquire whose reply was lost — is released, and nil returned.)
//   - ErrLockLost (also ErrNotHeld): the handle held the lock but it was gone from Redis, or
//     its lease had been lost (whatever was there is released); Lost is closed.
//   - ErrOutcomeUnknown: no reply came back. The hold counts as released — do not call Unlock
//     again for it — and a last hold is no longer renewed, so Redis frees it by its lease at
//     the latest. The handle's next acquire or release repeats the request first, and makes
//     no other until it has a reply, so a late run of it can never release a hold taken
//     since.
//   - any other error: Redis answered with an error, so the script did not run (or stopped
//     part way, which only a misconfiguration causes, such as sharded pub/sub on Redis < 7);
//     the handle still holds the lock, but a last hold is no longer renewed and lapses with
//     its lease unless Unlock is called again.
func (l *exclusive) Unlock(ctx context.Context) error {
	if l.reentrant {
		return l.v.unlock(ctx, &l.o)
	}
	if err := l.o.check(ctx); err != nil {
		return err
	}
	h, ok := l.held.pop()
	if !ok {
		return l.o.wrap(fmt.Errorf("%w: %s", ErrNotHeld, l.nothing))
	}
	err := l.v.unlock(ctx, h.o)
	if h.o.holding.Load() {
		// Redis refused the release: the hold is still the handle's, at once (a repeat of
		// the Unlock must find it), also when another call of the handle has the owner now.
		l.held.unpop(h)
	} else {
		l.returnOwner(h.o)
	}
	return overlapped(err, h, &l.o)
}

// ForceUnlock deletes the lock whoever holds it and wakes a waiter. It reports whether there
// was a lock to delete. It is sent once (a repeat could delete a hold taken since), and
// awaited while ctx lasts, or without a deadline for the retry budget at most: no reply is
// an error wrapping ErrOutcomeUnknown. A holder on this or another Client finds out through its Lost channel
// at its next renewal (a hold kept by the watchdog), its next call, or when its lease ends.
func (l *exclusive) ForceUnlock(ctx context.Context) (bool, error) {
	o := &l.o
	if err := o.check(ctx); err != nil {
		return false, err
	}
	msg, err := o.c.once(ctx, l.v.forceRelease(o).Call()) // once: a repeat could delete a hold taken since
	if !replied(err) {
		return false, o.wrap(err)
	}
	n, perr := msg.AsInt64()
	if perr != nil {
		return false, o.wrap(perr)
	}
	return n == 1, o.wrap(err)
}

// IsLocked reports whether anyone holds the lock. Like every read, it waits for Redis while
// ctx lasts, and without a deadline for the retry budget at most.
func (l *exclusive) IsLocked(ctx context.Context) (bool, error) { return l.o.exists(ctx) }

// IsHeld reports whether this handle holds the lock, as Redis sees it. When the handle
// thought it held the lock and Redis says no, the hold is lost: Lost closes.
func (l *exclusive) IsHeld(ctx context.Context) (bool, error) {
	n, err := l.HoldCount(ctx)
	return n > 0, err
}

// HoldCount returns how many holds this handle has on the lock, as Redis sees it (0: none):
// at most 1 unless the handle is Reentrant. The handle's own count of its Lock calls is what
// its Unlocks follow. When the handle thought it held the lock and Redis says no, the hold
// is lost: Lost closes. Bounded as IsLocked.
func (l *exclusive) HoldCount(ctx context.Context) (int, error) {
	if err := l.o.check(ctx); err != nil {
		return 0, err
	}
	o, lease := l.current()
	if o == nil {
		return 0, nil
	}
	if err := o.lock(ctx); err != nil {
		return 0, err
	}
	defer o.unlock()
	if !l.reentrant && o.lease.Load() != lease {
		return 0, nil // the hold ended meanwhile
	}
	msg, err := o.get(ctx, func(b rueidis.Builder) rueidis.Completed { return b.Hget().Key(o.name).Field(o.id).Build() })
	if err == nil && msg.IsNil() {
		if o.count > 0 {
			o.lost("the hold is gone from Redis")
		}
		return 0, nil
	}
	if err != nil {
		return 0, o.wrap(err)
	}
	n, err := msg.AsInt64()
	return int(n), o.wrap(err)
}

// NoExpiry is what RemainingTTL returns for a lock that exists without a TTL (not one this
// package creates, but a Redis key anyone could have written).
const NoExpiry time.Duration = -1

// RemainingTTL returns how long the lock has before it expires, whoever holds it: 0 when it
// is not locked, NoExpiry when it has no TTL. Millisecond precision. Bounded as IsLocked.
func (l *exclusive) RemainingTTL(ctx context.Context) (time.Duration, error) {
	o := &l.o
	// TYPE first (exists): PTTL alone would time a key that is no lock.
	if held, err := o.exists(ctx); err != nil || !held {
		return 0, err
	}
	msg, err := o.get(ctx, func(b rueidis.Builder) rueidis.Completed { return b.Pttl().Key(o.name).Build() })
	var ms int64
	if err == nil {
		ms, err = msg.AsInt64()
	}
	switch {
	case err != nil:
		return 0, o.wrap(err)
	case ms == -2: // gone since
		return 0, nil
	case ms < 0:
		return NoExpiry, nil
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// Lost returns a channel closed when the lease of this handle's current (or most recent)
// hold is lost while held: a renewal found the lock gone (deleted, force-unlocked, expired),
// no renewal succeeded before the lease ran out (Redis unreachable), an explicit Lease ran
// out, or a call of this handle learned that the hold is gone. A deletion is noticed at the
// next renewal of a hold the watchdog keeps (within a third of its timeout), at the handle's
// next call, or when the lease ends — not at once; and the channel is closed by the
// watchdog's goroutine, which may run after the holder's. So a closed channel proves the
// hold is gone, an open one does not prove it is held: check Valid right before acting, and
// for writes that must never follow a lost lease, have the store check a fencing token. A
// successful Unlock does not close it. Before the first successful acquisition it returns
// nil, a channel that never closes.
func (l *exclusive) Lost() <-chan struct{} {
	if l.reentrant {
		return l.o.lostCh()
	}
	return l.held.lost()
}

// Valid reports whether the handle's hold is live now: the lease, as last confirmed by
// Redis, is still ahead by the monotonic clock, and no loss is known. Unlike Lost it is true
// at the moment it is checked even if the process was paused, but it is no stronger than the
// clocks: a fencing token is what makes a write after a lost lease harmless. After Unlock it
// is false — unless Redis refused the Unlock of the last hold: the handle still holds the
// lock then, until its lease runs out.
func (l *exclusive) Valid() bool {
	if l.reentrant {
		return l.o.valid()
	}
	return l.held.valid()
}

// Deadline returns when the handle's hold expires unless renewed, as last confirmed by Redis
// (the send time of the command that last set its TTL, plus that TTL), and false when the
// handle holds nothing or its lease is lost.
func (l *exclusive) Deadline() (time.Time, bool) {
	if _, lease := l.current(); lease != nil {
		return lease.Deadline()
	}
	return time.Time{}, false
}
