package sync

import (
	"context"
	"fmt"
	"time"

	"github.com/latchkey/latchkey/internal/names"
	"github.com/latchkey/latchkey/lua"
	"github.com/redis/rueidis"
)

// Semaphore is a handle on a counting semaphore, wire-compatible with Redisson's RSemaphore:
// the Redis key name holds the number of available permits as a decimal integer, and every
// release publishes the new total on redisson_sc:{name}.
//
// Permits are counted, not owned: any handle, of any Client or Java process, may release
// permits, also ones it never acquired (as in Redisson and unlike x/sync/semaphore). Nor are
// they leased: permits held by a process that dies are never given back — use
// PermitSemaphore when holders may crash. A missing key is a semaphore with no permits:
// set them first (TrySetPermits, SetPermits).
//
// Every change a handle makes is safe to repeat: it is numbered on a request key of the
// handle's (redisson_unlock_latch:{name}:<32 hex>, as a lock handle's; one per concurrent
// call, expiring 5 minutes after its last change, or deleted when the handle is
// garbage-collected or its Client closed), so a request whose reply was lost is repeated
// within the retry budget without taking or giving permits twice (Redisson's retries may).
// A request whose outcome stays unknown (an error wrapping ErrOutcomeUnknown) is settled by
// the Client in the background as soon as Redis answers: a release is repeated, an Acquire
// cancelled — the permits it took, if it took any, given back. (It gives up when the Client
// closes, or once the request key may have expired, 4.5 minutes on: then it logs.)
//
// Who gets permits: within a Client, waiters of one semaphore are served in arrival order.
// Only the longest-waiting one attempts; when it gets its permits and some are left, the next
// attempts. So a large request is never overtaken by smaller ones of its Client, and a small
// one waits behind a large one that cannot be served yet. (TryAcquire without WaitTime makes
// its one attempt regardless.) A Release hands its permits straight to the Client's
// longest-waiting waiter, if that one waits for as many, with no request to Redis at all —
// up to WithLocalHandoff times in a row; then the permits go back to Redis. (A waiter
// woken to take permits from Redis is passed over for the next, so that those are taken
// too.) A release to
// Redis wakes one other Client, the first registered whose first waiter the permits can
// serve, and Java's waiters, which race it as Redisson's waiters race each other.
//
// A handle is safe for concurrent use, and concurrent calls on it do not wait for each
// other: share one per process (or per Client) rather than making one per call. A wake
// that never arrives (a Java process publishing with another pub/sub mode, a failover)
// costs a Client's first waiter at most a third of the fair wait time
// (WithFairLockWaitTimeout, by default the watchdog timeout), when it checks again by
// itself, which also keeps its Client's registration alive: one script per third.
type Semaphore struct {
	p     pool
	q     waitingClients // waiting Clients (see lib.lua's sem_wait); q.channel is redisson_sc:{name}
	wants string         // the permits each waiting Client's first waiter wants
}

// Semaphore returns a handle on the semaphore called name (its Redis key). It makes no
// network call; an empty name is reported by the handle's methods.
func (c *Client) Semaphore(name string) *Semaphore {
	clients := names.Suffix(name, "sem_clients")
	s := &Semaphore{q: newWaitingClients(c, names.Prefix(semaphoreChannelPrefix, name), clients, semaphoreForward),
		wants: clients + ":wants"}
	s.p.init(c, name, "semaphore")
	return s
}

// Name returns the semaphore's name, which is its Redis key.
func (s *Semaphore) Name() string { return s.p.name }

// TrySetPermits sets the number of available permits to n if the semaphore does not exist
// yet, and reports whether it did. n must be in [0, 2³¹-1].
func (s *Semaphore) TrySetPermits(ctx context.Context, n int) (bool, error) {
	if err := checkPermits("permits", n, 0); err != nil {
		return false, err
	}
	msg, err := s.set(ctx, "try", n)
	return replied(err) && !msg.IsNil(), err
}

// SetPermits sets the number of available permits to n, whatever it was, and wakes waiters.
// Permits held are not counted: their release adds to n. n must be in [0, 2³¹-1].
func (s *Semaphore) SetPermits(ctx context.Context, n int) error {
	if err := checkPermits("permits", n, 0); err != nil {
		return err
	}
	_, err := s.set(ctx, "set", n)
	return err
}

