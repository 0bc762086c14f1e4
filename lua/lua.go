// Package lua holds every Redis script latchkey runs, one embedded .lua file per script.
//
// Each script is one atomic state change and follows the effects, replies and pub/sub
// messages that Redisson's scripts have (see docs/redisson-interop.md), so Go and Java
// processes can work on the same keys. Every script that changes state is safe to repeat:
// counts come from the caller, leases only grow, and releases are numbered on the owner's
// unlock latch. A key holding a value a script cannot use (a word where a count belongs)
// stops it with a WRONGTYPE error (lib.lua's wrong_type). The values are immutable and safe
// to share.
package lua

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"

	"github.com/redis/rueidis"
)

// A Script is one of the scripts below. Exec (rueidis's) runs it by SHA, and whole where
// Redis lacks it (NOSCRIPT); ExecMulti runs it so several times in a pipeline; Cmd builds it
// as a command, to be pipelined with others (such as a WAIT that must follow it on the same
// connection).
type Script struct {
	*rueidis.Lua
	file     string // the script's body, in this package
	src, sha string
}

// files are the scripts' bodies and lib.lua, their helpers.
//
//go:embed *.lua
var files embed.FS

// lib is the helpers' source (see helpers.go).
var lib = body("lib.lua")

// scripts are all the Scripts, in the order declared.
var scripts []*Script

// body is the embedded file's text.
func body(file string) string {
	b, err := files.ReadFile(file)
	if err != nil {
		panic("lua: " + err.Error())
	}
	return string(b)
}

// newScript is the script whose body is file, run by SHA, with the helpers it uses.
func newScript(file string) *Script {
	src := withHelpers(body(file))
	sum := sha1.Sum([]byte(src))
	s := &Script{Lua: rueidis.NewLuaScript(src), file: file, src: src, sha: hex.EncodeToString(sum[:])}
	scripts = append(scripts, s)
	return s
}

