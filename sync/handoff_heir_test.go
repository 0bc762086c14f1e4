package sync

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

// An heir kept by the watchdog (Lock without Lease) gets, from the hand-off script, a TTL of
// the watchdog timeout, which may be shorter than what is left of the releaser's lease. Until
// the reply confirms the hand-off, the heir's lease must end with the shorter of the two: when
// the release ran but its reply is lost (and the retries and settlement keep failing), the
// heir's field expires after the watchdog timeout, nobody renews it, and another Client may
// take the lock — the heir's Lost must have closed by then, as a kept lease's does at its
// deadline. (Found by review: the provisional lease ended with the releaser's, a minute.)
func TestKeptHeirLeaseEndsWithItsOwnTTLUntilConfirmed(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "kept-heir"
		const wd = 300 * time.Millisecond // short, so the heir's field expires soon; the Unlock gives up after ~1 s
		oc, _ := newClient(t, b.Addr)
		// The releaser has a lease far beyond wd; the heir is kept by the watchdog (TTL wd).
		r := startHeldRelay(t, ctx, b, name, relayOpts{
			client: []Option{WithWatchdogTimeout(wd)}, holder: []LockOption{Lease(time.Minute)}})
		p, l, h := r.p, r.l, r.h
		// Every run of the release, and the settlement: replies lost.
		unlocked := r.handOffHeldBack(t, ctx, l.Owner(), true)
		defer p.disarm()
		// The first run and two retries are held back; now let them reach Redis: the hand-off
		// is recorded (heir's field, PTTL wd), but the releaser never learns it. Waiting for
		// the second retry (after 20+40 ms of backoff) puts the heir's provisional deadline,
		// from the release's send time, that much before its field expires in Redis: room for
		// a slow watchdog loop.
		eventually(t, 5*time.Second, "release runs held back", func() bool { return p.holding() >= 3 })
		p.release()

		o := oc.Lock(name)
		var otherAt time.Time
		eventually(t, 5*time.Second, "another Client takes the lock once the heir's hold expires", func() bool {
			ok, err := o.TryLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				otherAt = time.Now()
			}
			return ok
		})
		lostBefore := isClosed(h.Lost())
		var unlockedFirst bool
		select {
		case <-unlocked:
			unlockedFirst = true
		default:
		}
		select {
		case <-h.Lost():
		case <-time.After(10 * time.Second):
			t.Fatal("heir's lease never reported lost")
		}
		lostAfter := time.Since(otherAt)
		if unlockedFirst {
			t.Skip("the releaser's Unlock gave up before the other Client got in: timing, not the scenario")
		}
		if !lostBefore {
			t.Errorf("another Client holds the lock while the heir's lease is not lost "+
				"(Lost closed %v later, when the releaser gave up)", lostAfter)
		}
		must(t, o.Unlock(ctx))
		<-unlocked
	})
}

// A releaser only TryLocks a waiter's op, and skips a waiter whose op is busy: IsHeld and
// HoldCount must not take it, or a waiter probed at the moment of the release would be
// skipped, and the lock freed and published instead of handed on (so another Client, or a
// later local waiter, could take it first). Real Redis only: CLIENT PAUSE keeps the probe's
// HEXISTS in flight while the release picks its heir.
func TestProbedWaiterIsStillHandedTheLock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		if b.Mini != nil {
			t.Skip("needs CLIENT PAUSE")
		}
		ctx := testCtx(t, 30*time.Second)
		const name = "probed"
		c, rdb := newClient(t, b.Addr)
		admin := b.Client(t)
		sub := rawSubscribe(t, ctx, rdb, lockChannel(name))
		l, h := c.Lock(name), c.Lock(name)
		must(t, l.Lock(ctx))
		hDone := startLock(ctx, h)
		settled(t, c, name, 1)
		sub.published(t, ctx)

		must(t, admin.Do(ctx, admin.B().ClientPause().Timeout(500).All().Build()).Error())
		probed := make(chan error, 1)
		go func() { _, err := h.IsHeld(ctx); probed <- err }() // a monitor asks: do you hold it?
		// With the code under review the probe takes the waiter's op at once and keeps it
		// until the pause ends; wait for that (up to 200 ms: a probe that does not take the op
		// at all is what a fix looks like, and then there is nothing to wait for).
		for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); time.Sleep(time.Millisecond) {
			if !h.op.TryLock() {
				break
			}
			h.op.Unlock()
		}
		must(t, l.Unlock(ctx)) // returns once the pause ends
		must(t, <-probed)
		await(t, hDone, "waiter took the lock")
		if got := sub.published(t, ctx); len(got) != 0 {
			t.Errorf("release published %q: the parked waiter was skipped because a concurrent "+
				"IsHeld held its op; the lock was freed for anyone instead of handed on", got)
		}
		must(t, h.Unlock(ctx))
	})
}

// heirLeaseMarker is what only a release handing the lock to heir, taken with Lease(lease),
// sends: the heir's owner ID followed by its lease in ms.
func heirLeaseMarker(heir *Lock, lease time.Duration) string {
	ms := strconv.FormatInt(lease.Milliseconds(), 10)
	return heir.Owner() + "\r\n$" + strconv.Itoa(len(ms)) + "\r\n" + ms
}

