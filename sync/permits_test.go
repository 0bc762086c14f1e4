package sync

import (
	"context"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/rueidis"
)

// permitCounts reads available, acquired and all permits.
func permitCounts(t *testing.T, ctx context.Context, s *PermitSemaphore) [3]int {
	t.Helper()
	a, err := s.AvailablePermits(ctx)
	must(t, err)
	q, err := s.AcquiredPermits(ctx)
	must(t, err)
	p, err := s.Permits(ctx)
	must(t, err)
	return [3]int{a, q, p}
}

// zsetIDs returns the acquired permits' IDs as the zset holds them, in hex.
func zsetIDs(t *testing.T, ctx context.Context, rdb rueidis.Client, s *PermitSemaphore) []string {
	t.Helper()
	members, err := rdb.Do(ctx, rdb.B().Zrange().Key(s.timeouts).Min("0").Max("-1").Build()).AsStrSlice()
	must(t, err)
	var ids []string
	for _, m := range members {
		if len(m) != 16 {
			t.Fatalf("zset member of %d bytes, want 16 raw bytes", len(m))
		}
		ids = append(ids, hex.EncodeToString([]byte(m)))
	}
	slices.Sort(ids)
	return ids
}

func TestPermitSemaphoreAcquireRelease(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		c, rdb := newClient(t, b.Addr)
		s := c.PermitSemaphore("permits-basics")
		if ok, err := s.TrySetPermits(ctx, 3); !ok || err != nil {
			t.Fatalf("TrySetPermits: %v, %v", ok, err)
		}
		acquiring := time.Now()
		p, err := s.Acquire(ctx, 2)
		must(t, err)
		ids := p.IDs()
		for _, id := range ids {
			if _, err := hex.DecodeString(id); err != nil || len(id) != 32 {
				t.Fatalf("permit ID %q, want 32 hex characters", id)
			}
		}
		slices.Sort(ids)
		if got := zsetIDs(t, ctx, rdb, s); !slices.Equal(got, ids) {
			t.Fatalf("zset holds %q, want %q", got, ids)
		}
		if got := permitCounts(t, ctx, s); got != [3]int{1, 2, 3} {
			t.Fatalf("available, acquired, all: %v, want [1 2 3]", got)
		}
		// The lease less at most the time since the acquire was sent (and a millisecond of
		// rounding), however long the commands in between took.
		d, err := s.LeaseTime(ctx, ids[0])
		if low := DefaultWatchdogTimeout - time.Since(acquiring) - time.Millisecond; err != nil || d < low || d > DefaultWatchdogTimeout {
			t.Fatalf("LeaseTime of a watchdog-kept permit: %v, %v; want in [%v, %v]", d, err, low, DefaultWatchdogTimeout)
		}
		if !p.Valid() {
			t.Fatal("permits just acquired are not valid")
		}
		if q, ok, err := s.TryAcquire(ctx, 2); q != nil || ok || err != nil {
			t.Fatalf("TryAcquire(2) of 1: %v, %v, %v; want nil, false, nil", q, ok, err)
		}
		must(t, p.Release(ctx))
		if got := permitCounts(t, ctx, s); got != [3]int{3, 0, 3} {
			t.Fatalf("after Release: %v, want [3 0 3]", got)
		}
		if err := p.Release(ctx); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("second Release: %v, want ErrNotHeld", err)
		}
		if p.Valid() || isClosed(p.Lost()) {
			t.Fatal("released permits: valid, or Lost closed")
		}
		if _, err := s.LeaseTime(ctx, ids[0]); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("LeaseTime of a released permit: %v, want ErrNotHeld", err)
		}
		must(t, s.SetPermits(ctx, 5))
		if got := permitCounts(t, ctx, s); got != [3]int{5, 0, 5} {
			t.Fatalf("after SetPermits(5): %v", got)
		}
		must(t, s.AddPermits(ctx, -1))
		if got := permitCounts(t, ctx, s); got != [3]int{4, 0, 4} {
			t.Fatalf("after AddPermits(-1): %v", got)
		}
	})
}

