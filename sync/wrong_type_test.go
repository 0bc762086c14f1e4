package sync

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/rueidis"
)

// A key holding a value of another type or kind — a word where a count belongs, a hash where
// a string does, a string where a lock's hash does — is ErrWrongType naming the key, from
// every method, reads included, and nothing is changed.
func TestWrongTypeFromEveryMethod(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		c, rdb := newClient(t, b.Addr, WithRetryBudget(shortBudget))
		set := func(key string) { must(t, rdb.Do(ctx, rdb.B().Set().Key(key).Value("abc").Build()).Error()) }
		hash := func(key, field, value string) {
			must(t, rdb.Do(ctx, rdb.B().Hset().Key(key).FieldValue().FieldValue(field, value).Build()).Error())
		}
		id := strings.Repeat("ab", 16)
		type call struct {
			what string
			run  func() error
		}
		var calls []call
		add := func(what string, run func() error) { calls = append(calls, call{what, run}) }
		for _, key := range []string{"word", "hash"} {
			if key == "word" {
				set(key)
			} else {
				hash(key, "f", "1")
			}
			sem := c.Semaphore(key)
			add("Semaphore.TrySetPermits", func() error { _, err := sem.TrySetPermits(ctx, 1); return err })
			add("Semaphore.SetPermits", func() error { return sem.SetPermits(ctx, 1) })
			add("Semaphore.DrainPermits", func() error { _, err := sem.DrainPermits(ctx); return err })
			add("Semaphore.AddPermits", func() error { return sem.AddPermits(ctx, 1) })
			add("Semaphore.Release", func() error { return sem.Release(ctx, 1) })
			add("Semaphore.TryAcquire", func() error { _, err := sem.TryAcquire(ctx, 1); return err })
			add("Semaphore.AvailablePermits", func() error { _, err := sem.AvailablePermits(ctx); return err })
			perm := c.PermitSemaphore(key)
			add("PermitSemaphore.TrySetPermits", func() error { _, err := perm.TrySetPermits(ctx, 1); return err })
			add("PermitSemaphore.SetPermits", func() error { return perm.SetPermits(ctx, 1) })
			add("PermitSemaphore.AddPermits", func() error { return perm.AddPermits(ctx, 1) })
			add("PermitSemaphore.TryAcquire", func() error { _, _, err := perm.TryAcquire(ctx, 1); return err })
			add("PermitSemaphore.Release", func() error { return perm.Release(ctx, id) })
			add("PermitSemaphore.AvailablePermits", func() error { _, err := perm.AvailablePermits(ctx); return err })
			add("PermitSemaphore.AcquiredPermits", func() error { _, err := perm.AcquiredPermits(ctx); return err })
			add("PermitSemaphore.Permits", func() error { _, err := perm.Permits(ctx); return err })
			add("PermitSemaphore.LeaseTime", func() error { _, err := perm.LeaseTime(ctx, id); return err })
			add("PermitSemaphore.UpdateLeaseTime", func() error { _, err := perm.UpdateLeaseTime(ctx, id, time.Second); return err })
			latch := c.CountDownLatch(key)
			add("CountDownLatch.TrySetCount", func() error { _, err := latch.TrySetCount(ctx, 1); return err })
			add("CountDownLatch.CountDown", func() error { return latch.CountDown(ctx) })
			add("CountDownLatch.Count", func() error { _, err := latch.Count(ctx); return err })
			add("CountDownLatch.Await", func() error { return latch.Await(ctx) })
			add("CountDownLatch.Delete", func() error { _, err := latch.Delete(ctx); return err })
		}
		set("str")
		for _, l := range []interface {
			TryLock(context.Context, ...TryLockOption) (bool, error)
			Unlock(context.Context) error
			IsLocked(context.Context) (bool, error)
		}{c.Lock("str", Reentrant()), c.FairLock("str", Reentrant()), c.FencedLock("str", Reentrant()), c.RWLock("str", Reentrant())} {
			add("TryLock", func() error { _, err := l.TryLock(ctx); return err })
			add("Unlock", func() error { return l.Unlock(ctx) })
			add("IsLocked", func() error { _, err := l.IsLocked(ctx); return err })
		}
		lock := c.Lock("str", Reentrant())
		add("Lock.HoldCount", func() error { _, err := lock.HoldCount(ctx); return err })
		add("Lock.RemainingTTL", func() error { _, err := lock.RemainingTTL(ctx); return err })
		add("Lock.ForceUnlock", func() error { _, err := lock.ForceUnlock(ctx); return err })
		add("FairLock.ForceUnlock", func() error { _, err := c.FairLock("str").ForceUnlock(ctx); return err })
		rw := c.RWLock("str", Reentrant())
		add("RWLock.TryRLock", func() error { _, err := rw.TryRLock(ctx); return err })
		add("RWLock.RUnlock", func() error { return rw.RUnlock(ctx) })
		// A lock hash whose hold count is not a number. (Reentrant handles: a mutex handle that
		// holds nothing answers Unlock and HoldCount itself, reading nothing.)
		odd := c.Lock("odd", Reentrant())
		hash("odd", odd.Owner(), "abc")
		add("Lock.HoldCount of a word", func() error { _, err := odd.HoldCount(ctx); return err })
		// A fenced lock's token counter that is not a number.
		set("redisson_lock_token:{fenced}")
		add("FencedLock.Token", func() error { _, err := c.FencedLock("fenced").Token(ctx); return err })

		for _, cl := range calls {
			err := cl.run()
			if !errors.Is(err, ErrWrongType) {
				t.Errorf("%s: %v, want ErrWrongType", cl.what, err)
				continue
			}
			if !strings.Contains(err.Error(), "key ") {
				t.Errorf("%s: %q names no key", cl.what, err)
			}
		}
		// Nothing was changed.
		for key, kind := range map[string]string{"word": "string", "hash": "hash", "str": "string", "odd": "hash"} {
			if got, _ := rdb.Do(ctx, rdb.B().Type().Key(key).Build()).ToString(); got != kind {
				t.Errorf("%s is a %s now, was a %s", key, got, kind)
			}
		}
		if v, _ := rdb.Do(ctx, rdb.B().Get().Key("word").Build()).ToString(); v != "abc" {
			t.Errorf("word is %q now", v)
		}
		checkNoCount(t, rdb, "hash")
	})
}

// checkNoCount fails if the hash key has fields besides f (a script wrote to it).
func checkNoCount(t *testing.T, rdb rueidis.Client, key string) {
	t.Helper()
	n, err := rdb.Do(context.Background(), rdb.B().Hlen().Key(key).Build()).AsInt64()
	if err != nil || n != 1 {
		t.Errorf("%s has %d fields (%v), want 1: %s", key, n, err, strconv.Quote(key))
	}
}
