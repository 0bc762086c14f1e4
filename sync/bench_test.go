package sync

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/latchkey/latchkey/internal/redistest"
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
func BenchmarkLockUnlockParallel(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
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
