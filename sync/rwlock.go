package sync

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/latchkey/latchkey/lua"
	"github.com/latchkey/latchkey/pubsub"
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
// fleet Java readers can still keep a writer waiting.) A reader re-entering, or taking a
// read lock under its own write lock, never waits.
//
// The handle is one owner, as Lock's is: its read and write holds each nest, and each Lock
// or RLock is matched by one Unlock or RUnlock. Holding the write lock, it may take read
// locks too (a downgrade, as in Redisson); holding only read locks, it may not take the
// write lock: Lock and TryLock return ErrWouldDeadlock at once (Redisson would wait for
// ever). Nor should a goroutine holding a read lock take another through a second handle:
// behind a waiting writer, that reader waits for a writer that waits for it.
//
// Leases, contexts, unknown outcomes and Lost work as for Lock; read holds are renewed by
// their own watchdog kind, which renews each hold's timeout key. Waiters neither queue
// locally nor are handed the lock: every release wakes every local waiter, and each attempts.
type RWLock struct {
	r, w     owner  // the reader (field <owner>) and the writer (<owner>:write)
	channel  string // redisson_rwlock:{name}
	writers  string // waiting writers' claims
	timeouts string // the reader's timeout key prefix
	prefix   string // the lock's key prefix, before :<owner>:rwlock_timeout
}

// RWLock returns a handle on the read-write lock called name (the Redis key of its hash). It
// makes no network call; an empty name is reported by the handle's methods.
func (c *Client) RWLock(name string) *RWLock {
	l := &RWLock{channel: prefixName("redisson_rwlock", name), writers: suffixName(name, "rwlock_writers")}
	l.r.init(c, name, c.readKind)
	l.w.init(c, name, c.lockKind)
	l.w.id = l.r.id + ":write"
	l.r.releaser, l.w.releaser = l.readRelease, l.writeRelease
	l.timeouts = readTimeouts(name, l.r.id)
	l.prefix = strings.TrimSuffix(suffixName(name, ""), ":")
	return l
}

// readTimeouts is the prefix of owner's read hold timeout keys on the lock called name.
func readTimeouts(name, owner string) string { return suffixName(name, owner) + ":rwlock_timeout" }

// Name returns the lock's name, which is its Redis key.
func (l *RWLock) Name() string { return l.r.name }

// Owner returns the handle's owner ID, "<client UUID>:<n>": the hash field of its read
// holds; its write holds are under Owner()+":write".
func (l *RWLock) Owner() string { return l.r.id }

// RLock takes a read lock, waiting as long as ctx allows while a writer holds the lock or
// waits for it. Errors are as for Lock.Lock.
func (l *RWLock) RLock(ctx context.Context, opts ...LockOption) error {
	cfg, err := configure(ctx, &l.r, opts, LockOption.applyLock)
	if err != nil {
		return err
	}
	_, err = l.acquire(ctx, false, cfg.lease, -1)
	return err
}

// TryRLock takes a read lock if no writer holds the lock or waits for it (or the writer is
// this handle), and reports whether it did; with WaitTime it waits up to that long. Errors
// are as for Lock.TryLock.
func (l *RWLock) TryRLock(ctx context.Context, opts ...TryLockOption) (bool, error) {
	cfg, err := configure(ctx, &l.r, opts, TryLockOption.applyTry)
	if err != nil {
		return false, err
	}
	return l.acquire(ctx, false, cfg.lease, cfg.wait)
}

// Lock takes the write lock, waiting as long as ctx allows; while it waits, new readers
// wait too. It returns ErrWouldDeadlock if the handle holds read locks but not the write
// lock. Other errors are as for Lock.Lock.
func (l *RWLock) Lock(ctx context.Context, opts ...LockOption) error {
	cfg, err := configure(ctx, &l.w, opts, LockOption.applyLock)
	if err != nil {
		return err
	}
	_, err = l.acquire(ctx, true, cfg.lease, -1)
	return err
}

// TryLock takes the write lock if nobody else holds the lock, and reports whether it did;
// with WaitTime it waits up to that long. It returns ErrWouldDeadlock as Lock does; other
// errors are as for Lock.TryLock.
func (l *RWLock) TryLock(ctx context.Context, opts ...TryLockOption) (bool, error) {
	cfg, err := configure(ctx, &l.w, opts, TryLockOption.applyTry)
	if err != nil {
		return false, err
	}
	return l.acquire(ctx, true, cfg.lease, cfg.wait)
}

