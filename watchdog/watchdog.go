// Package watchdog keeps the leases of held locks alive and says at once when one is lost.
//
// One Watchdog runs one goroutine for any number of leases. A kept lease is renewed every
// Timeout/3 by batched scripts (at most BatchSize locks each, never mixing hash slots, all
// batches of a round pipelined); a renewal that finds the lock gone closes the lease's Lost
// channel at once, and a renewal that fails is retried until the lease's deadline, when the
// lease is reported lost. A watched lease (a lock taken with an explicit lease) is never
// renewed; it is reported lost when that lease runs out while still held.
package watchdog

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/latchkey/latchkey/internal/keyslot"
	"go.uber.org/zap"
)

// Batch is the locks one renewal script call renews, all in one hash slot: Owners[i] must
// still hold Keys[i].
type Batch struct {
	Keys   []string
	Owners []string
}

// Result is the outcome of one Batch: Held[i] reports whether Owners[i] still held Keys[i]
// (and so had its lease reset), or Err says the call failed and nothing is known.
type Result struct {
	Held []bool
	Err  error
}

// RenewFunc renews batches in one round trip, resetting each held lock's TTL to lease. It
// returns one Result per Batch, in order.
type RenewFunc func(ctx context.Context, lease time.Duration, batches []Batch) []Result

// Options configure a Watchdog.
type Options struct {
	// Timeout is the lease a renewal sets; renewals run every Timeout/3. Required.
	Timeout time.Duration
	// BatchSize caps the locks per renewal script; 0 means 100.
	BatchSize int
	// Renew runs the renewal scripts. Required.
	Renew RenewFunc
	// Logger receives lost leases and failed renewals; nil means no logging.
	Logger *zap.Logger
}

// Watchdog renews kept leases and times watched ones. It is safe for concurrent use.
type Watchdog struct {
	timeout  time.Duration
	interval time.Duration
	retry    time.Duration
	batch    int
	renew    RenewFunc
	log      *zap.Logger

	mu       sync.Mutex
	leases   map[*Lease]struct{}
	inflight bool
	closed   bool
	wakeAt   time.Time // when the loop's timer fires; zero when it is not set
	busy     bool      // a lease was added since the loop last found none

	kick    chan struct{}
	results chan roundResult
	stop    chan struct{}
	done    chan struct{}
	rounds  sync.WaitGroup
	// ctx is the parent of every round's context; Close cancels it, so that Close does not
	// wait up to an interval for a round stuck on an unresponsive server.
	ctx    context.Context
	cancel context.CancelFunc
}

// Lease is one held lock's lease, from acquisition to release or loss.
type Lease struct {
	w     *Watchdog
	key   string
	owner string
	slot  uint16
	lost  chan struct{}

	// Guarded by w.mu.
	keep     bool      // renewed by the watchdog
	deadline time.Time // when the lock expires unless renewed
	next     time.Time // when to renew (kept leases)
	gen      uint64    // bumped by Reset and Stop, so a late renewal result is not applied
	active   bool
	isLost   bool
	round    chan struct{} // closed when the renewal round carrying this lease returns; nil if none
}

type roundResult struct {
	done   chan struct{}
	leases []*Lease
	gens   []uint64
	sent   time.Time
	res    []Result
	sizes  []int
}

