package sync

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/latchkey/latchkey/internal/names"
	"github.com/latchkey/latchkey/lua"
	"github.com/redis/rueidis"
)

// PermitSemaphore is a handle on a semaphore whose permits expire, wire-compatible with
// Redisson's RPermitExpirableSemaphore: the Redis key name holds the available permits, the
// zset {name}:timeout the acquired ones — each a random 16-byte ID, scored by when its lease
// ends (epoch ms) — and releases are published on redisson_sc:{name}.
//
// Its point is crash safety: every acquired permit has a lease, and a permit whose lease has
// ended is given back by the next operation of any process on the semaphore — including the
// acquisitions that wait for it, which wake when the nearest lease ends as well as on
// release messages. Without an explicit Lease, permits are kept by the Client's watchdog
// like a lock: renewed while the process lives, given back a watchdog timeout after it dies.
// Permits tells its holder, through Lost and Valid, when their lease was lost.
//
// Every change is safe to repeat, as a Semaphore's is: numbered on the handle's latch, and an
// acquisition of unknown outcome is cancelled in the background. Waiters of
// one Client are served in arrival order, as a Semaphore's are. The scripts take the
// process's wall clock, as Redisson's do: processes sharing one must keep their clocks in
// sync. A handle is safe for concurrent use.
type PermitSemaphore struct {
	p        pool
	channel  string // redisson_sc:{name}
	timeouts string // {name}:timeout, the acquired permits
}

// PermitSemaphore returns a handle on the permit-expirable semaphore called name (its Redis
// key). It makes no network call; an empty name is reported by the handle's methods.
func (c *Client) PermitSemaphore(name string) *PermitSemaphore {
	s := &PermitSemaphore{channel: names.Prefix(semaphoreChannelPrefix, name), timeouts: names.Suffix(name, "timeout")}
	s.p.init(c, name, "permit semaphore")
	return s
}

// Name returns the semaphore's name, which is its Redis key.
func (s *PermitSemaphore) Name() string { return s.p.name }

// maxPermitsPerCall is the most permits one acquisition may take: each is an argument of the
// scripts, a member of the zset, and a check in every renewal.
const maxPermitsPerCall = 4096

// TrySetPermits sets the number of available permits to n if the semaphore does not exist
// yet, and reports whether it did. n must be in [0, 2³¹-1].
func (s *PermitSemaphore) TrySetPermits(ctx context.Context, n int) (bool, error) {
	if err := checkPermits("permits", n, 0); err != nil {
		return false, err
	}
	msg, err := s.set(ctx, "try", n)
	return replied(err) && !msg.IsNil(), err
}

// SetPermits makes the number of permits n in all, available and acquired: the available
// ones change by the difference. n must be in [0, 2³¹-1].
func (s *PermitSemaphore) SetPermits(ctx context.Context, n int) error {
	if err := checkPermits("permits", n, 0); err != nil {
		return err
	}
	_, err := s.set(ctx, "set", n)
	return err
}

// AddPermits adds n available permits, or takes -n away when n is negative. n must be in
// [-2³¹+1, 2³¹-1].
func (s *PermitSemaphore) AddPermits(ctx context.Context, n int) error {
	if err := checkPermits("permits", n, -maxPermits); err != nil {
		return err
	}
	_, err := s.set(ctx, "add", n)
	return err
}

func (s *PermitSemaphore) set(ctx context.Context, mode string, n int) (rueidis.RedisMessage, error) {
	o := &s.p.owner
	return s.p.request(ctx, func(num lua.Numbered) lua.Request {
		return lua.PermitSet{PermitKeys: s.keys(), Numbered: num, Mode: mode, Permits: n, NowMs: nowMs(), Publish: o.c.publishCmd}
	})
}

// Acquire takes n permits, waiting as long as ctx allows, with the lease of Lease or, by
// default, kept by the watchdog. When ctx ends first it returns ctx.Err(). An error wrapping
// ErrOutcomeUnknown means the permits may have been taken with no reply: the Client gives
// them back as soon as Redis answers again. n must be in [1, 4096], and at most the
// semaphore's permits in all (available and acquired): more is an error wrapping
// ErrInvalidArgument at once (or at the first attempt after SetPermits lowered it below n),
// not a wait for ever. A semaphore not set yet has no total: Acquire waits for it.
func (s *PermitSemaphore) Acquire(ctx context.Context, n int, opts ...LockOption) (*Permits, error) {
	cfg, err := configure(ctx, &s.p.owner, opts, LockOption.applyLock)
	if err != nil {
		return nil, err
	}
	p, _, err := s.acquire(ctx, n, cfg.lease, -1)
	return p, err
}

// TryAcquire takes n permits if they are available and reports whether it did; with
// WaitTime it waits up to that long, and too few permits is (nil, false, nil), not an error.
// Leases and errors are as for Acquire.
func (s *PermitSemaphore) TryAcquire(ctx context.Context, n int, opts ...TryLockOption) (*Permits, bool, error) {
	cfg, err := configure(ctx, &s.p.owner, opts, TryLockOption.applyTry)
	if err != nil {
		return nil, false, err
	}
	return s.acquire(ctx, n, cfg.lease, cfg.wait)
}

