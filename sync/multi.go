package sync

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	gosync "sync"
	"time"
)

// A Locker is one lock of a MultiLock: a *Lock, *FairLock, *FencedLock, an *RWLock (its
// write lock) or an RWLock's Reader (a type that embeds one is a Locker too). Its holds are
// the handle's, as if it were used alone.
type Locker interface {
	TryLock(ctx context.Context, opts ...TryLockOption) (bool, error)
	Unlock(ctx context.Context) error
	// Valid reports whether the handle's hold is live now (see Lock.Valid).
	Valid() bool
	// Name is the lock's name.
	Name() string
	// where is the lock's name on its handle's Client: a MultiLock refuses two lockers of
	// one name on one Client (the second could only wait for the first).
	where() string
}

func (l *exclusive) where() string { return l.o.where() }
func (l *RWLock) where() string    { return l.r.where() }

// where is the owner's name on its Client ("" for a zero value, whose calls report it).
func (o *owner) where() string {
	if o.c == nil {
		return ""
	}
	return o.c.id + " " + o.name
}
func (r rwReader) where() string { return r.l.where() }

// Multi takes several locks as one, all or none (Redisson's RedissonMultiLock), over any mix
// of lock handles — of one Client or several, on one Redis or several. It makes no key of
// its own: each lock keeps its own key, channel and lease. Make one with MultiLock. Like its
// locks, it is a mutex: safe for concurrent use, goroutines sharing it exclude each other,
// and each Unlock, from any goroutine, ends the oldest hold.
//
// An acquisition takes the locks in the order given, each with its own wait. When one is not
// taken, every lock taken so far is released (all at once, as is every release) and, while
// the wait allows, the acquisition starts again from the first. So two goroutines that take
// the same locks in opposite order through MultiLocks do not deadlock: the one whose wait for
// its second lock runs out first lets its first go.
type Multi struct {
	locks []Locker
	err   error // bad input, reported by every call
	red   bool  // a red lock: a quorum is enough
	mu    gosync.Mutex
	held  []*multiHold // its acquisitions, oldest first: each Unlock ends the oldest
}

// A multiHold is one acquisition of a Multi: the locks it took.
type multiHold struct {
	locks []Locker
	until time.Time // a red lock's validity, with a lease
}

// MultiLock returns a Multi over locks. It makes no network call; bad input (no locks, a
// nil one, two of one name on one Client) is reported by its methods.
func MultiLock(locks ...Locker) *Multi {
	m := &Multi{locks: locks}
	names := make(map[string]bool, len(locks))
	switch {
	case len(locks) == 0:
		m.err = invalid("locks", "must not be empty")
	default:
		for i, l := range locks {
			if v := reflect.ValueOf(l); l == nil || v.Kind() == reflect.Pointer && v.IsNil() {
				m.err = invalid("locks", "#%d must not be nil", i)
				break
			}
			if w := l.where(); w != "" && names[w] {
				m.err = invalid("locks", "must not name %q twice on one Client", l.Name())
				break
			}
			names[l.where()] = true
		}
	}
	return m
}

// multiRound bounds Lock's wait per round, per lock: Redisson's 1.5 s.
const multiRound = 1500 * time.Millisecond

