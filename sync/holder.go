package sync

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/latchkey/latchkey/lua"
	"github.com/latchkey/latchkey/watchdog"
	"github.com/redis/rueidis"
	"go.uber.org/zap"
)

// holder is an owner that holds a lock: how many holds, their lease, and whether it is lost.
type holder struct {
	owner
	kind *watchdog.Kind
	// releaser makes the primitive's numbered release of one hold when Redis counts holds of
	// the owner's: how a hold too few replicas confirmed (WithSyncReplicas) is given back.
	releaser func(holds int, num lua.Numbered) lua.Request
	unsure   bool          // an acquire's outcome is unknown: Redis may count a hold the owner does not
	count    int           // holds as last known
	holding  atomic.Bool   // count > 0, for a reader without op (see exclusive.Unlock)
	leaseD   time.Duration // the latest hold's explicit lease; 0: kept by the watchdog
	run      int           // consecutive local hand-offs that led to the current hold
	since    time.Time     // when the current hold was taken (its first, of nested ones)
	lease    atomic.Pointer[watchdog.Lease]
}

// init makes h a fresh holder of c on the what called name, its holds leased as kind.
func (h *holder) init(c *Client, name, what string, kind *watchdog.Kind) {
	h.owner.init(c, name, what)
	h.kind = kind
}

// doubtful reports whether Redis may count a hold of the owner's that the owner does not know
// of: an acquire's outcome is unknown, or a request's is (a release not yet run drops a hold
// later). Such an owner attempts before it waits, which adopts or settles it. Caller holds op.
func (o *holder) doubtful() bool { return o.unsure || o.unsettled != nil }

// holds returns how many holds the owner knows it has.
func (o *holder) holds(ctx context.Context) (int, error) {
	if err := o.lock(ctx); err != nil {
		return 0, err
	}
	defer o.unlock()
	return o.count, nil
}

// exists reports whether the object's key, a lock's hash, exists: whether anyone holds the
// lock. A key of another type is ErrWrongType. (TYPE costs what EXISTS does.)
func (o *holder) exists(ctx context.Context) (bool, error) {
	if err := o.check(ctx); err != nil {
		return false, err
	}
	msg, err := o.get(ctx, func(b rueidis.Builder) rueidis.Completed { return b.Type().Key(o.name).Build() })
	if err != nil {
		return false, o.wrap(err)
	}
	t, err := msg.ToString()
	switch {
	case err != nil:
		return false, o.wrap(err)
	case t == "none":
		return false, nil
	case t != "hash":
		return false, o.wrongType(o.name)
	}
	return true, nil
}

// settle is owner.settle for a holder. A reply of nil says the owner held nothing (every
// release script's "not held"): holds it still counts — besides one an inner release
// dropped, or a give-back gave — are lost. (The next request would find that out too, but
// it may get no reply.) Caller holds op.
func (o *holder) settle(ctx context.Context) error {
	nothing, err := o.owner.settle(ctx)
	if err == nil && nothing && o.count > 0 {
		return o.lost("a release of the handle's, repeated, found the lock gone")
	}
	return err
}

// disown gives back a hold the owner must not keep — too few replicas confirmed it, or the
// Client closed as it was taken: err says which — which Redis counts as the owner's
// holds-th, and returns the error of the acquisition: the owner's own state (count, lease)
// never saw the hold, so a failover cannot undo anything the caller was told.
// The release is numbered: should its outcome stay unknown, the owner repeats it before its
// next request; should Redis refuse it, the hold lapses with its lease (not renewed), or the
// owner's next acquire adopts it. Caller holds op.
func (o *holder) disown(ctx context.Context, err error, holds int) error {
	if gerr := o.giveBack(ctx, holds); gerr != nil {
		return o.wrap(errors.Join(err, fmt.Errorf("giving it back: %w", gerr)))
	}
	return o.wrap(err)
}

// giveBack releases, numbered, the holds-th hold Redis counts of the owner's, which the owner
// does not count (see disown). Caller holds op.
func (o *holder) giveBack(ctx context.Context, holds int) error {
	_, err := o.numbered(context.WithoutCancel(ctx), o.releaser(holds, o.nextRequest()).Call())
	if replied(err) {
		return nil
	}
	if !errors.Is(err, ErrOutcomeUnknown) && holds == 1 {
		o.unsure = true // refused: Redis has the hold still, which the next acquire adopts
	}
	return err
}

