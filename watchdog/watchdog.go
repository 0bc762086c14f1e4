// Package watchdog keeps the leases of held locks alive and says at once when one is lost.
//
// One Watchdog runs one goroutine for any number of leases. A kept lease is renewed every
// Timeout/3 by batched scripts (at most 100 locks each, on a Cluster never mixing hash slots, all
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

// Kind is one kind of lease, renewed by its own function: a plain lock's field, a read
// lock's timeout keys. Batches never mix kinds. Make one Kind per kind and share it.
type Kind struct {
	// Name names the kind in logs.
	Name string
	// Renew renews batches of this kind in one round trip. Required.
	Renew RenewFunc
}

// Batch is the leases one renewal script call renews, all of one kind (and on a Cluster in
// one hash slot): Owners[i] must still hold Keys[i].
type Batch struct {
	Keys   []string
	Owners []string
}

// Result is the outcome of one Batch: Held[i] reports whether Owners[i] still held Keys[i]
// (and so had its TTL set to at least the lease), or Err says the call failed and nothing is
// known.
type Result struct {
	Held []bool
	Err  error
}

// RenewFunc renews batches in one round trip, setting each held lock's TTL to at least
// lease. It returns one Result per Batch, in order.
type RenewFunc func(ctx context.Context, lease time.Duration, batches []Batch) []Result

// Options configure a Watchdog.
type Options struct {
	// Timeout is the lease a renewal sets; renewals run every Timeout/3. Required.
	Timeout time.Duration
	// batchSize caps the leases per renewal script; 0 means 100 (tests make it small).
	batchSize int
	// Logger receives lost leases and failed renewals; nil means no logging.
	Logger *zap.Logger
	// Cluster says the keys live on a Redis Cluster, where one script's keys must share a
	// hash slot: batches are then made per slot. Elsewhere a round is 100 leases a
	// script, whatever their slots.
	Cluster bool
	// OnLease, if not nil, hears what becomes of each kept lease at each renewal, and of any
	// lease lost: for metrics. It runs with the Watchdog's lock held, so it must not block
	// nor call the Watchdog.
	OnLease func(kind *Kind, key string, e LeaseEvent)
}

// A LeaseEvent is what OnLease hears.
type LeaseEvent int

// The lease events.
const (
	Renewed     LeaseEvent = iota // a renewal kept the lease
	RenewFailed                   // a renewal got no answer; it is retried until the deadline
	LeaseLost                     // the lease was lost (see Lease.Lost)
)

// Watchdog renews kept leases and times watched ones. It is safe for concurrent use.
type Watchdog struct {
	timeout  time.Duration
	interval time.Duration
	retry    time.Duration // the first retry after a failed renewal; it doubles up to interval
	batch    int
	cluster  bool // batches per hash slot
	log      *zap.Logger
	onLease  func(*Kind, string, LeaseEvent)

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
	kind  *Kind
	key   string
	owner string
	slot  uint16
	lost  chan struct{}

	// ended is closed when the hold ends, stopped or lost; a new hold gets a new one.
	ended    chan struct{} // guarded by w.mu
	hasEnded bool

	// Guarded by w.mu.
	keep     bool      // renewed by the watchdog
	deadline time.Time // when the lock expires unless renewed
	next     time.Time // when to renew (kept leases)
	fails    int       // renewals failed in a row
	gen      uint64    // bumped when the lease starts afresh or stops, so a late result is not applied
	active   bool
	isLost   bool
	round    chan struct{} // closed when the renewal round carrying this lease returns; nil if none
}

type roundResult struct {
	done   chan struct{}
	sent   time.Time
	byKind map[*Kind][]*renewal
}

