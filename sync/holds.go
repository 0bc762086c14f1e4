package sync

import (
	gosync "sync"
	"time"

	"github.com/latchkey/latchkey/watchdog"
)

// holds are the holds a mutex handle's acquisitions took, each through an owner of its own,
// with its lease. Goroutines sharing a handle do not tell it who they are, so a release
// ends the hold that is next (next): for
// holds that exclude each other, the oldest, as each Unlock of a sync.Mutex ends the Lock
// before it; for read holds, one already lost, else the one whose lease ends first, so that
// the holds left cover at least as long as before.
//
// Exclusive holds overlap only when an earlier one's lease was lost (the lock went to the
// next): both are then marked, since the handle cannot tell which goroutine's was lost, and
// the release of either reports the loss.
type holds struct {
	mu        gosync.Mutex
	exclusive bool
	list      []hold
	last      *watchdog.Lease // the newest hold's lease, kept once it ends: what Lost reports on
}

// A hold is one acquisition's owner and lease.
type hold struct {
	o          *holder
	lease      *watchdog.Lease
	overlapped bool // another hold of the handle began while it was held: one of them was lost
}

// push records a hold taken as o, whose lease is lease.
func (h *holds) push(o *holder, lease *watchdog.Lease) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := hold{o: o, lease: lease}
	if h.exclusive && len(h.list) > 0 {
		n.overlapped = true
		for i := range h.list {
			h.list[i].overlapped = true
		}
	}
	h.list = append(h.list, n)
	h.last = lease
}

// next returns the index of the hold a release ends, or -1. Caller holds mu.
func (h *holds) next() int {
	if len(h.list) == 0 {
		return -1
	}
	if h.exclusive {
		return 0
	}
	best, end := 0, time.Time{}
	for i, x := range h.list {
		d, ok := x.lease.Deadline()
		if !ok {
			return i // lost, or ended
		}
		if x.lease.Kept() {
			d = d.Add(1000 * time.Hour) // renewed for as long as it is held: ends last
		}
		if i == 0 || d.Before(end) {
			best, end = i, d
		}
	}
	return best
}

// pop takes the next hold out (see next), or reports that there is none.
func (h *holds) pop() (hold, bool) { return h.take(true) }

// peek returns the hold a release would end, or reports that there is none.
func (h *holds) peek() (hold, bool) { return h.take(false) }

// take returns the next hold, taking it out if out is true.
func (h *holds) take(out bool) (hold, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := h.next()
	if i < 0 {
		return hold{}, false
	}
	x := h.list[i]
	if out {
		h.list = append(h.list[:i:i], h.list[i+1:]...)
	}
	return x, true
}

// unpop puts back, as the next, a hold whose release Redis refused: it is still held.
func (h *holds) unpop(x hold) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.list = append([]hold{x}, h.list...)
}

// valid reports whether the handle holds something and every hold of its is live.
func (h *holds) valid() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, x := range h.list {
		if !live(x.lease) {
			return false
		}
	}
	return len(h.list) > 0
}

// lost is the Lost channel of the hold a release would end, or of the newest hold once they
// all ended: nil, which never closes, before the first.
func (h *holds) lost() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i := h.next(); i >= 0 {
		return h.list[i].lease.Lost()
	}
	if h.last == nil {
		return nil
	}
	return h.last.Lost()
}
