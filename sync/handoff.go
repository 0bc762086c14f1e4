package sync

import (
	"context"
	gosync "sync"
	"sync/atomic"
	"time"

	"github.com/latchkey/latchkey/pubsub"
)

// Local hand-off (lock cohorting).
//
// When a handle frees a lock that other handles of the same Client are waiting for, its
// release script can hand the lock straight to the longest-waiting of them: the script
// deletes the releaser's field and writes the heir's, with the heir's lease, in the one
// round trip the release costs anyway. Without it, a hand-off is the release, the message,
// the woken waiter's attempt: three scripts and two round trips. The lock is never free in
// between, so nothing is published and Redisson's layout is all that Redis ever holds.
//
// The heir does not wait for that round trip: it is told it holds the lock when the release
// is sent, as a cohort lock passes its global lock between the threads of one node. Until
// Redis has recorded the hand-off, the lock is held for this Client under the releaser's
// field, so the heir's hold rests on the releaser's lease, which the releaser knows to run
// for a while yet (handoffMinLeft): nobody else can take the lock in between, and the
// releaser is done with it. Until the reply confirms the hand-off, the heir's lease is timed
// to end with the releaser's, or with the TTL the script gives the heir if that is sooner;
// the heir's handle stays busy (its op lock held by the releaser), and its next Unlock,
// re-entry or read of Redis waits (see awaitHandoff), so that each comes after the hand-off
// in Redis. If Redis does not record the hand-off — the lock was gone before the release,
// Redis refused the script, or the outcome stays unknown and cannot be settled — the heir's
// lease is reported lost at once, as any lease found lost.
//
// A Client that always handed its lock on would keep it from other Clients and from Java
// processes for as long as it had local waiters: their waiters are only woken by a release
// message. So a run of consecutive hand-offs is capped (WithLocalHandoff); the release that
// ends a run frees the lock and publishes, and every Client's waiters race for it as they
// would without hand-off.

// handoffMinLeft is how much of its lease a releaser must have left to hand the lock on: the
// heir's hold rests on that lease until Redis has recorded the hand-off, one round trip
// later. A lease closer to its end is released and published instead.
const handoffMinLeft = 50 * time.Millisecond

// An heir is one waiting acquisition of a Lock that a releasing handle may hand the lock to.
// It is also the acquisition's attempt (see attempter), so that waiting costs one allocation.
type heir struct {
	l       *Lock
	lease   time.Duration // 0: kept by the watchdog
	leaseMs string

	// state is heirParked while the heir waits and nobody acts for it; a releaser moves it
	// to heirHanded, the heir itself to every other state.
	state atomic.Int32
	// handed is signalled once a releaser that moved the heir to heirHanded has recorded the
	// hold in the heir's handle: the acquisition has succeeded.
	handed chan struct{}
}

const (
	heirParked int32 = iota // waiting: may be handed the lock
	heirBusy                // making its own attempt: must not be handed the lock
	heirHanded              // a releaser is handing it the lock
	heirGone                // done waiting
)

// attempt makes one acquire attempt for the heir's handle.
func (h *heir) attempt(ctx context.Context) (int64, bool, error) {
	return h.l.attempt(ctx, h.lease, h.leaseMs)
}

// heirs queues each lock's local waiters that may be handed the lock, in arrival order.
type heirs struct {
	mu    gosync.Mutex
	queue map[string][]*heir
}

func (q *heirs) add(name string, h *heir) {
	h.handed = make(chan struct{}, 1)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.queue == nil {
		q.queue = make(map[string][]*heir)
	}
	q.queue[name] = append(q.queue[name], h)
}

func (q *heirs) remove(name string, h *heir) {
	q.mu.Lock()
	defer q.mu.Unlock()
	hs := q.queue[name]
	for i, x := range hs {
		if x == h {
			hs = append(hs[:i], hs[i+1:]...)
			break
		}
	}
	if len(hs) == 0 {
		delete(q.queue, name)
	} else {
		q.queue[name] = hs
	}
}

// reserve picks the longest-waiting heir of name that is parked and whose handle is idle,
// holds nothing and has no request of unknown outcome behind it, and moves it to
// heirHanded: the heir makes no attempt of its own from then on, and its handle's op lock is
// held, so that the handle's idea of its holds changes in the order Redis applies them. The
// caller must go on with handTo. Only TryLock is used on other handles' op locks, so a
// releaser (which holds its own) can never deadlock with another.
func (q *heirs) reserve(name string) *heir {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, h := range q.queue[name] {
		if h.state.Load() != heirParked || !h.l.op.TryLock() {
			continue
		}
		// A handle with a fence (requests of unknown outcome that could still reach Redis)
		// must take its next hold through its own acquire script, which raises the fence.
		if h.l.holds == 0 && len(h.l.fences) == 0 && h.state.CompareAndSwap(heirParked, heirHanded) {
			return h
		}
		h.l.op.Unlock()
	}
	return nil
}

// leave ends the heir's wait and reports whether a releaser handed it the lock meanwhile, in
// which case the caller holds it.
func (h *heir) leave() bool {
	if h.state.CompareAndSwap(heirParked, heirGone) {
		return false
	}
	if h.state.Load() == heirHanded {
		<-h.handed
		h.state.Store(heirGone)
		return true
	}
	h.state.Store(heirGone)
	return false
}

// took ends the wait of an heir that a release handed the lock to: acquire succeeds, and the
// heir's lease is the hint for waiters that join later.
func (h *heir) took(w *pubsub.Waiter) (bool, error) {
	h.state.Store(heirGone)
	ttl := h.lease
	if ttl == 0 {
		ttl = h.l.c.wdTimeout
	}
	hint(w, ttl.Milliseconds())
	return true, nil
}
