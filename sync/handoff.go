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
// The heir waits for the release's reply. The releaser holds the heir's op from reserving it
// to recording the outcome, so that nothing else the heir's owner does comes in between. If
// Redis recorded the hand-off, the releaser records the heir's hold, its lease timed from
// the release's send time. Otherwise — the lock was gone, Redis refused, or the outcome stays
// unknown — the heir makes its own attempt, which takes over whatever the release wrote (its
// count comes from the heir, and a field of its own is adopted).
//
// A Client that always handed its lock on would keep it from other Clients and from Java
// processes for as long as it had local waiters: their waiters are only woken by a release
// message. So a run of consecutive hand-offs is capped (WithLocalHandoff); the release that
// ends a run frees the lock and publishes, and every Client's waiters race for it.

// An heir is one waiting acquisition that a releasing owner of the same Client may hand the
// lock to — or a semaphore's permits (o nil).
type heir struct {
	key     string         // what it waits for: a lock's name, a semaphore's channel
	permits int            // a semaphore's: how many it waits for
	sub     *pubsub.Waiter // its registration on the channel, whose order a semaphore's hand-off follows
	// more, a semaphore's: its latest attempt found permits (or may have), too few for it
	// (see acquirePermits).
	more    atomic.Bool
	o       *holder       // a lock's: its owner
	lease   time.Duration // 0: kept by the watchdog
	leaseMs string
	attempt attempter // the wait's own attempt
	// state is heirParked while the heir waits and nobody acts for it; a releaser moves it
	// to heirReserved, the heir itself to every other state.
	state   atomic.Int32
	verdict chan verdict // a reserving releaser's outcome, one per reservation
}

// A verdict is what a release that reserved the heir did: handed it the lock (recorded as the
// heir's hold, or lost already: err), or not — or maybe (unknown) — and the heir must attempt
// itself.
type verdict struct {
	handed, unknown bool
	err             error
}

const (
	heirParked   int32 = iota // waiting: may be handed the lock
	heirBusy                  // making its own attempt: must not be handed the lock
	heirReserved              // a releaser is handing it the lock; its verdict decides
	heirGone                  // done waiting
)

// heirs queues each name's local waiters that may be handed the lock, in arrival order.
type heirs struct {
	mu    gosync.Mutex
	queue map[string][]*heir
	runs  map[string]int // a semaphore's local hand-offs in a row
}

func (q *heirs) add(h *heir) {
	h.verdict = make(chan verdict, 1)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.queue == nil {
		q.queue = make(map[string][]*heir)
	}
	q.queue[h.key] = append(q.queue[h.key], h)
}

func (q *heirs) remove(h *heir) {
	q.mu.Lock()
	defer q.mu.Unlock()
	hs := q.queue[h.key]
	for i, x := range hs {
		if x == h {
			hs = append(hs[:i], hs[i+1:]...)
			break
		}
	}
	if len(hs) == 0 {
		delete(q.queue, h.key)
		delete(q.runs, h.key)
	} else {
		q.queue[h.key] = hs
	}
}

// reserve picks the longest-waiting parked heir of name whose owner is idle, holds nothing
// and has no request of unknown outcome, moves it to heirReserved and returns it with its
// owner's op held: the caller must hand it the lock and then call decide. Only tryLock is
// used on other owners' ops, so a releaser (which holds its own) never deadlocks.
func (q *heirs) reserve(name string) *heir {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, h := range q.queue[name] {
		if h.o == nil || h.state.Load() != heirParked || !h.o.tryLock() { // h.o nil: a semaphore's, keyed by a channel
			continue
		}
		if h.o.count == 0 && !h.o.doubtful() && h.state.CompareAndSwap(heirParked, heirReserved) {
			return h
		}
		h.o.unlock()
	}
	return nil
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
func (q *heirs) give(key string, n, max int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	hs := q.queue[key]
	if q.runs[key] < max {
	next:
		for i, h := range hs {
			place, woken := h.sub.Place()
			if h.o != nil || place != i {
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

// park returns the heir, busy, to waiting, and reports whether it did: false when a release
// handed it permits meanwhile (see give), whose verdict it must take.
func (h *heir) park() bool { return h.state.CompareAndSwap(heirBusy, heirParked) }

// decide records what the release that reserved h did — handed, sent at sent as the run-th
// hand-off in a row; or, with its outcome unknown, maybe — gives h's owner back its op and
// tells h.
func (h *heir) decide(handed, unknown bool, sent time.Time, run int) {
	v := verdict{handed: handed, unknown: unknown}
	if handed {
		v.err = h.o.took(sent, h.lease, run)
	} else if unknown {
		h.o.unsure = true // the hand-off may have happened: the heir's next attempt adopts it
	}
	h.o.unlock()
	h.verdict <- v
}

// took ends the wait of an heir handed the lock. The hold's lease was checked when the
// releaser recorded it; it is checked again here, in the heir's goroutine, which may run
// much later (the process paused).
func (h *heir) took(v verdict) (bool, error) {
	h.state.Store(heirGone)
	if v.err == nil && h.o != nil && !h.o.valid() {
		_ = h.o.lock(context.Background())
		v.err = h.o.tookTooLate("the lease ran out before the hand-off was taken")
		h.o.unlock()
	}
	return v.err == nil, v.err
}

// leave ends the wait with err — unless a release is handing the lock over meanwhile: then
// its verdict decides, and when its outcome is unknown, one last attempt (whatever ctx says,
// within the retry budget) takes over whatever the release wrote, so that the heir never
// leaves holding the lock without knowing. h may be nil.
func (h *heir) leave(ctx context.Context, err error) (bool, error) {
	if h == nil || h.state.CompareAndSwap(heirParked, heirGone) {
		return false, err
	}
	v := <-h.verdict
	if v.handed {
		return h.took(v)
	}
	h.state.Store(heirGone)
	if v.unknown {
		if _, ok, aerr := h.attempt.attempt(context.WithoutCancel(ctx)); ok || aerr != nil {
			return ok, aerr
		}
	}
	return false, err
}