// Lock takes every lock, waiting as long as ctx allows: rounds of TryLock, each with a wait
// drawn at random up to 1.5 s per lock (Redisson's lock() waits 1.5 s per lock; drawn at
// random, two multi-locks that collide do not end their rounds together), and a short pause
// after a round that failed, in which the other can take the locks it let go of.
// With Lease, each lock is taken with that lease. Errors are as for TryLock.
func (m *Multi) Lock(ctx context.Context, opts ...LockOption) error {
	cfg, err := options(opts, LockOption.applyLock)
	if err == nil {
		err = cfg.check()
	}
	if err != nil {
		return err
	}
	if err := m.check(ctx); err != nil {
		return err // before drawing a round: there may be no locks
	}
	for {
		round := time.Duration(len(m.locks)) * multiRound
		ok, err := m.try(ctx, cfg, round/10+rand.N(round*9/10))
		if ok || err != nil {
			return err
		}
		// A pause before the next round, so that the multi-lock it collided with takes the
		// locks this round let go of rather than see them taken back at once.
		select {
		case <-time.After(multiPause/10 + rand.N(multiPause)):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// multiPause bounds the pause between Lock's rounds.
const multiPause = 50 * time.Millisecond

// TryLock takes every lock if it can, within WaitTime (default: one attempt at each lock),
// and reports whether it did; when any is not taken, none is held. With Lease each lock is
// taken with that lease, and one whose lease ran out before the last was taken (or before
// its own acquire returned) counts as not taken. An error (ctx ending, a lock's error — an
// ErrOutcomeUnknown included, whose hold lapses with its lease) also leaves none held.
func (m *Multi) TryLock(ctx context.Context, opts ...TryLockOption) (bool, error) {
	cfg, err := options(opts, TryLockOption.applyTry)
	if err == nil {
		err = cfg.check()
	}
	if err != nil {
		return false, err
	}
	return m.try(ctx, cfg, cfg.wait)
}

// check validates what every call gets: a context, and the locks the Multi was made of.
func (m *Multi) check(ctx context.Context) error {
	if ctx == nil {
		return invalid("ctx", "must not be nil")
	}
	if m.err == nil && len(m.locks) == 0 {
		return invalid("multi-lock", "is a zero value: make it with MultiLock or RedLock")
	}
	return m.err
}

// try runs Redisson's multi-lock (or red lock) acquisition with wait in all: rounds until
// one takes every lock (a quorum), or the wait is over.
func (m *Multi) try(ctx context.Context, cfg lockConfig, wait time.Duration) (bool, error) {
	if err := m.check(ctx); err != nil {
		return false, err
	}
	var lease []TryLockOption
	if cfg.leaseSet {
		lease = []TryLockOption{Lease(cfg.lease)}
	}
	deadline := time.Now().Add(wait)
	// A red lock's master gets redMinWait at least to answer — no more than half the
	// lease, which the rounds' time takes from the validity.
	answer := redMinWait
	if cfg.leaseSet {
		answer = min(answer, cfg.lease/2)
	}
	for {
		start := time.Now()
		h := &multiHold{}
		var ok bool
		var err error
		if m.red {
			ok, err = m.redRound(ctx, h, lease, deadline, answer)
		} else {
			ok, err = m.round(ctx, h, lease, wait, deadline)
		}
		if err != nil {
			return false, errors.Join(err, m.release(ctx, h, true))
		}
		if ok && !m.expired(h, cfg, start) {
			m.mu.Lock()
			m.held = append(m.held, h)
			m.mu.Unlock()
			return true, nil
		}
		if err := m.release(ctx, h, true); err != nil {
			return false, err
		}
		// A red round gives each master answer at least: one that could not end by the
		// deadline is not started.
		if left := time.Until(deadline); wait <= 0 || left <= 0 || m.red && left < answer {
			return false, nil
		}
	}
}

// round takes the locks one after another, each waiting up to the deadline (with a wait),
// and stops at the first not taken.
func (m *Multi) round(ctx context.Context, h *multiHold, lease []TryLockOption, wait time.Duration, deadline time.Time) (bool, error) {
	for _, l := range m.locks {
		opts := lease
		if wait > 0 {
			opts = append(slices.Clip(lease), WaitTime(max(time.Until(deadline), 0)))
		}
		ok, err := l.TryLock(ctx, opts...)
		if err != nil && !errors.Is(err, ErrLockLost) { // (a lease that ran out before the acquire returned: not taken)
			return false, err
		}
		if !ok {
			return false, nil
		}
		h.locks = append(h.locks, l)
	}
	return true, nil
}

// redRound asks every master at once, as the Redlock write-up does: a round costs the
// slowest master's answer, not the sum of all. Each gets its share of the wait left (as in
// Redisson's red lock, whose masters are asked one after another), and at least answer to
// answer — a master that is dead or hangs no more: its requests end with the round's
// context (see Client.try); one that fails counts as a refusal.
func (m *Multi) redRound(ctx context.Context, h *multiHold, lease []TryLockOption, deadline time.Time, answer time.Duration) (bool, error) {
	n := len(m.locks)
	share := max(time.Until(deadline)/time.Duration(n), 0)
	opts := append(slices.Clip(lease), WaitTime(share))
	lctx, cancel := context.WithTimeout(ctx, max(share, answer))
	defer cancel()
	taken := make([]bool, n)
	all(n, func(i int) { taken[i], _ = m.locks[i].TryLock(lctx, opts...) })
	for i, ok := range taken {
		if ok {
			h.locks = append(h.locks, m.locks[i])
		}
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	return len(h.locks) >= n/2+1, nil
}

// redMinWait is the least a red lock gives one master to answer (with a lease, no more than
// half of it): a master that answers, even on a loaded machine, is not taken for one that is
// down.
const redMinWait = time.Second

// expired reports whether, every lock taken, the acquisition is already worthless: a lock
// taken first whose lease ran out meanwhile (a multi-lock), or, for a red lock with a lease,
// no validity left (lease − elapsed − drift, the Redlock write-up's drift being
// lease × 1 % + 2 ms), which it records as its deadline.
func (m *Multi) expired(h *multiHold, cfg lockConfig, start time.Time) bool {
	if m.red {
		if !cfg.leaseSet {
			return false
		}
		drift := cfg.lease/100 + 2*time.Millisecond
		h.until = start.Add(cfg.lease - drift)
		return !time.Now().Before(h.until)
	}
	for _, l := range h.locks {
		if !l.Valid() {
			return true
		}
	}
	return false
}

// release gives back every lock held, reporting every failure — but, when rolling back
// (rollback), not a hold found gone (a lease that ran out during the wait is what failed the
// round), nor, for a red lock, any: a master that cannot be reached is what a red lock
// allows for, and its hold lapses with its lease.
//
// A rollback is awaited while ctx lasts, and replyGrace past its end at most: its releases
// go on in the background (each within its Client's retry budget), and a failure they meet
// then is not reported — a hold not given back lapses with its lease.
func (m *Multi) release(ctx context.Context, h *multiHold, rollback bool) error {
	held := slices.Clone(h.locks)
	h.locks = h.locks[:0]
	errs := make([]error, len(held))
	run := func() {
		all(len(held), func(i int) { // all at once, as Redisson's unlock does
			err := held[i].Unlock(ctx)
			// (A release that stood unconfirmed rolled back all the same.)
			if err != nil && !(rollback && (m.red || errors.Is(err, ErrNotHeld) || errors.Is(err, ErrNotReplicated))) {
				errs[i] = err
			}
		})
	}
	if !rollback {
		run()
		return errors.Join(errs...)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		run()
	}()
	select {
	case <-done:
		return errors.Join(errs...)
	case <-ctx.Done():
	}
	select {
	case <-done:
		return errors.Join(errs...)
	case <-time.After(replyGrace):
		return nil
	}
}

// all runs f(0) … f(n-1) at once, the last on the calling goroutine, and returns when all
// have.
func all(n int, f func(i int)) {
	var wg gosync.WaitGroup
	for i := range n - 1 {
		wg.Go(func() { f(i) })
	}
	if n > 0 {
		f(n - 1)
	}
	wg.Wait()
}

// Unlock releases every lock of the oldest hold, whatever fails, and reports every failure
// (errors.Join; each is as its lock's Unlock reports it). It returns ErrNotHeld if the
// multi-lock is not held.
func (m *Multi) Unlock(ctx context.Context) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	if len(m.held) == 0 {
		m.mu.Unlock()
		return fmt.Errorf("%w: the multi-lock is not held", ErrNotHeld)
	}
	h := m.held[0]
	m.held = m.held[1:]
	m.mu.Unlock()
	return m.release(ctx, h, false)
}

// RedLock returns a Multi that takes a quorum of locks on independent Redis masters — at
// least 3, one lock each — rather than all of them: the Redlock algorithm (Redisson's
// RedissonRedLock). It holds when more than half of the masters granted their lock. Every
// master is asked at once (Redisson asks one after another), each with its share of the
// wait, and at least a second to answer (with a Lease, half of it at most); one that is
// unreachable or hangs counts as a refusal, and costs the round no more than that. A round
// short of the quorum gives back what it took and, while the wait allows, another follows.
// With Lease, its validity is the lease less the time the round that took it lasted and a
// drift of 1 % + 2 ms (Deadline); without, each lock is kept by its Client's watchdog.
//
// Redisson deprecates its red lock, and so should you reach for it last: its safety rests on
// clocks that do not jump and processes that do not pause, which nothing checks (Martin
// Kleppmann's "How to do distributed locking"), and it needs masters that fail
// independently. A FencedLock (tokens make a paused holder's late writes harmless) on a
// Redis with replicas, or an RLock-style lock confirmed by replicas, is the sounder choice.
// RedLock exists for fleets that already run one across masters.
func RedLock(locks ...Locker) *Multi {
	m := MultiLock(locks...)
	m.red = true
	if m.err == nil && len(locks) < 3 {
		m.err = invalid("locks", "must be at least 3 locks on independent masters for a red lock, got %d", len(locks))
	}
	return m
}

// Deadline returns when a red lock taken with a Lease stops being valid (the lease, less the
// acquisition's time and the drift), and false otherwise (not held, no lease, or a
// multi-lock, whose members' Deadlines tell).
func (m *Multi) Deadline() (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.red || len(m.held) == 0 || m.held[0].until.IsZero() {
		return time.Time{}, false
	}
	return m.held[0].until, true
}
