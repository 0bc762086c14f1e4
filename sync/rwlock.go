package sync

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/latchkey/latchkey/internal/names"
	"github.com/latchkey/latchkey/lua"
	"github.com/latchkey/latchkey/watchdog"
)

// RWLock is a handle on a reentrant read-write lock, wire-compatible with Redisson's
// RReadWriteLock: the hash name → {mode: "read"|"write", <owner>: read holds,
// <owner>:write: write holds}, a key {name}:<owner>:rwlock_timeout:<k> per read hold, and
// releases published on redisson_rwlock:{name} (0 after the last read, 1 after a write).
//
// Like sync.RWMutex, any number of readers may hold it at once, or one writer; a writer that
// waits makes new readers wait, so that a stream of overlapping readers cannot keep it out
// for ever, and a writer's release lets the readers it woke in before the next writer, so
// that writers taking turns cannot keep readers out either. (The writers' claims, in the
// zset {name}:rwlock_writers, are latchkey's: Java readers do not see them, and in a mixed
// fleet Java readers can still keep a writer waiting.) A Reentrant handle's reader
// re-entering, or taking a read lock under its own write lock, never waits.
//
// A handle is safe for concurrent use, and goroutines sharing it exclude each other as they
// would through one sync.RWMutex: each RLock and Lock takes its hold as an owner of its own,
// each RUnlock ends a read hold (a lost one, else the one whose lease ends first) and each
// Unlock the oldest write hold, from any goroutine. As with sync.RWMutex, a goroutine holding a read lock must not take another
// while a writer may be waiting (the writer waits for it, the new reader for the writer).
// Made Reentrant, the handle is one owner, as Lock's is: its read and write holds each nest.
// Holding the write lock, it may take read locks too (a downgrade, as in Redisson); holding
// only read locks, it may not take the write lock: Lock and TryLock return ErrWouldDeadlock
// at once (Redisson would wait for ever).
//
// Leases, contexts, unknown outcomes and Lost work as for Lock; read holds are renewed by
// their own watchdog kind, which renews each hold's timeout key. Waiters neither queue
// locally nor are handed the lock: every release wakes every local waiter, and each attempts.
type RWLock struct {
	read, write exclusive // each side a handle of its own over one hash (rwlock_sides.go)
}

// RWLock returns a handle on the read-write lock called name (the Redis key of its hash). It
// makes no network call; an empty name or a bad option is reported by the handle's methods.
func (c *Client) RWLock(name string, opts ...HandleOption) *RWLock {
	keys := rwShared{channel: names.Prefix("redisson_rwlock", name), writers: names.Suffix(name, "rwlock_writers"),
		prefix: strings.TrimSuffix(names.Suffix(name, ""), ":")}
	l := &RWLock{}
	r, w := &readSide{rwShared: keys}, &writeSide{rwShared: keys}
	l.read.init(c, name, "read-write lock", "", c.readKind, r, opts)
	l.write.init(c, name, "read-write lock", ":write", c.lockKind, w, opts)
	l.read.held.exclusive = false
	l.read.nothing, l.write.nothing = "the handle holds no read lock", "the handle holds no write lock"
	if l.read.reentrant {
		// One owner, as a Java thread is: its write hold is <id>:write, which lets it read.
		l.write.o.id = l.read.o.id + ":write"
		r.writer, w.own = l.write.o.id, &l.write.o
	}
	return l
}

// Name returns the lock's name, which is its Redis key.
func (l *RWLock) Name() string { return l.read.Name() }

// Owner returns the owner ID, "<client UUID>:<n>", of the hold the handle's next Unlock (or,
// holding no write lock, RUnlock) ends: the hash field of its read holds, whose write holds
// are under Owner()+":write" ("" when a handle not Reentrant holds nothing).
func (l *RWLock) Owner() string {
	if l.read.reentrant {
		return l.read.o.id
	}
	if o, _ := l.write.current(); o != nil {
		return strings.TrimSuffix(o.id, ":write")
	}
	return l.read.Owner()
}

// RLock takes a read lock, waiting as long as ctx allows while a writer holds the lock or
// waits for it. Errors are as for Lock.Lock.
func (l *RWLock) RLock(ctx context.Context, opts ...LockOption) error {
	return l.read.Lock(ctx, opts...)
}

// TryRLock takes a read lock if no writer holds the lock or waits for it (or the writer is
// the handle itself), and reports whether it did; with WaitTime it waits up to that long.
// Errors are as for Lock.TryLock.
func (l *RWLock) TryRLock(ctx context.Context, opts ...TryLockOption) (bool, error) {
	return l.read.TryLock(ctx, opts...)
}

// Lock takes the write lock, waiting as long as ctx allows; while it waits, new readers
// wait too. It returns ErrWouldDeadlock if the handle is Reentrant and holds read locks but
// not the write lock (a mutex handle's Lock waits for its readers, as sync.RWMutex's does).
// Other errors are as for Lock.Lock.
func (l *RWLock) Lock(ctx context.Context, opts ...LockOption) error {
	cfg, err := configure(ctx, &l.write.o.owner, opts, LockOption.applyLock)
	if err == nil {
		err = l.mayWrite(ctx)
	}
	if err != nil {
		return err
	}
	_, err = l.write.acquire(ctx, cfg.lease, -1, nil)
	return err
}