// New starts a Watchdog. Close stops it.
func New(opts Options) (*Watchdog, error) {
	if opts.Timeout <= 0 {
		return nil, errors.New("watchdog: Timeout must be > 0")
	}
	batch := opts.batchSize
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
		// A failed renewal is retried well inside the lease, so a short outage costs nothing,
		// and backs off so that a long one costs little.
		retry:   min(interval, max(opts.Timeout/30, 5*time.Millisecond)),
		batch:   batch,
		cluster: opts.Cluster,
		log:     log,
		onLease: opts.OnLease,
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

// Start registers a lease of kind (not nil) on key for owner: a command sent at sent set its TTL to ttl (keep:
// to the watchdog timeout, and the lease is renewed by kind's Renew every Timeout/3; else it
// is only timed, and reported lost if it runs out while held). Call it before the
// acquisition is reported to the caller, so that no window exists in which the lock is held
// but not kept.
func (w *Watchdog) Start(kind *Kind, key, owner string, sent time.Time, ttl time.Duration, keep bool) *Lease {
	l := &Lease{w: w, kind: kind, key: key, owner: owner, lost: make(chan struct{}), ended: make(chan struct{})}
	if w.cluster {
		l.slot = keyslot.Of(key)
	}
	l.Restart(sent, ttl, keep)
	return l
}

// Lost is closed when the lease is lost while held: the lock was found gone at renewal, no
// renewal succeeded before the deadline, the watched lease ran out, its holder reported it
// lost (Lose), or the watchdog closed.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Hold records that a command sent at sent set the lock's TTL to at least ttl (keep: to at
// least the watchdog timeout, and the lease is renewed from now on). Leases only grow — no
// script lowers a held lock's TTL — so on an active lease, which must be the same hold's, the
// deadline becomes the later of the two and a kept lease stays kept; on a stopped one the
// lease starts afresh. It reports false if the lease is already lost.
func (l *Lease) Hold(sent time.Time, ttl time.Duration, keep bool) bool {
	return l.hold(sent, ttl, keep, false)
}

// Restart is Hold for a new hold: the lease starts afresh even if it is still active (the
// lapsing lease of a hold given up), since that hold's deadline is not the new one's.
func (l *Lease) Restart(sent time.Time, ttl time.Duration, keep bool) bool {
	return l.hold(sent, ttl, keep, true)
}

func (l *Lease) hold(sent time.Time, ttl time.Duration, keep, fresh bool) bool {
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
	if keep {
		ttl = max(ttl, w.timeout)
	}
	if l.active && !fresh {
		if end := sent.Add(ttl); end.After(l.deadline) {
			l.deadline = end
		}
		if keep && !l.keep {
			l.keep, l.fails = true, 0
			l.next = time.Now().Add(min(w.interval, time.Until(l.deadline)/3))
		}
	} else {
		// A fresh start: a renewal result still on its way is about an earlier hold.
		if l.hasEnded {
			l.ended, l.hasEnded = make(chan struct{}), false
		}
		l.gen++
		l.active = true
		l.keep, l.fails = keep, 0
		l.deadline = sent.Add(ttl)
		l.next = sent.Add(min(w.interval, ttl/3))
		w.leases[l] = struct{}{}
		w.busy = true
	}
	// Wake the loop only if it would otherwise sleep past this lease's first event: a lock
	// taken and released in a loop must not cost a goroutine wake-up per acquisition.
	at := l.deadline
	if l.keep && l.next.Before(at) {
		at = l.next
	}
	if w.wakeAt.IsZero() || at.Before(w.wakeAt) {
		w.wakeAt = at
		w.poke()
	}
	return true
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
	l.end()
	return l.round
}

// end closes ended, once per hold. Caller holds w.mu.
func (l *Lease) end() {
	if !l.hasEnded {
		l.hasEnded = true
		close(l.ended)
	}
}

// Ended returns a channel closed when the current hold ends: its lease is stopped (the hold
// was released) or lost. A later hold on the same lease has a channel of its own.
func (l *Lease) Ended() <-chan struct{} {
	w := l.w
	w.mu.Lock()
	defer w.mu.Unlock()
	return l.ended
}

// Lapse ends the renewals of a stopped lease whose release failed: the lock may still be
// held, so the lease is timed again with the deadline it had, and Lost closes when it runs
// out unless Stop or Hold comes first. Renewing it instead could keep an abandoned lock
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

// Deadline returns when the lock expires unless its TTL is set again, as last confirmed,
// and false if the lease is lost or stopped (its hold was released).
func (l *Lease) Deadline() (time.Time, bool) {
	w := l.w
	w.mu.Lock()
	defer w.mu.Unlock()
	return l.deadline, !l.isLost && l.active
}

// Kept reports whether the watchdog renews the lease (it has no explicit end).
func (l *Lease) Kept() bool {
	w := l.w
	w.mu.Lock()
	defer w.mu.Unlock()
	return l.keep && l.active && !l.isLost
}

// Lose reports the lease lost now: its holder learned by other means that the lock is not
// held (a release or re-entry found its field gone). It is a no-op on a lost lease.
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

// event tells OnLease, if set, of e. Caller holds w.mu.
func (w *Watchdog) event(kind *Kind, key string, e LeaseEvent) {
	if w.onLease != nil {
		w.onLease(kind, key, e)
	}
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
	l.end()
	w.event(l.kind, l.key, LeaseLost)
	w.log.Warn("lease lost", zap.String("name", l.key), zap.String("kind", l.kind.Name), zap.String("owner", l.owner),
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
	// Leases due within half an interval join this round, so rounds stay few and full; a
	// lease whose renewals are failing waits for its backoff.
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
			dueBy := horizon
			if l.fails > 0 {
				dueBy = now
			}
			if !w.inflight && !l.next.After(dueBy) {
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

// A renewal is one batch of a round, with the leases it renews and their generations.
type renewal struct {
	batch  Batch
	leases []*Lease
	gens   []uint64
	res    Result
}

// startRound sends one round of renewals on its own goroutine, so that deadlines keep being
// timed while Redis is slow. Leases are grouped by kind (and on a Cluster by hash slot) into
// batches of at most 100; each kind's batches go to one call of its Renew, which pipelines them. At most
// one round is in flight.
func (w *Watchdog) startRound(now time.Time, due []*Lease) {
	w.inflight = true
	done := make(chan struct{})
	type group struct {
		kind *Kind
		slot uint16
	}
	groups := make(map[group][]*Lease)
	for _, l := range due {
		g := group{l.kind, l.slot}
		groups[g] = append(groups[g], l)
	}
	byKind := make(map[*Kind][]*renewal)
	for g, ls := range groups {
		for len(ls) > 0 {
			n := min(len(ls), w.batch)
			rn := &renewal{leases: ls[:n:n], batch: Batch{Keys: make([]string, n), Owners: make([]string, n)}}
			for i, l := range rn.leases {
				rn.batch.Keys[i], rn.batch.Owners[i] = l.key, l.owner
				rn.gens = append(rn.gens, l.gen)
				l.round = done
			}
			byKind[g.kind] = append(byKind[g.kind], rn)
			ls = ls[n:]
		}
	}
	r := roundResult{sent: now, done: done, byKind: byKind}
	w.rounds.Add(1)
	go func() {
		defer w.rounds.Done()
		// No timeout of our own: a command abandoned by its context may still be sent by
		// rueidis, and a renewal must never land after Stop said the round was over. A stuck
		// round ends when the client's connection timeouts break the connection, or at Close.
		for kind, rns := range byKind {
			batches := make([]Batch, len(rns))
			for i, rn := range rns {
				batches[i] = rn.batch
			}
			res := kind.Renew(w.ctx, w.timeout, batches)
			for i, rn := range rns {
				if i < len(res) {
					rn.res = res[i]
				} else {
					rn.res.Err = errors.New("watchdog: renewal returned too few results")
				}
			}
		}
		close(done)
		select {
		case w.results <- r:
		case <-w.stop:
		}
	}()
}

// apply records a round's results: a held lease's deadline moves to the round's send time
// plus the timeout (never earlier: leases only grow), a lease found not held is lost, and a
// failed renewal is retried with backoff. An outage is logged once per lease, when its
// renewals start failing, and again when they recover.
func (w *Watchdog) apply(r roundResult) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inflight = false
	now := time.Now()
	for kind, rns := range r.byKind {
		for _, rn := range rns {
			for j, l := range rn.leases {
				if l.round == r.done {
					l.round = nil
				}
				if !l.active || l.gen != rn.gens[j] {
					continue // released or restarted while the round was in flight
				}
				switch {
				case rn.res.Err != nil || j >= len(rn.res.Held):
					if l.fails == 0 {
						err := rn.res.Err
						if err == nil {
							err = errors.New("renewal reply too short")
						}
						w.log.Warn("lease renewal failing; retrying with backoff until the lease deadline",
							zap.String("name", l.key), zap.String("kind", kind.Name), zap.String("owner", l.owner),
							zap.Time("deadline", l.deadline), zap.Error(err))
					}
					// Backing off, but never past half the time left, so that an outage that
					// ends shortly before the deadline still saves the lease.
					l.next = now.Add(min(w.retry<<min(l.fails, 16), w.interval, max(l.deadline.Sub(now)/2, w.retry)))
					l.fails++
					w.event(kind, l.key, RenewFailed)
				case rn.res.Held[j]:
					if l.fails > 0 {
						w.log.Info("lease renewed again", zap.String("name", l.key), zap.String("kind", kind.Name),
							zap.String("owner", l.owner), zap.Int("failed", l.fails))
					}
					if end := r.sent.Add(w.timeout); end.After(l.deadline) {
						l.deadline = end
					}
					l.next = r.sent.Add(w.interval)
					l.fails = 0
					w.event(kind, l.key, Renewed)
				default:
					w.loseLocked(l, "lock no longer held at renewal")
				}
			}
		}
	}
}
