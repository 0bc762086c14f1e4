package watchdog

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/lua"
	"github.com/redis/rueidis"
)

// A renewal round can be on its way when the holder releases. Stop hands that round back, and
// a release that waits for it is never followed by the renewal — which otherwise stretches a
// re-acquisition by the same owner (here with an explicit 100 ms lease) to the watchdog
// timeout: the owner check in the script cannot tell the two holds apart (Redisson #7272).
func TestStopWaitsForRoundInFlight(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		c := b.Client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		entered, gate := make(chan struct{}, 1), make(chan struct{})
		real := scriptRenew(c)
		kind := &Kind{Name: "plain", Renew: func(ctx context.Context, lease time.Duration, batches []Batch) []Result {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-gate // the round is in flight: its batch was taken while the lease was active
			return real(context.Background(), lease, batches)
		}}
		const timeout = 3 * time.Second
		const lease = 100 * time.Millisecond
		const key, owner = "stop-round:stale", "f8c1b4e2-0000-4000-8000-000000000001:1"
		w := newWatchdog(t, Options{Timeout: timeout})
		acquire := func(ms string) time.Time {
			sent := time.Now()
			if err := (lua.LockAcquire{Lock: key, LeaseMs: ms, Owner: owner}).Call().Exec(ctx, c).Error(); !rueidis.IsRedisNil(err) {
				t.Fatalf("acquire: %v", err)
			}
			return sent
		}
		// Acquired an interval ago as far as the watchdog knows (an earlier deadline than the
		// lock's: the safe side), so that the first round goes out at once.
		l := keep(w, kind, key, owner, acquire("3000").Add(-timeout/3))
		select {
		case <-entered:
		case <-time.After(5 * time.Second):
			t.Fatal("no renewal round")
		}
		round := l.Stop()
		if round == nil {
			t.Fatal("Stop returned no round while one carrying the lease was in flight")
		}
		select {
		case <-round:
			t.Fatal("the round reported over while its renewal was still held back")
		default:
		}
		close(gate)
		select {
		case <-round:
		case <-time.After(5 * time.Second):
			t.Fatal("the round did not end")
		}
		if err := c.Do(ctx, c.B().Del().Key(key).Build()).Error(); err != nil { // the release
			t.Fatal(err)
		}
		sent := acquire(strconv.FormatInt(lease.Milliseconds(), 10)) // same owner, explicit lease
		if !l.Hold(sent, lease, false) {
			t.Fatal("Hold")
		}
		if d := deadline(t, l); !d.Equal(sent.Add(lease)) {
			t.Fatalf("Hold of a stopped lease: deadline sent%+v, want a fresh start at sent+%v", d.Sub(sent), lease)
		}
		if r := l.Stop(); r != nil {
			select {
			case <-r: // the finished round, not yet cleared by the loop
			default:
				t.Fatal("Stop returned a round in flight although none carries the lease")
			}
		}
		// The hold must expire with its 100 ms lease; a renewal landing after the release
		// would have stretched it to the 3 s timeout.
		for {
			since := time.Since(sent) // before the PTTL: a stall after it must not count
			pttl, err := c.Do(ctx, c.B().Pttl().Key(key).Build()).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			if pttl <= 0 && pttl != -1 {
				break
			}
			if since > timeout/2 {
				t.Fatalf("a hold taken with a %v lease is still there after %v (PTTL %d ms): a renewal landed after the release", lease, since, pttl)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}
