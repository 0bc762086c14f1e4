package sync

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/names"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/rueidis"
)

// Read-write lock tests. The lock is Redis state in Redisson's layout (docs/redisson-interop.md:
// the hash with mode, <owner> and <owner>:write fields, a timeout key per read hold, the
// channel redisson_rwlock:{name}) plus latchkey's zset of waiting writers, so the tests wait
// for states by polling Redis, and write a Java process's holds with raw commands.

func rwChannel(name string) string    { return names.Prefix("redisson_rwlock", name) }
func rwWritersKey(name string) string { return names.Suffix(name, "rwlock_writers") }

// rwTimeoutKey is the timeout key of owner's k-th read hold on name.
func rwTimeoutKey(name, owner string, k int) string {
	return readTimeouts(name, owner) + ":" + strconv.Itoa(k)
}

// rwHash returns the lock hash's fields.
func rwHash(t *testing.T, rdb rueidis.Client, name string) map[string]string {
	t.Helper()
	h, err := rdb.Do(context.Background(), rdb.B().Hgetall().Key(name).Build()).AsStrMap()
	if err != nil {
		t.Fatalf("HGETALL %s: %v", name, err)
	}
	return h
}

// rwWriters returns the waiting writers' claims on name.
func rwWriters(t *testing.T, rdb rueidis.Client, name string) []string {
	t.Helper()
	w, err := rdb.Do(context.Background(), rdb.B().Zrange().Key(rwWritersKey(name)).Min("0").Max("-1").Build()).AsStrSlice()
	if err != nil {
		t.Fatalf("ZRANGE %s: %v", rwWritersKey(name), err)
	}
	return w
}

// rwKeys returns every key in the database but the unlock latches (which live until their
// owner is collected or its Client closed), sorted.
func rwKeys(t *testing.T, rdb rueidis.Client) []string {
	t.Helper()
	keys, err := rdb.Do(context.Background(), rdb.B().Keys().Pattern("*").Build()).AsStrSlice()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	keys = slices.DeleteFunc(keys, func(k string) bool { return strings.HasPrefix(k, unlockLatchPrefix+":") })
	slices.Sort(keys)
	return keys
}

// rwNoKeys fails if anything of a lock is left in Redis (the unlock latches aside).
func rwNoKeys(t *testing.T, rdb rueidis.Client, what string) {
	t.Helper()
	if keys := rwKeys(t, rdb); len(keys) != 0 {
		t.Fatalf("%s: keys left %q, want none", what, keys)
	}
}

// rwEqual fails unless the lock hash is exactly want.
func rwEqual(t *testing.T, rdb rueidis.Client, name string, want map[string]string, what string) {
	t.Helper()
	if got := rwHash(t, rdb, name); !maps.Equal(got, want) {
		t.Fatalf("%s: hash %s = %v, want %v", what, name, got, want)
	}
}

// rwParked waits until n local waiters of c are parked on name's channel: subscribed, with
// no wake-up left to take, across two looks 10 ms apart (a waiter that has just taken its
// wake-up is still making its attempt for a moment).
func rwParked(t *testing.T, c *Client, name string, n int) {
	t.Helper()
	ch := rwChannel(name)
	quiet := func() bool {
		return c.mux.Subscribed(ch) && c.mux.Pending(ch) == 0 && c.mux.Waiters(ch) == n
	}
	eventually(t, waitFor, fmt.Sprintf("%d waiters parked on %s", n, ch), func() bool {
		if !quiet() {
			return false
		}
		time.Sleep(10 * time.Millisecond)
		return quiet()
	})
}

// rwClaimed waits until the zset of waiting writers on name holds exactly want.
func rwClaimed(t *testing.T, rdb rueidis.Client, name string, want ...string) {
	t.Helper()
	slices.Sort(want)
	eventually(t, waitFor, fmt.Sprintf("writers' claims on %s = %v", name, want), func() bool {
		got := rwWriters(t, rdb, name)
		slices.Sort(got)
		return slices.Equal(got, want)
	})
}

// rwGo runs f in a goroutine and returns its result.
func rwGo(f func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	return done
}

// rwResult waits up to within for a result from done.
func rwResult(t *testing.T, done <-chan error, within time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(within):
		t.Fatalf("%s: no result within %v", what, within)
		return nil
	}
}

// notYet fails if done already has a result.
func notYet(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s returned (%v) while it should wait", what, err)
	default:
	}
}