// New starts a Watchdog. Close stops it.
func New(opts Options) (*Watchdog, error) {
	if opts.Timeout <= 0 {
		return nil, errors.New("watchdog: Timeout must be > 0")
	}
	if opts.Renew == nil {
		return nil, errors.New("watchdog: Renew is required")
	}
	batch := opts.BatchSize
	if batch <= 0 {
		batch = 100
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	interval := max(opts.Timeout/3, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	w := &Watchdog{
		ctx:      ctx,
		cancel:   cancel,
		timeout:  opts.Timeout,
		interval: interval,
		// A failed renewal is retried well inside the lease, so a short outage costs nothing.
		retry:   min(interval, max(opts.Timeout/30, 5*time.Millisecond)),
		batch:   batch,
		renew:   opts.Renew,
		log:     log,
		leases:  make(map[*Lease]struct{}),
		kick:    make(chan struct{}, 1),
		results: make(chan roundResult, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go w.run()
	return w, nil
}

// Timeout returns the lease that renewals set.
func (w *Watchdog) Timeout() time.Duration { return w.timeout }

// Keep starts renewing key's lease for owner. sent is when the acquiring command was sent:
// the lock is known to live until sent + Timeout. Call it before the acquisition is reported
// to the caller, so that no window exists in which the lock is held but not kept.
func (w *Watchdog) Keep(key, owner string, sent time.Time) *Lease {
	return w.add(key, owner, sent, w.timeout, true)
}

// Watch reports key's lease lost when it runs out at sent + lease while still held.
func (w *Watchdog) Watch(key, owner string, sent time.Time, lease time.Duration) *Lease {
	return w.add(key, owner, sent, lease, false)
}

func (w *Watchdog) add(key, owner string, sent time.Time, lease time.Duration, keep bool) *Lease {
	l := &Lease{w: w, key: key, owner: owner, slot: keyslot.Of(key), lost: make(chan struct{})}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		l.isLost = true
		close(l.lost)
		return l
	}
	l.resetLocked(sent, lease, keep)
	return l
}

// Lost is closed when the lease is lost while held: the lock was found gone at renewal, no
// renewal succeeded before the deadline, the watched lease ran out, or the watchdog closed.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Reset records that the lock's TTL was set again by a command sent at sent (a re-entry or a
// partial release): to the watchdog timeout if keep, else to lease. A kept lease stays kept
// — as with Redisson, a re-entry with an explicit lease does not end the renewals — but its
// deadline is the TTL Redis now has, and it is renewed within a third of it. Reset also
// resumes a stopped lease. It reports false if the lease is already lost.
func (l *Lease) Reset(sent time.Time, lease time.Duration, keep bool) bool {
	if keep {
		lease = l.w.timeout
	}
	return l.reset(sent, lease, keep, true)
}

// ResetKept is Reset for a lock the watchdog keeps whose TTL a command sent at sent set to
// ttl (a re-entry with an explicit lease of a lock held under the watchdog): the deadline is
// sent+ttl and renewals resume within a third of it, even after Distrust ended them. It
// reports false if the lease is already lost.
func (l *Lease) ResetKept(sent time.Time, ttl time.Duration) bool {
	return l.reset(sent, ttl, true, false)
}

// reset is Reset and ResetKept: the lease is kept if keep, or if stayKept and it is kept now.
func (l *Lease) reset(sent time.Time, ttl time.Duration, keep, stayKept bool) bool {
	w := l.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if l.isLost {
		return false
	}
	if w.closed {
		w.loseLocked(l, "watchdog closed")
		return false
	}
	l.resetLocked(sent, ttl, keep || (stayKept && l.keep && l.active))
	return true
}

// Distrust records that a command sent at sent whose outcome is unknown may set the lock's
// TTL to ttl whenever it runs — reaching Redis late, that may be after any renewal. The
// deadline becomes no later than sent+ttl; and when ttl is shorter than the timeout the lease
// is no longer renewed (a renewal would not outlast such a late run) but timed, until
// ResetKept or Reset keeps it again. A renewal in flight no longer counts. It returns the
// lease's state before, for Restore when the command turns out not to have run.
func (l *Lease) Distrust(sent time.Time, ttl time.Duration) Trust {
	w := l.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if l.isLost {
		return Trust{}
	}
	t := Trust{deadline: l.deadline, keep: l.keep, gen: l.gen, ok: true}
	l.gen++
	if end := sent.Add(ttl); end.Before(l.deadline) {
		l.deadline = end
	}
	if ttl < w.timeout {
		l.keep = false
	}
	if l.active && (w.wakeAt.IsZero() || l.deadline.Before(w.wakeAt)) {
		w.wakeAt = l.deadline
		w.poke()
	}
	return t
}

// Trust is a lease's state before Distrust.
type Trust struct {
	deadline time.Time
	keep     bool
	gen      uint64
	ok       bool
}

// LeaseLost reports whether the lease was already lost when Distrust returned t.
func (t Trust) LeaseLost() bool { return !t.ok }

// Restore undoes the Distrust that returned t — for a command Redis refused, which changed
// nothing — unless the lease has changed since (been reset, stopped or lost).
func (l *Lease) Restore(t Trust) {
	w := l.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if !t.ok || l.isLost || !l.active || l.gen != t.gen+1 {
		return
	}
	l.deadline, l.keep = t.deadline, t.keep
}

func (l *Lease) resetLocked(sent time.Time, lease time.Duration, keep bool) {
	w := l.w
	l.keep = keep
	l.deadline = sent.Add(lease)
	l.next = sent.Add(min(w.interval, lease/3))
	l.gen++
	l.active = true
	w.leases[l] = struct{}{}
	w.busy = true
	// Wake the loop only if it would otherwise sleep past this lease's first event: a lock
	// taken and released in a loop must not cost a goroutine wake-up per acquisition.
	at := l.deadline
	if keep && l.next.Before(at) {
		at = l.next
	}
	if w.wakeAt.IsZero() || at.Before(w.wakeAt) {
		w.wakeAt = at
		w.poke()
	}
}

// Stop stops renewing and timing the lease; Lost will not be closed by the watchdog
// afterwards. Call it before the releasing command is sent. A renewal of the lease may
// already be on its way to Redis: Stop then returns a channel closed when that round has
// returned, and the release must wait for it, or the renewal could land after the release
// and a re-acquisition by the same owner (Redisson #7272). Otherwise it returns nil. Stop is
// idempotent.
func (l *Lease) Stop() <-chan struct{} {
	w := l.w
	w.mu.Lock()
	defer w.mu.Unlock()
	l.gen++
	l.active = false
	delete(w.leases, l)
	return l.round
}

// Lapse ends the renewals of a stopped lease whose release failed: the lock may still be
// held, so the lease is timed again with the deadline it had, and Lost closes when it runs
// out unless Stop or Reset comes first. Renewing it instead could keep an abandoned lock
// alive for ever.
func (l *Lease) Lapse() {
	w := l.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if l.isLost || l.active {
		return
	}
	if w.closed {
		w.loseLocked(l, "watchdog closed")
		return
	}
	l.keep = false
	l.gen++
	l.active = true
	w.leases[l] = struct{}{}
	if w.wakeAt.IsZero() || l.deadline.Before(w.wakeAt) {
		w.wakeAt = l.deadline
		w.poke()
	}
}

// Deadline returns when the lock expires unless its TTL is set again, as last confirmed
// (a stopped lease keeps it), and false if the lease is lost.
func (l *Lease) Deadline() (time.Time, bool) {
	w := l.w
	w.mu.Lock()
	defer w.mu.Unlock()
	return l.deadline, !l.isLost
}

// Lose reports the lease lost now: its holder learned by other means that the lock is not,
// or may not be, held (a hand-off Redis did not record). It is a no-op on a lost lease.
func (l *Lease) Lose(reason string) {
	w := l.w
	w.mu.Lock()
	defer w.mu.Unlock()
	w.loseLocked(l, reason)
}

// Close stops the watchdog. Leases it still had are reported lost: nothing keeps them any
// more. Close is idempotent.
func (w *Watchdog) Close() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		for l := range w.leases {
			w.loseLocked(l, "watchdog closed")
		}
		close(w.stop)
		w.cancel()
	}
	w.mu.Unlock()
	<-w.done
	w.rounds.Wait()
}

func (w *Watchdog) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *Watchdog) loseLocked(l *Lease, reason string) {
	if l.isLost {
		return
	}
	l.isLost = true
	l.active = false
	l.gen++
	delete(w.leases, l)
	close(l.lost)
	w.log.Warn("lock lease lost", zap.String("key", l.key), zap.String("owner", l.owner),
		zap.String("reason", reason))
}

