package sync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	gosync "sync"
	"time"

	"github.com/latchkey/latchkey/lua"
	"github.com/latchkey/latchkey/pubsub"
	"github.com/latchkey/latchkey/watchdog"
	"github.com/redis/rueidis"
	"go.uber.org/zap"
)

// Lock is a handle on a reentrant lock, wire-compatible with Redisson's RLock: Redis hash
// name → {owner ID: hold count}, releases published on redisson_lock__channel:{name}.
//
// The handle is the owner: its holds nest (each Lock or successful TryLock must be matched by
// one Unlock), and two handles are two owners even in one goroutine. Give each goroutine
// that must be excluded its own handle. A handle is safe for concurrent use, but goroutines
// sharing one share its ownership.
//
// Without an explicit Lease the lock is kept by the Client's watchdog until Unlock; with
// one it expires when the lease runs out. Lost reports a lease lost while held.
//
// A context bounds how long a call waits for the lock. A script already sent to Redis is
// awaited even if the context ends meanwhile (bounded by the rueidis client's own timeouts),
// because rueidis may still deliver a command whose context has ended: only its reply tells
// what it did, and a handle never acts on a guess.
type Lock struct {
	c       *Client
	name    string
	channel string
	owner   string
	err     error // a bad name, reported by every method

	// op serialises the handle's acquisitions and releases, so that its idea of its holds
	// changes in the order Redis applied them even when goroutines share the handle.
	op      gosync.Mutex
	holds   int             // this handle's holds as last known: decides when Unlock is final
	lease   *watchdog.Lease // the current (or last) hold's lease
	leaseMs string          // TTL a partial release sets (Redisson's internalLockLeaseTime)
	leaseD  time.Duration   // the same as a duration; 0 while the watchdog keeps the lock
	latch   string          // the handle's unlock latch key, made at its first unlock
	unlocks uint64          // unlock requests made, which number them in the latch
	fences  []latchFence    // latch marks the next acquire must raise before taking a hold
	run     int             // consecutive local hand-offs that led to the current hold
	kept    bool            // one of the current holds was taken under the watchdog

	mu      gosync.Mutex    // guards lost and handing, read without waiting for an op
	lost    <-chan struct{} // lease.Lost() of the current (or last) hold
	handing chan struct{}   // closed when a hand-off to this handle is recorded or not; nil if none
}

// Lock returns a handle on the lock called name (the Redis key). It makes no network call;
// an empty name is reported by the handle's methods.
func (c *Client) Lock(name string) *Lock {
	l := &Lock{c: c, name: name, channel: lockChannel(name), owner: c.newOwner(), leaseMs: c.wdMs}
	if name == "" {
		l.err = invalid("name", "must not be empty, got %q", name)
	} else if strings.Contains(name, "{") && !hasHashTag(name) {
		// Redisson's rule (REDISSON-LAYOUT §1.2) trusts any '{' to be a tag: the channel and
		// latch keys then hash elsewhere, which a cluster rejects as CROSSSLOT.
		c.log.Warn("lock name has '{' but no valid hash tag; its derived keys may fall in another slot",
			zap.String("lock", name))
	}
	return l
}

// hasHashTag reports whether name has a non-empty Redis Cluster hash tag.
func hasHashTag(name string) bool {
	i := strings.IndexByte(name, '{')
	return i >= 0 && strings.IndexByte(name[i+1:], '}') > 0
}

// Name returns the lock's name, which is its Redis key.
func (l *Lock) Name() string { return l.name }

// Owner returns the handle's owner ID, "<client UUID>:<n>", the hash field it holds.
func (l *Lock) Owner() string { return l.owner }

// LockOption configures Lock and TryLock.
type LockOption interface{ applyLock(*lockConfig) }

// TryLockOption configures TryLock.
type TryLockOption interface{ applyTry(*lockConfig) }

type lockConfig struct {
	lease    time.Duration // 0: kept by the watchdog
	wait     time.Duration
	leaseSet bool
	waitSet  bool
}

type leaseOption time.Duration

func (o leaseOption) applyLock(c *lockConfig) { c.lease, c.leaseSet = time.Duration(o), true }
func (o leaseOption) applyTry(c *lockConfig)  { o.applyLock(c) }