// DrainPermits takes every available permit and returns how many there were. Should its
// reply be lost and a repeat find that it had run, the permits are drained but their number
// is not known: the error wraps ErrOutcomeUnknown.
func (s *Semaphore) DrainPermits(ctx context.Context) (int, error) {
	msg, err := s.set(ctx, "drain", 0)
	if !replied(err) {
		return 0, err
	}
	n, perr := msg.AsInt64()
	switch {
	case perr != nil:
		return 0, s.p.wrap(perr)
	case n < 0:
		return 0, s.p.wrap(fmt.Errorf("%w: the permits were drained, but the reply that counted them was lost", ErrOutcomeUnknown))
	}
	return int(n), err
}

func (s *Semaphore) set(ctx context.Context, mode string, n int) (rueidis.RedisMessage, error) {
	o := &s.p.owner
	return s.p.request(ctx, func(num lua.Numbered) lua.Request {
		return lua.SemSet{SemKeys: s.keys(), Numbered: num, Mode: mode, Permits: n, Publish: o.c.publishCmd}
	})
}

// AddPermits adds n permits, or takes -n away when n is negative (the count may go below
// zero: acquisitions then wait until releases bring it back above). Like Release, it runs
// even when ctx is already cancelled. n must be in [-2³¹+1, 2³¹-1].
func (s *Semaphore) AddPermits(ctx context.Context, n int) error {
	if err := checkPermits("permits", n, -maxPermits); err != nil {
		return err
	}
	_, err := s.p.release(ctx, s.release(n))
	return err
}

// Release gives n permits back and wakes waiters. When it returns nil the permits were
// given back exactly once, even if a reply was lost and the request repeated. Like a lock's
// Unlock it runs, and is repeated within the retry budget, even when ctx is already
// cancelled (a deferred Release after the request ended still releases); if the outcome stays
// unknown (an error wrapping ErrOutcomeUnknown) the Client repeats it in the background, so
// do not call Release again for those permits. n must be in [1, 2³¹-1].
func (s *Semaphore) Release(ctx context.Context, n int) error {
	if err := checkPermits("permits", n, 1); err != nil {
		return err
	}
	if err := s.p.check(ctx); err != nil {
		return err
	}
	local, err := s.handOn(ctx, n)
	s.p.c.obs.released(s.p.what, s.p.name, n, time.Time{}, local, err)
	return err
}

// release is the request that releases n permits to Redis.
func (s *Semaphore) release(n int) func(lua.Numbered) lua.Request {
	return func(num lua.Numbered) lua.Request {
		return lua.SemRelease{SemKeys: s.keys(), Numbered: num, Permits: n, Publish: s.p.c.publishCmd}
	}
}

// AvailablePermits returns the number of permits available now (0 when the semaphore does
// not exist; negative after AddPermits took more than there were). It waits for Redis while
// ctx lasts, and without a deadline for the retry budget at most.
func (s *Semaphore) AvailablePermits(ctx context.Context) (int, error) {
	if err := s.p.check(ctx); err != nil {
		return 0, err
	}
	return s.p.get(ctx)
}

// Acquire takes n permits, waiting as long as ctx allows. When ctx ends first it returns
// ctx.Err() and holds none of them — unless a release of its Client handed it the permits
// at that moment: then it returns nil, holding them. An error wrapping ErrOutcomeUnknown means the permits
// may have been taken with no reply: the Client gives them back as soon as Redis answers.
// n must be in [1, 2³¹-1].
func (s *Semaphore) Acquire(ctx context.Context, n int) error {
	if err := s.p.check(ctx); err != nil {
		return err
	}
	if err := checkPermits("permits", n, 1); err != nil {
		return err
	}
	_, err := s.acquire(ctx, n, -1)
	return err
}

// TryAcquire takes n permits if they are available and reports whether it did; with
// WaitTime it waits up to that long, and too few permits is (false, nil), not an error.
// Errors are as for Acquire.
func (s *Semaphore) TryAcquire(ctx context.Context, n int, opts ...TryAcquireOption) (bool, error) {
	cfg, err := configure(ctx, &s.p.owner, opts, TryAcquireOption.applyAcquire)
	if err != nil {
		return false, err
	}
	if err := checkPermits("permits", n, 1); err != nil {
		return false, err
	}
	return s.acquire(ctx, n, cfg.wait)
}
