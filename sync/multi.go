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
	if len(locks) == 0 {
		m.err = invalid("locks", "must not be empty")
	}
	names := make(map[string]bool, len(locks))
	for i, l := range locks {
		if v := reflect.ValueOf(l); l == nil || v.Kind() == reflect.Pointer && v.IsNil() {
			m.err = invalid("locks", "#%d must not be nil", i)
			break
		}
		w := l.where()
		if w != "" && names[w] {
			m.err = invalid("locks", "must not name %q twice on one Client", l.Name())
			break
		}
		names[w] = true
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
	deadline, answer := time.Now().Add(wait), redAnswer(cfg)
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

// expired reports whether, every lock taken, the acquisition is already worthless: a lock
// taken first whose lease ran out meanwhile (a multi-lock), or a red lock's validity gone.
func (m *Multi) expired(h *multiHold, cfg lockConfig, start time.Time) bool {
	if m.red {
		return h.redExpired(cfg, start)
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
	case <-ctx.Done():
		select {
		case <-done:
		case <-time.After(replyGrace):
			return nil
		}
	}
	return errors.Join(errs...)
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