// Lease gives the acquisition a fixed lease: the lock expires lease after it is taken unless
// released first. The watchdog does not renew it — unless the handle already holds the lock
// under the watchdog, which then keeps renewing it (Redisson's rule for re-entry). It must be
// at least 1 ms and is truncated to whole milliseconds.
func Lease(lease time.Duration) interface {
	LockOption
	TryLockOption
} {
	return leaseOption(lease)
}

type waitOption time.Duration

func (o waitOption) applyTry(c *lockConfig) { c.wait, c.waitSet = time.Duration(o), true }

// WaitTime lets TryLock wait up to wait for the lock (default: one attempt, no waiting). The
// context's deadline, if earlier, still applies. It must not be negative.
func WaitTime(wait time.Duration) TryLockOption { return waitOption(wait) }

func (l *Lock) check(ctx context.Context, cfg *lockConfig) error {
	if err := l.c.checkCall(ctx); err != nil {
		return err
	}
	if l.err != nil {
		return l.err
	}
	if cfg == nil {
		return nil
	}
	if cfg.leaseSet && cfg.lease < time.Millisecond {
		return invalid("lease", "must be >= 1ms, got %v", cfg.lease)
	}
	// Redis keeps whole milliseconds; the watchdog must not believe in the fraction.
	cfg.lease = cfg.lease.Truncate(time.Millisecond)
	if cfg.waitSet && cfg.wait < 0 {
		return invalid("wait time", "must be >= 0, got %v", cfg.wait)
	}
	return nil
}

// Lock takes the lock, waiting as long as ctx allows. Waiters are woken by the release
// message and re-check at the holder's lease expiry. When ctx ends first, Lock returns
// ctx.Err() and does not hold the lock.
func (l *Lock) Lock(ctx context.Context, opts ...LockOption) error {
	var cfg lockConfig
	for _, o := range opts {
		if o == nil {
			return invalid("option", "must not be nil")
		}
		o.applyLock(&cfg)
	}
	if err := l.check(ctx, &cfg); err != nil {
		return err
	}
	_, err := l.acquire(ctx, cfg.lease, -1)
	return err
}

// TryLock takes the lock if it is free (or already this handle's) and reports whether it did.
// With WaitTime it waits up to that long; a busy lock is (false, nil), not an error. When ctx
// ends before the wait time, TryLock returns ctx.Err().
func (l *Lock) TryLock(ctx context.Context, opts ...TryLockOption) (bool, error) {
	var cfg lockConfig
	for _, o := range opts {
		if o == nil {
			return false, invalid("option", "must not be nil")
		}
		o.applyTry(&cfg)
	}
	if err := l.check(ctx, &cfg); err != nil {
		return false, err
	}
	return l.acquire(ctx, cfg.lease, cfg.wait)
}

// acquire attempts, and waits up to wait (negative: without limit) for the lock.
func (l *Lock) acquire(ctx context.Context, lease, wait time.Duration) (bool, error) {
	leaseMs := l.c.wdMs
	if lease > 0 {
		leaseMs = strconv.FormatInt(lease.Milliseconds(), 10)
	}
	if wait == 0 { // no waiting: nothing to allocate
		_, ok, err := l.attempt(ctx, lease, leaseMs)
		return ok, err
	}
	// A handle that holds the lock re-enters at once: queued behind waiters, it would wait for
	// a release only it can make. Nor can it be handed the lock, which it already holds.
	if err := l.awaitHandoff(ctx); err != nil {
		return false, err
	}
	// Nor may a handle with a request of unknown outcome behind it queue behind waiters: it
	// may hold the lock in Redis without knowing (an acquire not undone, a release that never
	// ran), which they would wait out to its lease; its attempt adopts such a hold.
	l.op.Lock()
	join := l.holds == 0 && len(l.fences) == 0
	l.op.Unlock()
	h := &heir{l: l, lease: lease, leaseMs: leaseMs}
	var queued *heir // nil: not to be handed the lock
	if join && l.c.maxHandoff > 0 {
		queued = h
	}
	return l.c.acquire(ctx, l.channel, pubsub.LockPolicy, wait, join, h, queued)
}

