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
// A Client that always handed its lock on would keep it from other Clients and from Java
// processes for as long as it had local waiters: their waiters are only woken by a release
// message. So a run of consecutive hand-offs is capped (WithLocalHandoff); the release that
// ends a run frees the lock and publishes, and every Client's waiters race for it as they
// would without hand-off.

// An heir is one waiting acquisition of a Lock that a releasing handle may hand the lock to.
// It is also the acquisition's attempt (see attempter), so that waiting costs one allocation.
type heir struct {
	l       *Lock
	lease   time.Duration // 0: kept by the watchdog
	leaseMs string

	// state is heirParked while the heir waits and nobody acts for it; the releaser moves it
	// to heirReserved, the heir itself to every other state.
	state atomic.Int32
	// handed carries the outcome of a reservation, exactly one per reservation: true when the
	// release script handed the lock over and the handle's state already says it holds it.
	handed chan bool
}

const (
	heirParked   int32 = iota // waiting: may be reserved
	heirBusy                  // making its own attempt: must not be reserved
	heirReserved              // a release that may hand it the lock is under way
	heirGone                  // done waiting
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
	h.handed = make(chan bool, 1)
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
// holds nothing and has no unlock of unknown outcome behind it, and reserves it: the heir makes no attempt of its own until the reservation
// ends, and its handle's op lock is held, so that the handle's idea of its holds changes in
// the order Redis applies them. The caller must end the reservation with handOver. Only
// TryLock is used on other handles' op locks, so a releaser (which holds its own) can never
// deadlock with another.
func (q *heirs) reserve(name string) *heir {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, h := range q.queue[name] {
		if h.state.Load() != heirParked || !h.l.op.TryLock() {
			continue
		}
		// A handle with a fence (requests of unknown outcome that could still reach Redis)
		// must take its next hold through its own acquire script, which raises the fence.
		if h.l.holds == 0 && len(h.l.fences) == 0 && h.state.CompareAndSwap(heirParked, heirReserved) {
			return h
		}
		h.l.op.Unlock()
	}
	return nil
}

// leave ends the heir's wait. If a reservation is under way it waits for its outcome (the
// release is bounded by the unlock's retry budget) and reports whether the lock was handed
// over, in which case the caller holds it.
func (h *heir) leave() bool {
	if h.state.CompareAndSwap(heirParked, heirGone) {
		return false
	}
	if h.state.Load() == heirReserved {
		handed := <-h.handed
		h.state.Store(heirGone)
		return handed
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
