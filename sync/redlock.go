package sync

import (
	"context"
	"slices"
	"time"
)

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

// redAnswer is how long a red lock's master gets to answer: redMinWait at least, but no
// more than half the lease, which the rounds' time takes from the validity.
func redAnswer(cfg lockConfig) time.Duration {
	if cfg.leaseSet {
		return min(redMinWait, cfg.lease/2)
	}
	return redMinWait
}

// redExpired reports whether a red lock taken with a lease has no validity left (lease −
// elapsed − drift, the Redlock write-up's drift being lease × 1 % + 2 ms), and records the
// validity as the hold's deadline.
func (h *multiHold) redExpired(cfg lockConfig, start time.Time) bool {
	if !cfg.leaseSet {
		return false
	}
	drift := cfg.lease/100 + 2*time.Millisecond
	h.until = start.Add(cfg.lease - drift)
	return !time.Now().Before(h.until)
}

// redMinWait is the least a red lock gives one master to answer (with a lease, no more than
// half of it): a master that answers, even on a loaded machine, is not taken for one that is
// down.
const redMinWait = time.Second