// attempt runs the acquire script once. When its reply is lost (the connection broke) the
// script may have run, so the hold it may have added is taken back before returning the
// error: a caller told "no" must not hold the lock.
func (l *Lock) attempt(ctx context.Context, lease time.Duration, leaseMs string) (int64, bool, error) {
	if err := l.awaitHandoff(ctx); err != nil {
		return 0, false, err // nothing sent, so nothing to undo
	}
	l.op.Lock()
	defer l.op.Unlock()
	sent := time.Now()
	var trust watchdog.Trust
	var ttl int64
	var err error
	if l.holds > 0 && lease > 0 {
		// A re-entry sets the TTL of the handle's hold to lease when it runs: until its
		// outcome is known no renewal may count on more (see Lease.Distrust). It is numbered
		// on the latch, so that a late run of it changes nothing (lock_reenter.lua); its mark
		// passes every fence.
		if l.lease != nil {
			trust = l.lease.Distrust(sent, lease)
		}
		l.ensureLatch()
		l.unlocks++
		ttl, err = lua.LockReenter.Exec(context.WithoutCancel(ctx), l.c.rdb, []string{l.name, l.latch},
			[]string{leaseMs, l.owner, strconv.Itoa(l.holds), unlockLatchMs, strconv.FormatUint(l.unlocks, 10)}).AsInt64()
	} else {
		keys := []string{l.name}
		args := []string{leaseMs, l.owner, strconv.Itoa(l.holds)}
		if len(l.fences) > 0 {
			args = append(args, unlockLatchMs)
			for _, f := range l.fences {
				keys = append(keys, f.key)
				args = append(args, f.n)
			}
		}
		ttl, err = lua.LockAcquire.Exec(context.WithoutCancel(ctx), l.c.rdb, keys, args).AsInt64()
	}
	if err == nil || rueidis.IsRedisNil(err) {
		l.fences = l.fences[:0]
	}
	switch {
	case err == nil && ttl == reenterPassed:
		// Only a late run finds its number passed; this one was sent just now.
		return 0, false, fmt.Errorf("dsync: lock %q: re-entry found its request passed on the latch", l.name)
	case err == nil:
		return ttl, false, nil
	case rueidis.IsRedisNil(err):
		l.acquired(sent, lease, leaseMs)
		return l.leaseTTL().Milliseconds(), true, nil
	}
	if !isRedisErr(err) {
		l.undo(ctx, sent, lease)
	} else if l.lease != nil {
		l.lease.Restore(trust) // refused: the attempt changed nothing
	}
	return 0, false, fmt.Errorf("dsync: lock %q: %w", l.name, err)
}

// acquired records a hold that the script granted at sent, and makes sure its lease is kept
// or timed before the caller learns it holds the lock. Caller holds l.op.
func (l *Lock) acquired(sent time.Time, lease time.Duration, leaseMs string) {
	if l.holds == 0 {
		l.run, l.kept = 0, false
	}
	l.holds++
	l.leaseMs, l.leaseD = leaseMs, lease
	keep := lease == 0
	l.kept = l.kept || keep
	// A lease not lost is reused from hold to hold: its Lost channel is still open, and a
	// lock taken in a loop costs no new lease.
	if l.lease == nil || !l.leaseSetBy(sent, l.leaseTTL()) {
		if keep {
			l.lease = l.c.wd.Keep(l.name, l.owner, sent)
		} else {
			l.lease = l.c.wd.Watch(l.name, l.owner, sent, lease)
		}
		l.mu.Lock()
		l.lost = l.lease.Lost()
		l.mu.Unlock()
	}
}

// leaseTTL is the TTL a partial release (or an undo) sets: the lease of the latest hold.
func (l *Lock) leaseTTL() time.Duration {
	if l.leaseD == 0 {
		return l.c.wdTimeout
	}
	return l.leaseD
}