func (w *Watchdog) run() {
	defer close(w.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if at, ok := w.step(time.Now()); ok {
			timer.Reset(time.Until(at))
		} else {
			timer.Stop()
		}
		select {
		case <-w.stop:
			return
		case <-w.kick:
		case <-timer.C:
		case r := <-w.results:
			w.apply(r)
		}
	}
}

// step reports lost every lease past its deadline, starts a renewal round if one is due and
// none is in flight, and returns when it next has work.
func (w *Watchdog) step(now time.Time) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var next time.Time
	var due []*Lease
	// Leases due within half an interval join this round, so rounds stay few and full.
	horizon := now.Add(w.interval / 2)
	for l := range w.leases {
		if !now.Before(l.deadline) {
			if l.keep {
				w.loseLocked(l, "no renewal succeeded before the lease deadline")
			} else {
				w.loseLocked(l, "lease expired while held")
			}
			continue
		}
		at := l.deadline
		if l.keep {
			if !w.inflight && !l.next.After(horizon) {
				due = append(due, l)
				// Its deadline is still timed: a round that hangs must not let it pass unseen.
				if next.IsZero() || l.deadline.Before(next) {
					next = l.deadline
				}
				continue
			}
			if !w.inflight && l.next.Before(at) {
				at = l.next
			}
		}
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	if len(due) > 0 {
		w.startRound(now, due)
	}
	if next.IsZero() && w.busy {
		// No lease now, but leases come and go: a lock taken and released within a round
		// trip is gone before this loop runs. Keeping the timer one interval lets the leases
		// that follow, due no sooner, skip the wake-up; an interval without any lets the loop
		// sleep until one comes.
		w.busy = false
		next = now.Add(w.interval)
	}
	w.wakeAt = next
	return next, !next.IsZero()
}