// RemainingTTL is a read of Redis like IsHeld and HoldCount, and waits like them for a
// hand-off in flight: an heir that took the lock with Lease(2s) and asks how long it has
// right after its Lock returns must not be told the releaser's TTL (the watchdog's 30 s),
// or it would budget its work past its lease. (Found by review.)
func TestHeirRemainingTTLWaitsForHandoff(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "heir-ttl"
		const lease = 2 * time.Second
		// The releaser is kept (TTL 30 s).
		r := startHeldRelay(t, ctx, b, name, relayOpts{heir: []LockOption{Lease(lease)}})
		h := r.h
		// Every run of the release is held back (its retries take ~300 ms); the settlement
		// after them is not, and completes the hand-off.
		unlocked := r.handOffHeldBack(t, ctx, heirLeaseMarker(h, lease), true)
		defer r.p.disarm()

		var ttl time.Duration
		var err error
		for range 100 { // a held release cuts the connection; a PTTL on it is lost too
			if ttl, err = h.RemainingTTL(ctx); err == nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
		must(t, err)
		must(t, <-unlocked)
		after, err := h.RemainingTTL(ctx)
		must(t, err)
		if ttl > lease {
			t.Errorf("heir's RemainingTTL right after its Lock(Lease(%v)): %v — the releaser's TTL, "+
				"read before the hand-off reached Redis (once it had: %v)", lease, ttl, after)
		}
		must(t, h.Unlock(ctx))
	})
}

// The calls on an heir's handle that need the hand-off to have reached Redis — reads, and a
// re-entry — wait for it, but within ctx: while the release is retried (replies lost)
// through its whole budget and settlement (~1 s here), a call with a 50 ms deadline returns
// at that deadline. (Found by review: IsHeld and HoldCount, then a re-entry, waited on the
// handle's op mutex, which the releaser holds until its reply, whatever ctx said.)
func TestHeirCallsWaitForHandoffWithinCtx(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(ctx context.Context, h *Lock) error
	}{
		{"IsHeld", func(ctx context.Context, h *Lock) error { _, err := h.IsHeld(ctx); return err }},
		{"HoldCount", func(ctx context.Context, h *Lock) error { _, err := h.HoldCount(ctx); return err }},
		{"RemainingTTL", func(ctx context.Context, h *Lock) error { _, err := h.RemainingTTL(ctx); return err }},
		{"TryLock", func(ctx context.Context, h *Lock) error { _, err := h.TryLock(ctx); return err }},
		{"Lock", func(ctx context.Context, h *Lock) error { return h.Lock(ctx) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
				ctx := testCtx(t, 30*time.Second)
				r := startHeldRelay(t, ctx, b, "heir-calls", relayOpts{})
				unlocked := r.handOffHeldBack(t, ctx, r.l.Owner(), true) // release and settlement: Unlock takes ~1 s
				defer r.p.disarm()

				const limit = 50 * time.Millisecond
				qctx, cancel := context.WithTimeout(ctx, limit)
				defer cancel()
				start := time.Now()
				err := tc.call(qctx, r.h)
				// The Unlock takes ~1 s: half of that tells a wait bounded by ctx from one that
				// outwaits it, with room for a slow machine.
				if took := time.Since(start); took > limit+450*time.Millisecond || !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%s with a %v deadline returned after %v with %v, want its deadline's error: "+
						"it waited for the releaser's whole retry budget, ignoring ctx", tc.name, limit, took, err)
				}
				<-unlocked
			})
		})
	}
}

// heldRelay is a hand-off about to be made through a holdProxy: a Client c reaching Redis
// through p (scripts cached, so that a held EVALSHA runs when delivered), l holding the lock
// called name, and h parked waiting for it, its Lock's result on hDone.
type heldRelay struct {
	p     *holdProxy
	c     *Client
	l, h  *Lock
	hDone <-chan error
}

// relayOpts configure startHeldRelay: the Client's options, and the holder's and heir's Lock
// options.
type relayOpts struct {
	client       []Option
	holder, heir []LockOption
}

func startHeldRelay(t *testing.T, ctx context.Context, b *redistest.Backend, name string, o relayOpts) heldRelay {
	t.Helper()
	r := heldRelay{p: newHoldProxy(t, b.Addr)}
	r.c, _ = newClient(t, r.p.addr(), o.client...)
	warmScripts(t, ctx, r.c)
	r.l, r.h = r.c.Lock(name), r.c.Lock(name)
	must(t, r.l.Lock(ctx, o.holder...))
	r.hDone = startLock(ctx, r.h, o.heir...)
	settled(t, r.c, name, 1)
	return r
}

// handOffHeldBack arms the proxy to hold back the requests that contain marker (every one
// until disarmed, or the next only), starts l's Unlock, waits until the heir has been handed
// the lock, and returns the Unlock's result.
//
// An heir is told at once, so a wait of seconds means there was no hand-off: the parked heir
// was making its periodic re-check (every watchdog timeout, short in some tests) just as the
// release looked for an heir, and a busy waiter is skipped. The scenario did not happen, and
// the test is skipped rather than failed (TestHandoffToLongestWaitingLocalWaiter and its
// neighbours fail if hand-offs stop happening at all).
func (r heldRelay) handOffHeldBack(t *testing.T, ctx context.Context, marker string, all bool) <-chan error {
	t.Helper()
	r.p.arm(marker, all)
	unlocked := make(chan error, 1)
	go func() { unlocked <- r.l.Unlock(ctx) }()
	select {
	case err := <-r.hDone:
		must(t, err)
	case <-time.After(2 * time.Second):
		r.p.disarm()
		t.Skip("no hand-off: the heir was re-checking when the release looked for one (timing, not the scenario)")
	}
	return unlocked
}