// leaseSetBy records that a command sent at sent set the TTL of the handle's hold to ttl,
// and reports false if the lease is already lost. A hold taken under the watchdog is kept —
// re-entries with an explicit lease included, as Redisson does. Every caller has just had a
// request on the handle's latch (or an acquire raising its fences) run, so no request of
// unknown outcome can set a shorter TTL any more. Caller holds l.op.
func (l *Lock) leaseSetBy(sent time.Time, ttl time.Duration) bool {
	if l.kept {
		return l.lease.ResetKept(sent, ttl)
	}
	return l.lease.Reset(sent, ttl, false)
}

// undo takes back the hold a lost attempt (sent at attemptSent with lease, 0 for the
// watchdog's) may have added, leaving the handle's own holds and their lease as they were.
// It is a request of the handle's, numbered on its latch like an unlock, so it is retried
// like one and a run of it reaching Redis late — after the handle took a hold since — changes
// nothing; if every try fails, the handle carries a fence past it. Like the attempt, it is
// awaited whatever ctx does. Caller holds l.op.
func (l *Lock) undo(ctx context.Context, attemptSent time.Time, lease time.Duration) {
	ctx = context.WithoutCancel(ctx)
	sent := time.Now()
	if l.holds > 0 && l.lease != nil {
		l.lease.Distrust(sent, l.leaseTTL()) // the undo sets the TTL to the handle's lease
	}
	var n int64
	req, err := l.fencedRequest(ctx, func(req string) (err error) {
		n, err = lua.LockUndo.Exec(ctx, l.c.rdb, []string{l.name, l.channel, l.latch},
			[]string{l.owner, strconv.Itoa(l.holds), l.leaseMs, l.c.publishCmd, "0", req, unlockLatchMs}).AsInt64()
		return err
	})
	if err != nil {
		l.c.log.Warn("acquire reply lost and undo failed; the lock may stay held until its lease runs out",
			zap.String("lock", l.name), zap.String("owner", l.owner), zap.Error(err))
		l.addFence(latchFence{key: l.latch, n: req})
		if l.holds > 0 && l.lease != nil {
			// Reaching Redis late, the re-entry's attempt would set the TTL to its lease, and
			// the undo to the handle's latest: the hold's lease must not count on more.
			if lease == 0 {
				lease = l.c.wdTimeout
			}
			l.lease.Distrust(attemptSent, lease)
			l.lease.Distrust(sent, l.leaseTTL())
		}
		return
	}
	l.latchPassed()
	if n != undoneNothing && l.holds > 0 && l.lease != nil {
		l.leaseSetBy(sent, l.leaseTTL()) // the undo set the TTL back to the handle's lease
	}
}

// reenterPassed is lua.LockReenter's reply for a run whose number the latch has passed.
const reenterPassed int64 = -3

// What an undo did (lua.LockUndo).
const (
	undoneNothing int64 = 0 // no hold of the owner's to undo or keep, or a repeat
	undoneHold    int64 = 1 // the attempt's hold was taken back
	undoneKept    int64 = 2 // the attempt never ran; the owner's holds are as it knew them
)

// fencedRequest numbers the handle's next request on its latch and runs it, retrying a
// lost reply as the same request (the latch makes a repeat a no-op) within the unlock's
// attempts. It returns the request number and the last error. Caller holds l.op.
func (l *Lock) fencedRequest(ctx context.Context, run func(req string) error) (string, error) {
	l.ensureLatch()
	l.unlocks++
	req := strconv.FormatUint(l.unlocks, 10)
	var err error
	backoff := unlockBackoff
	for attempt := 1; attempt <= unlockAttempts; attempt++ {
		if err = run(req); err == nil || errors.Is(err, rueidis.ErrClosing) {
			break
		}
		time.Sleep(backoff)
		backoff *= 2
	}
	return req, err
}

// latchPassed records that a request on the handle's latch ran: its mark is past every
// earlier request, whose late runs now change nothing, so no fence is needed for them any
// more. (The only fences so far are on the handle's own latch.) Caller holds l.op.
func (l *Lock) latchPassed() {
	l.fences = l.fences[:0]
}

// ensureLatch makes the handle's latch key at its first use. Caller holds l.op.
func (l *Lock) ensureLatch() {
	if l.latch == "" {
		l.latch = unlockLatchKey(l.name, l.c.newRequestID())
		l.c.janitor.track(l, l.latch)
	}
}

