// Package otelsync reports what latchkey's primitives do as OpenTelemetry metrics, and each
// acquisition as a span around its wait. It is a module of its own, so that latchkey's
// main module depends on no OpenTelemetry package.
//
// Install it on a Client:
//
//	obs, err := otelsync.NewObserver()
//	…
//	c, err := dsync.New(rdb, dsync.WithObserver(obs, classify))
//
// classify maps a name to its class, the label every figure carries besides the kind of
// primitive: a bounded set (such as the part of a name before its first ':'), never one
// label per name.
//
// The instruments, each with the attributes latchkey.kind and latchkey.class:
//
//   - latchkey.acquisitions (counter) and latchkey.wait.duration (histogram, s), by
//     latchkey.outcome: taken, timed_out (the wait ran out) or failed;
//   - latchkey.releases (counter), by latchkey.outcome (released or failed) and
//     latchkey.handoff (straight to a waiter of the same Client);
//   - latchkey.hold.duration (histogram, s): how long a released hold was held;
//   - latchkey.permits.in_use (up-down counter): holds and permits taken and not yet given
//     back, as their callers know;
//   - latchkey.lease.events (counter), by latchkey.event: renewed, renew_failed, lost;
//   - latchkey.outcomes.unknown (counter), by latchkey.settled: pending (a request's
//     outcome is unknown), settled, given_up.
//
// An acquisition made in a traced context (whose span is recording) is a span,
// latchkey.acquire, from the call to its end, a child of the caller's; one made outside any
// trace is none, so that locks taken outside requests add no root spans.
package otelsync

