package otelsync_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/otelsync"
	dsync "github.com/latchkey/latchkey/sync"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// classOf is the part of a name before its first ':'.
func classOf(name string) string { c, _, _ := strings.Cut(name, ":"); return c }

// What primitives do reaches the metrics, labelled by kind and class, and each acquisition
// is a span under the caller's, as long as its wait.
func TestObserverRecords(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		reader := sdkmetric.NewManualReader()
		spans := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
		obs, err := otelsync.NewObserver(otelsync.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
			otelsync.WithTracerProvider(tp))
		if err != nil {
			t.Fatal(err)
		}
		c, err := dsync.New(b.Client(t), dsync.WithObserver(obs, classOf))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		other, err := dsync.New(b.Client(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { other.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		ctx, parent := tp.Tracer("test").Start(ctx, "request")

		l := c.Lock("orders:1")
		must(t, l.Lock(ctx))
		must(t, l.Unlock(ctx))
		must(t, other.Lock("orders:1").Lock(ctx))
		if ok, err := c.Lock("orders:1").TryLock(ctx, dsync.WaitTime(30*time.Millisecond)); ok || err != nil {
			t.Fatalf("TryLock of a lock held elsewhere: %v, %v", ok, err)
		}
		s := c.Semaphore("gate:a")
		must(t, s.SetPermits(ctx, 3))
		must(t, s.Acquire(ctx, 2))
		var rm metricdata.ResourceMetrics
		must(t, reader.Collect(ctx, &rm))
		if n := sum(t, rm, "latchkey.permits.in_use", "semaphore", "gate", ""); n != 2 {
			t.Errorf("semaphore permits in use: %d, want 2", n)
		}
		must(t, s.Release(ctx, 2))
		parent.End()

		rm = metricdata.ResourceMetrics{}
		must(t, reader.Collect(ctx, &rm))
		for _, w := range []struct {
			name, kind, class, outcome string
			want                       int64
		}{
			{"latchkey.acquisitions", "lock", "orders", "taken", 1},
			{"latchkey.acquisitions", "lock", "orders", "timed_out", 1},
			{"latchkey.acquisitions", "semaphore", "gate", "taken", 1},
			{"latchkey.releases", "lock", "orders", "released", 1},
			{"latchkey.releases", "semaphore", "gate", "released", 1},
			{"latchkey.permits.in_use", "lock", "orders", "", 0},
			{"latchkey.permits.in_use", "semaphore", "gate", "", 0},
		} {
			if n := sum(t, rm, w.name, w.kind, w.class, w.outcome); n != w.want {
				t.Errorf("%s{%s, %s, %s} = %d, want %d", w.name, w.kind, w.class, w.outcome, n, w.want)
			}
		}
		if n := histogramCount(rm, "latchkey.hold.duration"); n != 1 {
			t.Errorf("%d holds recorded, want the lock's 1", n)
		}

		var acquires []sdktrace.ReadOnlySpan
		for _, s := range spans.Ended() {
			if s.Name() == "latchkey.acquire" {
				acquires = append(acquires, s)
			}
		}
		if len(acquires) != 3 {
			t.Fatalf("%d acquisition spans, want 3", len(acquires))
		}
		timedOut := acquires[1]
		if timedOut.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Error("an acquisition span is not the caller's span's child")
		}
		if d := timedOut.EndTime().Sub(timedOut.StartTime()); d < 30*time.Millisecond {
			t.Errorf("the timed-out acquisition's span lasted %v, want its wait of 30ms at least", d)
		}
	})
}

// sum is the value of the sum metric name for kind and class (and outcome, if not "").
func sum(t *testing.T, rm metricdata.ResourceMetrics, name, kind, class, outcome string) int64 {
	t.Helper()
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			s, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				t.Fatalf("%s is a %T", name, m.Data)
			}
			for _, p := range s.DataPoints {
				if has(p.Attributes, "latchkey.kind", kind) && has(p.Attributes, "latchkey.class", class) &&
					(outcome == "" || has(p.Attributes, "latchkey.outcome", outcome)) {
					n += p.Value
				}
			}
		}
	}
	return n
}

func histogramCount(rm metricdata.ResourceMetrics, name string) uint64 {
	var n uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == name {
				for _, p := range h.DataPoints {
					n += p.Count
				}
			}
		}
	}
	return n
}

func has(set attribute.Set, key, value string) bool {
	v, ok := set.Value(attribute.Key(key))
	return ok && v.AsString() == value
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