// Permits whose holder never releases them come back when their lease ends, and a waiter
// for them wakes then, with no message: at the nearest expiry the acquire script reported.
func TestPermitSemaphoreExpiredPermitsComeBack(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		ctx := testCtx(t, 60*time.Second)
		c, _ := newClient(t, b.Addr)
		s := c.PermitSemaphore("permits-expire")
		must(t, s.SetPermits(ctx, 2))
		// A lease short enough to run out soon, long enough for the acquire to return within
		// it on a loaded machine (150 ms was not under CI's load, 500 ms not with two CPU hogs,
		// and a 1 s one elsewhere not with -race too).
		const lease = 5 * time.Second
		p, err := s.Acquire(ctx, 2, Lease(lease))
		must(t, err)
		start := time.Now()
		q, ok, err := c.PermitSemaphore("permits-expire").TryAcquire(ctx, 2, WaitTime(waitFor))
		must(t, err)
		if !ok {
			t.Fatal("the waiter did not get the expired permits")
		}
		// Waking at the expiry, not at a re-check the watchdog timeout (30 s) later.
		if waited := time.Since(start); waited > lease+5*time.Second {
			t.Fatalf("the waiter took %v: it did not wake at the nearest expiry", waited)
		}
		eventually(t, waitFor, "Lost closed after the lease ran out", func() bool { return isClosed(p.Lost()) })
		if p.Valid() {
			t.Fatal("permits past their lease are valid")
		}
		if err := p.Release(ctx); !errors.Is(err, ErrLockLost) {
			t.Fatalf("Release of expired permits: %v, want ErrLockLost", err)
		}
		must(t, q.Release(ctx))
		if got := permitCounts(t, ctx, s); got != [3]int{2, 0, 2} {
			t.Fatalf("at the end: %v, want [2 0 2]", got)
		}
	})
}

// Without an explicit lease the watchdog renews permits while their Client lives; when it
// closes (a crash, as far as Redis can tell) they come back a watchdog timeout later, and a
// permit deleted behind the holder's back closes Lost.
func TestPermitSemaphoreWatchdog(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		ctx := testCtx(t, 60*time.Second)
		// Renewals every 2 s keep a 6 s lease with 4 s to spare on a loaded machine (a 1.5 s
		// lease renewed every 500 ms was lost under two CPU hogs).
		const name, timeout = "permits-watchdog", 6 * time.Second
		holder, rdb := newClient(t, b.Addr, WithWatchdogTimeout(timeout))
		other, _ := newClient(t, b.Addr)
		s := holder.PermitSemaphore(name)
		must(t, s.SetPermits(ctx, 2))
		kept, err := s.Acquire(ctx, 1)
		must(t, err)
		doomed, err := s.Acquire(ctx, 1)
		must(t, err)
		first, _ := kept.Deadline()
		eventually(t, waitFor, "three renewals", func() bool {
			d, ok := kept.Deadline()
			return ok && d.Sub(first) >= 3*timeout/3
		})
		if got := permitCounts(t, ctx, s); got != [3]int{0, 2, 2} {
			t.Fatalf("renewed permits: %v, want [0 2 2]", got)
		}
		raw, _ := hex.DecodeString(doomed.IDs()[0])
		must(t, rdb.Do(ctx, rdb.B().Zrem().Key(s.timeouts).Member(string(raw)).Build()).Error())
		eventually(t, waitFor, "Lost closed for a permit deleted behind its back", func() bool {
			return isClosed(doomed.Lost())
		})
		if isClosed(kept.Lost()) {
			t.Fatal("the other acquisition's Lost closed too")
		}
		must(t, rdb.Do(ctx, rdb.B().Incr().Key(name).Build()).Error()) // the deleted permit, given back by hand

		holder.Close() // renewals stop: the kept permit lapses within a watchdog timeout
		q, ok, err := other.PermitSemaphore(name).TryAcquire(ctx, 2, WaitTime(waitFor))
		must(t, err)
		if !ok {
			t.Fatal("the kept permit did not come back after its Client closed")
		}
		must(t, q.Release(ctx))
	})
}

