package sync

import "sync/atomic"

// A permitsHeir is a Semaphore's waiting acquisition that a local Release may hand its
// permits to.
type permitsHeir struct {
	heir
	permits int // how many it waits for
	// more: its latest attempt found permits (or may have), too few for it (see
	// acquirePermits).
	more atomic.Bool
}

func (h *permitsHeir) enqueue(c *Client)            { c.permitHeirs.add(h) }
func (h *permitsHeir) dequeue(c *Client)            { c.permitHeirs.remove(h) }
func (h *permitsHeir) took(v verdict) (bool, error) { return h.end(v) }

// permitHeirs queues each semaphore's local waiters, by its channel, and counts its local
// hand-offs in a row.
type permitHeirs struct {
	heirQueue[*permitsHeir]
	runs map[string]int
}

func (q *permitHeirs) remove(h *permitsHeir) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.drop(h) {
		delete(q.runs, h.key)
	}
}

// give hands n permits of the semaphore key to the Client's first waiter for them, if it
// waits for exactly n, and reports whether it did. The first by the channel's order, which
// the heirs' may not yet match: another would overtake it. All n or none, so that a release
// is either done here or entirely Redis's. And at most max in a row (see WithLocalHandoff):
// then the permits go back to Redis, for every Client's waiters.
//
// Waiters served already, or leaving, are passed over. So is one parked with a wake it has
// not acted on yet (mostly: Redis has permits for it), for the next, if that one waits for n
// too: handed these, it would pass its wake to the next, whom the next release serves before
// it runs in turn, and the permits in Redis would wait for a release to Redis. A parked waiter
// handed permits leaves the channel at once, so that wakes go to waiters still waiting. A
// waiter busy with an attempt of its own is handed them too, and stays on the channel until
// the attempt ends, as it may act on a wake: it takes them if the attempt fails, and passes
// them on if it succeeds (see Semaphore.acquire) — so that a release that comes during an
// attempt does not go to Redis, and wake the waiter to attempt again.
func (q *permitHeirs) give(key string, n, max int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	hs := q.queue[key]
	if q.runs[key] < max {
	next:
		for i, h := range hs {
			place, woken := h.sub.Place()
			if place != i {
				break
			}
			switch st := h.state.Load(); {
			case st == heirReserved || st == heirGone:
				continue
			case h.permits != n:
				break next
			case st == heirParked && woken && i+1 < len(hs):
				continue
			}
			parked := h.state.CompareAndSwap(heirParked, heirReserved)
			if !parked && !h.state.CompareAndSwap(heirBusy, heirReserved) {
				break
			}
			if q.runs == nil {
				q.runs = make(map[string]int)
			}
			q.runs[key]++
			if parked {
				q.queue[key] = append(hs[:i:i], hs[i+1:]...)
				h.sub.Close()
			}
			h.verdict <- verdict{handed: true}
			return true
		}
	}
	delete(q.runs, key)
	return false
}
