package sync

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

// Every error about an object says which primitive and which object once, in front, in
// words: no "dsync:" stutter, no script SHA, Lua line or traceback, no "lock" in a
// semaphore's or latch's error, and permits released elsewhere are not said to have expired.
func TestErrorTextsNameTheirObjectOnce(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		c, rdb := newClient(t, b.Addr)
		set := func(key string) { must(t, rdb.Do(ctx, rdb.B().Set().Key(key).Value("abc").Build()).Error()) }
		type sample struct {
			what, prefix string
			is           error
			err          error
		}
		var samples []sample
		add := func(what, prefix string, is, err error) { samples = append(samples, sample{what, prefix, is, err}) }

		l := c.Lock("l")
		add("Unlock of a lock not held", `dsync: lock "l": `, ErrNotHeld, l.Unlock(ctx))
		must(t, l.Lock(ctx))
		must(t, rdb.Do(ctx, rdb.B().Del().Key("l").Build()).Error())
		add("Unlock of a lock deleted", `dsync: lock "l": `, ErrLockLost, l.Unlock(ctx))
		set("word")
		add("Lock of a word", `dsync: lock "word": `, ErrWrongType, c.Lock("word").Lock(ctx))
		add("Lock with an empty name", `dsync: lock "": `, ErrInvalidArgument, c.Lock("").Lock(ctx))
		add("FairLock.Unlock of a lock not held", `dsync: fair lock "f": `, ErrNotHeld, c.FairLock("f").Unlock(ctx))
		add("FairLock of a word", `dsync: fair lock "word": `, ErrWrongType, c.FairLock("word").Lock(ctx))
		add("FencedLock.Unlock of a lock not held", `dsync: fenced lock "fe": `, ErrNotHeld, c.FencedLock("fe").Unlock(ctx))
		rw := c.RWLock("rw", Reentrant()) // a reentrant handle: an upgrade is ErrWouldDeadlock
		add("RWLock.RUnlock not held", `dsync: read-write lock "rw": `, ErrNotHeld, rw.RUnlock(ctx))
		must(t, rw.RLock(ctx))
		add("RWLock upgrade", `dsync: read-write lock "rw": `, ErrWouldDeadlock, rw.Lock(ctx))
		add("RWLock of a word", `dsync: read-write lock "word": `, ErrWrongType, c.RWLock("word").RLock(ctx))

		add("Semaphore of a word", `dsync: semaphore "word": `, ErrWrongType, c.Semaphore("word").Acquire(ctx, 1))
		_, err := c.Semaphore("word").AvailablePermits(ctx)
		add("Semaphore.AvailablePermits of a word", `dsync: semaphore "word": `, ErrWrongType, err)
		add("Semaphore with an empty name", `dsync: semaphore "": `, ErrInvalidArgument, c.Semaphore("").Release(ctx, 1))

		perm := c.PermitSemaphore("perm")
		must(t, perm.SetPermits(ctx, 2))
		p, err := perm.Acquire(ctx, 1)
		must(t, err)
		must(t, perm.Release(ctx, p.IDs()...)) // released by ID, as another process may
		err = p.Release(ctx)
		add("Permits.Release of permits released elsewhere", `dsync: permit semaphore "perm": `, ErrLockLost, err)
		if err != nil && strings.Contains(err.Error(), "had expired") {
			t.Errorf("permits released by ID are said to have expired: %q", err)
		}
		add("Permits.Release twice", `dsync: permit semaphore "perm": `, ErrNotHeld, p.Release(ctx))
		short, cancel := context.WithTimeout(ctx, 2*time.Second) // no waiting for ever
		_, err = perm.Acquire(short, 3)
		cancel()
		add("PermitSemaphore.Acquire of more than there are", `dsync: permit semaphore "perm": `, ErrInvalidArgument, err)
		_, err = c.PermitSemaphore("word").Permits(ctx)
		add("PermitSemaphore.Permits of a word", `dsync: permit semaphore "word": `, ErrWrongType, err)

		add("CountDownLatch.CountDown of a word", `dsync: countdown latch "word": `, ErrWrongType, c.CountDownLatch("word").CountDown(ctx))
		add("CountDownLatch.Await of a word", `dsync: countdown latch "word": `, ErrWrongType, c.CountDownLatch("word").Await(ctx))

		closed, _ := newClient(t, b.Addr)
		closed.Close()
		add("Lock of a closed Client", `dsync: lock "l": `, ErrClosed, closed.Lock("l").Lock(ctx))
		_, err = closed.Semaphore("s").TryAcquire(ctx, 1)
		add("Semaphore of a closed Client", `dsync: semaphore "s": `, ErrClosed, err)

		noise := regexp.MustCompile(`f_[0-9a-f]{6}|[0-9a-f]{40}|script:|user_script|traceback|\(new function\)`)
		for _, s := range samples {
			if !errors.Is(s.err, s.is) {
				t.Errorf("%s: %v, want %v", s.what, s.err, s.is)
				continue
			}
			text := s.err.Error()
			if !strings.HasPrefix(text, s.prefix) {
				t.Errorf("%s: %q does not start with %q", s.what, text, s.prefix)
			}
			if strings.Count(text, "dsync:") != 1 {
				t.Errorf("%s: %q says dsync: more than once", s.what, text)
			}
			if m := noise.FindString(text); m != "" {
				t.Errorf("%s: %q carries script noise %q", s.what, text, m)
			}
			if !strings.Contains(s.prefix, "lock") && strings.Contains(text, "lock") {
				t.Errorf("%s: %q says lock", s.what, text)
			}
		}
	})
}