// addFence records a latch mark the next acquire must raise, replacing a lower one on the
// same latch, and pins the latch: it guards requests that may still reach Redis. Caller
// holds l.op.
func (l *Lock) addFence(f latchFence) {
	l.c.janitor.pin(f.key)
	for i := range l.fences {
		if l.fences[i].key == f.key {
			l.fences[i] = f // numbers on one latch only rise
			return
		}
	}
	l.fences = append(l.fences, f)
}

// Unlock releases one hold. The last one frees the lock and wakes a waiter. When the handle
// does not hold the lock the lock is untouched and the error matches ErrNotHeld; when it held
// the lock but lost its lease, the error matches ErrLockLost too.
//
// Unlock is not cut short by ctx: abandoning a release would leave the lock held until its
// lease ran out, so it always runs, and a reply lost to the network is retried (within 10 s)
// with the same request ID, which makes the retry report what the first run did instead of
// releasing twice. If Unlock still fails with its outcome unknown, the lock may or may not
// be released, and the hold counts as given up all the same: do not call Unlock again for
// it (a second call would release whatever the failed one left, and for a nested hold that
// is the outer one). A last hold is then no longer renewed, so it is released at the latest
// when its lease runs out, and Lost closes then if it was still held; the handle's next
// script sets Redis's count right, and a late run of the failed request changes nothing.
// Nor are the remaining holds renewed when the latest one was taken with a Lease shorter
// than the watchdog's: the failed release, running late, would set the TTL to it.
// When Redis refuses the release (an error reply), nothing changed and the hold is kept.
func (l *Lock) Unlock(ctx context.Context) error {
	if err := l.check(ctx, nil); err != nil {
		return err
	}
	l.op.Lock()
	defer l.op.Unlock()
	final := l.holds <= 1
	lease := l.lease
	if final && lease != nil {
		// Before the script is sent, and after any renewal already on its way has landed, so
		// that no renewal can follow the release (Redisson #7272).
		if round := lease.Stop(); round != nil {
			<-round
		}
	}
	// A final release may hand the lock to a local waiter instead of freeing it: one that
	// holds the lock once, knows its hold is live (no request of unknown outcome behind it)
	// and has enough lease left to carry the heir until Redis records the hand-off.
	var h *heir
	var until time.Time
	if l.holds == 1 && l.run < l.c.maxHandoff && len(l.fences) == 0 && lease != nil && !l.c.isClosed() {
		if d, ok := lease.Deadline(); ok && time.Until(d) > handoffMinLeft {
			h, until = l.c.heirs.reserve(l.name), d
		}
	}
	sent := time.Now()
	var trust watchdog.Trust
	if !final && lease != nil {
		// A partial release sets the TTL to the latest hold's lease when it runs; until its
		// outcome is known no renewal may count on more (see Lease.Distrust).
		trust = lease.Distrust(sent, l.leaseTTL())
	}
	if h != nil {
		l.handTo(h, sent, until)
	}
	outcome, err := l.release(context.WithoutCancel(ctx), h)
	if h != nil {
		l.confirmHandoff(h, outcome, err, sent)
	}
	switch {
	case errors.Is(err, ErrNotHeld):
		if l.holds == 0 {
			return err
		}
		l.holds = 0
		if lease != nil {
			lease.Stop()
		}
		return fmt.Errorf("%w: lock %q: %w", ErrLockLost, l.name, err)
	case errors.Is(err, errOutcomeUnknown):
		// The outcome is unknown. The hold counts as given up — the caller is done with it, and
		// must not have its next Unlock taken for this one — and a last hold's lease lapses
		// instead of being renewed, so Redis frees it by its lease at the latest. The counts
		// the scripts set come from the handle, so whatever Redis still counts is set right by
		// the handle's next script, and the latch makes a late run of this request a no-op
		// (see fences).
		l.holds = max(l.holds-1, 0)
		if final && lease != nil {
			lease.Lapse()
		}
		// A partial release stays distrusted (its late run may still set the TTL) until a
		// later request on the handle's latch runs, or its next acquire raises the latch past
		// it, and the lease is kept again.
		return err
	case err != nil:
		// Redis refused the script, so nothing changed and the handle still holds the lock.
		// Its lease lapses all the same (how long since Redis last set the TTL is not known
		// here): the lock is released by its lease at the latest unless Unlock is called again.
		if final && lease != nil {
			lease.Lapse()
		} else if lease != nil {
			lease.Restore(trust)
		}
		return err
	case outcome != releasedKept: // the handle's last hold, freed or handed on; its lease is stopped
		l.holds = 0
	default:
		// A partial release (the script frees the lock whenever the handle says this hold is
		// its last, whatever Redis counted): still held, and the script set the TTL again.
		l.holds--
		if lease != nil {
			l.leaseSetBy(sent, l.leaseTTL())
		}
	}
	return nil
}