// 4 Clients × 8 goroutines, each with its own handle, mix read and write cycles (one in four
// a write) on one lock: a writer is never inside with anyone else, readers do share it, the
// data the lock guards is never torn, and once the Clients are closed (which deletes their
// unlock latches) nothing is left in Redis; on every topology.
func TestRWLockInvariantsUnderConcurrency(t *testing.T) {
	t.Parallel()
	topologies.Each(t, func(t *testing.T, b *redistest.Backend) {
		cpuBound(t)
		const clients, goroutines, cycles = 4, 8, 6
		name := topoName(t, "rw:invariants")
		data := name + ":data"
		ctx := testCtx(t, 2*time.Minute)
		admin := b.Client(t)
		must(t, admin.Do(ctx, admin.B().Set().Key(data).Value("0").Build()).Error())
		var readers, writers, maxReaders, writes atomic.Int64
		var wg gosync.WaitGroup
		errs := make(chan error, 3*clients*goroutines*cycles)
		var cs []*Client
		for i := range clients {
			c, rdb := newClientOn(t, b)
			cs = append(cs, c)
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rw := c.RWLock(name, Reentrant())
					get := func() (int64, error) { return rdb.Do(ctx, rdb.B().Get().Key(data).Build()).AsInt64() }
					for k := range cycles {
						if (i*goroutines+g+k)%4 == 0 {
							if err := rw.Lock(ctx); err != nil {
								errs <- err
								return
							}
							if n := writers.Add(1); n != 1 || readers.Load() != 0 {
								errs <- fmt.Errorf("writer inside with %d writers and %d readers", n, readers.Load())
							}
							v, err := get()
							if err == nil {
								err = rdb.Do(ctx, rdb.B().Set().Key(data).Value(strconv.FormatInt(v+1, 10)).Build()).Error()
							}
							if err != nil {
								errs <- err
							}
							writes.Add(1)
							writers.Add(-1)
							if err := rw.Unlock(ctx); err != nil {
								errs <- err
								return
							}
							continue
						}
						if err := rw.RLock(ctx); err != nil {
							errs <- err
							return
						}
						n := readers.Add(1)
						for m := maxReaders.Load(); n > m && !maxReaders.CompareAndSwap(m, n); m = maxReaders.Load() {
						}
						if w := writers.Load(); w != 0 {
							errs <- fmt.Errorf("reader inside with %d writers", w)
						}
						v1, err1 := get()
						v2, err2 := get()
						if err := errors.Join(err1, err2); err != nil {
							errs <- err
						} else if v1 != v2 {
							errs <- fmt.Errorf("data changed under a read lock: %d, then %d", v1, v2)
						}
						readers.Add(-1)
						if err := rw.RUnlock(ctx); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if got := mustInt(t, admin.Do(ctx, admin.B().Get().Key(data).Build())); got != writes.Load() || got != clients*goroutines*cycles/4 {
			t.Fatalf("data %d after %d write cycles, want %d", got, writes.Load(), clients*goroutines*cycles/4)
		}
		if maxReaders.Load() < 2 {
			t.Fatalf("at most %d reader inside at once: readers do not share the lock", maxReaders.Load())
		}
		t.Logf("%s: up to %d readers inside at once", b.Name, maxReaders.Load())
		must(t, admin.Do(ctx, admin.B().Del().Key(data).Build()).Error())
		for _, c := range cs {
			must(t, c.Close())
		}
		if exists(t, admin, name) {
			t.Fatal("the lock is still there after every cycle")
		}
		if !ownServer(b) { // the rest of a shared topology's data is other tests'
			return
		}
		if n := dbsize(t, admin); n != 0 {
			keys, _ := admin.Do(ctx, admin.B().Keys().Pattern("*").Build()).AsStrSlice()
			t.Fatalf("DBSIZE %d after every cycle and Close, want 0: %q", n, keys)
		}
	})
}

// Nested holds are counts in the hash, with one timeout key per read hold; handles are
// independent; every release returns nil, and after the last nothing of the lock is left.
func TestRWLockNestedHoldsCountsAndTimeoutKeys(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name = "rw:nested"
		ctx := testCtx(t, 10*time.Second)
		c, rdb := newClient(t, b.Addr)
		r, r2, w := c.RWLock(name, Reentrant()), c.RWLock(name, Reentrant()), c.RWLock(name, Reentrant())
		for range 3 {
			must(t, r.RLock(ctx))
		}
		if n := hget(t, ctx, rdb, name, r.Owner()); n != 3 {
			t.Fatalf("HGET %s %s = %d after 3 RLocks, want 3", name, r.Owner(), n)
		}
		for k := 1; k <= 3; k++ {
			if ttl := pttl(t, rdb, rwTimeoutKey(name, r.Owner(), k)); ttl <= 0 {
				t.Fatalf("timeout key %d: PTTL %d, want > 0", k, ttl)
			}
		}
		if exists(t, rdb, rwTimeoutKey(name, r.Owner(), 4)) {
			t.Fatal("a 4th timeout key for 3 holds")
		}
		if locked, err := r2.IsLocked(ctx); !locked || err != nil {
			t.Fatalf("IsLocked with readers: %v, %v", locked, err)
		}

		must(t, r.RUnlock(ctx))
		if n := hget(t, ctx, rdb, name, r.Owner()); n != 2 {
			t.Fatalf("count %d after one RUnlock of 3, want 2", n)
		}
		if exists(t, rdb, rwTimeoutKey(name, r.Owner(), 3)) {
			t.Fatal("timeout key 3 left after the third hold's release")
		}
		for k := 1; k <= 2; k++ {
			if ttl := pttl(t, rdb, rwTimeoutKey(name, r.Owner(), k)); ttl <= 0 {
				t.Fatalf("timeout key %d after a release: PTTL %d, want > 0", k, ttl)
			}
		}

		// A second reader's field and keys are its own.
		must(t, r2.RLock(ctx))
		rwEqual(t, rdb, name, map[string]string{"mode": "read", r.Owner(): "2", r2.Owner(): "1"}, "two readers")
		if !exists(t, rdb, rwTimeoutKey(name, r2.Owner(), 1)) || exists(t, rdb, rwTimeoutKey(name, r2.Owner(), 2)) {
			t.Fatal("the second reader's timeout keys are not exactly :1")
		}
		must(t, r2.RUnlock(ctx))
		rwEqual(t, rdb, name, map[string]string{"mode": "read", r.Owner(): "2"}, "second reader gone")
		if ttl := pttl(t, rdb, name); ttl <= 0 {
			t.Fatalf("lock PTTL %d after a reader left, want > 0", ttl)
		}
		must(t, r.RUnlock(ctx))
		must(t, r.RUnlock(ctx))
		rwNoKeys(t, rdb, "after the last read release")
		if err := r.RUnlock(ctx); !errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLockLost) {
			t.Fatalf("RUnlock of nothing: %v, want ErrNotHeld", err)
		}

		// Write re-entry.
		must(t, w.Lock(ctx))
		must(t, w.Lock(ctx))
		rwEqual(t, rdb, name, map[string]string{"mode": "write", w.Owner() + ":write": "2"}, "write held twice")
		if ok, err := r.TryRLock(ctx); ok || err != nil {
			t.Fatalf("TryRLock under a writer: %v, %v; want false, nil", ok, err)
		}
		if ok, err := r.TryLock(ctx); ok || err != nil {
			t.Fatalf("TryLock under a writer: %v, %v; want false, nil", ok, err)
		}
		if got := rwWriters(t, rdb, name); len(got) != 0 {
			t.Fatalf("a TryLock without WaitTime left a claim: %v", got)
		}
		must(t, w.Unlock(ctx))
		rwEqual(t, rdb, name, map[string]string{"mode": "write", w.Owner() + ":write": "1"}, "write held once")
		must(t, w.Unlock(ctx))
		rwNoKeys(t, rdb, "after the last write release")
		if locked, err := w.IsLocked(ctx); locked || err != nil {
			t.Fatalf("IsLocked after every release: %v, %v", locked, err)
		}
		if err := w.Unlock(ctx); !errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLockLost) {
			t.Fatalf("Unlock of nothing: %v, want ErrNotHeld", err)
		}
		must(t, c.Close())
		if n := dbsize(t, rdb); n != 0 {
			t.Fatalf("DBSIZE %d after Close, want 0", n)
		}
	})
}

