package sync

import (
	"context"
	"strconv"
	"time"

	"github.com/latchkey/latchkey/lua"
)

// FairLock is a handle on a fair reentrant lock, wire-compatible with Redisson's fair lock
// (RedissonFairLock): the lock hash is Lock's, and waiters queue in Redis, in the list
// redisson_lock_queue:{name} with their deadlines in the zset redisson_lock_timeout:{name}.
// It has Lock's methods and guarantees; what differs is who gets the lock.
//
// Waiters get the lock in the order they first attempted it, across every Client and every
// Java process on the same name. A release tells only the head waiter, on its own channel
// (redisson_lock__channel:{name}:<owner ID>); nobody else attempts. A TryLock without wait
// time takes the lock only when nobody is queued, and never queues. A waiter whose wait
// ends (its context, its wait time) leaves the queue, and the waiters behind move up.
//
// A waiter keeps its place alive by attempting again at least every third of the Client's
// fair wait time (WithFairLockWaitTimeout, by default the watchdog timeout). A waiter that
// stops — its process died, or Redis was unreachable for that long — loses its place once
// it reaches the head and a wait time has passed since its last attempt (plus one for every
// stopped waiter dropped ahead of it: as in Redisson, dropping a stale head does not move
// the deadlines behind); should it still be waiting, its next attempt queues it again at the
// tail. So each crashed waiter holds up the queue for one wait time at most — a process that
// dies with k waiters queued, k wait times — not Redisson's default of 5 minutes each. Java
// processes sharing the lock must use the same wait time (docs/redisson-interop.md).
//
// Fairness costs throughput under contention: every hand-over goes through Redis and the
// next waiter's round trip, with no local hand-off.
type FairLock struct{ exclusive }

// FairLock returns a handle on the fair lock called name (the Redis key of its hash). It
// makes no network call; an empty name is reported by the handle's methods.
func (c *Client) FairLock(name string) *FairLock {
	l := &FairLock{}
	l.init(c, name, &fairKeys{
		queue:    prefixName("redisson_lock_queue", name),
		timeouts: prefixName("redisson_lock_timeout", name),
	})
	return l
}

// fairKeys are a fair lock's keys besides its hash: the queue of waiting owners, and the
// zset of their deadlines.
type fairKeys struct{ queue, timeouts string }

// leave takes the owner's place out of the queue after a wait that did not end in the lock.
func (l *exclusive) leave(ctx context.Context) {
	o, f := &l.o, l.fair
	o.withdraw(ctx, script{lua.FairLeave, []string{o.name, f.queue, f.timeouts, l.channel},
		[]string{o.id, o.c.fairWaitMs, o.c.publishCmd, "0"}})
}

// keepAlive shortens a waiter's wait hint (ms, negative: unknown) so that it attempts
// again within a third of the fair wait time: a place in a fair lock's queue, or a waiting
// writer's claim, lapses a wait time after its last attempt.
func (c *Client) keepAlive(ttl int64) int64 {
	if every := c.fairWait.Milliseconds() / 3; ttl < 0 || ttl > every {
		return every
	}
	return ttl
}

// nowMs is the wall clock in epoch ms, as Redisson's fair lock scripts take it: processes
// sharing a fair lock must keep their clocks in sync.
func nowMs() string { return strconv.FormatInt(time.Now().UnixMilli(), 10) }

// flag is a boolean as a script argument.
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
