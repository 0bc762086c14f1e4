package sync

import (
	"context"
	"time"
)

// A lock's local hand-off (lock cohorting).
//
// When a handle frees a lock that other handles of the same Client are waiting for, its
// release script can hand the lock straight to the longest-waiting of them: the script
// deletes the releaser's field and writes the heir's, with the heir's lease. The lock is
// never free in between, so nothing is published and Redisson's layout is all that Redis
// ever holds.
//
// The heir waits for the release's reply. The releaser holds the heir's op from reserving it
// to recording the outcome, so that nothing else the heir's owner does comes in between. If
// Redis recorded the hand-off, the releaser records the heir's hold, its lease timed from
// the release's send time. Otherwise — the lock was gone, Redis refused, or the outcome stays
// unknown — the heir makes its own attempt, which takes over whatever the release wrote (its
// count comes from the heir, and a field of its own is adopted). The release that ends a run
// of hand-offs (WithLocalHandoff) frees the lock and publishes, and every Client's waiters
// race for it.

// A lockHeir is a lock's waiting acquisition that a release may hand the lock to.
type lockHeir struct {
	heir
	o       *holder       // its owner
	lease   time.Duration // 0: kept by the watchdog
	leaseMs string
}

func (h *lockHeir) enqueue(c *Client) { c.lockHeirs.add(h) }
func (h *lockHeir) dequeue(c *Client) { c.lockHeirs.remove(h) }

// took ends the wait of an heir handed the lock. The hold's lease was checked when the
// releaser recorded it; it is checked again here, in the heir's goroutine, which may run
// much later (the process paused).
func (h *lockHeir) took(v verdict) (bool, error) {
	if v.err == nil && !h.o.valid() {
		_ = h.o.lock(context.Background())
		v.err = h.o.tookTooLate("the lease ran out before the hand-off was taken")
		h.o.unlock()
	}
	return h.end(v)
}

// lockHeirs queues each lock name's local waiters that may be handed the lock.
type lockHeirs struct{ heirQueue[*lockHeir] }

// reserve picks the longest-waiting parked heir of name whose owner is idle, holds nothing
// and has no request of unknown outcome, moves it to heirReserved and returns it with its
// owner's op held: the caller must hand it the lock and then call decide. Only tryLock is
// used on other owners' ops, so a releaser (which holds its own) never deadlocks.
func (q *lockHeirs) reserve(name string) *lockHeir {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, h := range q.queue[name] {
		if h.state.Load() != heirParked || !h.o.tryLock() {
			continue
		}
		if h.o.count == 0 && !h.o.doubtful() && h.state.CompareAndSwap(heirParked, heirReserved) {
			return h
		}
		h.o.unlock()
	}
	return nil
}

// decide records what the release that reserved h did — handed, sent at sent as the run-th
// hand-off in a row; or, with its outcome unknown, maybe — gives h's owner back its op and
// tells h.
func (h *lockHeir) decide(handed, unknown bool, sent time.Time, run int) {
	v := verdict{handed: handed, unknown: unknown}
	if handed {
		v.err = h.o.took(sent, h.lease, run)
	} else if unknown {
		h.o.unsure = true // the hand-off may have happened: the heir's next attempt adopts it
	}
	h.o.unlock()
	h.verdict <- v
}