// A writer may take read locks (a downgrade) and keeps them past its Unlock; a reader may
// not take the write lock (an upgrade): Lock and TryLock refuse at once with
// ErrWouldDeadlock, whatever they would wait.
func TestRWLockDowngradeAndUpgrade(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name = "rw:grade"
		ctx := testCtx(t, 10*time.Second)
		c, rdb := newClient(t, b.Addr)
		w, other := c.RWLock(name, Reentrant()), c.RWLock(name, Reentrant())

		// Downgrade.
		must(t, w.Lock(ctx))
		must(t, w.RLock(ctx))
		rwEqual(t, rdb, name, map[string]string{"mode": "write", w.Owner() + ":write": "1", w.Owner(): "1"}, "write and read")
		must(t, w.Lock(ctx)) // holding both, the write lock re-enters
		must(t, w.Unlock(ctx))
		if ok, err := other.TryRLock(ctx); ok || err != nil {
			t.Fatalf("another reader under the write lock: %v, %v", ok, err)
		}
		must(t, w.Unlock(ctx))
		rwEqual(t, rdb, name, map[string]string{"mode": "read", w.Owner(): "1"}, "downgraded")
		if !exists(t, rdb, rwTimeoutKey(name, w.Owner(), 1)) {
			t.Fatal("the downgraded read hold has no timeout key")
		}
		must(t, other.RLock(testCtx(t, time.Second)))
		rwEqual(t, rdb, name, map[string]string{"mode": "read", w.Owner(): "1", other.Owner(): "1"}, "downgraded, another reader")
		must(t, other.RUnlock(ctx))
		must(t, w.RUnlock(ctx))
		rwNoKeys(t, rdb, "after the downgrade's release")

		// Read released before write, in a downgrade: the write lock stays.
		must(t, w.Lock(ctx))
		must(t, w.RLock(ctx))
		must(t, w.RUnlock(ctx))
		rwEqual(t, rdb, name, map[string]string{"mode": "write", w.Owner() + ":write": "1"}, "read released first")
		if ttl := pttl(t, rdb, name); ttl <= 0 {
			t.Fatalf("write lock PTTL %d after its read hold went, want > 0", ttl)
		}
		must(t, w.Unlock(ctx))
		rwNoKeys(t, rdb, "after write released last")

		// Upgrade: refused at once, with or without waiting.
		r := c.RWLock(name, Reentrant())
		must(t, r.RLock(ctx))
		calls := map[string]func(context.Context) error{
			"Lock":              func(ctx context.Context) error { return r.Lock(ctx) },
			"TryLock":           func(ctx context.Context) error { return second(r.TryLock(ctx)) },
			"TryLock(WaitTime)": func(ctx context.Context) error { return second(r.TryLock(ctx, WaitTime(time.Minute))) },
		}
		for what, call := range calls {
			short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			start := time.Now()
			err := call(short)
			cancel()
			if !errors.Is(err, ErrWouldDeadlock) || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s holding a read lock: %v, want ErrWouldDeadlock", what, err)
			}
			if d := time.Since(start); d > 150*time.Millisecond {
				t.Fatalf("%s took %v to refuse the upgrade", what, d)
			}
		}
		if got := rwWriters(t, rdb, name); len(got) != 0 {
			t.Fatalf("a refused upgrade left a claim: %v", got)
		}
		rwEqual(t, rdb, name, map[string]string{"mode": "read", r.Owner(): "1"}, "after the refused upgrades")
		must(t, r.RUnlock(ctx))
		must(t, r.Lock(ctx)) // holding nothing, the same handle may write
		must(t, r.Unlock(ctx))
		rwNoKeys(t, rdb, "after the upgrade tests")

		// Refused before the acquisition begins, as a bad argument is: also on a Client whose
		// Shutdown has begun, which refuses acquisitions.
		closing, _ := newClient(t, b.Addr)
		u := closing.RWLock(name, Reentrant())
		must(t, u.RLock(ctx))
		closing.stopAcquiring()
		if err := u.Lock(ctx); !errors.Is(err, ErrWouldDeadlock) {
			t.Fatalf("upgrade on a Client shutting down: %v, want ErrWouldDeadlock", err)
		}
		must(t, u.RUnlock(ctx))
	})
}

// Release messages wake waiters, with no re-check to help: waiters re-check by themselves only
// a minute apart (fairSlowRechecks), so within waitFor only a message can wake them. The last
// reader's release wakes a waiting writer; a writer's release wakes every waiting reader, in
// every Client.
func TestRWLockReleaseWakesWaiters(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name = "rw:wake"
		c1, rdb := newClient(t, b.Addr, fairSlowRechecks...)
		c2, _ := newClient(t, b.Addr, fairSlowRechecks...)
		ctx := testCtx(t, 10*time.Second)
		sub := rawSubscribe(t, ctx, rdb, rwChannel(name))

		// A writer behind two readers.
		r1, r2, w := c1.RWLock(name, Reentrant()), c1.RWLock(name, Reentrant()), c2.RWLock(name, Reentrant())
		must(t, r1.RLock(ctx))
		must(t, r2.RLock(ctx))
		wctx := testCtx(t, waitFor)
		wrote := rwGo(func() error { return w.Lock(wctx) })
		rwClaimed(t, rdb, name, w.Owner()+":write")
		rwParked(t, c2, name, 1)
		must(t, r1.RUnlock(ctx))
		notYet(t, wrote, "the writer with a reader left")
		sub.quiet(t, ctx, "a read release that leaves the lock held")
		must(t, r2.RUnlock(ctx))
		must(t, rwResult(t, wrote, waitFor, "writer after the last reader left"))
		if got := sub.published(t, ctx); !slices.Equal(got, []string{"1"}) {
			t.Fatalf("the last read release with a writer waiting published %q, want [1]", got)
		}
		rwEqual(t, rdb, name, map[string]string{"mode": "write", w.Owner() + ":write": "1"}, "writer in")
		if got := rwWriters(t, rdb, name); len(got) != 0 {
			t.Fatalf("the writer's claim outlived its acquisition: %v", got)
		}

		// Readers of both Clients behind the writer: one message wakes them all.
		rctx := testCtx(t, waitFor)
		var readers []*RWLock
		var read []<-chan error
		for _, c := range []*Client{c1, c1, c1, c2, c2} {
			r := c.RWLock(name, Reentrant())
			readers = append(readers, r)
			read = append(read, rwGo(func() error { return r.RLock(rctx) }))
		}
		rwParked(t, c1, name, 3)
		rwParked(t, c2, name, 2)
		must(t, w.Unlock(ctx))
		for i, done := range read {
			must(t, rwResult(t, done, waitFor, fmt.Sprintf("reader %d after the write release", i)))
		}
		if got := sub.published(t, ctx); !slices.Equal(got, []string{"1"}) {
			t.Fatalf("the write release published %q, want [1]", got)
		}
		if h := rwHash(t, rdb, name); len(h) != 6 || h["mode"] != "read" {
			t.Fatalf("hash %v, want mode read and 5 readers", h)
		}
		for _, r := range readers {
			must(t, r.RUnlock(ctx))
		}
		if got := sub.published(t, ctx); !slices.Equal(got, []string{"0"}) {
			t.Fatalf("the read releases published %q, want one 0 from the last", got)
		}
		rwNoKeys(t, rdb, "after every release")
	})
}