import (
	"context"
	"errors"
	gosync "sync"
	"sync/atomic"
	"time"

	dsync "github.com/latchkey/latchkey/sync"
	"github.com/latchkey/latchkey/watchdog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// scope is the instrumentation scope of the meter and the tracer.
const scope = "github.com/latchkey/latchkey/otelsync"

// An Option configures NewObserver.
type Option func(*config)

type config struct {
	mp metric.MeterProvider
	tp trace.TracerProvider
}

// WithMeterProvider sets where the metrics go (default: otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithTracerProvider sets where the spans go (default: otel.GetTracerProvider()).
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// An Observer is a dsync.Observer that records what it hears as OpenTelemetry metrics and
// spans. It is safe for concurrent use. Its counters are counted in memory and read when
// the metrics are collected (observable instruments): an event costs an atomic add, and
// only the durations are recorded as they happen.
type Observer struct {
	tracer trace.Tracer
	wait   metric.Float64Histogram
	hold   metric.Float64Histogram
	// The counts behind the observable instruments, each by setKey.
	acquisitions, releases, inUse, leases, unknown counts
	sets                                           gosync.Map // setKey → metric.MeasurementOption of its attribute set
}

var _ dsync.Observer = (*Observer)(nil)

// counts are the values of one observable instrument, by attribute set.
type counts struct{ m gosync.Map } // setKey → *atomic.Int64

func (c *counts) add(k setKey, n int64) {
	v, ok := c.m.Load(k)
	if !ok {
		v, _ = c.m.LoadOrStore(k, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(n)
}

// NewObserver makes an Observer with its instruments.
func NewObserver(opts ...Option) (*Observer, error) {
	cfg := config{mp: otel.GetMeterProvider(), tp: otel.GetTracerProvider()}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.mp == nil || cfg.tp == nil {
		return nil, errors.New("otelsync: nil meter or tracer provider")
	}
	m := cfg.mp.Meter(scope)
	o := &Observer{tracer: cfg.tp.Tracer(scope)}
	var errs []error
	var err error
	o.wait, err = m.Float64Histogram("latchkey.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("How long acquisitions waited, from the call to its end"))
	errs = append(errs, err)
	o.hold, err = m.Float64Histogram("latchkey.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("How long released holds and permits were held"))
	errs = append(errs, err)
	for _, c := range []struct {
		name, unit, desc string
		counts           *counts
		upDown           bool
	}{
		{"latchkey.acquisitions", "{acquisition}", "Acquisitions that ended, by outcome", &o.acquisitions, false},
		{"latchkey.releases", "{release}", "Releases callers asked for", &o.releases, false},
		{"latchkey.permits.in_use", "{permit}", "Holds and permits taken and not given back", &o.inUse, true},
		{"latchkey.lease.events", "{event}", "What became of held leases: renewed, a renewal failing, lost", &o.leases, false},
		{"latchkey.outcomes.unknown", "{request}", "Requests whose outcome was unknown, and their settling", &o.unknown, false},
	} {
		observe := func(_ context.Context, obs metric.Int64Observer) error {
			c.counts.m.Range(func(k, v any) bool {
				obs.Observe(v.(*atomic.Int64).Load(), o.set(k.(setKey)))
				return true
			})
			return nil
		}
		if c.upDown {
			_, err = m.Int64ObservableUpDownCounter(c.name, metric.WithUnit(c.unit), metric.WithDescription(c.desc),
				metric.WithInt64Callback(observe))
		} else {
			_, err = m.Int64ObservableCounter(c.name, metric.WithUnit(c.unit), metric.WithDescription(c.desc),
				metric.WithInt64Callback(observe))
		}
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return o, nil
}

// setKey is what an event's attributes are made of.
type setKey struct {
	subject    dsync.Subject
	key, value string
	flag       int8 // -1: no latchkey.handoff; else its value
}

func key(subject dsync.Subject, k, v string) setKey { return setKey{subject, k, v, -1} }

// set is the attribute set of k, made once per combination: there are few, as classes are
// bounded.
func (o *Observer) set(k setKey) metric.MeasurementOption {
	if s, ok := o.sets.Load(k); ok {
		return s.(metric.MeasurementOption)
	}
	kvs := []attribute.KeyValue{attribute.String("latchkey.kind", k.subject.Kind), attribute.String("latchkey.class", k.subject.Class)}
	if k.key != "" {
		kvs = append(kvs, attribute.String(k.key, k.value))
	}
	if k.flag >= 0 {
		kvs = append(kvs, attribute.Bool("latchkey.handoff", k.flag == 1))
	}
	s, _ := o.sets.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(kvs...)))
	return s.(metric.MeasurementOption)
}

// Acquired counts the acquisition, records its wait, and ends its span.
func (o *Observer) Acquired(a dsync.Acquisition) {
	end := time.Now()
	outcome := "failed"
	switch {
	case a.Taken:
		outcome = "taken"
	case a.TimedOut:
		outcome = "timed_out"
	}
	ctx := a.Context
	if ctx == nil {
		ctx = context.Background()
	}
	k := key(a.Subject, "latchkey.outcome", outcome)
	o.acquisitions.add(k, 1)
	o.wait.Record(ctx, a.Wait.Seconds(), o.set(k))
	if a.Taken {
		o.inUse.add(key(a.Subject, "", ""), int64(a.Permits))
	}
	if !trace.SpanFromContext(ctx).IsRecording() {
		return
	}
	_, span := o.tracer.Start(ctx, "latchkey.acquire", trace.WithTimestamp(end.Add(-a.Wait)),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
			attribute.String("latchkey.kind", a.Kind), attribute.String("latchkey.class", a.Class),
			attribute.Int("latchkey.permits", a.Permits), attribute.String("latchkey.outcome", outcome)))
	if a.Err != nil && !a.TimedOut {
		span.RecordError(a.Err)
		span.SetStatus(codes.Error, a.Err.Error())
	}
	span.End(trace.WithTimestamp(end))
}

// Released counts the release, records how long the hold was held, and takes its permits
// out of latchkey.permits.in_use when they are no longer held: released, lost, or with an
// unknown outcome, which the Client settles (not when Redis refused the release).
func (o *Observer) Released(r dsync.Release) {
	outcome := "released"
	if r.Err != nil {
		outcome = "failed"
	}
	k := setKey{r.Subject, "latchkey.outcome", outcome, 0}
	if r.HandedOff {
		k.flag = 1
	}
	o.releases.add(k, 1)
	plain := key(r.Subject, "", "")
	if r.Held > 0 {
		o.hold.Record(context.Background(), r.Held.Seconds(), o.set(plain))
	}
	if r.Err == nil || errors.Is(r.Err, dsync.ErrOutcomeUnknown) || errors.Is(r.Err, dsync.ErrLockLost) {
		o.inUse.add(plain, -int64(r.Permits))
	}
}

// Lease counts what became of a held lease.
func (o *Observer) Lease(e dsync.LeaseEvent) {
	event := "renewed"
	switch e.Event {
	case watchdog.RenewFailed:
		event = "renew_failed"
	case watchdog.LeaseLost:
		event = "lost"
	}
	o.leases.add(key(e.Subject, "latchkey.event", event), 1)
}

// Outcome counts a request whose outcome is unknown, and its settling.
func (o *Observer) Outcome(e dsync.OutcomeEvent) {
	settled := "pending"
	switch {
	case e.Settled && e.Err == nil:
		settled = "settled"
	case e.Settled:
		settled = "given_up"
	}
	o.unknown.add(key(e.Subject, "latchkey.settled", settled), 1)
}
