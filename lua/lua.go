// Package lua holds every Redis script latchkey runs, one embedded .lua file per script,
// whose header is the script's contract: its keys, arguments and reply. Each script carries
// the helpers of lib.lua it uses (see helpers.go), and runs by SHA.
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

// The scripts. Each one's contract — its keys, arguments and reply, and what it does to
// them — is the header of its file, named here: the comments below only say what each is
// for.
var (
	// LockAcquire takes or re-enters a plain or fenced lock, or registers a waiting
	// attempt's client (lock_acquire.lua).
	LockAcquire = newScript("lock_acquire.lua")

	// LockRelease drops one hold of a plain or fenced lock, and when it frees the lock
	// wakes the next waiting client, or hands the lock to a local waiter (lock_release.lua).
	LockRelease = newScript("lock_release.lua")

	// LockForceRelease deletes a plain or fenced lock whoever holds it, and wakes the next
	// waiting client (lock_force_release.lua).
	LockForceRelease = newScript("lock_force_release.lua")

	// LockLeave drops a client's registration as a waiter of a plain lock when its last
	// waiter gives up (lock_leave.lua).
	LockLeave = newScript("lock_leave.lua")

	// LockRenew renews batches of exclusive holds, of any lock but a read lock, for the
	// watchdog (lock_renew.lua).
	LockRenew = newScript("lock_renew.lua")

	// FairAcquire takes or re-enters a fair lock, or keeps the caller's place in its queue
	// (fair_acquire.lua).
	FairAcquire = newScript("fair_acquire.lua")

	// FairRelease drops one hold of a fair lock, and when it frees the lock passes it to the
	// head waiter (fair_release.lua).
	FairRelease = newScript("fair_release.lua")

	// FairForceRelease deletes a fair lock whoever holds it, and passes it to the head
	// waiter (fair_force_release.lua).
	FairForceRelease = newScript("fair_force_release.lua")

	// FairLeave takes a waiter that gives up out of a fair lock's queue (fair_leave.lua).
	FairLeave = newScript("fair_leave.lua")

	// ReadAcquire takes or re-enters a read lock of a read-write lock (rw_read_acquire.lua).
	ReadAcquire = newScript("rw_read_acquire.lua")

	// ReadRelease drops one read hold (rw_read_release.lua).
	ReadRelease = newScript("rw_read_release.lua")

	// ReadRenew renews batches of read holds for the watchdog (rw_read_renew.lua).
	ReadRenew = newScript("rw_read_renew.lua")

	// WriteAcquire takes or re-enters a write lock, or claims it as a waiting writer
	// (rw_write_acquire.lua).
	WriteAcquire = newScript("rw_write_acquire.lua")

	// WriteRelease drops one write hold (rw_write_release.lua).
	WriteRelease = newScript("rw_write_release.lua")

	// WriteLeave drops the claim of a waiting writer that gives up (rw_write_leave.lua).
	WriteLeave = newScript("rw_write_leave.lua")

	// SemAcquire takes permits of a semaphore, or withdraws a request whose outcome was lost
	// (sem_acquire.lua).
	SemAcquire = newScript("sem_acquire.lua")

	// SemRelease adds permits to a semaphore, or takes them away (sem_release.lua).
	SemRelease = newScript("sem_release.lua")

	// SemSet sets or drains a semaphore's permits (sem_set.lua).
	SemSet = newScript("sem_set.lua")

	// SemLeave drops a client's registration as a waiter of a semaphore when its last
	// waiter gives up (sem_leave.lua).
	SemLeave = newScript("sem_leave.lua")

	// LatchSet sets a countdown latch's count if it does not exist (latch_set.lua).
	LatchSet = newScript("latch_set.lua")

	// LatchCountDown counts a countdown latch down by one (latch_count_down.lua).
	LatchCountDown = newScript("latch_count_down.lua")

	// LatchDelete deletes a countdown latch (latch_delete.lua).
	LatchDelete = newScript("latch_delete.lua")

	// PermitAcquire takes permits of a permit-expirable semaphore, or withdraws a request
	// whose outcome was lost (perm_acquire.lua).
	PermitAcquire = newScript("perm_acquire.lua")

	// PermitRelease gives back acquired permits (perm_release.lua).
	PermitRelease = newScript("perm_release.lua")

	// PermitSet sets or adds a permit-expirable semaphore's permits (perm_set.lua).
	PermitSet = newScript("perm_set.lua")

	// PermitState reads a permit-expirable semaphore, or extends a permit's lease
	// (perm_state.lua).
	PermitState = newScript("perm_state.lua")

	// PermitRenew renews batches of permit acquisitions for the watchdog (perm_renew.lua).
	PermitRenew = newScript("perm_renew.lua")
)