// A write release that finds the lock gone (deleted under the writer) reports the loss and
// still tells the waiters, as Redisson's does: a waiting reader gets the lock at once, not at
// its re-check a watchdog timeout later.
func TestRWLockWriteReleaseOfDeletedLockWakesWaiters(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name = "rw:gone"
		// A waiting reader re-checks by itself only a minute apart: getting the lock within
		// waitFor, it was woken by the release.
		c1, rdb := newClient(t, b.Addr, fairSlowRechecks...)
		c2, _ := newClient(t, b.Addr, fairSlowRechecks...)
		ctx := testCtx(t, 10*time.Second)
		w, r := c1.RWLock(name, Reentrant()), c2.RWLock(name, Reentrant())
		must(t, w.Lock(ctx))
		attempts := fairCountAttempts(c2)
		rctx := testCtx(t, waitFor)
		read := rwGo(func() error { return r.RLock(rctx) })
		// Both its attempts made (the second when its subscription is confirmed): a later one
		// would take the deleted lock before the release below could find it gone.
		fairAwaitSettled(t, attempts)
		rwParked(t, c2, name, 1)
		must(t, rdb.Do(ctx, rdb.B().Del().Key(name).Build()).Error())
		sub := rawSubscribe(t, ctx, rdb, rwChannel(name))
		if err := w.Unlock(ctx); !errors.Is(err, ErrLockLost) {
			t.Fatalf("Unlock of a deleted write lock: %v, want ErrLockLost", err)
		}
		if got := sub.published(t, ctx); !slices.Equal(got, []string{"1"}) {
			t.Fatalf("the write release of a deleted lock published %q, want [1]", got)
		}
		must(t, rwResult(t, read, waitFor, "the reader after the write release found the lock gone"))
		must(t, r.RUnlock(ctx))
		rwNoKeys(t, rdb, "after every release")
	})
}

// A waiting writer keeps new readers out, but not a re-entering reader nor the holder's own
// downgrade; when it gives up (TryLock's WaitTime runs out, or its ctx ends), its claim goes
// and the message wakes the readers it held back.
func TestRWLockWriterPreference(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		for _, giveUp := range []string{"WaitTime", "ctx"} {
			t.Run(giveUp, func(t *testing.T) {
				name := "rw:prefer:" + giveUp
				ctx := testCtx(t, 60*time.Second)
				c, rdb := newClient(t, b.Addr, WithWatchdogTimeout(30*time.Second))
				wc, _ := newClient(t, b.Addr, WithWatchdogTimeout(30*time.Second))
				r1, r2, w := c.RWLock(name, Reentrant()), c.RWLock(name, Reentrant()), wc.RWLock(name, Reentrant())
				must(t, r1.RLock(ctx))
				must(t, r2.RLock(ctx))

				wctx, cancel := context.WithCancel(ctx)
				defer cancel()
				const waitTime = 5 * time.Second // outlasts the steps below on a loaded machine
				wrote := rwGo(func() error {
					if giveUp == "ctx" {
						return w.Lock(wctx)
					}
					ok, err := w.TryLock(ctx, WaitTime(waitTime))
					if err == nil && ok {
						err = errors.New("the writer took the lock over readers")
					}
					return err
				})
				rwClaimed(t, rdb, name, w.Owner()+":write")
				if s, err := rdb.Do(ctx, rdb.B().Zscore().Key(rwWritersKey(name)).Member(w.Owner()+":write").Build()).AsFloat64(); err != nil ||
					s < float64(time.Now().Add(20*time.Second).UnixMilli()) {
					t.Fatalf("claim score %v (%v), want about now + the 30 s fair wait time", s, err)
				}

				r3 := c.RWLock(name, Reentrant())
				if ok, err := r3.TryRLock(ctx); ok || err != nil {
					t.Fatalf("a new reader's TryRLock past a waiting writer: %v, %v; want false, nil", ok, err)
				}
				rctx := testCtx(t, 30*time.Second)
				read := rwGo(func() error { return r3.RLock(rctx) })
				rwParked(t, c, name, 1)
				notYet(t, read, "a new reader behind a waiting writer")

				// Re-entry does not wait.
				must(t, r1.RLock(testCtx(t, 5*time.Second)))
				if n := hget(t, ctx, rdb, name, r1.Owner()); n != 2 {
					t.Fatalf("re-entering reader's count %d, want 2", n)
				}
				must(t, r1.RUnlock(ctx))

				// The writer gives up; its claim goes and the reader it held back is woken.
				if giveUp == "ctx" {
					cancel()
					if err := rwResult(t, wrote, waitFor, "writer whose ctx ended"); !errors.Is(err, context.Canceled) {
						t.Fatalf("writer's Lock: %v, want context.Canceled", err)
					}
				} else {
					must(t, rwResult(t, wrote, waitTime+waitFor, "writer whose wait time ran out"))
				}
				// Withdrawn in the background (the caller does not wait for Redis).
				eventually(t, waitFor, "the writer's claim withdrawn", func() bool { return len(rwWriters(t, rdb, name)) == 0 })
				must(t, rwResult(t, read, waitFor, "reader after the writer gave up"))
				rwEqual(t, rdb, name, map[string]string{"mode": "read", r1.Owner(): "1", r2.Owner(): "1", r3.Owner(): "1"}, "readers")
				for _, r := range []*RWLock{r1, r2, r3} {
					must(t, r.RUnlock(ctx))
				}
				rwNoKeys(t, rdb, "after every release")
			})
		}

		// The write holder's downgrade does not wait for a writer waiting behind it.
		t.Run("downgrade", func(t *testing.T) {
			const name = "rw:prefer:downgrade"
			ctx := testCtx(t, 60*time.Second)
			c, rdb := newClient(t, b.Addr, WithWatchdogTimeout(30*time.Second))
			w1, w2, r := c.RWLock(name, Reentrant()), c.RWLock(name, Reentrant()), c.RWLock(name, Reentrant())
			must(t, w1.Lock(ctx))
			wctx := testCtx(t, 30*time.Second)
			wrote := rwGo(func() error { return w2.Lock(wctx) })
			rwClaimed(t, rdb, name, w2.Owner()+":write")
			must(t, w1.RLock(testCtx(t, 5*time.Second)))
			must(t, w1.Unlock(ctx))
			rwEqual(t, rdb, name, map[string]string{"mode": "read", w1.Owner(): "1"}, "downgraded with a writer waiting")
			if ok, err := r.TryRLock(ctx); ok || err != nil {
				t.Fatalf("a new reader past the waiting writer: %v, %v; want false, nil", ok, err)
			}
			rwParked(t, c, name, 1)
			notYet(t, wrote, "the writer behind the downgraded reader")
			must(t, w1.RUnlock(ctx))
			must(t, rwResult(t, wrote, waitFor, "writer after the downgraded reader left"))
			must(t, w2.Unlock(ctx))
			rwNoKeys(t, rdb, "after every release")
		})

		// A writer that stopped waiting without a word (crashed) holds readers back only until
		// its claim's deadline.
		t.Run("crashed writer", func(t *testing.T) {
			const name = "rw:prefer:crashed"
			ctx := testCtx(t, 60*time.Second)
			c, rdb := newClient(t, b.Addr, WithWatchdogTimeout(30*time.Second), WithFairLockWaitTimeout(300*time.Millisecond))
			// Live until well after the reader's first attempt on a loaded machine (a 300 ms
			// claim had lapsed by then).
			deadline := time.Now().Add(1500 * time.Millisecond)
			must(t, rdb.Do(ctx, rdb.B().Zadd().Key(rwWritersKey(name)).ScoreMember().
				ScoreMember(float64(deadline.UnixMilli()), "x:write").Build()).Error())
			r := c.RWLock(name, Reentrant())
			if ok, err := r.TryRLock(ctx); ok || err != nil {
				t.Fatalf("a reader past a live claim: %v, %v; want false, nil", ok, err)
			}
			must(t, r.RLock(testCtx(t, 30*time.Second)))
			if now := time.Now(); now.Before(deadline.Add(-20 * time.Millisecond)) {
				t.Fatalf("the reader got in %v before the claim's deadline", deadline.Sub(now))
			}
			if exists(t, rdb, rwWritersKey(name)) {
				t.Fatalf("the lapsed claim is still there: %v", rwWriters(t, rdb, name))
			}
			must(t, r.RUnlock(ctx))
			rwNoKeys(t, rdb, "after the release")
		})
	})
}

