package sync

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/watchdog"
)

// The benchmarks run on a real redis-server (skipped without one, unless LATCHKEY_REDIS is
// required): figures on miniredis would measure miniredis. BenchmarkPing is the floor to
// compare against: an uncontended Lock+Unlock is two scripts, so about two round trips.

func BenchmarkPing(b *testing.B) {
	rdb := redistest.Redis(b).Client(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := rdb.Do(ctx, rdb.B().Ping().Build()).Error(); err != nil {
			b.Fatal(err)
		}
	}
}

// benchClient is a Client on a fresh real redis-server, closed when the benchmark ends.
func benchClient(b *testing.B) *Client {
	c, err := New(redistest.Redis(b).Client(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

func BenchmarkLockUnlock(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	mu := c.Lock("bench:solo")
	b.ReportAllocs()
	for b.Loop() {
		if err := mu.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := mu.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLockUnlockParallel runs Lock+Unlock from many goroutines, each on its own lock,
// through one Client: rueidis pipelines the scripts of all of them on one connection.
// Its context can be cancelled, as a request's is.
func BenchmarkLockUnlockParallel(b *testing.B) {
	c := benchClient(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		mu := c.Lock("bench:parallel:" + strconv.FormatInt(n.Add(1), 10))
		for pb.Next() {
			if err := mu.Lock(ctx); err != nil {
				b.Error(err)
				return
			}
			if err := mu.Unlock(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRenewalRound300Locks holds 300 locks with distinct names on one server and
// measures the watchdog's rounds: renewal scripts per round, and Redis CPU per round (from
// INFO's used_cpu_sys and used_cpu_user). An iteration is one round.
func BenchmarkRenewalRound300Locks(b *testing.B) {
	srv := redistest.Redis(b)
	admin := srv.Client(b)
	c, err := New(srv.Client(b), WithWatchdogTimeout(300*time.Millisecond)) // a round every 100 ms
	if err != nil {
		b.Fatal(err)
	}
	// Rounds are counted as they start, not inferred from the time slept: a sleep of N
	// periods sees N or N+1 rounds.
	var rounds atomic.Int64
	renew := c.lockKind.Renew
	c.lockKind.Renew = func(ctx context.Context, lease time.Duration, batches []watchdog.Batch) []watchdog.Result {
		rounds.Add(1)
		return renew(ctx, lease, batches)
	}
	b.Cleanup(func() { c.Close() })
	ctx := context.Background()
	for i := range 300 {
		if err := c.Lock("renew:" + strconv.Itoa(i)).Lock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	cpu := func() float64 {
		info, err := admin.Do(ctx, admin.B().Info().Section("cpu").Build()).ToString()
		if err != nil {
			b.Fatal(err)
		}
		var total float64
		for _, line := range strings.Split(info, "\r\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
				f, _ := strconv.ParseFloat(v, 64)
				total += f
			}
		}
		return total
	}
	waitRound := func() {
		for n := rounds.Load(); rounds.Load() == n; {
			time.Sleep(time.Millisecond)
		}
	}
	waitRound()
	time.Sleep(50 * time.Millisecond) // the round under way has replied
	if err := admin.Do(ctx, admin.B().ConfigResetstat().Build()).Error(); err != nil {
		b.Fatal(err)
	}
	cpu0, rounds0 := cpu(), rounds.Load()
	b.ResetTimer()
	for range b.N {
		waitRound()
	}
	time.Sleep(50 * time.Millisecond)
	b.StopTimer()
	cpu1, n := cpu(), rounds.Load()-rounds0
	stats, err := admin.Do(ctx, admin.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	scripts := 0
	for _, line := range strings.Split(stats, "\r\n") {
		if strings.HasPrefix(line, "cmdstat_eval:") || strings.HasPrefix(line, "cmdstat_evalsha:") {
			_, rest, _ := strings.Cut(line, "calls=")
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			scripts += n
		}
	}
	b.ReportMetric(float64(scripts)/float64(n), "scripts/round")
	b.ReportMetric((cpu1-cpu0)*1e6/float64(n), "redis-µs/round")
}