// Retry budget of one unlock. The latch outlives the budget by far: it is what makes a run
// of an earlier request that reaches Redis late change nothing, and it is deleted anyway when
// its handle is collected or its Client closed; a run delayed in transit longer than its PX
// after the handle's last unlock is the case left uncovered.
const (
	unlockAttempts = 5
	unlockBudget   = 10 * time.Second
	unlockLatchMs  = "300000"
	unlockBackoff  = 20 * time.Millisecond
)

// What a release script did.
const (
	releasedKept   int64 = 0 // a hold was dropped; the lock is still held
	releasedFreed  int64 = 1 // the lock was freed and the release published
	releasedHanded int64 = 2 // the lock went to the heir
)

// release runs the release script, retrying lost replies as the same request, and reports
// what it did. With an heir (handed the lock by the caller) the script hands the lock over
// instead of freeing it; when its outcome stays unknown, the hand-off is settled. Caller
// holds l.op.
func (l *Lock) release(ctx context.Context, h *heir) (int64, error) {
	l.ensureLatch()
	l.unlocks++
	req := strconv.FormatUint(l.unlocks, 10)
	keys := []string{l.name, l.channel, l.latch}
	args := []string{"0", l.leaseMs, l.owner, l.c.publishCmd, unlockLatchMs, strconv.Itoa(l.holds), req}
	if h != nil {
		args = append(args, h.l.owner, h.leaseMs)
	}
	start := time.Now()
	backoff := unlockBackoff
	for attempt := 1; ; attempt++ {
		v, err := lua.LockRelease.Exec(ctx, l.c.rdb, keys, args).AsInt64()
		switch {
		case err == nil:
			l.latchPassed()
			return v, nil
		case rueidis.IsRedisNil(err):
			l.latchPassed()
			return 0, fmt.Errorf("%w: lock %q, owner %s", ErrNotHeld, l.name, l.owner)
		}
		if isRedisErr(err) || attempt == unlockAttempts || time.Since(start)+backoff > unlockBudget ||
			errors.Is(err, rueidis.ErrClosing) {
			if attempt == 1 && isRedisErr(err) { // Redis refused the script: it did not run
				return 0, fmt.Errorf("dsync: unlock %q: %w", l.name, err)
			}
			// A run whose reply was lost may have acted, or may still.
			if h != nil {
				if handed, ok := l.settleHandoff(ctx, h); ok {
					if handed {
						return releasedHanded, nil
					}
					return 0, fmt.Errorf("%w: lock %q, owner %s", ErrNotHeld, l.name, l.owner)
				}
			}
			l.addFence(latchFence{key: l.latch, n: strconv.FormatUint(l.unlocks, 10)})
			return 0, fmt.Errorf("dsync: unlock %q: %w: %w", l.name, errOutcomeUnknown, err)
		}
		l.c.log.Debug("unlock reply lost; retrying with the same request ID",
			zap.String("lock", l.name), zap.Int("attempt", attempt), zap.Error(err))
		time.Sleep(backoff)
		backoff *= 2
	}
}

// errOutcomeUnknown marks an unlock whose script may or may not have run.
var errOutcomeUnknown = errors.New("outcome unknown")