// Permits in use never exceed the limit with 32 goroutines on 4 Clients, and every permit
// comes back, on every topology.
func TestPermitSemaphoreNeverOverLimit(t *testing.T) {
	t.Parallel()
	topologies.Each(t, func(t *testing.T, b *redistest.Backend) {
		cpuBound(t)
		ctx := testCtx(t, 30*time.Second)
		const limit, clients, workers, rounds = 3, 4, 8, 6
		name := topoName(t, "permits-limit")
		var cs []*Client
		for range clients {
			c, _ := newClientOn(t, b)
			cs = append(cs, c)
		}
		must(t, cs[0].PermitSemaphore(name).SetPermits(ctx, limit))
		var inUse, peak atomic.Int64
		var wg gosync.WaitGroup
		errs := make(chan error, clients*workers)
		for _, c := range cs {
			s := c.PermitSemaphore(name)
			for range workers {
				wg.Go(func() {
					for range rounds {
						p, err := s.Acquire(ctx, 1, Lease(10*time.Second))
						if err != nil {
							errs <- err
							return
						}
						now := inUse.Add(1)
						for v := peak.Load(); now > v && !peak.CompareAndSwap(v, now); v = peak.Load() {
						}
						time.Sleep(200 * time.Microsecond) // the guarded work
						inUse.Add(-1)
						if err := p.Release(ctx); err != nil {
							errs <- err
							return
						}
					}
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if p := peak.Load(); p > limit {
			t.Fatalf("%d permits in use at once, limit %d", p, limit)
		}
		if got := permitCounts(t, ctx, cs[0].PermitSemaphore(name)); got != [3]int{limit, 0, limit} {
			t.Fatalf("at the end: %v, want [%d 0 %d]", got, limit, limit)
		}
	})
}

// Wire level: permits a Java process acquired the way Redisson's script does (raw ID in the
// zset, the no-lease score) are counted, have no expiry, and can be released by ID here.
func TestPermitSemaphoreWire(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		const name = "permits-wire"
		c, rdb := newClient(t, b.Addr)
		sub := rawSubscribe(t, ctx, rdb, "redisson_sc:{"+name+"}")
		s := c.PermitSemaphore(name)
		must(t, s.SetPermits(ctx, 2))
		const javaID = "00112233445566778899aabbccddeeff"
		raw, _ := hex.DecodeString(javaID)
		must(t, rdb.Do(ctx, rdb.B().Decrby().Key(name).Decrement(1).Build()).Error())
		must(t, rdb.Do(ctx, rdb.B().Zadd().Key("{"+name+"}:timeout").ScoreMember().ScoreMember(922337203685477, string(raw)).Build()).Error())
		if got := permitCounts(t, ctx, s); got != [3]int{1, 1, 2} {
			t.Fatalf("with a Java permit: %v, want [1 1 2]", got)
		}
		if d, err := s.LeaseTime(ctx, javaID); d != NoExpiry || err != nil {
			t.Fatalf("LeaseTime of a no-lease permit: %v, %v; want NoExpiry", d, err)
		}
		if ok, err := s.UpdateLeaseTime(ctx, javaID, time.Minute); !ok || err != nil {
			t.Fatalf("UpdateLeaseTime: %v, %v", ok, err)
		}
		if d, err := s.LeaseTime(ctx, javaID); d != NoExpiry || err != nil {
			t.Fatalf("LeaseTime of a no-lease permit after UpdateLeaseTime: %v, %v; want NoExpiry (leases only grow)", d, err)
		}
		// A Java permit with a lease: 10 s left, extended to a minute.
		must(t, rdb.Do(ctx, rdb.B().Zadd().Key(s.timeouts).ScoreMember().ScoreMember(float64(time.Now().Add(10*time.Second).UnixMilli()), string(raw)).Build()).Error())
		if ok, err := s.UpdateLeaseTime(ctx, javaID, time.Minute); !ok || err != nil {
			t.Fatalf("UpdateLeaseTime: %v, %v", ok, err)
		}
		score, err := rdb.Do(ctx, rdb.B().Zscore().Key(s.timeouts).Member(string(raw)).Build()).AsFloat64()
		must(t, err)
		if left := time.Until(time.UnixMilli(int64(score))); left < 50*time.Second || left > time.Minute {
			t.Fatalf("score after UpdateLeaseTime a minute: %v from now", left)
		}
		must(t, s.Release(ctx, javaID))
		if err := s.Release(ctx, javaID); !errors.Is(err, ErrNotHeld) || !strings.Contains(err.Error(), javaID) {
			t.Fatalf("second release of an ID: %v, want ErrNotHeld naming the ID", err)
		}
		if got := sub.published(t, ctx); !slices.Equal(got, []string{"2", "2"}) {
			t.Fatalf("published %q, want [2 2] (SetPermits: the total; release: the new total)", got)
		}
		if got := permitCounts(t, ctx, s); got != [3]int{2, 0, 2} {
			t.Fatalf("after the release: %v, want [2 0 2]", got)
		}

		// A waiter wakes on a Java release: ZREM the permit, INCRBY, PUBLISH the total.
		held, err := s.Acquire(ctx, 2)
		must(t, err)
		done := make(chan error, 1)
		go func() {
			p, err := c.PermitSemaphore(name).Acquire(ctx, 1)
			if err == nil {
				err = p.Release(ctx)
			}
			done <- err
		}()
		listeningOn(t, c, s.channel, 1)
		raw, _ = hex.DecodeString(held.IDs()[0])
		must(t, rdb.Do(ctx, rdb.B().Zrem().Key(s.timeouts).Member(string(raw)).Build()).Error())
		must(t, rdb.Do(ctx, rdb.B().Incrby().Key(name).Increment(1).Build()).Error())
		must(t, rdb.Do(ctx, rdb.B().Publish().Channel(s.channel).Message("1").Build()).Error())
		select {
		case err := <-done:
			must(t, err)
		case <-ctx.Done():
			t.Fatal("the waiter did not wake on a Java release")
		}
	})
}

func TestPermitSemaphoreBadInput(t *testing.T) {
	t.Parallel()
	b := redistest.Miniredis(t)
	ctx := testCtx(t, 5*time.Second)
	c, _ := newClient(t, b.Addr)
	s := c.PermitSemaphore("permits-bad")
	var nilCtx context.Context
	const id = "00112233445566778899aabbccddeeff"
	for name, err := range map[string]error{
		"Acquire(0)":                 func() error { _, err := s.Acquire(ctx, 0); return err }(),
		"Acquire(4097)":              func() error { _, err := s.Acquire(ctx, 4097); return err }(),
		"Acquire(Lease(0))":          func() error { _, err := s.Acquire(ctx, 1, Lease(0)); return err }(),
		"TryAcquire(-wait)":          func() error { _, _, err := s.TryAcquire(ctx, 1, WaitTime(-1)); return err }(),
		"Release()":                  s.Release(ctx),
		"Release(bad ID)":            s.Release(ctx, "xyz"),
		"Release(short ID)":          s.Release(ctx, "0011"),
		"UpdateLeaseTime(0)":         func() error { _, err := s.UpdateLeaseTime(ctx, "00112233445566778899aabbccddeeff", 0); return err }(),
		"LeaseTime(bad ID)":          func() error { _, err := s.LeaseTime(ctx, "zz112233445566778899aabbccddeeff"); return err }(),
		"SetPermits(-1)":             s.SetPermits(ctx, -1),
		"TrySetPermits(2^31)":        func() error { _, err := s.TrySetPermits(ctx, 1<<31); return err }(),
		"empty name":                 c.PermitSemaphore("").SetPermits(ctx, 1),
		"nil ctx (TrySetPermits)":    func() error { _, err := s.TrySetPermits(nilCtx, 1); return err }(),
		"nil ctx (SetPermits)":       s.SetPermits(nilCtx, 1),
		"nil ctx (AddPermits)":       s.AddPermits(nilCtx, 1),
		"nil ctx (Acquire)":          func() error { _, err := s.Acquire(nilCtx, 1); return err }(),
		"nil ctx (TryAcquire)":       func() error { _, _, err := s.TryAcquire(nilCtx, 1); return err }(),
		"nil ctx (Release)":          s.Release(nilCtx, id),
		"nil ctx (UpdateLeaseTime)":  func() error { _, err := s.UpdateLeaseTime(nilCtx, id, time.Second); return err }(),
		"nil ctx (LeaseTime)":        func() error { _, err := s.LeaseTime(nilCtx, id); return err }(),
		"nil ctx (AvailablePermits)": func() error { _, err := s.AvailablePermits(nilCtx); return err }(),
		"nil ctx (AcquiredPermits)":  func() error { _, err := s.AcquiredPermits(nilCtx); return err }(),
		"nil ctx (Permits)":          func() error { _, err := s.Permits(nilCtx); return err }(),
	} {
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if n := dbsize(t, c.rdb); n != 0 {
		t.Fatalf("bad input wrote %d keys", n)
	}
}

// The most permits one call may take are taken and released: the scripts copy their IDs
// without unpack, which Redis's Lua 5.1 refuses beyond its C stack (LUAI_MAXCSTACK = 8000).
func TestPermitAcquireMostPermits(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		cpuBound(t)
		ctx := testCtx(t, 2*time.Minute)
		// Miniredis runs the 4096-permit scripts in seconds, more on a loaded machine: past
		// rueidis's default 10 s read timeout there.
		opt := b.ClientOption()
		opt.ConnWriteTimeout = time.Minute
		rdb, err := rueidis.NewClient(opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rdb.Close)
		c, err := New(rdb)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		s := c.PermitSemaphore("permits-most")
		const n = maxPermitsPerCall // beyond what Lua's unpack takes on a small stack
		must(t, s.SetPermits(ctx, n))
		p, err := s.Acquire(ctx, n)
		if err != nil {
			t.Fatalf("Acquire(%d) of %d (documented limit %d): %v", n, n, maxPermitsPerCall, err)
		}
		if err := p.Release(ctx); err != nil {
			t.Fatalf("Release of %d permits: %v", n, err)
		}
	})
}

// UpdateLeaseTime never shortens a lease: were it to, Redis would give the permit back while
// its Permits still say Valid, and another process would take it.
func TestPermitUpdateLeaseTimeOnlyGrows(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "permits-update-lease"
		c1, _ := newClient(t, b.Addr)
		c2, _ := newClient(t, b.Addr)
		s := c1.PermitSemaphore(name)
		must(t, s.SetPermits(ctx, 1))
		p, err := s.Acquire(ctx, 1) // kept by the watchdog
		must(t, err)
		ok, err := s.UpdateLeaseTime(ctx, p.IDs()[0], 20*time.Millisecond)
		if !ok || err != nil {
			t.Fatalf("UpdateLeaseTime: %v, %v", ok, err)
		}
		time.Sleep(50 * time.Millisecond)
		_, ok, err = c2.PermitSemaphore(name).TryAcquire(ctx, 1)
		must(t, err)
		if ok && p.Valid() {
			t.Fatalf("another Client took the only permit while the holder's Permits are Valid (deadline %v)", func() time.Time { d, _ := p.Deadline(); return d }())
		}
	})
}

