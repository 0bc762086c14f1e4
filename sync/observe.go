package sync

import (
	"context"
	"errors"
	"time"

	"github.com/latchkey/latchkey/watchdog"
)

// An Observer hears what a Client's primitives do, for metrics and traces: install one with
// WithObserver. Its methods run on the goroutine where the event happens, some with a lock
// held: they must be quick, must not block nor call the Client, and must be safe for
// concurrent use. Embed NopObserver to implement only some of them.
type Observer interface {
	// Acquired hears an acquisition that ended, taken or not.
	Acquired(Acquisition)
	// Released hears a release its caller asked for, of a hold or of permits.
	Released(Release)
	// Lease hears what becomes of a held lease: renewed by the watchdog, a renewal failing
	// (it is retried until the lease's deadline), lost.
	Lease(LeaseEvent)
	// Outcome hears a request whose outcome is unknown (an error wrapping
	// ErrOutcomeUnknown), and again when the Client has settled it in the background, or
	// given up.
	Outcome(OutcomeEvent)
}

// NopObserver is an Observer that does nothing: embed it to implement only some methods.
type NopObserver struct{}

// Acquired does nothing.
func (NopObserver) Acquired(Acquisition) {}

// Released does nothing.
func (NopObserver) Released(Release) {}

// Lease does nothing.
func (NopObserver) Lease(LeaseEvent) {}

// Outcome does nothing.
func (NopObserver) Outcome(OutcomeEvent) {}

// A Subject is what an event is about: the kind of primitive ("lock", "fair lock", "fenced
// lock", "read-write lock", "semaphore", "permit semaphore"; for a LeaseEvent the lease's
// kind: "lock", "read lock", "permits") and the class of its name, as WithObserver's classify
// maps it: a bounded label set, never one label per name.
type Subject struct {
	Kind, Class string
}

// An Acquisition is an acquisition that ended.
type Acquisition struct {
	Subject
	// Context is the caller's: the parent of a span around the wait, say. Its values only:
	// it may have ended.
	Context  context.Context
	Permits  int           // a semaphore's; 1 for a lock
	Wait     time.Duration // from the call to its end
	Taken    bool
	TimedOut bool  // not taken: the wait ran out (WaitTime, or the context's deadline)
	Err      error // why it failed, if it did (a timed-out wait's context error included)
}

// A Release is a release its caller asked for.
type Release struct {
	Subject
	Permits   int           // a semaphore's; 1 for a lock
	Held      time.Duration // since the hold (or permits) was taken; 0 for a Semaphore's, which are not owned
	HandedOff bool          // straight to a waiter of the same Client, with no request to Redis
	Err       error
}

// A LeaseEvent is what became of a held lease.
type LeaseEvent struct {
	Subject
	Event watchdog.LeaseEvent // watchdog.Renewed, watchdog.RenewFailed or watchdog.LeaseLost
}

// An OutcomeEvent is a request whose outcome is unknown (Settled false), or its settling
// (Settled true: Err is nil when a repeat got a reply, else why the Client gave up).
type OutcomeEvent struct {
	Subject
	Settled bool
	Err     error
}

// WithObserver has the Client tell o what its primitives do (see Observer). classify maps a
// name to the class its events carry; nil puts every name in class "". Default: none.
func WithObserver(o Observer, classify func(name string) string) Option {
	return func(c *config) error {
		if o == nil {
			return invalid("observer", "must not be nil")
		}
		if classify == nil {
			classify = func(string) string { return "" }
		}
		c.obs = &observing{o: o, classify: classify}
		return nil
	}
}

// observing is a Client's Observer and its classify; nil when there is none, so that a
// Client without one pays a nil check per event.
type observing struct {
	o        Observer
	classify func(string) string
}

func (ob *observing) subject(kind, name string) Subject {
	return Subject{Kind: kind, Class: ob.classify(name)}
}

// acquired tells of an acquisition of what called name for ctx, begun at start, that ended
// so.
func (ob *observing) acquired(ctx context.Context, what, name string, permits int, start time.Time, taken bool, err error) {
	if ob == nil {
		return
	}
	timedOut := !taken && (err == nil || errors.Is(err, context.DeadlineExceeded))
	ob.o.Acquired(Acquisition{Subject: ob.subject(what, name), Context: ctx, Permits: permits, Wait: time.Since(start),
		Taken: taken, TimedOut: timedOut, Err: err})
}

// released tells of a release of what called name, of a hold taken at since (zero: not
// known).
func (ob *observing) released(what, name string, permits int, since time.Time, handed bool, err error) {
	if ob == nil {
		return
	}
	var held time.Duration
	if !since.IsZero() {
		held = time.Since(since)
	}
	ob.o.Released(Release{Subject: ob.subject(what, name), Permits: permits, Held: held, HandedOff: handed, Err: err})
}

// lease is the watchdog's OnLease.
func (ob *observing) lease(kind *watchdog.Kind, key string, e watchdog.LeaseEvent) {
	ob.o.Lease(LeaseEvent{Subject: ob.subject(kind.Name, key), Event: e})
}

// outcome tells of a request of o's whose outcome is unknown, or of its settling.
func (ob *observing) outcome(o *owner, settled bool, err error) {
	if ob == nil {
		return
	}
	ob.o.Outcome(OutcomeEvent{Subject: ob.subject(o.what, o.name), Settled: settled, Err: err})
}
