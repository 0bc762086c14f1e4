package sync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/latchkey/latchkey/lua"
	"github.com/latchkey/latchkey/pubsub"
	"github.com/latchkey/latchkey/watchdog"
	"github.com/redis/rueidis"
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
// timeout if that is shorter. Choose FairLock for grants in strict arrival order across
// every Client and Java process (docs/design.md compares the two).
type Lock struct{ exclusive }

// Lock returns a handle on the lock called name (the Redis key). It makes no network call;
// an empty name or a bad option is reported by the handle's methods.
func (c *Client) Lock(name string, opts ...HandleOption) *Lock {
	l := &Lock{}
	l.init(c, name, "lock", nil, opts)
	return l
}

// exclusive is what Lock, FairLock and FencedLock share: one method set, whose scripts and
// waiting (who joins, who is handed the lock, who is granted it) follow fair and tokenKey.
type exclusive struct {
	// o names the handle and checks its calls; made Reentrant, it is the handle's one owner.
	o         owner
	reentrant bool
	key       string        // the Client's idle owners of this handle's kind and name (see lender)
	held      holds[*owner] // a mutex handle's holds
	channel   string        // the lock's channel
	clients   string        // a plain lock's zset of waiting clients (see lib.lua)
	clientCh  string        // the channel a plain lock's waiters of this Client listen on
	// listener holds the token of the Client that listens on a plain lock's channel for its
	// waiters (see lib.lua's listen).
	listener string
	fair     *fairKeys
	// tokenKey is a fenced lock's token counter, redisson_lock_token:{name} ("": not fenced).
	tokenKey string
}

func (l *exclusive) init(c *Client, name, kind string, fair *fairKeys, opts []HandleOption) {
	cfg, err := handleOptions(opts)
	l.o.init(c, name, kindWhat[kind], c.lockKind)
	if l.o.err == nil {
		l.o.err = err
	}
	l.reentrant, l.key = cfg.reentrant, kind+":"+name
	l.held.exclusive = true
	l.o.releaser = l.releaser(&l.o)
	l.channel, l.fair = prefixName(lockChannelPrefix, name), fair
	if fair == nil {
		l.clients = suffixName(name, "lock_clients")
		l.clientCh = l.clients + ":" + c.lockToken
		l.listener = l.clients + ":listener"
	}
}

// kindWhat is how errors name a handle of each kind (see exclusive.init).
var kindWhat = map[string]string{"lock": "lock", "fair": "fair lock", "fenced": "fenced lock"}

// releaser makes o's numbered release of a hold it does not count (see owner.releaser).
func (l *exclusive) releaser(o *owner) func(holds int, latch, n string) script {
	return func(holds int, latch, n string) script {
		r, _ := l.release(o, holds, latch, n, nil)
		return r
	}
}

// wakeCh is the channel o's waits listen on: a plain lock's waiters their Client's (see
// lib.lua), a fair lock's their own.
func (l *exclusive) wakeCh(o *owner) string {
	if l.fair != nil {
		return l.channel + ":" + o.id
	}
	return l.clientCh
}

// borrow returns the owner an acquisition takes the lock as: a Reentrant handle's own, or
// else an idle owner of the Client's for the name (see lender).
func (l *exclusive) borrow() *owner {
	if l.reentrant {
		return &l.o
	}
	c := l.o.c
	if o, ok := c.lockOwners.take(l.key); ok {
		return o
	}
	o := &owner{}
	o.init(c, l.o.name, l.o.what, c.lockKind)
	o.releaser = l.releaser(o)
	return o
}

// returnOwner returns a borrowed owner to the Client's idle owners if it holds nothing, and
// reports whether it does (a Reentrant handle's own owner stays with it).
func (l *exclusive) returnOwner(o *owner) bool {
	if o == &l.o {
		return o.count == 0
	}
	c := l.o.c
	return c.returnOwner(o, func(o *owner) { c.lockOwners.put(l.key, o) })
}