// attempt runs an acquire script once (repeated while its reply is lost), after settling a
// release of unknown outcome, and records the hold it took with lease (0: kept by the
// watchdog). r is the request, sent with the holds the owner knows it has under op; its
// reply reads as lua.Acquired, and the attempt returns its hint when it did not take. out,
// if not nil, is given the reply as read.
//
// A hold taken that too few replicas confirmed (WithSyncReplicas), or once the Client was
// closed, is given back at once (see giveBack) and the attempt fails with an error wrapping
// ErrNotReplicated or ErrClosed.
func (o *holder) attempt(ctx context.Context, lease time.Duration, r lua.Acquire, out *lua.Acquired) (int64, bool, error) {
	if err := o.lock(ctx); err != nil {
		return 0, false, err
	}
	var pending <-chan sent // the script's reply, which ctx ended before
	defer func() {
		if pending == nil {
			o.unlock()
		}
	}()
	if err := o.settle(ctx); err != nil {
		return 0, false, err
	}
	if o.leaseLost() {
		return 0, false, o.lost("re-entry after the lease was lost")
	}
	sent := time.Now()
	call := r.WithHolds(o.count)
	msg, pending, err := o.c.try(ctx, true, true, &scriptCall{o.c, call})
	var disowned error // a reply, but a hold taken goes back: why (see disown)
	if errors.Is(err, ErrNotReplicated) {
		disowned, err = err, nil
	}
	if err != nil {
		o.unsure = o.unsure || errors.Is(err, ErrOutcomeUnknown)
		if pending != nil {
			holds := o.count + 1
			o.c.background(func() { o.late(pending, holds) }) // it takes op over
		}
		return 0, false, o.wrap(err)
	}
	// A reply: whatever an earlier acquire did, this one adopted or saw gone. (A first run of
	// a hand-off to this owner reaching Redis even later can still hand it over; the owner
	// adopts that at its next re-check, or it lapses with its lease.)
	o.unsure = false
	got, err := lua.ReadAcquired(msg)
	if err != nil {
		return 0, false, o.wrap(err)
	}
	if out != nil {
		*out = got
	}
	if got.Taken && disowned == nil && o.c.closing() {
		// Closed before or while the script ran (a wait that a wake-up and Close ended at
		// once may attempt): nobody would renew or release the hold.
		disowned = ErrClosed
	}
	switch {
	case got.Taken && disowned != nil:
		return 0, false, o.disown(ctx, disowned, o.count+1)
	case got.Taken:
		if err := o.took(sent, lease, 0); err != nil {
			return 0, false, err
		}
		return o.ttl().Milliseconds(), true, nil
	case got.Lost:
		return 0, false, o.lost("re-entry found the hold gone")
	}
	return got.Hint, false, nil
}

// late awaits, in the background, the reply of an acquire whose caller's ctx ended first —
// the caller was told it took nothing — and gives back the hold it shows taken, the
// holds-th Redis counts of the owner's (see giveBack). Until then the owner makes no other
// request: its next call waits for op, and so finds Redis as its caller was told. With no
// reply (the send's end), the acquire's outcome stays unknown (unsure). Caller holds op,
// which late gives back.
func (o *holder) late(pending <-chan sent, holds int) {
	defer o.unlock()
	msg, err := (<-pending).res.ToMessage()
	if err != nil && !rueidis.IsRedisNil(err) {
		return
	}
	o.unsure = false // a reply: whatever an earlier acquire did, this one adopted or saw gone
	if got, _ := lua.ReadAcquired(msg); !got.Taken {
		return
	}
	if gerr := o.giveBack(context.Background(), holds); gerr != nil {
		o.c.log.Warn("a hold taken after its acquire's caller gave up was not given back; it lapses with its lease",
			o.fields(zap.Error(o.wrap(gerr)))...)
	}
}

// release drops one hold with a numbered request (see Lock.Unlock for what each outcome
// means). req, called under op once a last hold's lease is stopped, makes the request for
// the latch and request number it is given, and may reserve an heir to hand the lock to
// (then it is a lua.LockRelease); every release script replies nil when the owner held
// nothing, releasedHanded when it handed the lock to the heir, 0 or 1 otherwise.
func (o *holder) release(ctx context.Context, req func(last bool, num lua.Numbered) (lua.Request, *lockHeir)) (err error) {
	if err := o.check(ctx); err != nil {
		return err
	}
	if ctx.Done() != nil {
		ctx = context.WithoutCancel(ctx) // a release must run even when the caller's request ended
	}
	_ = o.lock(ctx)
	defer o.unlock()
	since, handed := o.since, false
	defer func() { o.c.obs.released(o.what, o.name, 1, since, handed, err) }()
	if err := o.settle(ctx); err != nil {
		return err
	}
	lease := o.lease.Load()
	last, inner := o.count == 1, o.count > 1
	lostBefore := o.leaseLost()
	if last {
		// Before the script is sent, and after any renewal already on its way has landed, so
		// that no renewal can follow the release (Redisson #7272).
		if round := lease.Stop(); round != nil {
			<-round
		}
	}
	r, h := req(last, o.nextRequest())
	sent := time.Now()
	msg, err := o.numbered(ctx, r.Call())
	var unconfirmed error // ran, but too few replicas confirmed it: it stands all the same
	if errors.Is(err, ErrNotReplicated) {
		unconfirmed, err = err, nil
	}
	v, verr := msg.AsInt64()
	unknown := errors.Is(err, ErrOutcomeUnknown)
	if h != nil {
		handed = err == nil && verr == nil && v == releasedHanded
		h.decide(handed, unknown, sent, o.run+1)
	}
	if rel, ok := r.(lua.LockRelease); ok && h != nil && o.unsettled != nil {
		// The heir attempts itself now: should the release first run when repeated at the
		// next call, it frees the lock and publishes rather than hand it to a waiter that
		// would not know.
		rel.Heir = ""
		o.unsettled.call = rel.Call()
	}
	switch {
	case unknown:
		// The hold counts as given up: a last one is no longer renewed or timed (Redis frees
		// it by its lease at the latest), and the handle holds nothing it could call valid.
		o.setCount(max(o.count-1, 0))
		return err
	case err != nil:
		// Refused: nothing ran, and the handle still holds the lock; a last hold is no
		// longer renewed, and lapses with its lease unless Unlock is called again.
		if last {
			lease.Lapse()
		}
		return err
	case msg.IsNil():
		if o.count == 0 {
			return o.wrap(fmt.Errorf("%w by owner %s", ErrNotHeld, o.id))
		}
		return o.lost("the release found the lock gone")
	case inner:
		o.setCount(o.count - 1)
		if unconfirmed == nil { // unconfirmed, the TTL it set is not one a failover keeps
			lease.Hold(sent, o.ttl(), false)
		}
	default:
		o.setCount(0)
	}
	if lostBefore {
		// Released, but the lease had been lost before: the critical section was not
		// covered throughout, even though the field was back.
		return o.lostErr("the lease was lost before the release")
	}
	return unconfirmed
}

