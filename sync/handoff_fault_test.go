package sync

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strconv"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/lua"
	"github.com/redis/rueidis"
)

// The first run of an unlock whose reply was lost may reach Redis after its retry (a
// delayed segment of the broken connection, a proxy in between). It must change nothing: the
// script reads the latch before anything else even on a first run (REDISSON-LAYOUT §1.6).
// Skipping that read on first runs made a late first run of a partial release drop the
// owner's last hold — Redis freed a lock its owner still held once.
func TestLateFirstRunOfUnlockChangesNothing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		c, rdb := newClient(t, b.Addr)
		mu := c.Lock("late-first-run")
		const owner = "late-owner"
		for holds := range 2 { // the owner holds the lock twice
			err := lua.LockAcquire.Exec(ctx, rdb, []string{mu.name}, []string{"30000", owner, strconv.Itoa(holds)}).Error()
			if !rueidis.IsRedisNil(err) {
				t.Fatalf("acquire: %v", err)
			}
		}
		latch := unlockLatchKey(mu.name, c.newRequestID())
		keys := []string{mu.name, mu.channel, latch}
		args := []string{"0", "30000", owner, c.publishCmd, unlockLatchMs, "2", "7"}
		// The retry of the partial unlock runs first: 2 → 1, and Unlock returns.
		if v, err := lua.LockRelease.Exec(ctx, rdb, keys, args).AsInt64(); err != nil || v != 0 {
			t.Fatalf("retry run: %v, %v; want 0", v, err)
		}
		// The lost first run of the same request then reaches Redis.
		v, err := lua.LockRelease.Exec(ctx, rdb, keys, args).AsInt64()
		if err != nil || v != 0 {
			t.Fatalf("late first run replied %v, %v; want the stored 0", v, err)
		}
		if n := mustInt(t, rdb.Do(ctx, rdb.B().Hget().Key(mu.name).Field(owner).Build())); n != 1 {
			t.Fatalf("hold count %d after the late first run, want 1", n)
		}
	})
}

// A hand-off whose outcome stays unknown (reply lost, then Redis unreachable for the
// retries and the settlement) has the heir's lease reported lost, though the release did run
// and the heir's field holds the lock in Redis, renewed by nobody. What must not happen is
// worse: that hold staying in Redis for ever. The heir's handle still counts its hold, so the
// caller's Unlock — due after a lost lease as after any hold — frees the lock; and the count
// the scripts set comes from the handle, so nothing is left over.
func TestUnknownHandoffLeavesNoOrphanHold(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		r := startLossyRelay(t, ctx, ctx, b, "orphan-relay")
		proxy, admin, a, heirMu, done := r.proxy, r.admin, r.holder, r.heir, r.heirDone
		other, _ := newClient(t, b.Addr)
		unlocked := make(chan error, 1)
		go func() { unlocked <- a.Unlock(ctx) }()
		if err := <-done; err != nil {
			t.Fatalf("heir: %v, want the lock handed over", err)
		}
		// The hand-off ran (its reply is being dropped); now Redis becomes unreachable for the
		// retries and the settlement.
		eventually(t, 5*time.Second, "hand-off ran", func() bool {
			n, err := admin.Do(ctx, admin.B().Hget().Key("orphan-relay").Field(heirMu.Owner()).Build()).AsInt64()
			return err == nil && n == 1
		})
		proxy.Blackhole(true)
		uerr := <-unlocked
		proxy.Blackhole(false)
		t.Logf("releaser Unlock: %v", uerr)
		if uerr == nil {
			t.Skip("the retry got through before the blackhole: timing, not the scenario")
		}
		if !isClosed(heirMu.Lost()) {
			t.Fatal("the heir's lease was not reported lost when its hand-off could not be confirmed")
		}
		if ttl := pttl(t, admin, "orphan-relay"); ttl > DefaultWatchdogTimeout.Milliseconds() {
			t.Fatalf("the heir's hold has PTTL %d, beyond its lease", ttl)
		}
		if err := heirMu.Unlock(ctx); err != nil {
			t.Fatalf("heir's Unlock of the hold the release did hand over: %v", err)
		}
		if n, _ := heirMu.HoldCount(ctx); n != 0 {
			t.Errorf("after its Unlock the heir's handle still holds %d in Redis", n)
		}
		if ok, err := other.Lock("orphan-relay").TryLock(ctx); err != nil || !ok {
			t.Errorf("another Client cannot take the lock after its only user released it (TryLock %v, %v)", ok, err)
		}
	})
}

// Handles of two Clients contend with random cancellations and TryLock waits, hand-offs
// and frees interleaving: at most one holder at any time, and every call's result matches
// Redis (a call that failed holds nothing; one that succeeded holds the lock).
func TestHandoffStress(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 60*time.Second)
		c1, _ := newClient(t, b.Addr, WithLocalHandoff(3))
		c2, _ := newClient(t, b.Addr, WithLocalHandoff(3))
		admin := b.Client(t)
		var inside atomic.Int32
		var acquired atomic.Int64
		var wg gosync.WaitGroup
		errs := make(chan error, 64)
		for i := range 12 {
			c := c1
			if i%3 == 2 {
				c = c2
			}
			mu := c.Lock("stress")
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewSource(int64(i)))
				for range 60 {
					cctx, cancel := context.WithTimeout(ctx, time.Duration(r.Intn(8)+1)*time.Millisecond)
					var ok bool
					var err error
					switch r.Intn(3) {
					case 0:
						err = mu.Lock(cctx)
						ok = err == nil
					case 1:
						ok, err = mu.TryLock(cctx, WaitTime(time.Duration(r.Intn(5))*time.Millisecond))
					default:
						err = mu.Lock(ctx)
						ok = err == nil
					}
					cancel()
					if err != nil && !errors.Is(err, context.DeadlineExceeded) {
						errs <- fmt.Errorf("lock: %w", err)
						return
					}
					held, herr := mu.IsHeld(ctx)
					if herr != nil {
						errs <- herr
						return
					}
					if held != ok {
						errs <- fmt.Errorf("call said ok=%v (err %v) but Redis says held=%v", ok, err, held)
						return
					}
					if !ok {
						continue
					}
					if n := inside.Add(1); n != 1 {
						errs <- fmt.Errorf("%d holders at once", n)
					}
					acquired.Add(1)
					time.Sleep(time.Duration(r.Intn(300)) * time.Microsecond)
					inside.Add(-1)
					if err := mu.Unlock(ctx); err != nil {
						errs <- fmt.Errorf("unlock: %w", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if exists(t, admin, "stress") {
			t.Error("lock alive at the end")
		}
		t.Logf("%d acquisitions", acquired.Load())
	})
}
