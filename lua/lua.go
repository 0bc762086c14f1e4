// Package lua holds every Redis script latchkey runs, one embedded .lua file per script,
// each run through one request type whose fields are its contract: its keys, arguments and
// reply (calls.go). Each script carries the helpers of lib.lua it uses (see helpers.go), and
// runs by SHA.
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

// A Script is one of the scripts, run through its request type (see calls.go).
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

// ExecMulti runs calls, pipelined (on a Cluster, one pipeline per node), by SHA, and
// returns the results in calls' order. The calls a node answers NOSCRIPT (it lacks the
// script: a restart, a failover, the script's first run there) go again whole, in a second
// pipeline, which loads it there. It replaces rueidis's Lua.ExecMulti, which first loads
// the script on every node of the client, whole, at every call: a round trip more per call,
// and every run failed while any node is unreachable, even one no run goes to.
func ExecMulti(ctx context.Context, c rueidis.Client, calls ...Call) []rueidis.RedisResult {
	cmds := make(rueidis.Commands, len(calls))
	for i, call := range calls {
		cmds[i] = call.Cmd(c.B(), false)
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
		whole[j] = calls[i].Cmd(c.B(), true)
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
