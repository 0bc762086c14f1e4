package sync

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/lua"
	"github.com/redis/rueidis"
)

// withLeaveGrace sets how long past its context's end a call awaits the withdrawal of its
// waiter's claim (see Client.leaveBy): tests that need the withdrawal to have run when the
// call returns, whatever the machine's load, lengthen it.
func withLeaveGrace(d time.Duration) Option {
	return func(c *config) error {
		c.leaveGrace = d
		return nil
	}
}

// hookedRDB is the rueidis client of a Client that newClient makes, through which a test
// stands events between the Client's scripts and their replies: afterAcquire runs when an
// acquire script has replied, before the Client reads the reply (a process pause, a Close);
// beforeRelease before a plain lock's release goes, and beforeLeave before a last waiter's
// leave (a plain lock's, a writer's) goes (waiters coming and going meanwhile). Each runs
// for every send, repeats included. A test that sets hook before the Client runs has its Do
// run hook first, which may answer for Redis (ok: the command is not sent) or hold the
// command back.
type hookedRDB struct {
	rueidis.Client
	afterAcquire, beforeRelease, beforeLeave testHook
	hook                                     func(ctx context.Context, cmd rueidis.Completed) (res rueidis.RedisResult, ok bool)
}

// hooks are the hooks of c, made by newClient.
func hooks(c *Client) *hookedRDB { return c.rdb.(*hookedRDB) }

// A testHook is a function a test sets, and clears with nil, while a Client runs. It gets
// the command's words: EVALSHA, the script's SHA, the number of keys, keys, arguments.
type testHook struct {
	f atomic.Pointer[func(cmd []string)]
}

func (h *testHook) set(f func(cmd []string)) {
	if f == nil {
		h.f.Store(nil)
		return
	}
	h.f.Store(&f)
}

func (h *testHook) run(cmd []string) {
	if f := h.f.Load(); f != nil {
		(*f)(cmd)
	}
}

func newHookedRDB(t *testing.T, addr string) *hookedRDB {
	return &hookedRDB{Client: redistest.ClientFor(t, addr)}
}

// sha is the SHA of the script cmd runs ("" if none).
func sha(cmd rueidis.Completed) string {
	c := cmd.Commands()
	switch {
	case len(c) < 2:
		return ""
	case c[0] == "EVALSHA":
		return c[1]
	case c[0] == "EVAL":
		sum := sha1.Sum([]byte(c[1]))
		return hex.EncodeToString(sum[:])
	}
	return ""
}

// before runs the hooks due before cmd goes, and returns its words (nil if it runs no
// script): rueidis recycles a command once it is done.
func (h *hookedRDB) before(cmd rueidis.Completed) []string {
	s := sha(cmd)
	if s == "" {
		return nil
	}
	words := append([]string{"EVALSHA", s}, cmd.Commands()[2:]...)
	switch s {
	case shaOf(lua.LockRelease{}):
		h.beforeRelease.run(words)
	case shaOf(lua.LockLeave{}), shaOf(lua.WriteLeave{}):
		h.beforeLeave.run(words)
	}
	return words
}

// after runs the hooks due once the script command cmd (its words) has replied r.
func (h *hookedRDB) after(cmd []string, r rueidis.RedisResult) {
	if err := r.Error(); cmd == nil || err != nil && !rueidis.IsRedisNil(err) {
		return
	}
	switch cmd[1] {
	case shaOf(lua.LockAcquire{}), shaOf(lua.FairAcquire{}), shaOf(lua.ReadAcquire{}), shaOf(lua.WriteAcquire{}),
		shaOf(lua.SemAcquire{}):
		h.afterAcquire.run(cmd)
	}
}

// shaOf is the SHA the script of r runs by: a marker for hooks and the fault proxy that
// matches one script and nothing else.
func shaOf(r lua.Request) string { return r.Call().Script.SHA() }

func (h *hookedRDB) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if h.hook != nil {
		if res, ok := h.hook(ctx, cmd); ok {
			return res
		}
	}
	return doHooked(h, cmd, func() rueidis.RedisResult { return h.Client.Do(ctx, cmd) })
}

func (h *hookedRDB) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	return doMultiHooked(h, cmds, func() []rueidis.RedisResult { return h.Client.DoMulti(ctx, cmds...) })
}

func (h *hookedRDB) Dedicated(fn func(rueidis.DedicatedClient) error) error {
	return h.Client.Dedicated(func(dc rueidis.DedicatedClient) error { return fn(hookedDedicated{dc, h}) })
}

// hookedDedicated is a dedicated connection of a hookedRDB, which runs its hooks.
type hookedDedicated struct {
	rueidis.DedicatedClient
	h *hookedRDB
}

func (d hookedDedicated) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	return doHooked(d.h, cmd, func() rueidis.RedisResult { return d.DedicatedClient.Do(ctx, cmd) })
}

func (d hookedDedicated) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	return doMultiHooked(d.h, cmds, func() []rueidis.RedisResult { return d.DedicatedClient.DoMulti(ctx, cmds...) })
}

func doHooked(h *hookedRDB, cmd rueidis.Completed, do func() rueidis.RedisResult) rueidis.RedisResult {
	s := h.before(cmd)
	r := do()
	h.after(s, r)
	return r
}

func doMultiHooked(h *hookedRDB, cmds []rueidis.Completed, do func() []rueidis.RedisResult) []rueidis.RedisResult {
	scripts := make([][]string, len(cmds))
	for i, cmd := range cmds {
		scripts[i] = h.before(cmd)
	}
	rs := do()
	for i, r := range rs {
		h.after(scripts[i], r)
	}
	return rs
}
