package sync

import (
	"slices"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

// Java's forceUnlock of a lock a latchkey Client holds deletes the key and publishes 0 on
// Redisson's channel only: latchkey waiters, which wait on their Client's channel, still
// hear it there and take the lock at once — not at their next re-check, a third of the fair
// wait time (10 s here).
func TestJavaForceUnlockWakesLatchkeyWaiters(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 40*time.Second)
		const name = "java-force"
		holderC, rdb := newClient(t, b.Addr, WithWatchdogTimeout(30*time.Second))
		waiterC, _ := newClient(t, b.Addr, WithWatchdogTimeout(30*time.Second))
		must(t, holderC.Lock(name).Lock(ctx))
		got := make(chan error, 1)
		go func() { got <- waiterC.Lock(name).Lock(ctx) }()
		eventually(t, 10*time.Second, "the waiter listens on its Client's channel", func() bool {
			return listening(t, b, waiterC, name)
		})
		// And on Redisson's, once its wait has begun (not a condition: the wake-up is what
		// the test checks).
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end) && !waiterC.mux.Subscribed(lockChannel(name)); {
			time.Sleep(time.Millisecond)
		}
		notYet(t, got, "the waiter, while the lock is held")
		// Redisson's forceUnlock script: DEL, then PUBLISH 0 on the lock channel.
		must(t, rdb.Do(ctx, rdb.B().Del().Key(name).Build()).Error())
		start := time.Now()
		must(t, rdb.Do(ctx, rdb.B().Publish().Channel(lockChannel(name)).Message("0").Build()).Error())
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("Lock after Java's forceUnlock: %v", err)
			}
			t.Logf("woken %v after the force unlock", time.Since(start))
		case <-time.After(5 * time.Second): // far below the 10 s re-check, far above a wake-up
			t.Fatal("the waiter did not take the lock within 5 s of Java's forceUnlock")
		}
	})
}

// freed reports whether what a release published on Redisson's lock channel says it freed
// the lock: 0, after latchkey's 2 when it woke a Client (a hand-off publishes nothing).
func freed(got []string) bool {
	return slices.Equal(got, []string{"0"}) || slices.Equal(got, []string{"2", "0"})
}