// acquire attempts, and waits up to limit (negative: without limit), for a read or the write
// lock. Readers and writers wait on the one channel and never join a local queue: a reader
// queued behind a writer would wait for a release it does not need.
func (l *RWLock) acquire(ctx context.Context, write bool, lease, limit time.Duration) (bool, error) {
	c := l.r.c
	if write {
		reads, err := l.r.holds(ctx)
		if err != nil {
			return false, err
		}
		writes, err := l.w.holds(ctx)
		if err != nil {
			return false, err
		}
		if reads > 0 && writes == 0 {
			return false, fmt.Errorf("%w: %q: the handle holds read locks and asks for the write lock", ErrWouldDeadlock, l.r.name)
		}
	}
	leaseMs := c.leaseMs(lease)
	a := attemptFunc(func(ctx context.Context) (int64, bool, error) {
		return l.attempt(ctx, write, lease, leaseMs, limit != 0)
	})
	if limit == 0 {
		_, ok, err := a(ctx)
		return ok, err
	}
	// Every message wakes every waiter, a 0 too (a Java read release): the one waiter a 0
	// wakes may be a reader held back by a writer's claim, which would swallow it.
	ok, err := c.acquire(ctx, wait{channel: l.channel, policy: pubsub.AllPolicy, limit: limit, attempt: a})
	if !ok && write {
		l.leave(ctx, c.leaveBy(ctx, err))
	}
	return ok, err
}

// attempt makes one attempt; a waiting writer claims the lock, and attempts again within a
// third of the fair wait time to keep its claim.
func (l *RWLock) attempt(ctx context.Context, write bool, lease time.Duration, leaseMs string, waiting bool) (int64, bool, error) {
	c := l.r.c
	if !write {
		o := &l.r
		return o.attempt(ctx, lease, func() script {
			return script{lua.ReadAcquire, []string{o.name, l.timeouts, l.writers},
				[]string{leaseMs, o.id, l.w.id, strconv.Itoa(o.count), nowMs()}}
		}, nil)
	}
	o := &l.w
	ttl, ok, err := o.attempt(ctx, lease, func() script {
		return script{lua.WriteAcquire, []string{o.name, l.writers},
			[]string{leaseMs, o.id, strconv.Itoa(o.count), nowMs(), c.fairWaitMs, flag(waiting)}}
	}, nil)
	return c.keepAlive(ttl), ok, err
}

// leave drops the writer's claim after a wait that did not end in the lock, and wakes the
// readers it held back; in the background, awaited until until at most (see owner.withdraw).
func (l *RWLock) leave(ctx context.Context, until time.Time) {
	o := &l.w
	_, _ = o.withdraw(ctx, until, script{lua.WriteLeave, []string{l.writers, l.channel}, []string{o.id, o.c.publishCmd}}, nil, nil)
}

// RUnlock releases one read hold. Its guarantee and errors are Lock.Unlock's.
func (l *RWLock) RUnlock(ctx context.Context) error {
	o := &l.r
	return o.release(ctx, func(_ bool, latch, n string) (script, *heir) { return l.readRelease(o.count, latch, n), nil })
}

// readRelease makes the numbered release of one of holds read holds the owner has in Redis.
func (l *RWLock) readRelease(holds int, latch, n string) script {
	o := &l.r
	return script{lua.ReadRelease, []string{o.name, l.channel, l.timeouts, l.prefix, latch, l.writers},
		[]string{"0", o.id, o.c.publishCmd, unlockLatchMs, strconv.Itoa(holds), n, nowMs(),
			strconv.FormatInt(o.ttl().Milliseconds(), 10)}}
}

// Unlock releases one write hold. Its guarantee and errors are Lock.Unlock's. At the last
// write hold every waiter is woken; if the handle still holds read locks (a downgrade), the
// lock stays in read mode.
func (l *RWLock) Unlock(ctx context.Context) error {
	o := &l.w
	return o.release(ctx, func(_ bool, latch, n string) (script, *heir) { return l.writeRelease(o.count, latch, n), nil })
}

// writeRelease makes the numbered release of one of holds write holds the owner has in Redis.
func (l *RWLock) writeRelease(holds int, latch, n string) script {
	o := &l.w
	return script{lua.WriteRelease, []string{o.name, l.channel, latch, l.writers},
		[]string{"1", strconv.FormatInt(o.ttl().Milliseconds(), 10), o.id, o.c.publishCmd, unlockLatchMs,
			strconv.Itoa(holds), n}}
}

// IsLocked reports whether anyone holds the lock, to read or to write.
func (l *RWLock) IsLocked(ctx context.Context) (bool, error) { return l.r.exists(ctx) }

// Lost returns a channel closed when the lease of the handle's current (or most recent)
// write hold is lost while held; RLost does the same for its read holds. What they can and
// cannot promise is as for Lock.Lost.
func (l *RWLock) Lost() <-chan struct{} { return l.w.lostCh() }

// RLost returns a channel closed when the lease of the handle's current (or most recent)
// read holds is lost while held (see Lost).
func (l *RWLock) RLost() <-chan struct{} { return l.r.lostCh() }
