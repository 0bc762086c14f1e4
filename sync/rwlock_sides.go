package sync

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/latchkey/latchkey/lua"
	"github.com/latchkey/latchkey/pubsub"
)

// rwShared is what a read-write lock's two sides share. The sides are variants of exclusive
// over one hash: the reader's holds are the field <owner> with a timeout key each, the
// writer's the field <owner>:write. They share the channel, on which every release
// publishes, and the writers' claims.
type rwShared struct {
	channel string // redisson_rwlock:{name}
	writers string // waiting writers' claims
	prefix  string // the lock's key prefix, before :<owner>:rwlock_timeout
}

func (k *rwShared) wakeCh(*holder) string { return k.channel }

// prepare: readers and writers wait on the one channel and never join a local queue (a
// reader queued behind a writer would wait for a release it does not need). Every message
// wakes every waiter, a 0 too (a Java read release): the one waiter a 0 wakes may be a
// reader held back by a writer's claim, which would swallow it.
func (k *rwShared) prepare(_ *lockAttempt, w *wait) { w.join, w.policy = false, pubsub.AllPolicy }

// forceRelease: RWLock has no ForceUnlock.
func (k *rwShared) forceRelease(*holder) lua.Request { return nil }

// readSide is the reader's variant.
type readSide struct {
	rwShared
	writer string // a Reentrant handle's writer: its own write hold lets it read (a downgrade)
}

func (r *readSide) request(o *holder, leaseMs string, _ *lockAttempt) lua.Acquire {
	return lua.ReadAcquire{Lock: o.name, Timeouts: readTimeouts(o.name, o.id), Writers: r.writers, LeaseMs: leaseMs,
		Owner: o.id, Writer: r.writer, NowMs: nowMs()}
}

func (r *readSide) replied(_ *holder, _ *lockAttempt, ttl int64, ok bool, err error) (int64, bool, error) {
	return ttl, ok, err
}

// left: a reader makes no claim.
func (r *readSide) left(context.Context, *holder, *lockAttempt, time.Time) {}

func (r *readSide) release(o *holder, holds int, num lua.Numbered) lua.Request {
	return lua.ReadRelease{Lock: o.name, Channel: r.channel, Timeouts: readTimeouts(o.name, o.id), Prefix: r.prefix,
		Numbered: num, Writers: r.writers, Owner: o.id, Publish: o.c.publishCmd, Holds: holds, NowMs: nowMs(),
		LeaseMs: msOf(o.ttl())}
}

func (r *readSide) unlock(ctx context.Context, o *holder) error { return releaseOne(ctx, o, r) }

// writeSide is the writer's variant. A waiting writer claims the lock, which makes new
// readers wait, and attempts again within a third of the fair wait time to keep its claim.
type writeSide struct {
	rwShared
	// own is a Reentrant handle's writer, whose goroutines share its claim: waits counts
	// their waits under way, and the last to stop waiting withdraws the claim. (The channel,
	// which every reader and writer shares, cannot tell.)
	own   *holder
	waits atomic.Int32
}

// request counts a wait of the handle's own writer at its first attempt.
func (w *writeSide) request(o *holder, leaseMs string, a *lockAttempt) lua.Acquire {
	if a != nil && o == w.own && !a.counted {
		a.counted = true
		w.waits.Add(1)
	}
	return lua.WriteAcquire{Lock: o.name, Writers: w.writers, LeaseMs: leaseMs, Owner: o.id, NowMs: nowMs(),
		ClaimMs: o.c.fairWaitMs, Waiting: a != nil}
}

// replied ends the count of a wait that took the lock, or whose take too few replicas
// confirmed: that take dropped the claim, and another wait of the writer's keeps it.
func (w *writeSide) replied(o *holder, a *lockAttempt, ttl int64, ok bool, err error) (int64, bool, error) {
	if a != nil && a.counted && (ok || errors.Is(err, ErrNotReplicated)) {
		a.counted = false
		w.waits.Add(-1)
	}
	return o.c.keepAlive(ttl), ok, err
}

// left drops the writer's claim after the wait of a ended without the lock, and wakes the
// readers it held back — unless another wait of the handle's own writer goes on; in the
// background, awaited until until at most (see holder.withdraw).
func (w *writeSide) left(ctx context.Context, o *holder, a *lockAttempt, until time.Time) {
	if a.counted {
		a.counted = false
		w.waits.Add(-1)
	}
	if o == w.own && w.waits.Load() > 0 {
		return
	}
	o.withdraw(ctx, until, lua.WriteLeave{Writers: w.writers, Channel: w.channel, Owner: o.id, Publish: o.c.publishCmd}, nil)
}

func (w *writeSide) release(o *holder, holds int, num lua.Numbered) lua.Request {
	return lua.WriteRelease{Lock: o.name, Channel: w.channel, Numbered: num, Writers: w.writers, LeaseMs: msOf(o.ttl()),
		Owner: o.id, Publish: o.c.publishCmd, Holds: holds}
}

func (w *writeSide) unlock(ctx context.Context, o *holder) error { return releaseOne(ctx, o, w) }