// A PermitSemaphore waiter that becomes first re-checks when the permit the waiter ahead took
// expires: the served waiter wakes it, and its attempt learns the nearest expiry, rather
// than wait for its old timer, the watchdog timeout.
func TestPermitWaiterBecomingFirstSeesShortLease(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "permits-first-short-lease"
		const lease = 5 * time.Second // A's: 1.5 s ran out before a slow acquire returned
		c, _ := newClient(t, b.Addr)
		s := c.PermitSemaphore(name)
		must(t, s.SetPermits(ctx, 1))
		held, err := s.Acquire(ctx, 1) // kept by the watchdog: it expires 30 s ahead
		must(t, err)

		a := make(chan error, 1)
		go func() {
			// Then never released. Long enough for the acquire to return within it on a loaded
			// machine (200 ms was not), far shorter than B's 30 s timer.
			_, err := c.PermitSemaphore(name).Acquire(ctx, 1, Lease(lease))
			a <- err
		}()
		listeningOn(t, c, s.channel, 1)
		time.Sleep(50 * time.Millisecond)
		bDone := make(chan time.Time, 1)
		go func() {
			if _, err := c.PermitSemaphore(name).Acquire(ctx, 1); err == nil {
				bDone <- time.Now()
			}
		}()
		waitersOn(t, c, s.channel, 2)
		must(t, held.Release(ctx)) // A is served; its permit's lease ends a lease later
		must(t, <-a)
		expired := time.Now().Add(lease)
		select {
		case at := <-bDone:
			t.Logf("B served %v after A's permit expired", at.Sub(expired))
		case <-time.After(lease + 10*time.Second):
			t.Fatalf("B not served 10 s after A's %v permit expired (waits for its 30 s timer)", lease)
		}
	})
}

