package sync

import (
	"context"
	"fmt"
	gosync "sync"
	"sync/atomic"
	"time"

	"github.com/latchkey/latchkey/pubsub"
)

// A wait describes one blocking acquisition: what to attempt, which channel's messages mean
// it may now succeed, and how long to wait.
type wait struct {
	channel string
	policy  pubsub.Policy
	limit   time.Duration // > 0: that long; < 0: no limit (a single attempt, 0, is the caller's)
	// join lets the waiter queue behind the channel's other local waiters without attempting
	// first: only for waiters that all want the same thing, and only when the caller holds
	// nothing a waiter ahead could need.
	join    bool
	attempt attempter
	// heir, if not nil, is queued while waiting for a local release to hand the lock to.
	heir *heir
	// ordered serves the channel's local waiters in arrival order: only the first attempts,
	// and a wake-up that reaches another is left to it (a semaphore's waiters, where a later,
	// smaller request could succeed where the first cannot). Every ordered waiter joins.
	ordered bool
	// granted, if not nil, is given each message of the channel, and takes what a release
	// gave the waiter if the message says it granted it something (see FairLock).
	granted func(msg string) (ok bool, err error, taken bool)
}

// An attempter makes one attempt. ttl is in ms, negative when unknown: on failure, when the
// state may next change with no message (the holder's lease); on success, the lease just
// taken, which tells waiters that join later when to re-check.
type attempter interface {
	attempt(ctx context.Context) (ttl int64, ok bool, err error)
}

// acquire is how every blocking primitive takes what it waits for (docs/redisson-interop.md):
// attempt; on failure register on the channel (before the attempt, if it is subscribed
// already) and alternate waiting and attempting.
//
// A waiter that may join and finds other local waiters already on the channel queues behind
// them without attempting: a release wakes the longest-waiting one, so an attempt of its own
// could only fail — or barge ahead of waiters that came first. Within a Client, waiters are
// served in arrival order, and a contended acquisition costs one script, not three. A joined
// waiter still re-checks by the channel's hint (when the holder's lease runs out, which no
// message announces) and makes at least one attempt before a deadline ends its wait.
func (c *Client) acquire(ctx context.Context, w wait) (bool, error) {
	start := time.Now()
	var deadline time.Time
	if w.limit > 0 {
		deadline = start.Add(w.limit)
	}
	if w.join {
		if sub, hint := c.mux.Join(w.channel); sub != nil {
			ttl := int64(-1)
			if !hint.IsZero() {
				ttl = max(time.Until(hint).Milliseconds(), 0)
			}
			return c.await(ctx, w, sub, deadline, ttl, false)
		}
	}
	var sub *pubsub.Waiter
	if c.mux.Subscribed(w.channel) {
		// Subscribed already (channels linger subscribed between waits), the waiter
		// registers before it attempts and misses nothing from here on, so a waiter coming
		// back needs no second attempt for a message it might have missed while subscribing
		// (should the channel be left meanwhile, it is signalled when it is subscribed
		// again, and attempts again).
		var err error
		if sub, _, err = c.mux.Listen(w.channel, w.policy); err != nil {
			return false, c.waitEnded(err)
		}
		if w.ordered && !sub.First() {
			return c.await(ctx, w, sub, deadline, -1, false) // others came meanwhile
		}
	}
	ttl, ok, err := w.attempt.attempt(ctx)
	if ok || err != nil {
		if sub != nil {
			sub.Close()
		}
		return ok, err
	}
	if sub == nil {
		return c.waitAfter(ctx, w, start, ttl)
	}
	hint(sub, ttl)
	return c.await(ctx, w, sub, deadline, ttl, true)
}

// waitAfter is acquire for a wait whose first attempt, made at start on a channel not yet
// subscribed, failed with ttl: it subscribes and waits.
func (c *Client) waitAfter(ctx context.Context, w wait, start time.Time, ttl int64) (bool, error) {
	sub, err := c.mux.Subscribe(w.channel, w.policy)
	if err != nil {
		return false, c.waitEnded(err)
	}
	hint(sub, ttl)
	var deadline time.Time
	if w.limit > 0 {
		deadline = start.Add(w.limit)
	}
	return c.await(ctx, w, sub, deadline, ttl, true)
}

// hint passes an attempt's ttl on to the waiters that join after it.
func hint(sub *pubsub.Waiter, ttlMs int64) {
	if ttlMs >= 0 {
		sub.Hint(time.Now().Add(time.Duration(ttlMs) * time.Millisecond))
	}
}

// waitEnded is the error of a wait the Client's shutdown, or its rueidis client's, ended.
func (c *Client) waitEnded(err error) error {
	if c.closing() {
		return ErrClosed
	}
	return fmt.Errorf("dsync: waiting stopped: %w", err)
}