// The watchdog keeps read and write holds across renewal periods; a deleted lock closes
// RLost or Lost within the watchdog timeout, and the release then reports ErrLockLost. A
// read hold with a lease of its own is not renewed.
func TestRWLockWatchdogAndLost(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		// Renewals every 2 s keep a 6 s TTL with 4 s to spare on a loaded machine (1.5 s
		// renewed every 500 ms was lost under two CPU hogs).
		const timeout = 6 * time.Second
		const lease = 3 * time.Second // the leased read hold's
		const rname, wname, lname = "rw:lost:read", "rw:lost:write", "rw:lost:lease"
		ctx := testCtx(t, 30*time.Second)
		c, rdb := newClient(t, b.Addr, WithWatchdogTimeout(timeout))
		r, w, leased := c.RWLock(rname, Reentrant()), c.RWLock(wname, Reentrant()), c.RWLock(lname, Reentrant())
		must(t, r.RLock(ctx))
		must(t, r.RLock(ctx))
		must(t, w.Lock(ctx))
		// Long enough to outlast its acquisition on a loaded machine (200 ms did not), short
		// enough to run out during the renewals below.
		must(t, leased.RLock(ctx, Lease(lease)))
		if ttl := pttl(t, rdb, rwTimeoutKey(lname, leased.Owner(), 1)); ttl <= 0 || ttl > lease.Milliseconds() {
			t.Fatalf("leased read hold's timeout key: PTTL %d, want the %v lease", ttl, lease)
		}

		// Past the first TTL, over several renewal periods (every 2 s): the kept holds' keys
		// never run out; the leased one does.
		kept := []string{rname, rwTimeoutKey(rname, r.Owner(), 1), rwTimeoutKey(rname, r.Owner(), 2), wname}
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for start := time.Now(); time.Since(start) < timeout+timeout/3; <-tick.C {
			for _, k := range kept {
				if ttl := pttl(t, rdb, k); ttl <= 0 {
					t.Fatalf("%s: PTTL %d after %v held, want > 0 (renewed)", k, ttl, time.Since(start))
				}
			}
		}
		if exists(t, rdb, lname) || exists(t, rdb, rwTimeoutKey(lname, leased.Owner(), 1)) {
			t.Fatalf("a read hold with a %v lease still there after %v", lease, timeout+timeout/3)
		}
		rlost, wlost := r.RLost(), w.Lost()
		if isClosed(rlost) || isClosed(wlost) || isClosed(w.RLost()) {
			t.Fatal("RLost or Lost closed while held")
		}
		wantLost(t, "RUnlock after the lease ran out", leased.RUnlock(ctx), leased.RLost())

		admin := b.Client(t)
		must(t, admin.Do(ctx, admin.B().Del().Key(rname, wname).Build()).Error())
		for what, ch := range map[string]<-chan struct{}{"RLost": rlost, "Lost": wlost} {
			select {
			case <-ch:
			case <-time.After(timeout + 2*time.Second):
				t.Fatalf("%s not closed after the lock was deleted", what)
			}
		}
		wantLost(t, "RUnlock after the lock was deleted", r.RUnlock(ctx), rlost)
		wantLost(t, "Unlock after the lock was deleted", w.Unlock(ctx), wlost)
		eventually(t, timeout+waitFor, "the lost read holds' timeout keys expire", func() bool {
			return len(rwKeys(t, rdb)) == 0
		})

		// The handles take fresh holds.
		must(t, r.RLock(ctx))
		must(t, w.Lock(ctx))
		if isClosed(r.RLost()) || isClosed(w.Lost()) {
			t.Fatal("a fresh hold's RLost or Lost is closed")
		}
		must(t, r.RUnlock(ctx))
		must(t, w.Unlock(ctx))
		rwNoKeys(t, rdb, "after the fresh holds' release")
	})
}