// ExecMulti runs the script once for each of multi, pipelined (on a Cluster, one pipeline
// per node), by SHA, and returns the results in multi's order. The runs a node answers
// NOSCRIPT (it lacks the script: a restart, a failover, the script's first run there) go
// again whole, in a second pipeline, which loads it there. It replaces rueidis's
// Lua.ExecMulti, which first loads the script on every node of the client, whole, at every
// call: a round trip more per call, and every run failed while any node is unreachable,
// even one no run goes to.
func (s *Script) ExecMulti(ctx context.Context, c rueidis.Client, multi ...rueidis.LuaExec) []rueidis.RedisResult {
	cmds := make(rueidis.Commands, len(multi))
	for i, m := range multi {
		cmds[i] = s.Cmd(c.B(), m.Keys, m.Args, false)
	}
	res := c.DoMulti(ctx, cmds...)
	var again []int
	for i, r := range res {
		if err, ok := rueidis.IsRedisErr(r.Error()); ok && err.IsNoScript() {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return res
	}
	whole := make(rueidis.Commands, len(again))
	for j, i := range again {
		whole[j] = s.Cmd(c.B(), multi[i].Keys, multi[i].Args, true)
	}
	for j, r := range c.DoMulti(ctx, whole...) {
		res[again[j]] = r
	}
	return res
}

// SHA is the SHA1 the script runs by: EVALSHA's argument.
func (s *Script) SHA() string { return s.sha }

// Cmd builds the script as EVALSHA — or as EVAL, whole, when whole is set (Redis lacked it:
// NOSCRIPT).
func (s *Script) Cmd(b rueidis.Builder, keys, args []string, whole bool) rueidis.Completed {
	if whole {
		return b.Eval().Script(s.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	}
	return b.Evalsha().Sha1(s.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

var (
	// LockAcquire takes or re-enters a reentrant lock: KEYS [lock, (waiting clients,
	// listener), (token counter)], ARGV [leaseMs, owner, holdsKnown, (token, registrationMs,
	// othersWaiting (1/0), publishCmd)]; the count becomes holdsKnown+1 and the TTL at least
	// leaseMs. It replies nil when acquired, -3 when holdsKnown > 0 but the owner's field is
	// gone (nothing changes), or the holder's PTTL — and then, given a token, registers it as
	// a waiting client's (a latchkey addition) and replies {PTTL} when that client is the
	// listener, which hears the lock channel for the others; given one, a take drops that
	// registration, and the listening of a client with no other waiter.
	LockAcquire = newScript("lock_acquire.lua")

	// LockRelease drops one hold of a reentrant lock and, when it frees the lock, wakes the
	// next waiting client: KEYS [lock, channel, owner's latch, waiting clients, listener], ARGV
	// [leaseMs, owner, publishCmd, latchMs, holdsKnown, requestNumber, token, waitersLeft
	// (1/0), registrationMs, (heir, heirLeaseMs)]; the count becomes holdsKnown-1 (the TTL
	// at least leaseMs), and the lock is freed at 0. It replies nil (not held), 0 (still
	// held), 1 (freed: 0 published on the next registered client's channel,
	// <clients>:<token>, and 00 on the lock channel) or 2 (handed to the heir, who holds it
	// once with its lease; no message). A client with no waiter left stops listening. The latch keeps the owner's highest request number:
	// a repeat of a request replies what the first run did, and an older one arriving late
	// changes nothing.
	LockRelease = newScript("lock_release.lua")

	// LockForceRelease deletes a lock whoever holds it and wakes the next waiting client as
	// LockRelease does: KEYS [lock, channel, waiting clients], ARGV [publishCmd]. It replies
	// 1 if a lock was deleted; a key that is no hash is refused (WRONGTYPE), not deleted.
	LockForceRelease = newScript("lock_force_release.lua")

	// LockLeave drops a client's registration as a waiter of a plain lock when its last
	// waiter gives up, and its listening: KEYS [lock, waiting clients, channel, listener],
	// ARGV [token, publishCmd, registrationMs]. If the registration was gone already and the lock is free, it
	// wakes the next client.
	LockLeave = newScript("lock_leave.lua")

	// LockRenew sets the TTL of every listed lock its owner still holds to at least the lease:
	// KEYS [lock1..k], ARGV [leaseMs, owner1..k]. It replies an array of 1 (renewed) and 0
	// (not held). Renewal rounds go out with Script.ExecMulti, by SHA.
	LockRenew = newScript("lock_renew.lua")

	// FairAcquire takes or re-enters a fair lock, or keeps the caller's place in its queue:
	// KEYS [lock, queue, deadlines, leases], ARGV [leaseMs, owner, holdsKnown, waitMs, nowMs,
	// queue (1/0), token]. It replies as LockAcquire, except that a waiter gets the ms until the lock
	// may come to it with no message. A queued waiter's deadline is refreshed by every
	// attempt, and its lease recorded, so that a release can grant it the lock.
	FairAcquire = newScript("fair_acquire.lua")

	// FairRelease drops one hold of a fair lock and, when it frees the lock, passes it to the
	// head waiter: KEYS [lock, queue, deadlines, leases, channel, owner's latch], ARGV
	// [leaseMs, owner, publishCmd, latchMs, holdsKnown, requestNumber, nowMs]. A latchkey
	// waiter is granted the lock and told its wait's token on its own channel, a Java waiter
	// told 0. It
	// replies nil (not held), 0 (still held) or 1 (freed), numbered as LockRelease.
	FairRelease = newScript("fair_release.lua")

	// FairForceRelease deletes a fair lock whoever holds it and passes it to the head
	// waiter: KEYS [lock, queue, deadlines, leases, channel], ARGV [publishCmd, nowMs]. It
	// replies 1 if a lock was deleted.
	FairForceRelease = newScript("fair_force_release.lua")

	// FairLeave takes a waiter out of a fair lock's queue: KEYS [lock, queue, deadlines,
	// leases, channel], ARGV [owner, publishCmd, nowMs]. It replies 1 if the owner holds the
	// lock (granted as its wait ended).
	FairLeave = newScript("fair_leave.lua")

	// ReadAcquire takes or re-enters a read lock of a read-write lock: KEYS [lock, owner's
	// timeout prefix, waiting writers], ARGV [leaseMs, owner, owner's writer field,
	// holdsKnown, nowMs]. It replies as LockAcquire; a new reader waits while a writer waits.
	ReadAcquire = newScript("rw_read_acquire.lua")

	// ReadRelease drops one read hold: KEYS [lock, channel, owner's timeout prefix, key
	// prefix, owner's latch, waiting writers], ARGV [message, owner, publishCmd, latchMs,
	// holdsKnown, requestNumber, nowMs, leaseMs]. It replies nil (not held), 0 (the lock is
	// still held) or 1 (freed), numbered as LockRelease.
	ReadRelease = newScript("rw_read_release.lua")

	// ReadRenew renews read holds: KEYS [lock1, prefix1, ...], ARGV [leaseMs, owner1, ...]; it
	// replies as LockRenew.
	ReadRenew = newScript("rw_read_renew.lua")

	// WriteAcquire takes or re-enters a write lock, or claims it as a waiting writer: KEYS
	// [lock, waiting writers], ARGV [leaseMs, writer field, holdsKnown, nowMs, claimMs, wait
	// (1/0)]. It replies as LockAcquire.
	WriteAcquire = newScript("rw_write_acquire.lua")

	// WriteRelease drops one write hold: KEYS [lock, channel, owner's latch, waiting
	// writers], ARGV [message,
	// leaseMs, writer field, publishCmd, latchMs, holdsKnown, requestNumber]. It replies nil
	// (not held), 0 (still held) or 1 (released), numbered as LockRelease.
	WriteRelease = newScript("rw_write_release.lua")

	// WriteLeave drops a waiting writer's claim and wakes the lock's waiters: KEYS [waiting
	// writers, channel], ARGV [writer field, publishCmd].
	WriteLeave = newScript("rw_write_leave.lua")

	// SemAcquire takes permits of a semaphore: KEYS [semaphore, handle's latch, channel], ARGV
	// [permits, requestNumber, latchMs, cancel (1/0), publishCmd]. It replies the permits
	// left (-1 from a repeat), or nil when too few were available. With cancel it withdraws
	// the request numbered requestNumber, whose outcome was lost: it gives back what the
	// request took, if it ran, and a late run of it changes nothing.
	SemAcquire = newScript("sem_acquire.lua")

	// SemRelease adds permits to a semaphore (negative: takes them away) and publishes the new
	// total when positive: KEYS [semaphore, handle's latch, channel], ARGV [permits,
	// requestNumber, latchMs, publishCmd]. It replies 1.
	SemRelease = newScript("sem_release.lua")

	// SemSet sets a semaphore's permits ('try': only if it does not exist; 'set') or drains
	// them ('drain'): KEYS [semaphore, handle's latch, channel], ARGV [mode, permits,
	// requestNumber, latchMs, publishCmd]. try replies 1 or nil (it existed), set 1, drain
	// the permits drained (-1 from a repeat).
	SemSet = newScript("sem_set.lua")

	// LatchSet sets a countdown latch's count if it does not exist and publishes 1: KEYS
	// [latch, handle's latch], ARGV [count, requestNumber, latchMs, publishCmd, channel]. It
	// replies 1, or nil when the latch existed. (The channel is no key: Redisson's hashes to
	// another slot for a name with its own hash tag.)
	LatchSet = newScript("latch_set.lua")

	// LatchCountDown counts a countdown latch down by one, deleting it and publishing 0 at
	// zero: KEYS [latch, handle's latch], ARGV [requestNumber, latchMs, publishCmd, channel].
	// It replies 1.
	LatchCountDown = newScript("latch_count_down.lua")

	// LatchDelete deletes a countdown latch and publishes 1: KEYS [latch, handle's latch],
	// ARGV [requestNumber, latchMs, publishCmd, channel]. It replies 1, or nil when there was
	// none.
	LatchDelete = newScript("latch_delete.lua")

	// PermitAcquire takes permits of a permit-expirable semaphore under the IDs given: KEYS
	// [semaphore, acquired permits, handle's latch, channel], ARGV [expiryMs, nowMs,
	// requestNumber, latchMs, cancel (1/0), publishCmd, id1..n (hex)]. It replies the
	// permits left (-1 from a repeat), {ms until the nearest expiry} or nil when too few
	// were available, or {'total', permits in all} when the semaphore has fewer in all than
	// asked for. With cancel it withdraws the request as SemAcquire does.
	PermitAcquire = newScript("perm_acquire.lua")

	// PermitRelease gives back acquired permits: KEYS [semaphore, acquired permits, handle's
	// latch, channel], ARGV [nowMs, requestNumber, latchMs, publishCmd, id1..n (hex)]. It
	// replies how many were acquired and unexpired (-1 from a repeat).
	PermitRelease = newScript("perm_release.lua")

	// PermitSet sets ('try', 'set') or adds ('add') a permit-expirable semaphore's permits:
	// KEYS [semaphore, acquired permits, handle's latch, channel], ARGV [mode, permits, nowMs,
	// requestNumber, latchMs, publishCmd]. It replies 1, or nil from try when it existed.
	PermitSet = newScript("perm_set.lua")

	// PermitState reads a permit-expirable semaphore, or sets a permit's expiry ('update'),
	// after reclaiming expired permits: KEYS [semaphore, acquired permits, channel], ARGV
	// [mode, nowMs, publishCmd, (id, expiryMs)].
	PermitState = newScript("perm_state.lua")

	// PermitRenew renews acquisitions of permits kept by the watchdog: KEYS [acquired
	// permits1..k], ARGV [leaseMs, nowMs, ids1..k (each acquisition's hex IDs,
	// concatenated)]. It replies as LockRenew.
	PermitRenew = newScript("perm_renew.lua")
)
