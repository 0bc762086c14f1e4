package sync

import (
	gosync "sync"

	"github.com/latchkey/latchkey/watchdog"
)

// holds are the holds a handle's acquisitions took, each through an owner of its own (T: an
// *owner, or a read-write lock's *rwPair), oldest first. Each release ends the oldest, as
// each Unlock of a sync.Mutex ends the Lock before it, whichever goroutine calls it:
// goroutines sharing a handle need not tell it who they are.
type holds[T comparable] struct {
	mu   gosync.Mutex
	list []T
	last *watchdog.Lease // the newest hold's lease, kept once it ends: what Lost reports on
}

// push records a hold taken as o, whose lease is lease.
func (h *holds[T]) push(o T, lease *watchdog.Lease) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.list = append(h.list, o)
	h.last = lease
}

// pop takes the oldest hold's owner out, or reports that there is none.
func (h *holds[T]) pop() (T, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var none T
	if len(h.list) == 0 {
		return none, false
	}
	o := h.list[0]
	h.list[0] = none
	h.list = h.list[1:]
	return o, true
}

// unpop puts back, as the oldest, a hold whose release Redis refused: it is still held.
func (h *holds[T]) unpop(o T) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.list = append([]T{o}, h.list...)
}

// newest returns the newest hold's owner, or reports that there is none.
func (h *holds[T]) newest() (T, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var none T
	if len(h.list) == 0 {
		return none, false
	}
	return h.list[len(h.list)-1], true
}

// lost is the newest hold's Lost channel: nil, which never closes, before the first.
func (h *holds[T]) lost() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last == nil {
		return nil
	}
	return h.last.Lost()
}