// A latchFence is a latch mark that a handle's next acquire raises before it takes a hold, so
// that requests of unknown outcome numbered up to n on that latch change nothing if they
// reach Redis later: the handle's own unlock, undo, or settlement of a hand-off it made.
type latchFence struct {
	key string // the latch; empty: no fence
	n   string // the request number to raise its mark to
}

// settleHandoff completes a hand-off release whose outcome stayed unknown, while h's
// handle is still held: a request of its own (lua.LockSettleHandoff), fenced by l's latch
// like an unlock and retried like one, passes the lock to h if the release never ran, and
// makes any late run of the release a no-op. It reports whether the lock went to h (by the
// release, read from the latch, or by the settlement: h's lease, timed from the release's
// send time, tells whether h still has it), and whether the settlement got through at all.
// When it did not, the caller fences l past it (l's next acquire raises its mark, so that
// neither the release nor the settlement, reaching Redis late, can take the hold l takes
// then). h needs no fence: neither script ever takes a
// hold from h. Caller holds l.op and h's op.
func (l *Lock) settleHandoff(ctx context.Context, h *heir) (handed, ok bool) {
	var v int64
	_, err := l.fencedRequest(ctx, func(req string) (err error) {
		v, err = lua.LockSettleHandoff.Exec(ctx, l.c.rdb, []string{l.name, l.latch},
			[]string{l.owner, req, unlockLatchMs, h.leaseMs, h.l.owner}).AsInt64()
		return err
	})
	if err == nil {
		l.latchPassed()
		return v == 1, true
	}
	l.c.log.Warn("hand-off outcome unknown and not settled; the lock may stay held until its lease runs out",
		zap.String("lock", l.name), zap.String("owner", l.owner), zap.String("heir", h.l.owner), zap.Error(err))
	return false, false
}

// handTo gives h's handle the lock as the release that hands it over is sent: the hold is
// recorded, timed to end with the releaser's lease (until) or the heir's own, whichever
// comes first, and h is told. h's op stays held until confirmHandoff. Caller holds l.op; h
// was reserved.
func (l *Lock) handTo(h *heir, sent, until time.Time) {
	hl := h.l
	hl.holds, hl.run, hl.kept = 1, l.run+1, h.lease == 0
	hl.leaseMs, hl.leaseD = h.leaseMs, h.lease
	// The script gives the heir its own lease (the watchdog timeout if kept), which may be
	// shorter than what is left of the releaser's.
	own := h.lease
	if own == 0 {
		own = l.c.wdTimeout
	}
	until = minTime(until, sent.Add(own))
	now := time.Now()
	// Timed, not kept: nothing in Redis is the heir's to renew yet. The heir's old lease is
	// stopped or lapsing (it held nothing), so Reset makes it a timed one.
	hl.mu.Lock()
	if hl.lease == nil || !hl.lease.Reset(now, until.Sub(now), false) {
		hl.lease = l.c.wd.Watch(hl.name, hl.owner, now, until.Sub(now))
		hl.lost = hl.lease.Lost()
	}
	hl.handing = make(chan struct{})
	hl.mu.Unlock()
	h.handed <- struct{}{}
}

// confirmHandoff ends a hand-off by what Redis did: when it recorded the heir's hold, the
// heir's lease becomes the one the release set (kept by the watchdog, or timed); otherwise
// the heir's hold is lost. Then h's handle is free for the heir's next request. Caller holds
// l.op and h's op.
func (l *Lock) confirmHandoff(h *heir, outcome int64, err error, sent time.Time) {
	hl := h.l
	if err == nil && outcome == releasedHanded {
		hl.lease.Reset(sent, h.lease, h.lease == 0)
	} else {
		// An error (a release naming an heir replies nothing else): the lock was gone, Redis
		// refused the script, or the outcome stays unknown.
		hl.lease.Lose(fmt.Sprintf("hand-off not recorded: %v", err))
	}
	hl.mu.Lock()
	close(hl.handing)
	hl.handing = nil
	hl.mu.Unlock()
	hl.op.Unlock()
}

