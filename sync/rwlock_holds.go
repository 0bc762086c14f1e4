package sync

import (
	"context"
	"fmt"

	"github.com/latchkey/latchkey/lua"
	"github.com/latchkey/latchkey/watchdog"
)

// RUnlock releases one read hold: the oldest, unless the handle is Reentrant. Its guarantee
// and errors are Lock.Unlock's.
func (l *RWLock) RUnlock(ctx context.Context) error {
	return l.unlock(ctx, false)
}

// Unlock releases one write hold: the oldest, unless the handle is Reentrant. Its guarantee
// and errors are Lock.Unlock's. At the last write hold every waiter is woken; if a Reentrant
// handle still holds read locks (a downgrade), the lock stays in read mode.
func (l *RWLock) Unlock(ctx context.Context) error {
	return l.unlock(ctx, true)
}

// unlock releases one read or write hold.
func (l *RWLock) unlock(ctx context.Context, write bool) error {
	if l.reentrant {
		return l.unlockAs(ctx, &l.rwPair, write)
	}
	if err := l.r.check(ctx); err != nil {
		return err
	}
	held, mode := &l.reads, "read"
	if write {
		held, mode = &l.writes, "write"
	}
	h, ok := held.pop()
	if !ok {
		return l.r.wrap(fmt.Errorf("%w: the handle holds no %s lock", ErrNotHeld, mode))
	}
	err := l.unlockAs(ctx, h.o, write)
	l.returnPair(h.o, h.o.side(write), func() { held.unpop(h) }) // kept: Redis refused the release
	return overlapped(err, h, &l.r)
}

// unlockAs releases one read or write hold of p's.
func (l *RWLock) unlockAs(ctx context.Context, p *rwPair, write bool) error {
	if write {
		o := &p.w
		return o.release(ctx, func(_ bool, num lua.Numbered) (lua.Request, *lockHeir) { return l.writeRelease(p, o.count, num), nil })
	}
	o := &p.r
	return o.release(ctx, func(_ bool, num lua.Numbered) (lua.Request, *lockHeir) { return l.readRelease(p, o.count, num), nil })
}

// readRelease makes p's numbered release of one of holds read holds it has in Redis.
func (l *RWLock) readRelease(p *rwPair, holds int, num lua.Numbered) lua.Request {
	o := &p.r
	return lua.ReadRelease{Lock: o.name, Channel: l.channel, Timeouts: p.timeouts, Prefix: l.prefix, Numbered: num,
		Writers: l.writers, Owner: o.id, Publish: o.c.publishCmd, Holds: holds, NowMs: nowMs(), LeaseMs: msOf(o.ttl())}
}

// writeRelease makes p's numbered release of one of holds write holds it has in Redis.
func (l *RWLock) writeRelease(p *rwPair, holds int, num lua.Numbered) lua.Request {
	o := &p.w
	return lua.WriteRelease{Lock: o.name, Channel: l.channel, Numbered: num, Writers: l.writers, LeaseMs: msOf(o.ttl()),
		Owner: o.id, Publish: o.c.publishCmd, Holds: holds}
}

// IsLocked reports whether anyone holds the lock, to read or to write.
func (l *RWLock) IsLocked(ctx context.Context) (bool, error) { return l.r.exists(ctx) }

// Lost returns a channel closed when the lease of the handle's current (or most recent)
// write hold is lost while held; RLost does the same for its read holds. What they can and
// cannot promise is as for Lock.Lost.
func (l *RWLock) Lost() <-chan struct{} {
	if l.reentrant {
		return l.w.lostCh()
	}
	return l.writes.lost()
}

// RLost returns a channel closed when the lease of the handle's current (or most recent)
// read holds is lost while held (see Lost).
func (l *RWLock) RLost() <-chan struct{} {
	if l.reentrant {
		return l.r.lostCh()
	}
	return l.reads.lost()
}

// side is p's writer, or its reader.
func (p *rwPair) side(write bool) *holder {
	if write {
		return &p.w
	}
	return &p.r
}

// current is the owner and lease of the write (or read) hold the next Unlock (RUnlock) ends:
// a Reentrant handle's own (its lease nil before its first hold), or nil when a mutex handle
// holds none.
func (l *RWLock) current(write bool) (*holder, *watchdog.Lease) {
	if l.reentrant {
		o := l.side(write)
		return o, o.lease.Load()
	}
	held := &l.reads
	if write {
		held = &l.writes
	}
	h, ok := held.peek()
	if !ok {
		return nil, nil
	}
	return h.o.side(write), h.lease
}

// valid reports whether the handle's write (or read) holds are live now (see Lock.Valid).
func (l *RWLock) valid(write bool) bool {
	if l.reentrant {
		return l.side(write).valid()
	}
	if write {
		return l.writes.valid()
	}
	return l.reads.valid()
}

// Reader returns the read lock of l as a Locker, for a MultiLock: its TryLock is TryRLock,
// its Unlock RUnlock.
func (l *RWLock) Reader() Locker {
	if l == nil {
		return nil
	}
	return rwReader{l}
}

type rwReader struct{ l *RWLock }

func (r rwReader) TryLock(ctx context.Context, opts ...TryLockOption) (bool, error) {
	return r.l.TryRLock(ctx, opts...)
}

func (r rwReader) Unlock(ctx context.Context) error { return r.l.RUnlock(ctx) }

func (r rwReader) Valid() bool { return r.l.valid(false) }

func (r rwReader) Name() string { return r.l.Name() }

// Valid reports whether the handle's write hold is live now: its lease, as last confirmed
// by Redis, is ahead by the monotonic clock (see Lock.Valid).
func (l *RWLock) Valid() bool { return l.valid(true) }

// readTimeoutKeys are the timeout key prefixes of a batch of read holds' owners.
func readTimeoutKeys(b watchdog.Batch) []string {
	keys := make([]string, len(b.Keys))
	for i, k := range b.Keys {
		keys[i] = readTimeouts(k, b.Owners[i])
	}
	return keys
}
