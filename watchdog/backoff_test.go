package watchdog

import (
	"context"
	"errors"
	"math/bits"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestBackoffUnderOutage checks that a lease whose renewals all fail is retried with
// backoff — the first retry after Timeout/30, doubling up to the interval — instead of in a
// tight loop, and is reported lost at its deadline, not before. A healthy lease renewed
// meanwhile does not pull the failing one's retries forward.
func TestBackoffUnderOutage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		timeout, ttl time.Duration
	}{
		{"lease of the timeout", 300 * time.Millisecond, 300 * time.Millisecond},
		// Six intervals: long enough for the backoff to reach its cap.
		{"longer lease", 150 * time.Millisecond, 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				timeout := tc.timeout
				interval, retry := timeout/3, max(timeout/30, 5*time.Millisecond)
				f := newFake(func(_ context.Context, _ int, batches []Batch) []Result {
					res := allHeld(batches)
					for i, b := range batches {
						if strings.HasPrefix(b.Keys[0], "{down}") {
							res[i] = Result{Err: errors.New("fake: connection refused")}
						}
					}
					return res
				})
				w := newWatchdog(t, Options{Timeout: timeout, Cluster: true}) // {down} and {up} in batches of their own
				k := f.kind("plain")
				sent := time.Now()
				l := w.Start(k, "{down}k", "o", sent, tc.ttl, true)
				healthy := keep(w, k, "{up}k", "o", sent)

				lostAt := waitLost(t, l, "renewals failing")
				end := sent.Add(tc.ttl)
				if lostAt.Before(end) {
					t.Fatalf("Lost closed %v before the deadline", end.Sub(lostAt))
				}
				if late := lostAt.Sub(end); late > 250*time.Millisecond {
					t.Fatalf("Lost closed %v after the deadline", late)
				}
				at := f.renewals("{down}k")
				// First renewal after an interval, then retries after retry, 2×retry, ... capped
				// at the interval and at half the time left: about log2(interval/retry) twice
				// plus ttl/interval calls in all. The old code retried at once, thousands of times.
				limit := 2*bits.Len64(uint64(interval/retry)) + int(tc.ttl/interval) + 1
				if len(at) < 2 || len(at) > limit {
					t.Fatalf("%d renewal attempts over a lease of %v, want 2..%d", len(at), tc.ttl, limit)
				}
				// Each retry waits at least the first backoff, and the backoff does grow: it is
				// timed from the reply, which came after the call.
				maxGap := time.Duration(0)
				for i := 1; i < len(at); i++ {
					gap := at[i].Sub(at[i-1])
					if gap < retry {
						t.Errorf("retry %d came %v after the attempt before, want at least %v (attempts at %v)", i, gap, retry, offsets(sent, at))
					}
					maxGap = max(maxGap, gap)
				}
				t.Logf("attempts at %v", offsets(sent, at))
				if tc.ttl >= 5*interval && maxGap < interval {
					t.Errorf("backoff never reached the interval: longest gap %v", maxGap)
				}
				// Backing off never skips the time just before the deadline.
				if last := at[len(at)-1]; end.Sub(last) > interval/2 {
					t.Errorf("last attempt %v before the deadline, want within %v", end.Sub(last), interval/2)
				}
				if isClosed(healthy.Lost()) {
					t.Fatal("the healthy lease was reported lost")
				}
				if n := len(f.renewals("{up}k")); n < int(tc.ttl/interval)-1 {
					t.Fatalf("the healthy lease was renewed %d times in %v", n, tc.ttl)
				}
			})
		})
	}
}

func offsets(from time.Time, at []time.Time) []time.Duration {
	d := make([]time.Duration, len(at))
	for i, a := range at {
		d[i] = a.Sub(from).Round(time.Millisecond)
	}
	return d
}

// TestOutageLoggedOncePerLease checks that an outage of many failed rounds logs one warning
// per lease when its renewals start failing and one note when they recover.
func TestOutageLoggedOncePerLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const failed = 8 // calls 2..9 fail
		core, logs := observer.New(zapcore.DebugLevel)
		f := newFake(func(_ context.Context, n int, batches []Batch) []Result {
			if n > 1 && n <= 1+failed {
				return allErr(batches)
			}
			return allHeld(batches)
		})
		const timeout = 60 * time.Millisecond
		w := newWatchdog(t, Options{Timeout: timeout, Logger: zap.New(core)})
		k := f.kind("plain")
		sent := time.Now()
		// Held for far longer than the outage lasts: the outage never reaches the deadline.
		keys := []string{"{log}a", "{log}b"}
		var leases []*Lease
		for _, key := range keys {
			leases = append(leases, w.Start(k, key, "o", sent, time.Minute, true))
		}
		// Three rounds after the outage: the replies of all but the last are applied.
		cs := f.waitCalls(t, "renewals after the outage", func(cs []call) bool { return len(cs) >= failed+4 })
		// The two leases were due together throughout: every round renewed both.
		for i, c := range cs {
			if len(c.batches) != 1 || len(c.batches[0].Keys) != len(keys) {
				t.Fatalf("renewal call %d = %+v, want one batch of both leases", i+1, c.batches)
			}
		}

		for _, key := range keys {
			byKey := logs.FilterField(zap.String("name", key))
			warn := byKey.FilterMessageSnippet("lease renewal failing").All()
			if len(warn) != 1 {
				t.Errorf("%s: %d failing-renewal warnings over %d failed renewals, want 1", key, len(warn), failed)
			} else if warn[0].Level != zapcore.WarnLevel || warn[0].ContextMap()["kind"] != "plain" {
				t.Errorf("%s: warning %+v, want at Warn level with the kind", key, warn[0])
			}
			again := byKey.FilterMessage("lease renewed again").All()
			if len(again) != 1 {
				t.Errorf("%s: %d recovery notes, want 1", key, len(again))
			} else if m := again[0].ContextMap(); again[0].Level != zapcore.InfoLevel || m["failed"] != int64(failed) {
				t.Errorf("%s: recovery note %v at %v, want at Info level with failed=%d", key, m, again[0].Level, failed)
			}
			if n := byKey.FilterMessage("lease lost").Len(); n != 0 {
				t.Errorf("%s: %d lost-lease messages", key, n)
			}
		}
		if n := logs.Len(); n != 2*len(keys) {
			for _, e := range logs.All() {
				t.Log(e.Message, e.ContextMap())
			}
			t.Errorf("%d log entries, want %d", n, 2*len(keys))
		}
		for _, l := range leases {
			if isClosed(l.Lost()) {
				t.Fatal("a lease was lost in an outage shorter than its lease")
			}
		}
	})
}

// TestLateRecoverySavesLease checks that the backoff still tries shortly before the deadline:
// an outage that ends then does not cost the lease.
func TestLateRecoverySavesLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const timeout = 300 * time.Millisecond
		sent := time.Now()
		f := newFake(func(_ context.Context, _ int, b []Batch) []Result {
			if time.Since(sent) < timeout*85/100 {
				return allErr(b)
			}
			return allHeld(b)
		})
		w := newWatchdog(t, Options{Timeout: timeout})
		l := keep(w, f.kind("plain"), "k", "o", sent)
		select {
		case <-l.Lost():
			t.Fatalf("lost at %v; attempts at %v", time.Since(sent), offsets(sent, f.renewals("k")))
		case <-time.After(2 * timeout):
		}
	})
}
