package sync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/latchkey/latchkey/internal/names"
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
// fleet Java readers can still keep a writer waiting.) A Reentrant handle's reader
// re-entering, or taking a read lock under its own write lock, never waits.
//
// A handle is safe for concurrent use, and goroutines sharing it exclude each other as they
// would through one sync.RWMutex: each RLock and Lock takes its hold as an owner of its own,
// each RUnlock ends the oldest read hold and each Unlock the oldest write hold, from any
// goroutine. As with sync.RWMutex, a goroutine holding a read lock must not take another
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
	// rwPair names the handle and checks its calls; made Reentrant, it is the handle's one
	// owner pair.
	rwPair
	reentrant bool
	reads     holds[*rwPair] // a mutex handle's read holds
	writes    holds[*rwPair] // a mutex handle's write holds
	channel   string         // redisson_rwlock:{name}
	writers   string         // waiting writers' claims
	prefix    string         // the lock's key prefix, before :<owner>:rwlock_timeout
}

// An rwPair is one owner of a read-write lock: its reader (field <owner>) and its writer
// (<owner>:write).
type rwPair struct {
	r, w     holder
	timeouts string // the reader's timeout key prefix
	// writes counts the writer's waits under way: a Reentrant handle's goroutines share one
	// writer, and so its claim, which the last to stop waiting withdraws. (The channel,
	// which every reader and writer shares, cannot tell.)
	writes atomic.Int32
}

// RWLock returns a handle on the read-write lock called name (the Redis key of its hash). It
// makes no network call; an empty name or a bad option is reported by the handle's methods.
func (c *Client) RWLock(name string, opts ...HandleOption) *RWLock {
	l := &RWLock{channel: names.Prefix("redisson_rwlock", name), writers: names.Suffix(name, "rwlock_writers")}
	l.prefix = strings.TrimSuffix(names.Suffix(name, ""), ":")
	cfg, err := handleOptions(opts)
	l.reentrant = cfg.reentrant
	l.writes.exclusive = true
	l.pair(c, name, &l.rwPair)
	if l.r.err == nil {
		l.r.err = err
	}
	return l
}

// pair makes p a fresh owner pair of the lock called name.
func (l *RWLock) pair(c *Client, name string, p *rwPair) {
	p.r.init(c, name, "read-write lock", c.readKind)
	p.w.init(c, name, "read-write lock", c.lockKind)
	p.w.id = p.r.id + ":write"
	p.r.releaser = func(holds int, num lua.Numbered) lua.Request { return l.readRelease(p, holds, num) }
	p.w.releaser = func(holds int, num lua.Numbered) lua.Request { return l.writeRelease(p, holds, num) }
	p.timeouts = readTimeouts(name, p.r.id)
}

// readTimeouts is the prefix of owner's read hold timeout keys on the lock called name.
func readTimeouts(name, owner string) string { return names.Suffix(name, owner) + ":rwlock_timeout" }

// borrow returns the owner pair an acquisition takes its hold as: a Reentrant handle's own,
// or else an idle pair of the Client's for the name (see lender).
func (l *RWLock) borrow() *rwPair {
	if l.reentrant {
		return &l.rwPair
	}
	c := l.r.c
	if p, ok := c.rwOwners.take(l.r.name); ok {
		return p
	}
	p := &rwPair{}
	l.pair(c, l.r.name, p)
	return p
}

// returnPair returns a borrowed pair to the Client's idle pairs once its side o holds
// nothing (the other side never held); kept, if not nil, is called if it still holds (see
// Client.returnOwner).
func (l *RWLock) returnPair(p *rwPair, o *holder, kept func()) {
	c := l.r.c
	c.returnOwner(o, func() { c.rwOwners.put(l.r.name, p) }, kept)
}

// Name returns the lock's name, which is its Redis key.
func (l *RWLock) Name() string { return l.r.name }

// Owner returns the owner ID, "<client UUID>:<n>", of the handle's newest hold: the hash
// field of its read holds, whose write holds are under Owner()+":write" ("" when a handle
// not Reentrant holds nothing).
func (l *RWLock) Owner() string {
	if l.reentrant {
		return l.r.id
	}
	if h, ok := l.writes.peek(); ok {
		return h.o.r.id
	}
	if h, ok := l.reads.peek(); ok {
		return h.o.r.id
	}
	return ""
}

// RLock takes a read lock, waiting as long as ctx allows while a writer holds the lock or
// waits for it. Errors are as for Lock.Lock.
func (l *RWLock) RLock(ctx context.Context, opts ...LockOption) error {
	cfg, err := configure(ctx, &l.r.owner, opts, LockOption.applyLock)
	if err != nil {
		return err
	}
	_, err = l.acquire(ctx, false, cfg.lease, -1)
	return err
}

// TryRLock takes a read lock if no writer holds the lock or waits for it (or the writer is
// this Reentrant handle), and reports whether it did; with WaitTime it waits up to that long. Errors
// are as for Lock.TryLock.
func (l *RWLock) TryRLock(ctx context.Context, opts ...TryLockOption) (bool, error) {
	cfg, err := configure(ctx, &l.r.owner, opts, TryLockOption.applyTry)
	if err != nil {
		return false, err
	}
	return l.acquire(ctx, false, cfg.lease, cfg.wait)
}