// Java at the wire (docs/redisson-interop.md, read-write lock): what we write is Redisson's layout, what we
// publish is what a Redisson waiter listens for, a Redisson-style release wakes our
// waiters, and Redisson-style holders exclude ours.
func TestRWLockRedissonWireCompatibility(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const javaOwner = "9c345276-aa6e-44c1-b478-bf4b14ba1498:805"
		ctx := testCtx(t, 20*time.Second)
		c, rdb := newClient(t, b.Addr) // default watchdog: its leases are Redisson's 30 s
		// Waiters re-check by themselves only a minute apart (fairSlowRechecks): one that gets
		// the lock within waitFor was woken by the release.
		wc, _ := newClient(t, b.Addr, fairSlowRechecks...)

		t.Run("layout", func(t *testing.T) {
			for _, name := range []string{"rw:layout", "{app}:rw"} {
				r, w := c.RWLock(name, Reentrant()), c.RWLock(name, Reentrant())
				if id, n, ok := strings.Cut(r.Owner(), ":"); !ok || id != c.ID() || len(id) != 36 {
					t.Fatalf("owner %q is not <uuid>:<n>", r.Owner())
				} else if _, err := strconv.ParseInt(n, 10, 64); err != nil {
					t.Fatalf("owner %q: thread part %q is not a long", r.Owner(), n)
				}
				must(t, r.RLock(ctx))
				rwEqual(t, rdb, name, map[string]string{"mode": "read", r.Owner(): "1"}, name+" read")
				timeoutKey := "{" + name + "}:" + r.Owner() + ":rwlock_timeout:1"
				if strings.Contains(name, "{") {
					timeoutKey = name + ":" + r.Owner() + ":rwlock_timeout:1"
				}
				want := []string{name, timeoutKey}
				slices.Sort(want)
				if got := rwKeys(t, rdb); !slices.Equal(got, want) {
					t.Fatalf("%s read-held: keys %q, want %q", name, got, want)
				}
				if v, err := rdb.Do(ctx, rdb.B().Get().Key(timeoutKey).Build()).ToString(); err != nil || v != "1" {
					t.Fatalf("timeout key value %q (%v), want 1", v, err)
				}
				for _, k := range want {
					if ttl := pttl(t, rdb, k); ttl <= 20000 || ttl > 30000 {
						t.Fatalf("%s: PTTL %d, want the 30000 ms watchdog lease", k, ttl)
					}
				}
				// A reader leaving finds the other's timeout key by the lock's key prefix
				// ({N}, or N with braces) and keeps the lock for it.
				r2 := c.RWLock(name, Reentrant())
				must(t, r2.RLock(ctx))
				must(t, r2.RUnlock(ctx))
				rwEqual(t, rdb, name, map[string]string{"mode": "read", r.Owner(): "1"}, name+" after a second reader left")
				if ttl := pttl(t, rdb, name); ttl <= 20000 {
					t.Fatalf("%s: PTTL %d after a second reader left, want the first's time left", name, ttl)
				}
				must(t, r.RUnlock(ctx))
				must(t, w.Lock(ctx))
				rwEqual(t, rdb, name, map[string]string{"mode": "write", w.Owner() + ":write": "1"}, name+" write")
				if got := rwKeys(t, rdb); !slices.Equal(got, []string{name}) {
					t.Fatalf("%s write-held: keys %q, want only the hash", name, got)
				}
				if ttl := pttl(t, rdb, name); ttl <= 20000 || ttl > 30000 {
					t.Fatalf("write-held PTTL %d, want the 30000 ms watchdog lease", ttl)
				}
				must(t, w.Unlock(ctx))
				rwNoKeys(t, rdb, name+" released")
			}
			if rwChannel("rw:layout") != "redisson_rwlock:{rw:layout}" || rwChannel("{app}:rw") != "redisson_rwlock:{app}:rw" {
				t.Fatalf("channels %q, %q", rwChannel("rw:layout"), rwChannel("{app}:rw"))
			}
			if got := c.RWLock("rw:layout", Reentrant()).write.v.wakeCh(nil); got != "redisson_rwlock:{rw:layout}" {
				t.Fatalf("the handle's channel %q", got)
			}
		})

		t.Run("messages", func(t *testing.T) {
			const name = "rw:messages"
			sub := rawSubscribe(t, ctx, rdb, "redisson_rwlock:{rw:messages}")
			r, r2, w := c.RWLock(name, Reentrant()), c.RWLock(name, Reentrant()), c.RWLock(name, Reentrant())
			must(t, r.RLock(ctx))
			must(t, r2.RLock(ctx))
			must(t, r.RUnlock(ctx))
			sub.quiet(t, ctx, "a read release that leaves a reader")
			must(t, r2.RUnlock(ctx))
			if got := sub.published(t, ctx); !slices.Equal(got, []string{"0"}) {
				t.Fatalf("the last read release published %q, want [0]", got)
			}
			must(t, w.Lock(ctx))
			must(t, w.Lock(ctx))
			must(t, w.Unlock(ctx))
			sub.quiet(t, ctx, "an inner write release")
			must(t, w.Unlock(ctx))
			if got := sub.published(t, ctx); !slices.Equal(got, []string{"1"}) {
				t.Fatalf("the write release published %q, want [1]", got)
			}
			// A downgrade's write release tells the readers too (Redisson stays silent).
			must(t, w.Lock(ctx))
			must(t, w.RLock(ctx))
			must(t, w.Unlock(ctx))
			if got := sub.published(t, ctx); !slices.Equal(got, []string{"1"}) {
				t.Fatalf("the downgrade's write release published %q, want [1]", got)
			}
			must(t, w.RUnlock(ctx))
			if got := sub.published(t, ctx); !slices.Equal(got, []string{"0"}) {
				t.Fatalf("the downgraded read release published %q, want [0]", got)
			}
			rwNoKeys(t, rdb, "after every release")
		})

		t.Run("Java write release wakes our reader", func(t *testing.T) {
			const name = "rw:java-writer"
			must(t, rdb.Do(ctx, rdb.B().Hset().Key(name).FieldValue().FieldValue("mode", "write").
				FieldValue(javaOwner+":write", "1").Build()).Error())
			must(t, rdb.Do(ctx, rdb.B().Pexpire().Key(name).Milliseconds(180000).Build()).Error())
			r := wc.RWLock(name, Reentrant())
			if ok, err := r.TryRLock(ctx); ok || err != nil {
				t.Fatalf("TryRLock over a Java writer: %v, %v; want false, nil", ok, err)
			}
			rctx := testCtx(t, waitFor)
			read := rwGo(func() error { return r.RLock(rctx) })
			rwParked(t, wc, name, 1)
			must(t, rdb.Do(ctx, rdb.B().Del().Key(name).Build()).Error())
			must(t, rdb.Do(ctx, rdb.B().Publish().Channel("redisson_rwlock:{rw:java-writer}").Message("1").Build()).Error())
			must(t, rwResult(t, read, waitFor, "our reader after the Java write release"))
			rwEqual(t, rdb, name, map[string]string{"mode": "read", r.Owner(): "1"}, "our reader in")
			must(t, r.RUnlock(ctx))
			rwNoKeys(t, rdb, "after the release")
		})

		t.Run("Java reader holds our writer", func(t *testing.T) {
			const name = "rw:java-reader"
			javaTimeout := "{" + name + "}:" + javaOwner + ":rwlock_timeout:1"
			must(t, rdb.Do(ctx, rdb.B().Hset().Key(name).FieldValue().FieldValue("mode", "read").FieldValue(javaOwner, "1").Build()).Error())
			must(t, rdb.Do(ctx, rdb.B().Pexpire().Key(name).Milliseconds(180000).Build()).Error())
			must(t, rdb.Do(ctx, rdb.B().Set().Key(javaTimeout).Value("1").PxMilliseconds(180000).Build()).Error())
			w, r := wc.RWLock(name, Reentrant()), wc.RWLock(name, Reentrant())

			// Our reader shares the lock with the Java reader, and its release leaves it.
			must(t, r.RLock(ctx))
			rwEqual(t, rdb, name, map[string]string{"mode": "read", javaOwner: "1", r.Owner(): "1"}, "Java and our reader")
			must(t, r.RUnlock(ctx))
			rwEqual(t, rdb, name, map[string]string{"mode": "read", javaOwner: "1"}, "our reader left")
			if ttl := pttl(t, rdb, name); ttl <= 20000 {
				t.Fatalf("PTTL %d after our reader left, want the Java hold's time left", ttl)
			}

			if ok, err := w.TryLock(ctx); ok || err != nil {
				t.Fatalf("TryLock over a Java reader: %v, %v; want false, nil", ok, err)
			}
			wctx := testCtx(t, waitFor)
			wrote := rwGo(func() error { return w.Lock(wctx) })
			rwClaimed(t, rdb, name, w.Owner()+":write")
			rwParked(t, wc, name, 1)
			must(t, rdb.Do(ctx, rdb.B().Del().Key(name).Build()).Error())
			must(t, rdb.Do(ctx, rdb.B().Del().Key(javaTimeout).Build()).Error())
			must(t, rdb.Do(ctx, rdb.B().Publish().Channel("redisson_rwlock:{rw:java-reader}").Message("0").Build()).Error())
			must(t, rwResult(t, wrote, waitFor, "our writer after the Java read release"))
			rwEqual(t, rdb, name, map[string]string{"mode": "write", w.Owner() + ":write": "1"}, "our writer in")
			if exists(t, rdb, rwWritersKey(name)) {
				t.Fatal("the writer's claim outlived its acquisition")
			}
			must(t, w.Unlock(ctx))
			rwNoKeys(t, rdb, "after the release")
		})
	})
}