// startRound sends one pipelined round of renewals on its own goroutine, so that deadlines
// keep being timed while Redis is slow. At most one round is in flight.
func (w *Watchdog) startRound(now time.Time, due []*Lease) {
	w.inflight = true
	done := make(chan struct{})
	bySlot := make(map[uint16][]*Lease)
	for _, l := range due {
		bySlot[l.slot] = append(bySlot[l.slot], l)
	}
	r := roundResult{sent: now, done: done}
	var batches []Batch
	for _, ls := range bySlot {
		for len(ls) > 0 {
			n := min(len(ls), w.batch)
			b := Batch{Keys: make([]string, n), Owners: make([]string, n)}
			for i, l := range ls[:n] {
				b.Keys[i], b.Owners[i] = l.key, l.owner
				l.round = done
				r.leases = append(r.leases, l)
				r.gens = append(r.gens, l.gen)
			}
			batches = append(batches, b)
			r.sizes = append(r.sizes, n)
			ls = ls[n:]
		}
	}
	w.rounds.Add(1)
	go func() {
		defer w.rounds.Done()
		// No timeout of our own: a command abandoned by its context may still be sent by
		// rueidis, and a renewal must never land after Stop said the round was over. A stuck
		// round ends when the client's connection timeouts break the connection, or at Close.
		r.res = w.renew(w.ctx, w.timeout, batches)
		close(done)
		select {
		case w.results <- r:
		case <-w.stop:
		}
	}()
}

func (w *Watchdog) apply(r roundResult) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inflight = false
	for _, l := range r.leases {
		if l.round == r.done {
			l.round = nil
		}
	}
	i := 0
	for b, n := range r.sizes {
		var res Result
		if b < len(r.res) {
			res = r.res[b]
		} else {
			res.Err = errors.New("watchdog: renewal returned too few results")
		}
		if res.Err != nil {
			w.log.Warn("lease renewal failed; retrying", zap.Int("locks", n), zap.Error(res.Err))
		}
		for j := 0; j < n; j, i = j+1, i+1 {
			l := r.leases[i]
			if !l.active || l.gen != r.gens[i] {
				continue // released or re-acquired while the round was in flight
			}
			switch {
			case res.Err != nil || j >= len(res.Held):
				l.next = time.Now().Add(w.retry)
			case res.Held[j]:
				l.deadline = r.sent.Add(w.timeout)
				l.next = r.sent.Add(w.interval)
			default:
				w.loseLocked(l, "lock no longer held at renewal")
			}
		}
	}
}