// Lock takes the write lock, waiting as long as ctx allows; while it waits, new readers
// wait too. It returns ErrWouldDeadlock if the handle is Reentrant and holds read locks but
// not the write lock (a mutex handle's Lock waits for its readers, as sync.RWMutex's does).
// Other errors are as for Lock.Lock.
func (l *RWLock) Lock(ctx context.Context, opts ...LockOption) error {
	cfg, err := configure(ctx, &l.w.owner, opts, LockOption.applyLock)
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
	cfg, err := configure(ctx, &l.w.owner, opts, TryLockOption.applyTry)
	if err != nil {
		return false, err
	}
	return l.acquire(ctx, true, cfg.lease, cfg.wait)
}

// acquire attempts, and waits up to limit (negative: without limit), for a read or the write
// lock.
func (l *RWLock) acquire(ctx context.Context, write bool, lease, limit time.Duration) (ok bool, err error) {
	end, open := l.r.c.begin() // Shutdown awaits the acquisition, and what it leaves to clean up
	defer end()
	if !open {
		return false, l.r.wrap(ErrClosed)
	}
	start := time.Now()
	defer func() { l.r.c.obs.acquired(ctx, l.r.what, l.r.name, 1, start, ok, err) }()
	p, held := l.borrow(), &l.reads
	o := &p.r
	if write {
		o, held = &p.w, &l.writes
	}
	ok, err = l.acquireAs(ctx, p, write, lease, limit)
	switch {
	case p == &l.rwPair:
		o.failed(ok, err)
	case ok:
		held.push(p, o.lease.Load())
	default:
		l.returnPair(p, o, nil)
	}
	return ok, err
}

// acquireAs is acquire, as the owner pair p. Readers and writers wait on the one channel
// and never join a local queue: a reader queued behind a writer would wait for a release it
// does not need.
func (l *RWLock) acquireAs(ctx context.Context, p *rwPair, write bool, lease, limit time.Duration) (bool, error) {
	c := l.r.c
	if write && p == &l.rwPair {
		reads, err := l.r.holds(ctx)
		if err != nil {
			return false, err
		}
		writes, err := l.w.holds(ctx)
		if err != nil {
			return false, err
		}
		if reads > 0 && writes == 0 {
			return false, l.r.wrap(fmt.Errorf("%w: the handle holds read locks and asks for the write lock", ErrWouldDeadlock))
		}
	}
	leaseMs := c.leaseMs(lease)
	a := attemptFunc(func(ctx context.Context) (int64, bool, error) {
		return l.attempt(ctx, p, write, lease, leaseMs, limit != 0)
	})
	if limit == 0 {
		_, ok, err := a(ctx)
		return ok, err
	}
	// Every message wakes every waiter, a 0 too (a Java read release): the one waiter a 0
	// wakes may be a reader held back by a writer's claim, which would swallow it.
	if write {
		p.writes.Add(1)
	}
	ok, err := c.acquire(ctx, wait{channel: l.channel, policy: pubsub.AllPolicy, limit: limit, attempt: a})
	// Unconfirmed, the take dropped the claim (see exclusive.acquire); another wait of the
	// writer's (a Reentrant handle's goroutines) keeps it.
	if write && p.writes.Add(-1) == 0 && !ok && !errors.Is(err, ErrNotReplicated) {
		l.leave(ctx, &p.w, c.leaveBy(ctx, err))
	}
	return ok, err
}

// attempt makes one attempt as p; a waiting writer claims the lock, and attempts again
// within a third of the fair wait time to keep its claim.
func (l *RWLock) attempt(ctx context.Context, p *rwPair, write bool, lease time.Duration, leaseMs string, waiting bool) (int64, bool, error) {
	c := l.r.c
	if !write {
		o, writer := &p.r, ""
		if l.reentrant {
			writer = p.w.id // its own write hold lets it read (a downgrade)
		}
		return o.attempt(ctx, lease, lua.ReadAcquire{Lock: o.name, Timeouts: p.timeouts, Writers: l.writers, LeaseMs: leaseMs,
			Owner: o.id, Writer: writer, NowMs: nowMs()}, nil)
	}
	o := &p.w
	ttl, ok, err := o.attempt(ctx, lease, lua.WriteAcquire{Lock: o.name, Writers: l.writers, LeaseMs: leaseMs, Owner: o.id,
		NowMs: nowMs(), ClaimMs: c.fairWaitMs, Waiting: waiting}, nil)
	return c.keepAlive(ttl), ok, err
}

// leave drops the writer o's claim after a wait that did not end in the lock, and wakes the
// readers it held back; in the background, awaited until until at most (see owner.withdraw).
func (l *RWLock) leave(ctx context.Context, o *holder, until time.Time) {
	o.withdraw(ctx, until, lua.WriteLeave{Writers: l.writers, Channel: l.channel, Owner: o.id, Publish: o.c.publishCmd}, nil)
}