// A Client's idle owners serve only handles of their own side and name: a reader of a lock
// whose name is another's writer side spelt out never takes that writer's owner, and with
// it a hold on the other lock.
func TestRWLockOwnersOfOtherNamesNeverMix(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		c, rdb := newClient(t, b.Addr)
		w := c.RWLock("rw-mix")
		must(t, w.Lock(ctx))
		must(t, w.Unlock(ctx)) // its writer's owner goes idle
		r := c.RWLock("write:rw-mix")
		must(t, r.RLock(ctx))
		if h := rwHash(t, rdb, "rw-mix"); len(h) != 0 {
			t.Errorf("RLock of %q wrote the hash rw-mix: %v", "write:rw-mix", h)
		}
		if h := rwHash(t, rdb, "write:rw-mix"); len(h) == 0 {
			t.Errorf("RLock of %q took no hold on it", "write:rw-mix")
		}
		must(t, r.RUnlock(ctx))
	})
}

// An RUnlock or Unlock of a handle that holds nothing on that side says which side.
func TestRWLockUnlockOfNothingSaysWhichSide(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		c, _ := newClient(t, b.Addr)
		rw := c.RWLock("rw:nothing")
		must(t, rw.Lock(ctx))
		if err := rw.RUnlock(ctx); !errors.Is(err, ErrNotHeld) || !strings.Contains(err.Error(), "holds no read lock") {
			t.Errorf("RUnlock of a handle holding only the write lock: %v", err)
		}
		must(t, rw.Unlock(ctx))
		if err := rw.Unlock(ctx); !errors.Is(err, ErrNotHeld) || !strings.Contains(err.Error(), "holds no write lock") {
			t.Errorf("Unlock of a handle holding nothing: %v", err)
		}
	})
}