// current is the owner and lease of the hold the next Unlock ends: a Reentrant handle's own
// owner (its lease nil before its first hold), or nil when a mutex handle holds nothing.
func (l *exclusive) current() (*owner, *watchdog.Lease) {
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
func overlapped[T comparable](err error, h hold[T], o *owner) error {
	if err != nil || !h.overlapped {
		return err
	}
	const reason = "another hold of the handle began while it was held: one of them was lost"
	h.lease.Lose(reason)
	return o.lostErr(reason)
}

// Owner returns the owner ID, "<client UUID>:<n>", that the handle's newest hold is the hash
// field of ("" when the handle holds nothing); a Reentrant handle's is always its one owner.
func (l *exclusive) Owner() string {
	if o, _ := l.current(); o != nil {
		return o.id
	}
	return ""
}

// Lock takes the lock, waiting as long as ctx allows. Waiters are woken by the release
// message and re-check at the holder's lease expiry. When ctx ends first, Lock returns
// ctx.Err() and does not hold the lock — unless a release handed it the lock at that moment
// (a local hand-off, a fair lock's grant): then it returns nil, holding it. Re-entering (a
// Reentrant handle) a hold that is gone from Redis or whose lease was lost fails with
// ErrLockLost. An error wrapping ErrOutcomeUnknown means no reply came back: either for the
// acquire, which may have run — the hold it may have taken is not counted, not renewed, and
// lapses with its lease, or its owner's next acquire adopts it — or for an earlier release of
// a Reentrant handle's, repeated first, in which case nothing was acquired.
func (l *exclusive) Lock(ctx context.Context, opts ...LockOption) error {
	cfg, err := configure(ctx, &l.o, opts, LockOption.applyLock)
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
	cfg, err := configure(ctx, &l.o, opts, TryLockOption.applyTry)
	if err != nil {
		return false, err
	}
	return l.acquire(ctx, cfg.lease, cfg.wait, nil)
}

// acquire attempts, and waits up to limit (negative: without limit) for the lock; out, if
// not nil, is given what the acquire that took it replied besides (a fenced lock's token).
func (l *exclusive) acquire(ctx context.Context, lease, limit time.Duration, out *acquireOut) (bool, error) {
	o := l.borrow()
	ok, err := l.acquireAs(ctx, o, lease, limit, out)
	switch {
	case o == &l.o:
	case ok:
		l.held.push(o, o.lease.Load())
	default:
		l.returnOwner(o)
	}
	return ok, err
}

// acquireAs is acquire, as owner o.
func (l *exclusive) acquireAs(ctx context.Context, o *owner, lease, limit time.Duration, out *acquireOut) (bool, error) {
	leaseMs := o.c.leaseMs(lease)
	if limit == 0 {
		_, ok, err := l.attempt(ctx, o, lease, leaseMs, nil, out)
		return ok, err
	}
	// A handle that holds the lock re-enters at once: queued behind waiters, it would wait for
	// a release only it can make. Nor may a handle queue whose last acquire's outcome is
	// unknown: it may hold the lock without knowing, and its attempt adopts such a hold.
	if err := o.lock(ctx); err != nil {
		return false, err
	}
	// A fair lock's waiters never join: each listens on its own channel, and Redis keeps the
	// order.
	join := o.count == 0 && !o.doubtful() && l.fair == nil
	o.unlock()
	a := &lockAttempt{l: l, o: o, lease: lease, leaseMs: leaseMs} // one allocation for the whole wait
	w := wait{channel: l.wakeCh(o), policy: pubsub.LockPolicy, limit: limit, join: join, attempt: a}
	if l.fair != nil {
		// The waiter's own channel: a release may grant it the lock (the token of its latest
		// attempt) rather than tell it to attempt (0). A grant for an earlier attempt is
		// stale: the lock it gave may have lapsed, and gone to another, since.
		w.policy = pubsub.AllPolicy
		w.granted = func(msg string) (bool, error, bool) {
			if msg != a.token {
				return false, nil, false
			}
			return o.takeGrant(lease, a.requests)
		}
	}
	// A fenced lock is never handed on: each holder must take a token of its own.
	if join && o.c.maxHandoff > 0 && l.tokenKey == "" {
		a.heir = heir{key: o.name, o: o, lease: lease, leaseMs: leaseMs}
		w.heir = &a.heir
	}
	ok, err := o.c.acquire(ctx, w)
	if out != nil {
		*out = a.out
	}
	switch {
	case ok:
	case errors.Is(err, ErrNotReplicated):
		// Taken, unconfirmed and given back (see owner.attempt): the take dropped the
		// waiter's claim (its place, its Client's registration), and the give-back freed the
		// lock and woke the next — what a leave would do, at the cost of a third WAIT.
		o.c.mux.Wake(l.wakeCh(o))
	case l.fair != nil:
		got, gerr := l.leave(ctx, o, lease, o.c.leaveBy(ctx, err))
		if got {
			return true, gerr
		}
		if gerr != nil {
			err = errors.Join(err, gerr)
		}
	default:
		// Also when the wait ended with Close: the rueidis client is still open then, as
		// Close's doc asks, and a registration left behind would take a wake from others.
		l.waitLeft(ctx, o, o.c.leaveBy(ctx, err))
	}
	return ok, err
}

// waitLeft keeps a plain lock's Client registration in step with its waiters after a wait
// ended without the lock, or after a release that registered the Client for waiters that
// have left since. The Client's last waiter drops the registration (or, if a release woke
// this Client as the wait ended, wakes the next Client: lock_leave.lua). And one waiter
// still there attempts again: one that came meanwhile may have registered just before the
// leave dropped it, and one that queued behind this wait never attempted, so never saw what
// this one saw (a Redisson holder, whose release only its channel carries). The leave runs
// in the background, as o, awaited until until at most (see owner.withdraw).
func (l *exclusive) waitLeft(ctx context.Context, o *owner, until time.Time) {
	wake := func() { o.c.mux.Wake(l.clientCh) }
	if o.c.mux.Waiters(l.clientCh) != 0 {
		wake()
		return
	}
	if o.c.beforeLeave != nil {
		o.c.beforeLeave()
	}
	_, _ = o.withdraw(ctx, until, script{lua.LockLeave, []string{o.name, l.clients, l.channel, l.listener},
		[]string{o.c.lockToken, o.c.publishCmd, o.c.fairWaitMs}}, nil, func() {
		if o.c.mux.Waiters(l.clientCh) == 0 {
			o.c.mux.Unforward(l.channel)
		}
		wake()
	})
}

// A lockAttempt is one waiting acquisition of a Lock: its attempt, and its place in the
// hand-off queue.
type lockAttempt struct {
	l        *exclusive
	o        *owner
	lease    time.Duration
	leaseMs  string
	token    string // a fair lock's: the message with which a release grants its latest attempt the lock
	requests uint64 // the owner's request count at this wait's latest attempt
	// out.listen: a plain lock's Client is the listener (see listen);
	// out.token: a fenced lock's token, once taken.
	out  acquireOut
	heir heir
}

func (a *lockAttempt) attempt(ctx context.Context) (int64, bool, error) {
	return a.l.attempt(ctx, a.o, a.lease, a.leaseMs, a, &a.out)
}

// attempt makes one attempt, for the waiting acquisition w (nil: a single attempt). A fair
// lock's waiter takes or keeps its place in the queue, and is told to attempt again within a
// third of the place's wait time.
func (l *exclusive) attempt(ctx context.Context, o *owner, lease time.Duration, leaseMs string, w *lockAttempt, out *acquireOut) (int64, bool, error) {
	registered, others := false, false // a waiting attempt, of a Client with other waiters
	ttl, ok, err := o.attempt(ctx, lease, func() script {
		if l.fair != nil {
			token := "0"
			if w != nil {
				w.requests = o.requests + 1 // this one
				w.token = o.c.newToken()
				token = w.token
			}
			return script{lua.FairAcquire, l.keys(),
				[]string{leaseMs, o.id, strconv.Itoa(o.count), o.c.fairWaitMs, nowMs(), flag(w != nil), token}}
		}
		keys := []string{o.name, l.clients, l.listener, l.tokenKey} // a fenced lock's token key last
		if l.tokenKey == "" {
			keys = keys[:3]
		}
		if w != nil && o.c.mux.Subscribed(l.clientCh) {
			// A waiter registers its client, so that a release wakes it alone — once it
			// can hear it: a wake sent to a client not yet subscribed would reach nobody.
			registered, others = true, o.c.mux.Waiters(l.clientCh) > 1
			return script{lua.LockAcquire, keys, []string{leaseMs, o.id, strconv.Itoa(o.count), o.c.lockToken,
				o.c.fairWaitMs, flag(others), o.c.publishCmd}}
		}
		if l.tokenKey == "" {
			keys = keys[:1]
		}
		return script{lua.LockAcquire, keys, []string{leaseMs, o.id, strconv.Itoa(o.count)}}
	}, out)
	if registered && err == nil {
		// The listener role may come to this Client by a message on its channel (see
		// lib.lua's resign).
		o.c.mux.Cue(l.clientCh, "00", l.channel, pubsub.LockPolicy)
		switch {
		case out.listen:
			_ = o.c.mux.Forward(l.channel, l.clientCh, pubsub.LockPolicy)
		case !ok || !others:
			o.c.mux.Unforward(l.channel) // another Client listens, or this one resigned
		}
	}
	if l.fair != nil || w != nil {
		ttl = o.c.keepAlive(ttl)
	}
	return ttl, ok, err
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
		return l.unlockAs(ctx, &l.o)
	}
	if err := l.o.check(ctx); err != nil {
		return err
	}
	h, ok := l.held.pop()
	if !ok {
		return l.o.wrap(fmt.Errorf("%w: the handle holds nothing", ErrNotHeld))
	}
	err := l.unlockAs(ctx, h.o)
	if !l.returnOwner(h.o) {
		l.held.unpop(h) // Redis refused the release: the hold is still the handle's
	}
	return overlapped(err, h, &l.o)
}