// A bad count of permits is refused before the acquisition begins, as a Semaphore's is: the
// Observer hears of no acquisition, and a Client shutting down reports the bad argument,
// not ErrClosed.
func TestPermitAcquireRefusesABadCountFirst(t *testing.T) {
	t.Parallel()
	b := redistest.Miniredis(t)
	ctx := testCtx(t, 5*time.Second)
	ev := &events{}
	c, _ := newClient(t, b.Addr, WithObserver(ev, nil))
	s := c.PermitSemaphore("permits-bad-count")
	check := func(when string) {
		t.Helper()
		for name, err := range map[string]error{
			"Acquire(0)":           func() error { _, err := s.Acquire(ctx, 0); return err }(),
			"TryAcquire(4097)":     func() error { _, _, err := s.TryAcquire(ctx, maxPermitsPerCall+1); return err }(),
			"Semaphore.Acquire(0)": c.Semaphore("sem-bad-count").Acquire(ctx, 0),
		} {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("%s %s: %v, want ErrInvalidArgument", name, when, err)
			}
		}
	}
	check("on an open Client")
	c.stopAcquiring() // as Shutdown begins: no acquisition starts any more
	check("on a Client shutting down")
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if len(ev.acquired) != 0 {
		t.Errorf("the Observer heard %d acquisitions of a bad count: %+v", len(ev.acquired), ev.acquired)
	}
}
