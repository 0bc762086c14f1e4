// Package lua holds every Redis script latchkey runs, one embedded .lua file per script.
//
// Each script is one atomic state change and follows the effects, replies and pub/sub
// messages that Redisson's scripts have (see docs/redisson-interop.md), so Go and Java
// processes can work on the same keys. The values are immutable and safe to share.
package lua

import (
	_ "embed"

	"github.com/redis/rueidis"
)

var (
	//go:embed lock_acquire.lua
	lockAcquire string
	//go:embed lock_reenter.lua
	lockReenter string
	//go:embed lock_release.lua
	lockRelease string
	//go:embed lock_force_release.lua
	lockForceRelease string
	//go:embed lock_renew.lua
	lockRenew string
	//go:embed lock_undo.lua
	lockUndo string
	//go:embed lock_settle_handoff.lua
	lockSettleHandoff string
)

var (
	// LockAcquire takes or re-enters a reentrant lock: KEYS [lock, (latch...)], ARGV
	// [leaseMs, owner, holdsKnown, (latchMs, number...)]; the count becomes holdsKnown+1. It
	// replies nil when acquired, or the holder's PTTL. With latches, it first raises each
	// latch's mark to its number, so that requests of unknown outcome up to it change nothing
	// if they reach Redis later.
	LockAcquire = rueidis.NewLuaScript(lockAcquire)

	// LockReenter re-enters a held reentrant lock with an explicit lease, as a request
	// numbered on the owner's latch: KEYS [lock, owner's latch], ARGV [leaseMs, owner,
	// holdsKnown, latchMs, requestNumber]. It replies as LockAcquire, or -3 for a run whose
	// number the latch has passed (a late run), which changes nothing.
	LockReenter = rueidis.NewLuaScript(lockReenter)

	// LockRelease drops one hold of a reentrant lock and publishes the unlock message when the
	// lock is freed: KEYS [lock, channel, owner's latch], ARGV [message, leaseMs, owner,
	// publishCmd, latchMs, holdsKnown, requestNumber, (heir, heirLeaseMs)]; the count becomes
	// holdsKnown-1, and the lock is freed at 0. It replies nil (not held), 0 (still held), 1
	// (freed) or 2 (handed to the heir, who holds it once with its lease; no message). The
	// latch keeps the owner's highest request number: a repeat of a request, or an older one
	// arriving late, changes nothing (a repeat replies what the first run did).
	LockRelease = rueidis.NewLuaScript(lockRelease)

	// LockForceRelease deletes a lock whoever holds it and publishes the unlock message:
	// KEYS [lock, channel], ARGV [message, publishCmd]. It replies 1 if a lock was deleted.
	LockForceRelease = rueidis.NewLuaScript(lockForceRelease)

	// LockRenew resets the lease of every listed lock its owner still holds: KEYS [lock1..k],
	// ARGV [leaseMs, owner1..k]. It replies an array of 1 (renewed) and 0 (not held). It is
	// sent as EVAL, never by SHA: renewal rounds go out with ExecMulti, which for a SHA
	// script first loads it on every node — a round trip per round, and a failed round
	// whenever any node is unreachable.
	LockRenew = rueidis.NewLuaScriptNoSha(lockRenew)

	// LockUndo takes back the hold added by an acquire whose reply was lost: KEYS [lock,
	// channel, owner's latch], ARGV [owner, holdsBefore, leaseMs, publishCmd, message,
	// requestNumber, latchMs]. It replies 1 if it did, 2 if the attempt never ran and the
	// owner's holds are as it knew them (their TTL set again), 0 otherwise. It is fenced by
	// the latch like an unlock: a repeat or a late run changes nothing.
	LockUndo = rueidis.NewLuaScript(lockUndo)

	// LockSettleHandoff completes a hand-off whose outcome stayed unknown: a request of the
	// releaser's, fenced by its latch like an unlock, that passes the releaser's hold to the
	// heir if the release never ran: KEYS [lock, releaser's latch], ARGV [releaser,
	// requestNumber, latchMs, heirLeaseMs, heir]. It replies 1 when the lock went to the heir
	// (the release's own mark on the latch tells whether the release ran and what it did), 0
	// when it did not: the releaser had lost it. A repeat replies the same and a stale run
	// changes nothing.
	LockSettleHandoff = rueidis.NewLuaScript(lockSettleHandoff)
)
