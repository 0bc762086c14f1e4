package sync

import (
	"context"
	gosync "sync"
	"sync/atomic"

	"github.com/latchkey/latchkey/pubsub"
)

// Local hand-off: a waiter served by a release of its own Client, in the round trip the
// release costs anyway, where otherwise the release would wake the waiter to make its own
// attempt — three scripts and two round trips. A lock's release script hands the lock
// straight to the heir (handoff_lock.go); a semaphore's permits released locally never go to
// Redis (handoff_semaphore.go).
//
// What both share is here. A wait that may be served so queues an heir while it waits (see
// Client.await). The heir's state says whether a release may serve it: only a parked one
// (or, for permits, a busy one), which the release moves to heirReserved. The release then
// sends its verdict, and the heir's wait takes it — also when the wait is ending meanwhile
// (leave): what a release hands over is never left with nobody knowing.
//
// A Client that always served its own waiters would keep what they wait for from other
// Clients, and from Java processes, whose waiters only a release to Redis wakes. So a run
// of consecutive hand-offs is capped (WithLocalHandoff).

// An heir is the part of a waiting acquisition a local release may serve, whatever it waits
// for.
type heir struct {
	key     string         // what it waits for: a lock's name, a semaphore's channel
	sub     *pubsub.Waiter // its registration on the channel
	attempt attempter      // the wait's own attempt
	// state is heirParked while the heir waits and nobody acts for it; a releaser moves it
	// to heirReserved, the heir itself to every other state.
	state   atomic.Int32
	verdict chan verdict // a reserving releaser's outcome, one per reservation
}

// A verdict is what a release that reserved the heir did: handed it what it waits for (and
// for a lock, recorded the heir's hold, or found it lost already: err), or not — or maybe
// (unknown) — and the heir must attempt itself.
type verdict struct {
	handed, unknown bool
	err             error
}

const (
	heirParked   int32 = iota // waiting: may be served
	heirBusy                  // making its own attempt
	heirReserved              // a releaser is serving it; its verdict decides
	heirGone                  // done waiting
)

// An heirKind is an heir of one kind, as a wait sees it: queued while it waits, and ended
// by a verdict that handed it what it waits for.
type heirKind interface {
	base() *heir
	enqueue(c *Client)
	dequeue(c *Client)
	took(v verdict) (bool, error) // ends the wait of an heir handed what it waits for
}

func (h *heir) base() *heir { return h }

// end is what took comes to for every kind.
func (h *heir) end(v verdict) (bool, error) {
	h.state.Store(heirGone)
	return v.err == nil, v.err
}

// park returns the heir, busy, to waiting, and reports whether it did: false when a release
// served it meanwhile, whose verdict it must take.
func (h *heir) park() bool { return h.state.CompareAndSwap(heirBusy, heirParked) }

// leave ends the wait of h (nil: none) with err — unless a release is serving it meanwhile:
// then its verdict decides, and when its outcome is unknown, one last attempt (whatever ctx
// says, within the retry budget) takes over whatever the release wrote, so that the heir
// never leaves holding something without knowing.
func leave(ctx context.Context, h heirKind, err error) (bool, error) {
	if h == nil || h.base().state.CompareAndSwap(heirParked, heirGone) {
		return false, err
	}
	b := h.base()
	v := <-b.verdict
	if v.handed {
		return h.took(v)
	}
	b.state.Store(heirGone)
	if v.unknown {
		if _, ok, aerr := b.attempt.attempt(context.WithoutCancel(ctx)); ok || aerr != nil {
			return ok, aerr
		}
	}
	return false, err
}

// heirQueue queues each key's heirs of one kind, in arrival order.
type heirQueue[H heirKind] struct {
	mu    gosync.Mutex
	queue map[string][]H
}

func (q *heirQueue[H]) add(h H) {
	h.base().verdict = make(chan verdict, 1)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.queue == nil {
		q.queue = make(map[string][]H)
	}
	q.queue[h.base().key] = append(q.queue[h.base().key], h)
}

func (q *heirQueue[H]) remove(h H) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.drop(h)
}

// drop removes h, with q.mu held, and reports whether its key has no heir left.
func (q *heirQueue[H]) drop(h H) bool {
	key := h.base().key
	hs := q.queue[key]
	for i, x := range hs {
		if x.base() == h.base() {
			hs = append(hs[:i], hs[i+1:]...)
			break
		}
	}
	if len(hs) == 0 {
		delete(q.queue, key)
		return true
	}
	q.queue[key] = hs
	return false
}