func (s *PermitSemaphore) acquire(ctx context.Context, n int, lease, limit time.Duration) (p *Permits, ok bool, err error) {
	if n < 1 || n > maxPermitsPerCall {
		return nil, false, invalid("permits", "must be in [1, %d], got %d", maxPermitsPerCall, n)
	}
	end, open := s.p.c.begin() // Shutdown awaits the acquisition, and what it leaves to clean up
	defer end()
	if !open {
		return nil, false, s.p.wrap(ErrClosed)
	}
	start := time.Now()
	defer func() { s.p.c.obs.acquired(ctx, s.p.what, s.p.name, n, start, ok, err) }()
	c := s.p.c
	ids := make([]string, n)
	raw := make([]byte, 16*n)
	if _, err := rand.Read(raw); err != nil {
		return nil, false, s.p.wrap(fmt.Errorf("random permit IDs: %w", err))
	}
	for i := range ids {
		ids[i] = hex.EncodeToString(raw[16*i : 16*(i+1)])
	}
	ttl := c.leaseOr(lease)
	var sent time.Time
	a := attemptFunc(func(ctx context.Context) (int64, bool, error) {
		sent = time.Now()
		return s.attempt(ctx, ids, ttl)
	})
	ok, err = c.acquirePermits(ctx, s.channel, limit, nil, a) // permits are not handed on: they carry their IDs and leases
	if !ok {
		return nil, false, err
	}
	p = &Permits{s: s, ids: ids, since: sent, lease: c.wd.Start(c.permitKind, s.p.name, strings.Join(ids, ""), sent, ttl, lease == 0)}
	if !p.Valid() {
		p.lease.Lose("the lease ran out before the acquire returned")
		// A repeat of the acquire may have set a lease later than the one timed here: the
		// permits go back rather than wait for it (the release settles in the background).
		c.background(func() { _, _ = s.release(context.WithoutCancel(ctx), ids) })
		return nil, false, s.p.wrap(tag("lease lost: the permits' lease ran out before the acquire returned", ErrLockLost, ErrNotHeld))
	}
	c.permitsHeld.add(p)
	return p, true, nil
}

// attempt makes one acquisition of the permits ids with a lease of ttl. One that succeeds
// wakes the Client's next waiter, which attempts: if no permit is left, its attempt learns
// when the nearest lease ends, which no message announces. One that fails replies the ms
// until then (negative: no lease ends).
func (s *PermitSemaphore) attempt(ctx context.Context, ids []string, ttl time.Duration) (int64, bool, error) {
	o := &s.p.owner
	msg, err := s.p.request(ctx, func(num lua.Numbered) lua.Request {
		now := time.Now()
		// Repeated as its cancel when its outcome is unknown: the caller is told the permits
		// are not its.
		return lua.PermitAcquire{PermitKeys: s.keys(), Numbered: num, ExpiryMs: strconv.FormatInt(now.Add(ttl).UnixMilli(), 10),
			NowMs: strconv.FormatInt(now.UnixMilli(), 10), Publish: o.c.publishCmd, IDs: ids}
	})
	if err != nil || msg.IsNil() { // an error wrapping ErrNotReplicated: withdrawn, whatever it took given back
		return -1, false, err
	}
	if arr, aerr := msg.ToArray(); aerr == nil && len(arr) == 1 {
		ms, err := arr[0].AsInt64()
		return ms, false, o.wrap(err)
	} else if aerr == nil && len(arr) == 2 { // {'total', n}: fewer permits in all than asked for
		total, err := arr[1].AsInt64()
		if err == nil {
			err = invalid("permits", "must be at most the semaphore's %d permits in all, available and acquired, got %d",
				total, len(ids))
		}
		return -1, false, o.wrap(err)
	}
	if _, err := msg.AsInt64(); err != nil {
		return -1, false, o.wrap(err)
	}
	o.c.mux.Wake(s.channel)
	return -1, true, nil
}

// Release gives back the permits with the given IDs (32 hex characters each), acquired by
// any handle or process: every one still acquired, expired or not. It returns an error
// wrapping ErrNotHeld when some were not acquired or had expired. Its repeats and unknown
// outcomes are as for Semaphore.Release. Permits taken by this Client are better released
// with Permits.Release, which also stops their renewal.
func (s *PermitSemaphore) Release(ctx context.Context, ids ...string) error {
	if len(ids) == 0 || len(ids) > maxPermitsPerCall {
		return invalid("permit IDs", "must be 1 to %d, got %d", maxPermitsPerCall, len(ids))
	}
	for _, id := range ids {
		if err := checkPermitID(id); err != nil {
			return err
		}
	}
	live, err := s.release(ctx, ids)
	if replied(err) && live >= 0 && live < len(ids) {
		named := ids
		if len(named) > 4 {
			named = append(ids[:4:4], "…")
		}
		err = s.p.wrap(errors.Join(fmt.Errorf("%w: %d of the permits %s were not acquired or had expired",
			ErrNotHeld, len(ids)-live, strings.Join(named, ", ")), err))
	}
	return err
}

// release gives back the permits ids and returns how many were acquired and unexpired (-1:
// not known, the reply of a repeat).
func (s *PermitSemaphore) release(ctx context.Context, ids []string) (int, error) {
	o := &s.p.owner
	msg, err := s.p.release(ctx, func(num lua.Numbered) lua.Request {
		return lua.PermitRelease{PermitKeys: s.keys(), Numbered: num, NowMs: nowMs(), Publish: o.c.publishCmd, IDs: ids}
	})
	if !replied(err) {
		return 0, err
	}
	live, perr := msg.AsInt64()
	if perr != nil {
		return 0, o.wrap(perr)
	}
	return int(live), err
}