// ttl is the lease of the latest hold: the TTL a partial release keeps at least.
func (o *holder) ttl() time.Duration { return o.c.leaseOr(o.leaseD) }

// took records a hold that a script sent at sent granted with lease (0: kept by the
// watchdog) and registers it with the watchdog before the caller learns of it. A hold whose
// lease ran out before it could be reported (the process paused) is lost, not reported
// taken. Caller holds op.
func (o *holder) took(sent time.Time, lease time.Duration, run int) error {
	if o.count == 0 {
		o.run, o.since = run, sent
	}
	o.setCount(o.count + 1)
	o.leaseD = lease
	keep := lease == 0
	// A lease not lost is reused from hold to hold: its Lost channel is still open, and a
	// lock taken in a loop costs no new lease.
	l := o.lease.Load()
	hold := (*watchdog.Lease).Hold
	if o.count == 1 {
		hold = (*watchdog.Lease).Restart // a new hold: a given-up hold's deadline is not its own
	}
	if l == nil || !hold(l, sent, o.ttl(), keep) {
		if o.count > 1 {
			return o.lost("the lease was lost while re-entering") // a lost lease stays lost
		}
		l = o.c.wd.Start(o.kind, o.name, o.id, sent, o.ttl(), keep)
		o.lease.Store(l)
	}
	if !o.valid() {
		return o.tookTooLate("the lease ran out before the acquire returned")
	}
	return nil
}

// tookTooLate reports lost a hold whose lease ran out before its acquisition could return,
// and, if it was a new hold, gives it back (giveBackLater). Caller holds op.
func (o *holder) tookTooLate(reason string) error {
	first := o.count == 1
	err := o.lost(reason)
	if first && o.unsettled == nil {
		o.giveBackLater()
	}
	return err
}

// giveBackLater queues the release of a new hold the owner does not report — its lease,
// timed from the first run of the acquire, ran out before the acquire returned — as a
// request of unknown outcome: Redis may have the hold still, with the TTL of a later run
// (an acquire repeated across an outage), and nobody to release it. It goes out before the
// owner's next request, or in the background for an owner lent to an acquisition (see
// Client.giveBack). Caller holds op.
func (o *holder) giveBackLater() {
	o.unsettled = &request{call: o.releaser(1, o.nextRequest()).Call(), sent: time.Now()}
}

// lost records that the owner's hold is gone from Redis: Lost closes, and the error to
// return says so. Caller holds op.
func (o *holder) lost(reason string) error {
	o.setCount(0)
	if l := o.lease.Load(); l != nil {
		l.Lose(reason)
	}
	return o.lostErr(reason)
}

// lostErr is the error of a hold found lost.
func (o *holder) lostErr(reason string) error {
	return o.wrap(tag(fmt.Sprintf("lease lost (owner %s): %s", o.id, reason), ErrLockLost, ErrNotHeld))
}

// leaseLost reports whether the current hold's lease was lost: a hold the owner still counts
// is gone, even if a field of its name is back in Redis (a late acquire) — the gap in
// between was not covered.
func (o *holder) leaseLost() bool {
	l := o.lease.Load()
	return l != nil && o.count > 0 && done(l.Lost())
}

// valid reports whether the current hold's lease is ahead, now, by the monotonic clock.
func (o *holder) valid() bool { return live(o.lease.Load()) }

// live reports whether lease (nil: none) is ahead, now, by the monotonic clock, as last
// confirmed by Redis, and no loss of it is known.
func live(lease *watchdog.Lease) bool {
	if lease == nil {
		return false
	}
	d, ok := lease.Deadline()
	return ok && time.Now().Before(d)
}

// lostCh is Lost: the current (or last) hold's Lost channel, nil before the first.
func (o *holder) lostCh() <-chan struct{} {
	if l := o.lease.Load(); l != nil {
		return l.Lost()
	}
	return nil
}