// awaitHandoff waits, within ctx, for a hand-off to the handle that is on its way to Redis
// (the releaser holds the handle's op lock until then), so that a read sent after it sees
// what Redis made of it and a call that needs the op lock does not outwait ctx. It returns
// ctx.Err() if ctx ends first, and checks ctx even when there is nothing to wait for.
func (l *Lock) awaitHandoff(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	handing := l.handing
	l.mu.Unlock()
	if handing == nil {
		return nil
	}
	select {
	case <-handing:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func isRedisErr(err error) bool {
	_, ok := rueidis.IsRedisErr(err)
	return ok
}

// ForceUnlock deletes the lock whoever holds it and wakes a waiter. It reports whether there
// was a lock to delete. A holder on this or another Client finds out through its Lost channel
// at its next renewal.
func (l *Lock) ForceUnlock(ctx context.Context) (bool, error) {
	if err := l.check(ctx, nil); err != nil {
		return false, err
	}
	n, err := lua.LockForceRelease.Exec(ctx, l.c.rdb, []string{l.name, l.channel},
		[]string{"0", l.c.publishCmd}).AsInt64()
	if err != nil {
		return false, fmt.Errorf("dsync: force unlock %q: %w", l.name, err)
	}
	return n == 1, nil
}

// IsLocked reports whether anyone holds the lock.
func (l *Lock) IsLocked(ctx context.Context) (bool, error) {
	if err := l.check(ctx, nil); err != nil {
		return false, err
	}
	n, err := l.c.rdb.Do(ctx, l.c.rdb.B().Exists().Key(l.name).Build()).AsInt64()
	if err != nil {
		return false, fmt.Errorf("dsync: lock %q: %w", l.name, err)
	}
	return n == 1, nil
}

// IsHeld reports whether this handle holds the lock, as Redis sees it. It waits (within ctx)
// for a local hand-off to the handle still on its way to Redis.
func (l *Lock) IsHeld(ctx context.Context) (bool, error) {
	if err := l.check(ctx, nil); err != nil {
		return false, err
	}
	if err := l.awaitHandoff(ctx); err != nil {
		return false, err
	}
	ok, err := l.c.rdb.Do(ctx, l.c.rdb.B().Hexists().Key(l.name).Field(l.owner).Build()).AsBool()
	if err != nil {
		return false, fmt.Errorf("dsync: lock %q: %w", l.name, err)
	}
	return ok, nil
}

// HoldCount returns how many holds this handle has on the lock, as Redis sees it (0: none).
// It waits (within ctx) for a local hand-off to the handle still on its way to Redis.
func (l *Lock) HoldCount(ctx context.Context) (int, error) {
	if err := l.check(ctx, nil); err != nil {
		return 0, err
	}
	if err := l.awaitHandoff(ctx); err != nil {
		return 0, err
	}
	n, err := l.c.rdb.Do(ctx, l.c.rdb.B().Hget().Key(l.name).Field(l.owner).Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("dsync: lock %q: %w", l.name, err)
	}
	return int(n), nil
}

// NoExpiry is what RemainingTTL returns for a lock that exists without a TTL (not one this
// package creates, but a Redis key anyone could have written).
const NoExpiry time.Duration = -1

// RemainingTTL returns how long the lock has before it expires, whoever holds it: 0 when it
// is not locked, NoExpiry when it has no TTL. Millisecond precision. It waits (within ctx)
// for a local hand-off to the handle still on its way to Redis.
func (l *Lock) RemainingTTL(ctx context.Context) (time.Duration, error) {
	if err := l.check(ctx, nil); err != nil {
		return 0, err
	}
	if err := l.awaitHandoff(ctx); err != nil {
		return 0, err
	}
	ms, err := l.c.rdb.Do(ctx, l.c.rdb.B().Pttl().Key(l.name).Build()).AsInt64()
	if err != nil {
		return 0, fmt.Errorf("dsync: lock %q: %w", l.name, err)
	}
	switch {
	case ms == -2:
		return 0, nil
	case ms < 0:
		return NoExpiry, nil
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// Lost returns a channel closed when the lease of this handle's current (or most recent)
// hold is lost while held: the lock expired, was deleted or force-unlocked, or could not be
// renewed until its lease ran out (Redis unreachable). Unlock does not close it. Before the
// first successful acquisition it returns nil, a channel that never closes.
func (l *Lock) Lost() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}
