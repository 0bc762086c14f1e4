package sync

import (
	"context"

	"github.com/latchkey/latchkey/internal/names"
	"github.com/latchkey/latchkey/lua"
)

// FencedLock is a handle on a reentrant lock with fencing tokens, wire-compatible with
// Redisson's RFencedLock: the lock is Lock's (same hash, channel, latch and watchdog), and
// the counter redisson_lock_token:{name} is incremented by every acquisition, re-entries
// included, and never reset.
//
// A lease cannot protect a holder that pauses past it (a GC pause, a stopped process): the
// lock passes to another holder while the paused one still believes it holds it. A token
// can: the holder sends its token with each write, and the store rejects a write whose token
// is older than the newest it has seen. Then a late write of the paused holder is rejected,
// whatever its clocks believe. LockToken and TryLockToken return the hold's token; Lock and
// TryLock take a token too, which Token reads back (as the newest, while the handle holds
// the lock).
//
// It has Lock's methods and guarantees, except that a release never hands the lock to a
// waiting handle of the same Client (each holder must take a token of its own): waiters of
// one Client are woken in turn, and each attempts. A repeated acquisition (its reply lost)
// takes a second token; tokens only grow, which is all fencing needs.
type FencedLock struct{ exclusive }

// FencedLock returns a handle on the fenced lock called name (the Redis key of its hash). It
// makes no network call; an empty name or a bad option is reported by the handle's methods.
func (c *Client) FencedLock(name string, opts ...HandleOption) *FencedLock {
	l := &FencedLock{}
	p := newPlainLock(c, name, names.Prefix("redisson_lock_token", name))
	l.init(c, name, "fenced lock", "", c.lockKind, &p, opts)
	return l
}

// LockToken takes the lock as Lock does and returns the hold's token: higher than that of
// every earlier acquisition of the lock, by any handle.
func (l *FencedLock) LockToken(ctx context.Context, opts ...LockOption) (int64, error) {
	cfg, err := configure(ctx, &l.o.owner, opts, LockOption.applyLock)
	if err != nil {
		return 0, err
	}
	var out lua.Acquired
	if _, err := l.acquire(ctx, cfg.lease, -1, &out); err != nil {
		return 0, err
	}
	return out.Token, nil
}

// TryLockToken takes the lock as TryLock does and returns the hold's token, and whether it
// took the lock (0, false when it did not).
func (l *FencedLock) TryLockToken(ctx context.Context, opts ...TryLockOption) (int64, bool, error) {
	cfg, err := configure(ctx, &l.o.owner, opts, TryLockOption.applyTry)
	if err != nil {
		return 0, false, err
	}
	var out lua.Acquired
	ok, err := l.acquire(ctx, cfg.lease, cfg.wait, &out)
	if !ok || err != nil {
		return 0, false, err
	}
	return out.Token, true, nil
}

// Token returns the newest token the lock has given (0 when it has given none). Bounded as
// Lock.IsLocked.
func (l *FencedLock) Token(ctx context.Context) (int64, error) {
	if err := l.o.check(ctx); err != nil {
		return 0, err
	}
	return l.o.getInt(ctx, l.tokenKey())
}

func (l *FencedLock) tokenKey() string { return l.v.(*plainLock).token }