// TryLock takes the write lock if nobody else holds the lock, and reports whether it did;
// with WaitTime it waits up to that long. It returns ErrWouldDeadlock as Lock does; other
// errors are as for Lock.TryLock.
func (l *RWLock) TryLock(ctx context.Context, opts ...TryLockOption) (bool, error) {
	cfg, err := configure(ctx, &l.write.o.owner, opts, TryLockOption.applyTry)
	if err == nil {
		err = l.mayWrite(ctx)
	}
	if err != nil {
		return false, err
	}
	return l.write.acquire(ctx, cfg.lease, cfg.wait, nil)
}

// mayWrite refuses the write lock to a Reentrant handle that holds read locks but not the
// write lock: it would wait for ever for its own readers (Redisson would).
func (l *RWLock) mayWrite(ctx context.Context) error {
	if !l.read.reentrant {
		return nil
	}
	reads, err := l.read.o.holds(ctx)
	if err != nil {
		return err
	}
	writes, err := l.write.o.holds(ctx)
	if err != nil {
		return err
	}
	if reads > 0 && writes == 0 {
		return l.read.o.wrap(fmt.Errorf("%w: the handle holds read locks and asks for the write lock", ErrWouldDeadlock))
	}
	return nil
}

// RUnlock releases one read hold: unless the handle is Reentrant, a lost one, else the one
// whose lease ends first, so that the holds left cover at least as long. Its guarantee
// and errors are Lock.Unlock's.
func (l *RWLock) RUnlock(ctx context.Context) error { return l.read.Unlock(ctx) }

// Unlock releases one write hold: the oldest, unless the handle is Reentrant. Its guarantee
// and errors are Lock.Unlock's. At the last write hold every waiter is woken; if a Reentrant
// handle still holds read locks (a downgrade), the lock stays in read mode.
func (l *RWLock) Unlock(ctx context.Context) error { return l.write.Unlock(ctx) }

// IsLocked reports whether anyone holds the lock, to read or to write.
func (l *RWLock) IsLocked(ctx context.Context) (bool, error) { return l.read.o.exists(ctx) }

// Lost returns a channel closed when the lease of the handle's current (or most recent)
// write hold is lost while held; RLost does the same for its read holds. What they can and
// cannot promise is as for Lock.Lost.
func (l *RWLock) Lost() <-chan struct{} { return l.write.Lost() }

// RLost returns a channel closed when the lease of the handle's current (or most recent)
// read holds is lost while held (see Lost).
func (l *RWLock) RLost() <-chan struct{} { return l.read.Lost() }

// Valid reports whether the handle's write hold is live now: its lease, as last confirmed
// by Redis, is ahead by the monotonic clock (see Lock.Valid).
func (l *RWLock) Valid() bool { return l.write.Valid() }

// Reader returns the read lock of l as a Locker, for a MultiLock: its TryLock is TryRLock,
// its Unlock RUnlock.
func (l *RWLock) Reader() Locker {
	if l == nil {
		return nil
	}
	return rwReader{&l.read}
}

// rwReader is an RWLock's read side as a Locker, and nothing more.
type rwReader struct{ l *exclusive }

func (r rwReader) TryLock(ctx context.Context, opts ...TryLockOption) (bool, error) {
	return r.l.TryLock(ctx, opts...)
}

func (r rwReader) Unlock(ctx context.Context) error { return r.l.Unlock(ctx) }
func (r rwReader) Valid() bool                      { return r.l.Valid() }
func (r rwReader) Name() string                     { return r.l.Name() }
func (r rwReader) where() string                    { return r.l.where() }

// HoldContext returns a copy of parent cancelled when the handle's write hold ends, as
// Lock.HoldContext does; RHoldContext does the same for a read hold. On a handle shared by
// readers, the read hold is the one the next RUnlock ends — an already lost one, else the one
// whose lease ends first — which another reader's RUnlock may end.
func (l *RWLock) HoldContext(parent context.Context) (context.Context, context.CancelFunc) {
	return l.write.HoldContext(parent)
}

// RHoldContext returns a copy of parent cancelled when the handle's read hold ends (see
// HoldContext).
func (l *RWLock) RHoldContext(parent context.Context) (context.Context, context.CancelFunc) {
	return l.read.HoldContext(parent)
}

// Extend makes the handle's write hold last at least lease from now, as Lock.Extend does;
// RExtend does the same for a read hold (the one the next RUnlock ends).
func (l *RWLock) Extend(ctx context.Context, lease time.Duration) error {
	return l.write.Extend(ctx, lease)
}

// RExtend makes the handle's read hold last at least lease from now (see Extend): its read
// holds' timeout keys, and the lock's TTL.
func (l *RWLock) RExtend(ctx context.Context, lease time.Duration) error {
	o, hold := l.read.current()
	if o == nil {
		o = &l.read.o
	}
	return o.extend(ctx, hold, lease, func(ms string) lua.Request {
		return lua.ReadRenew{Locks: []string{o.name}, Timeouts: []string{readTimeouts(o.name, o.id)}, LeaseMs: ms, Owners: []string{o.id}}
	})
}

// readTimeouts is the prefix of owner's read hold timeout keys on the lock called name.
func readTimeouts(name, owner string) string { return names.Suffix(name, owner) + ":rwlock_timeout" }

// readTimeoutKeys are the timeout key prefixes of a batch of read holds' owners.
func readTimeoutKeys(b watchdog.Batch) []string {
	keys := make([]string, len(b.Keys))
	for i, k := range b.Keys {
		keys[i] = readTimeouts(k, b.Owners[i])
	}
	return keys
}
