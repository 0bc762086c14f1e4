package watchdog

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// While a renewal round is in flight (Redis unresponsive), the leases in it are still
// timed: Lost closes at their deadline. The step that starts a round must keep those leases'
// deadlines in its wake-up time, or the loop sleeps until the round returns.
func TestDeadlineTimedWhileRoundStuck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		defer close(gate)
		f := newFake(func(ctx context.Context, n int, batches []Batch) []Result {
			if n >= 3 {
				select { // Redis stops answering
				case <-gate:
				case <-ctx.Done():
				}
				return allErr(batches)
			}
			return allHeld(batches)
		})
		const timeout = 150 * time.Millisecond
		w := newWatchdog(t, Options{Timeout: timeout})
		l := keep(w, f.kind("plain"), "stuck", "owner:1", time.Now())
		calls := f.waitCalls(t, "third round sent", func(c []call) bool { return len(c) >= 3 })
		last := calls[1].at // the last renewal that succeeded
		select {
		case <-l.Lost():
			if late := time.Since(last.Add(timeout)); late > 100*time.Millisecond {
				t.Fatalf("Lost closed %v after the deadline", late)
			}
		case <-time.After(3 * timeout):
			t.Fatalf("lease not reported lost %v after its deadline: the stuck round's leases are not timed", time.Since(last.Add(timeout)).Round(time.Millisecond))
		}
	})
}