// unlockAs is Unlock, as owner o.
func (l *exclusive) unlockAs(ctx context.Context, o *owner) error {
	registered := false // the release registers the Client again, for its waiters left
	err := o.release(ctx, func(last bool, latch, n string) (script, *heir) {
		var h *heir
		if last && l.fair == nil && l.tokenKey == "" && o.run < o.c.maxHandoff && !o.c.closing() {
			h = o.c.heirs.reserve(o.name)
		}
		var r script
		r, registered = l.release(o, o.count, latch, n, h)
		registered = registered && last
		return r, h
	})
	if registered && o.c.mux.Waiters(l.clientCh) == 0 && !o.c.isClosed() {
		// The waiters it registered for left while it was on its way.
		l.waitLeft(ctx, o, o.c.bound(context.WithoutCancel(ctx)).Add(replyGrace))
	}
	return err
}

// release makes o's numbered release of one of holds it has in Redis, handing the lock to h
// if not nil, and reports whether, at the last hold, it registers the Client again for
// waiters it has left.
func (l *exclusive) release(o *owner, holds int, latch, n string, h *heir) (script, bool) {
	leaseMs := strconv.FormatInt(o.ttl().Milliseconds(), 10)
	if l.fair != nil {
		return script{lua.FairRelease, l.keys(l.channel, latch),
			[]string{leaseMs, o.id, o.c.publishCmd, unlockLatchMs, strconv.Itoa(holds), n, nowMs()}}, false
	}
	// Whether the Client has waiters left: besides the heir, if it hands the lock on.
	heirs := 0
	if h != nil {
		heirs = 1
	}
	left := o.c.mux.Waiters(l.clientCh) > heirs
	args := []string{leaseMs, o.id, o.c.publishCmd, unlockLatchMs, strconv.Itoa(holds), n,
		o.c.lockToken, flag(left), o.c.fairWaitMs}
	if o.c.beforeRelease != nil {
		o.c.beforeRelease()
	}
	if h != nil {
		args = append(args, h.o.id, h.leaseMs)
	}
	if !left {
		o.c.mux.Unforward(l.channel) // the release ends the Client's listening
	}
	return script{lua.LockRelease, []string{o.name, l.channel, latch, l.clients, l.listener}, args}, h == nil && left
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
	script, keys, args := lua.LockForceRelease, []string{o.name, l.channel, l.clients}, []string{o.c.publishCmd}
	if l.fair != nil {
		script, keys, args = lua.FairForceRelease, l.keys(l.channel), []string{o.c.publishCmd, nowMs()}
	}
	msg, confirmed, err := o.c.once(ctx, script, keys, args) // once: a repeat could delete a hold taken since
	if err != nil {
		return false, o.wrap(err)
	}
	n, err := msg.AsInt64()
	if err != nil {
		return false, o.wrap(err)
	}
	return n == 1, o.wrap(o.c.confirmed(confirmed))
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
	if err := o.check(ctx); err != nil {
		return 0, err
	}
	// And TYPE, once it exists: PTTL alone would time a key that is no lock.
	msg, err := o.get(ctx, func(b rueidis.Builder) rueidis.Completed { return b.Pttl().Key(o.name).Build() })
	var ms int64
	if err == nil {
		ms, err = msg.AsInt64()
	}
	t := "none"
	if err == nil && ms != -2 {
		if msg, err = o.get(ctx, func(b rueidis.Builder) rueidis.Completed { return b.Type().Key(o.name).Build() }); err == nil {
			t, err = msg.ToString()
		}
	}
	switch {
	case err != nil:
		return 0, o.wrap(err)
	case t != "hash" && t != "none":
		return 0, o.wrongType(o.name)
	case ms == -2:
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
