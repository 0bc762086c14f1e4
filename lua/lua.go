// Package lua holds every Redis script latchkey runs, one embedded .lua file per script.
//
// Each script is one atomic state change and follows the effects, replies and pub/sub
// messages that Redisson's scripts have (see docs/redisson-interop.md), so Go and Java
// processes can work on the same keys. Every script that changes state is safe to repeat:
// counts come from the caller, leases only grow, and releases are numbered on the owner's
// unlock latch. The values are immutable and safe to share.
package lua

import (
	_ "embed"

	"github.com/redis/rueidis"
)

var (
	//go:embed lock_acquire.lua
	lockAcquire string
	//go:embed lock_release.lua
	lockRelease string
	//go:embed lock_force_release.lua
	lockForceRelease string
	//go:embed lock_renew.lua
	lockRenew string
)

var (
	// LockAcquire takes or re-enters a reentrant lock: KEYS [lock], ARGV [leaseMs, owner,
	// holdsKnown]; the count becomes holdsKnown+1 and the TTL at least leaseMs. It replies
	// nil when acquired, -3 when holdsKnown > 0 but the owner's field is gone (nothing
	// changes), or the holder's PTTL.
	LockAcquire = rueidis.NewLuaScript(lockAcquire)

	// LockRelease drops one hold of a reentrant lock and publishes the unlock message when the
	// lock is freed: KEYS [lock, channel, owner's latch], ARGV [message, leaseMs, owner,
	// publishCmd, latchMs, holdsKnown, requestNumber, (heir, heirLeaseMs)]; the count becomes
	// holdsKnown-1 (the TTL at least leaseMs), and the lock is freed at 0. It replies nil (not
	// held), 0 (still held), 1 (freed) or 2 (handed to the heir, who holds it once with its
	// lease; no message). The latch keeps the owner's highest request number: a repeat of a
	// request replies what the first run did, and an older one arriving late changes nothing.
	LockRelease = rueidis.NewLuaScript(lockRelease)

	// LockForceRelease deletes a lock whoever holds it and publishes the unlock message:
	// KEYS [lock, channel], ARGV [message, publishCmd]. It replies 1 if a lock was deleted.
	LockForceRelease = rueidis.NewLuaScript(lockForceRelease)

	// LockRenew sets the TTL of every listed lock its owner still holds to at least the lease:
	// KEYS [lock1..k], ARGV [leaseMs, owner1..k]. It replies an array of 1 (renewed) and 0
	// (not held). It is sent as EVAL, never by SHA: renewal rounds go out with ExecMulti,
	// which for a SHA script first loads it on every node — a round trip per round, and a
	// failed round whenever any node is unreachable.
	LockRenew = rueidis.NewLuaScriptNoSha(lockRenew)
)