// await alternates waiting on sub and attempting. A wait
// ends at the first of: a wake-up from a channel (a release message, or the subscription
// being confirmed, so nothing published before the subscription is missed), the holder's
// TTL (a lost message costs latency, never liveness), the deadline, ctx, Close or the
// rueidis client closing — or, for an heir, a release handing it the lock. ttl is the last attempt's reply (negative:
// unknown); attempted says whether there was one, since a wait that reaches its deadline
// makes one attempt if it had none.
func (c *Client) await(ctx context.Context, w wait, sub *pubsub.Waiter, deadline time.Time, ttl int64, attempted bool) (bool, error) {
	defer sub.Close()
	h := w.heir
	var verdicts <-chan verdict
	if h != nil {
		h.sub, h.attempt = sub, w.attempt
		c.heirs.add(h)
		defer c.heirs.remove(h)
		verdicts = h.verdict
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d := c.recheckAfter(ttl)
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 && attempted {
				return h.leave(ctx, nil)
			}
			d = max(min(d, left), 0)
		}
		timer.Reset(d)
		var woken *pubsub.Waiter // the registration whose signal woke the waiter
		var v *verdict           // what a release that reserved the heir did
		select {
		case <-sub.C():
			woken = sub
			if w.granted != nil {
				if ok, err, taken := w.granted(sub.Last()); taken {
					return ok, err
				}
			}
		case <-timer.C:
		case got := <-verdicts:
			v = &got
		case <-ctx.Done():
			return h.leave(ctx, ctx.Err())
		case <-c.shut:
			return h.leave(ctx, ErrClosed)
		case <-c.mux.Done():
			return h.leave(ctx, c.waitEnded(c.mux.Err()))
		}
		if h != nil && v == nil && !h.state.CompareAndSwap(heirParked, heirBusy) {
			got := <-h.verdict // a release is handing the lock over: its reply decides
			v = &got
		}
		if v != nil && v.handed {
			if woken != nil {
				woken.Requeue() // the wake-up was for someone else
			}
			return h.took(*v)
		}
		if w.ordered && !sub.First() {
			// Not its turn: the waiter ahead attempts, and wakes the next when it leaves (see
			// the semaphores). Nor does it time re-checks by a hint, which only the first
			// keeps fresh.
			if h != nil {
				h.state.Store(heirParked)
			}
			if !deadline.IsZero() && time.Until(deadline) <= 0 {
				return h.leave(ctx, nil)
			}
			ttl = -1
			continue
		}
		actx := ctx
		if v != nil {
			// Not handed over: the heir attempts itself. If the release may have handed the
			// lock over, this attempt must run whatever ctx says, and take over what it wrote.
			h.state.Store(heirBusy)
			if v.unknown {
				actx = context.WithoutCancel(ctx)
			}
		}
		var ok bool
		var err error
		ttl, ok, err = w.attempt.attempt(actx)
		attempted = true
		if err != nil && woken != nil {
			// The wake-up may have been the only one a release sent this Client: it goes to
			// another waiter rather than dying with this one.
			woken.Requeue()
		}
		if err == nil {
			hint(sub, ttl)
		}
		if ok || err != nil {
			return ok, err
		}
		if h != nil {
			h.state.Store(heirParked)
		}
	}
}

// recheckAfter is how long a waiter may go without a message before it checks again: the
// holder's TTL, capped by the watchdog timeout so that a lock with a long lease, or no
// expiry at all, still gets re-checked now and then should a release message be lost.
func (c *Client) recheckAfter(ttlMs int64) time.Duration {
	if ttlMs < 0 {
		return c.wdTimeout
	}
	return min(time.Duration(ttlMs)*time.Millisecond+time.Millisecond, c.wdTimeout)
}

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
	sub     *pubsub.Waiter // its registration on the channel: a semaphore's is handed permits only while first
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
// is parked (not in an attempt of its own) and waits for exactly n, and reports whether it
// did. The first only — by the channel's order, which the heirs' may not yet match: another
// would overtake it. All n or none, so that a release is either done here or entirely
// Redis's. And at most max in a row (see WithLocalHandoff): then the permits go back to
// Redis, for every Client's waiters.
func (q *heirs) give(key string, n, max int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	hs := q.queue[key]
	if len(hs) == 0 || hs[0].o != nil || q.runs[key] >= max || hs[0].permits != n || !hs[0].sub.First() ||
		!hs[0].state.CompareAndSwap(heirParked, heirReserved) {
		delete(q.runs, key)
		return false
	}
	if q.runs == nil {
		q.runs = make(map[string]int)
	}
	q.runs[key]++
	hs[0].verdict <- verdict{handed: true}
	return true
}

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

// attemptFunc adapts a function to attempter.
type attemptFunc func(ctx context.Context) (int64, bool, error)

func (f attemptFunc) attempt(ctx context.Context) (int64, bool, error) { return f(ctx) }

// keepAlive shortens a waiter's wait hint (ms, negative: unknown) so that it attempts
// again within a third of the fair wait time: a place in a fair lock's queue, or a waiting
// writer's claim, lapses a wait time after its last attempt.
func (c *Client) keepAlive(ttl int64) int64 {
	if every := c.fairWait.Milliseconds() / 3; ttl < 0 || ttl > every {
		return every
	}
	return ttl
}