// Bad arguments are refused before Redis is touched, with an error naming the argument.
func TestRWLockInvalidArguments(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		c, rdb := newClient(t, b.Addr)
		ctx := context.Background()
		var nilCtx context.Context
		empty, rw := c.RWLock("", Reentrant()), c.RWLock("rw:args", Reentrant())
		badOption := c.RWLock("rw:args", nil)
		cases := []struct {
			arg string
			err error
		}{
			{"name", empty.RLock(ctx)},
			{"name", second(empty.TryRLock(ctx))},
			{"name", empty.Lock(ctx)},
			{"name", second(empty.TryLock(ctx))},
			{"name", empty.RUnlock(ctx)},
			{"name", empty.Unlock(ctx)},
			{"name", second(empty.IsLocked(ctx))},
			{"option", rw.RLock(ctx, nil)},
			{"option", second(rw.TryRLock(ctx, nil))},
			{"option", rw.Lock(ctx, nil)},
			{"option", second(rw.TryLock(ctx, WaitTime(time.Second), nil))},
			{"option", badOption.RLock(ctx)},
			{"option", badOption.Lock(ctx)},
			{"option", second(badOption.TryLock(ctx))},
			{"wait time", second(rw.TryRLock(ctx, WaitTime(-1)))},
			{"wait time", second(rw.TryLock(ctx, WaitTime(-time.Second)))},
			{"lease", rw.RLock(ctx, Lease(time.Microsecond))},
			{"lease", rw.Lock(ctx, Lease(0))},
			{"lease", second(rw.TryRLock(ctx, Lease(-time.Second)))},
			{"lease", second(rw.TryLock(ctx, Lease(999*time.Microsecond)))},
			{"ctx", rw.RLock(nilCtx)},
			{"ctx", rw.Lock(nilCtx)},
			{"ctx", rw.RUnlock(nilCtx)},
			{"ctx", rw.Unlock(nilCtx)},
		}
		for i, tc := range cases {
			if !errors.Is(tc.err, ErrInvalidArgument) || !strings.Contains(tc.err.Error(), tc.arg) {
				t.Errorf("case %d, bad %s: got %v", i, tc.arg, tc.err)
			}
		}
		if err := rw.RLock(ctx, Lease(-time.Second)); err == nil || !strings.Contains(err.Error(), "-1s") {
			t.Errorf("the error should give the bad value: %v", err)
		}
		if n := dbsize(t, rdb); n != 0 {
			t.Fatalf("a rejected call touched Redis: DBSIZE %d", n)
		}
	})
}

// A Java reader's release publishes 0, which wakes one local waiter per Client. When that
// waiter is a reader held back by a waiting writer's claim, its attempt fails, and the
// writer of the same Client — the one waiter that could take the lock — must still be woken
// by the message, not by its re-check (a minute later here).
func TestRWLockJavaReadReleaseWakesWriterBehindHeldBackReader(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name, javaOwner = "rw:java-mixed", "9c345276-aa6e-44c1-b478-bf4b14ba1498:806"
		ctx := testCtx(t, 20*time.Second)
		// Waiters re-check by themselves only a minute apart (fairSlowRechecks), under a Java
		// hold of minutes: a writer that gets the lock within waitFor was woken by the message.
		c, rdb := newClient(t, b.Addr, fairSlowRechecks...)
		c2, _ := newClient(t, b.Addr, fairSlowRechecks...)
		javaTimeout := "{" + name + "}:" + javaOwner + ":rwlock_timeout:1"
		must(t, rdb.Do(ctx, rdb.B().Hset().Key(name).FieldValue().FieldValue("mode", "read").FieldValue(javaOwner, "1").Build()).Error())
		must(t, rdb.Do(ctx, rdb.B().Pexpire().Key(name).Milliseconds(180000).Build()).Error())
		must(t, rdb.Do(ctx, rdb.B().Set().Key(javaTimeout).Value("1").PxMilliseconds(180000).Build()).Error())

		// A writer of another Client waits first, so that our reader waits behind its claim,
		// and then our writer behind the Java reader: our reader is our oldest waiter.
		first := c2.RWLock(name, Reentrant())
		fctx, cancel := context.WithCancel(ctx)
		defer cancel()
		firstDone := rwGo(func() error { return first.Lock(fctx) })
		rwClaimed(t, rdb, name, first.Owner()+":write")
		r, w := c.RWLock(name, Reentrant()), c.RWLock(name, Reentrant())
		rctx := testCtx(t, 2*waitFor)
		read := rwGo(func() error { return r.RLock(rctx) })
		rwParked(t, c, name, 1)
		wctx := testCtx(t, waitFor)
		wrote := rwGo(func() error { return w.Lock(wctx) })
		rwClaimed(t, rdb, name, first.Owner()+":write", w.Owner()+":write")
		rwParked(t, c, name, 2)
		cancel()
		if err := rwResult(t, firstDone, waitFor, "the first writer"); !errors.Is(err, context.Canceled) {
			t.Fatalf("first writer: %v, want context.Canceled", err)
		}
		rwClaimed(t, rdb, name, w.Owner()+":write")
		rwParked(t, c, name, 2)

		// The Java reader leaves as Redisson's read unlock does: DEL, PUBLISH 0.
		must(t, rdb.Do(ctx, rdb.B().Del().Key(name, javaTimeout).Build()).Error())
		must(t, rdb.Do(ctx, rdb.B().Publish().Channel(rwChannel(name)).Message("0").Build()).Error())
		start := time.Now()
		if err := rwResult(t, wrote, waitFor, "our writer after the Java read release"); err != nil {
			t.Fatalf("our writer after the Java read release: %v after %v; the release's one wake-up "+
				"went to the reader held back by its claim", err, time.Since(start).Round(time.Millisecond))
		}
		must(t, w.Unlock(ctx))
		must(t, rwResult(t, read, waitFor, "our reader after the writer"))
		must(t, r.RUnlock(ctx))
		rwNoKeys(t, rdb, "after every release")
	})
}

// Writers taking turns must not keep a reader out: freeing the lock drops the waiting
// writers' claims, so the readers woken get in before the next writer claims again. (With
// the claims kept, a writer's release found the other writer's claim live, every reader was
// refused, and the writers alternated for ever.)
func TestRWLockWritersTakingTurnsLetReadersIn(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name = "rw:writer-turns"
		ctx := testCtx(t, 90*time.Second)
		stop := make(chan struct{})
		var wg gosync.WaitGroup
		for range 2 {
			c, _ := newClient(t, b.Addr)
			w := c.RWLock(name, Reentrant())
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if err := w.Lock(ctx); err != nil {
						t.Error(err)
						return
					}
					time.Sleep(2 * time.Millisecond) // the hold: long enough for the other writer to wait
					if err := w.Unlock(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		rc, _ := newClient(t, b.Addr)
		r := rc.RWLock(name, Reentrant())
		for i := range 3 {
			// Seconds on a loaded machine; kept out, it never gets in.
			ok, err := r.TryRLock(ctx, WaitTime(15*time.Second))
			if !ok || err != nil {
				close(stop)
				wg.Wait()
				t.Fatalf("read %d behind writers taking turns: %v, %v", i, ok, err)
			}
			must(t, r.RUnlock(ctx))
		}
		close(stop)
		wg.Wait()
	})
}
