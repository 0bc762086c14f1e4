package sync

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/lua"
	"github.com/redis/rueidis"
)

// Unlock latches do not pile up: a handle has one latch key, which each of its unlocks
// overwrites, and the janitor deletes it once the handle has been garbage-collected — no
// Close needed. (While the handle lives, the latch is what makes a late duplicate of its
// earlier unlocks a no-op, so it stays.)
func TestLatchesDoNotLinger(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		cpuBound(t)
		ctx := testCtx(t, 20*time.Second)
		c, rdb := newClient(t, b.Addr)
		latches := func() int {
			keys, err := rdb.Do(ctx, rdb.B().Keys().Pattern(unlockLatchPrefix+"*").Build()).AsStrSlice()
			if err != nil {
				t.Fatal(err)
			}
			return len(keys)
		}
		cycle := func(mu *Lock) {
			for range 2 { // a partial release writes the latch too
				if err := mu.Lock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for range 2 {
				if err := mu.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		mu := c.Lock("latches", Reentrant())
		for i := 0; i < 50; i++ {
			cycle(mu)
			if n := latches(); n != 1 {
				t.Fatalf("cycle %d: %d unlock latches alive, want the handle's one", i, n)
			}
		}
		if ttl := pttl(t, rdb, mu.o.latch); ttl <= 0 {
			t.Fatalf("latch PTTL %d, want it to expire by itself", ttl)
		}
		for i := range 20 { // handles made per request, as services do, and dropped
			cycle(c.Lock("latches:"+strconv.Itoa(i), Reentrant()))
		}
		runtime.KeepAlive(mu)
		eventually(t, waitFor, "the latches of collected handles deleted", func() bool {
			runtime.GC()
			return latches() == 0
		})
	})
}

// A release that finds the lock not held records that, as minus its request number, so that
// its repeat finds the lock not held too instead of taking the first run for a success.
func TestNotHeldReleaseRepeatsAsNotHeld(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		c, rdb := newClient(t, b.Addr)
		mu := c.Lock("not-held")
		latch := latchKeyFor(mu.Name(), c.newRequestID())
		p := mu.plain()
		for i, holds := range []int{1, 2} {
			req := strconv.Itoa(9 + i)
			release := lua.LockRelease{Lock: mu.Name(), Channel: p.channel, Numbered: lua.Numbered{Latch: latch, N: uint64(9 + i), LatchMs: unlockLatchMs},
				Clients: p.clients, Listener: p.listener, LeaseMs: "30000", Owner: mu.Owner(), Publish: c.publishCmd, Holds: holds,
				Token: c.lockToken, RegMs: c.fairWaitMs}.Call()
			for run := range 2 {
				err := release.Exec(ctx, rdb).Error()
				if !rueidis.IsRedisNil(err) {
					t.Fatalf("holds %d, run %d: %v, want nil (not held)", holds, run, err)
				}
			}
			if v, err := rdb.Do(ctx, rdb.B().Get().Key(latch).Build()).ToString(); err != nil || v != "-"+req {
				t.Fatalf("holds %d: latch %q (%v), want -%s", holds, v, err, req)
			}
		}
	})
}

// Close deletes the latches of idle handles but not of one whose unlock is still running
// (simulated by holding its op lock): that unlock may yet retry, and needs its latch to tell
// a repeat from a first run.
func TestCloseSparesLatchOfRunningUnlock(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		c, rdb := newClient(t, b.Addr)
		idle, busy := c.Lock("close-idle", Reentrant()), c.Lock("close-busy", Reentrant())
		for _, mu := range []*Lock{idle, busy} {
			must(t, mu.Lock(ctx))
			must(t, mu.Unlock(ctx))
		}
		must(t, busy.o.lock(ctx)) // as an unlock still running would
		c.Close()
		busy.o.unlock()
		if exists(t, rdb, idle.o.latch) {
			t.Fatal("Close left an idle handle's latch")
		}
		if !exists(t, rdb, busy.o.latch) {
			t.Fatal("Close deleted the latch of a handle whose unlock was running")
		}
	})
}
