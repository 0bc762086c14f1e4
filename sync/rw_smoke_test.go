package sync

import (
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

func TestRWSmoke(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		c, rdb := newClient(t, b.Addr)
		r1, r2, w := c.RWLock("rw"), c.RWLock("rw"), c.RWLock("rw")
		must(t, r1.RLock(ctx))
		must(t, r1.RLock(ctx))
		must(t, r2.RLock(ctx))
		h, _ := rdb.Do(ctx, rdb.B().Hgetall().Key("rw").Build()).AsStrMap()
		t.Log(h)
		keys, _ := rdb.Do(ctx, rdb.B().Keys().Pattern("*").Build()).AsStrSlice()
		t.Log(keys)
		if ok, err := w.TryLock(ctx); ok || err != nil {
			t.Fatal(ok, err)
		}
		if err := r1.Lock(ctx); !errors.Is(err, ErrWouldDeadlock) {
			t.Fatal(err)
		}
		done := make(chan error)
		go func() { done <- w.Lock(ctx) }()
		eventually(t, 5*time.Second, "writer claims", func() bool {
			n, _ := rdb.Do(ctx, rdb.B().Zcard().Key("{rw}:rwlock_writers").Build()).AsInt64()
			return n == 1
		})
		r3 := c.RWLock("rw")
		if ok, err := r3.TryRLock(ctx); ok || err != nil {
			t.Fatal("new reader entered past a waiting writer", ok, err)
		}
		must(t, r1.RLock(ctx)) // re-entry passes
		must(t, r1.RUnlock(ctx))
		must(t, r1.RUnlock(ctx))
		must(t, r1.RUnlock(ctx))
		must(t, r2.RUnlock(ctx))
		must(t, <-done)
		must(t, w.RLock(ctx)) // downgrade
		must(t, w.Unlock(ctx))
		h, _ = rdb.Do(ctx, rdb.B().Hgetall().Key("rw").Build()).AsStrMap()
		t.Log(h)
		must(t, r3.RLock(ctx))
		must(t, r3.RUnlock(ctx))
		must(t, w.RUnlock(ctx))
		c.Close()
		keys, _ = rdb.Do(ctx, rdb.B().Keys().Pattern("*").Build()).AsStrSlice()
		if len(keys) != 0 {
			t.Fatal(keys)
		}
	})
}
