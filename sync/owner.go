package sync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	gosync "sync"
	"time"

	"github.com/latchkey/latchkey/internal/names"
	"github.com/latchkey/latchkey/lua"
	"github.com/redis/rueidis"
	"go.uber.org/zap"
)

// The core every primitive is built on: an owner (its ID, unlock latch and numbered
// requests), a holder (holder.go: an owner's holds, their count, lease and Lost; withdraw.go:
// a waiter's withdrawal), the transport (transport.go), the wait (wait.go) and the janitor
// (janitor.go). A primitive adds its scripts and a thin type.
//
// Every request is safe to repeat, so an unknown outcome is settled by asking again:
// counts come from the owner (a repeat sets the same count, and a hold the owner never
// learned of is adopted by its next acquire), leases only grow (no run, late or repeated,
// cuts a hold short), and releases are numbered on the owner's latch (a repeat replies what
// the first run did, a late run of an earlier release changes nothing).

// Backoff between repeats of a request (see WithRetryBudget). The latch outlives the retry
// budget by far: it is what makes a run of an earlier release reaching Redis late change
// nothing, and it is deleted when its owner is collected or its Client closed.
const (
	retryBackoff = 20 * time.Millisecond
	// maxBackoff is short enough that a request under way lands within half a second of a
	// failover's end (a new master promoted, the client pointed at it).
	maxBackoff    = 500 * time.Millisecond
	unlockLatch   = 5 * time.Minute
	unlockLatchMs = "300000" // unlockLatch, as scripts take it
	// settleMargin is how long before its mark may expire a request of unknown outcome is
	// last repeated: later, a repeat could find no mark and act twice.
	settleMargin = 30 * time.Second
)

// owner is one owner ID on one object: the identity its requests are numbered under (the
// unlock latch), and the one retry loop's settling of a request of unknown outcome. A
// semaphore's or latch's calls each take one (pool); a lock's holds are a holder's.
type owner struct {
	c    *Client
	name string // the object's name, its Redis key
	what string // the primitive, as errors name it: "lock", "semaphore"...
	id   string // "<client UUID>:<n>"
	err  error  // a bad name, reported by every call

	// op serialises the owner's requests, so that its idea of its holds changes in the order
	// Redis applied them even when goroutines share the owner. A channel, so that waiting
	// for it honours a context.
	op chan struct{}

	latch     string   // the unlock latch key, made at the first numbered request
	reqs      uint64   // numbered requests made
	unsettled *request // a numbered request whose outcome is unknown, repeated before the next
}

// init makes o a fresh owner of c on the what called name.
func (o *owner) init(c *Client, name, what string) {
	o.c, o.name, o.what, o.op = c, name, what, make(chan struct{}, 1)
	o.id = c.id + ":" + strconv.FormatInt(c.owners.Add(1), 10)
	switch {
	case name == "":
		o.err = invalid("name", "must not be empty, got %q", name)
	case c.cluster && strings.Contains(name, "{") && !hasHashTag(name):
		// Redisson's rule (see names.go) trusts any '{' to be a tag: the channel and
		// latch keys would hash to other slots, and a cluster refuses a script whose keys do.
		o.err = invalid("name", "%q has a '{' but no hash tag ({tag}, not empty), so its keys cannot share "+
			"a hash slot, which a Cluster requires: give it a tag, or no '{'", name)
	case strings.Contains(name, "{") && !hasHashTag(name):
		c.log.Warn("name has '{' but no valid hash tag; its derived keys may fall in another slot", o.fields()...)
	}
}

// fields are what every log line about o says: the name, the kind of primitive and the owner
// ID (docs/design.md, Logs), then more.
func (o *owner) fields(more ...zap.Field) []zap.Field {
	return append([]zap.Field{zap.String("name", o.name), zap.String("kind", o.what), zap.String("owner", o.id)}, more...)
}

// hasHashTag reports whether name has a non-empty Redis Cluster hash tag.
func hasHashTag(name string) bool {
	i := strings.IndexByte(name, '{')
	return i >= 0 && strings.IndexByte(name[i+1:], '}') > 0
}

// lock takes the owner's op within ctx; unlock gives it back.
func (o *owner) lock(ctx context.Context) error {
	select {
	case o.op <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (o *owner) unlock() { <-o.op }

func (o *owner) tryLock() bool {
	select {
	case o.op <- struct{}{}:
		return true
	default:
		return false
	}
}

// get runs the read cmd makes, repeated within the retry budget while its reply is lost
// (see Client.read): a read without a deadline never waits for Redis for ever. A nil reply
// is no error.
func (o *owner) get(ctx context.Context, cmd func(rueidis.Builder) rueidis.Completed) (rueidis.RedisMessage, error) {
	c := o.c
	return c.read(ctx, func(ctx context.Context) rueidis.RedisResult { return c.rdb.Do(ctx, cmd(c.rdb.B())) })
}

// wrongType is the ErrWrongType of key, one of the object's keys.
func (o *owner) wrongType(key string) error {
	return o.wrap(tag(fmt.Sprintf("key %q holds a value of another type", key), ErrWrongType))
}

// check validates what every Redis-touching call gets — a handle's zero value (a Client
// method makes every handle) included.
func (o *owner) check(ctx context.Context) error {
	if o.c == nil {
		return invalid("handle", "is a zero value: make it with a Client method (Client.Lock, Client.Semaphore, …)")
	}
	if ctx == nil {
		return o.wrap(invalid("ctx", "must not be nil"))
	}
	if o.c.isClosed() {
		return o.wrap(ErrClosed)
	}
	return o.wrap(o.err)
}

// A request is a numbered request kept for repeating.
type request struct {
	call lua.Call
	sent time.Time // when it was first sent: its mark lasts unlockLatch from about then
}

// nextRequest numbers the owner's next request on its latch, made at the first one. Caller
// holds op and has settled.
func (o *owner) nextRequest() lua.Numbered {
	if o.latch == "" {
		o.latch = names.Prefix(unlockLatchPrefix, o.name) + ":" + o.c.newRequestID()
		o.c.janitor.track(o)
	}
	o.reqs++
	return lua.Numbered{Latch: o.latch, N: o.reqs, LatchMs: unlockLatchMs}
}

// numbered runs a request numbered by nextRequest. When its outcome stays unknown it is kept
// in o.unsettled, to be repeated before the owner's next request (settle). Caller holds op.
func (o *owner) numbered(ctx context.Context, call lua.Call) (rueidis.RedisMessage, error) {
	sent := time.Now()
	msg, err := o.c.exec(ctx, call)
	if errors.Is(err, ErrOutcomeUnknown) {
		o.unsettled = &request{call: call, sent: sent}
		o.c.obs.outcome(o, false, nil)
	}
	return msg, o.wrap(err)
}

// request runs a numbered request that req makes for the latch and number it is given: how
// a primitive without holds (a semaphore, a countdown latch) makes each state change safe
// to repeat. The owner has no request of unknown outcome (pool.request lends none). When
// this one's outcome stays unknown it is kept in o.unsettled, to be repeated (see
// settleLater), as its own cancel when it is a lua.Cancellable. A Cancellable that too few
// replicas confirmed (WithSyncReplicas) is withdrawn so at once, and the error wraps
// ErrNotReplicated; a withdrawal that gets no reply, or is refused, stays unsettled and is
// repeated too. A release (ctx without cancellation) is repeated within the retry
// budget whatever the caller's ctx says.
func (o *owner) request(ctx context.Context, req func(lua.Numbered) lua.Request) (rueidis.RedisMessage, error) {
	if err := o.lock(ctx); err != nil {
		return rueidis.RedisMessage{}, err
	}
	defer o.unlock()
	r := req(o.nextRequest())
	sent := time.Now()
	msg, err := o.numbered(ctx, r.Call())
	cancel, ok := r.(lua.Cancellable)
	if !ok {
		return msg, err
	}
	if u := o.unsettled; u != nil {
		u.call = cancel.Cancel()
	} else if errors.Is(err, ErrNotReplicated) {
		// Too few replicas confirmed it: withdrawn at once, as a request of unknown outcome
		// is (what it took, if anything, is given back), whatever ctx says.
		o.unsettled = &request{call: cancel.Cancel(), sent: sent}
		if _, serr := o.settle(context.WithoutCancel(ctx)); serr != nil {
			err = o.wrap(errors.Join(err, fmt.Errorf("giving it back: %w", serr)))
		}
	}
	return msg, err
}

// A pool is the owners of a handle that holds nothing (a semaphore, a countdown latch),
// whose calls share no state: each request takes an idle owner, so that concurrent calls on
// one handle need not wait for each other's round trips, as the requests numbered on one
// owner's latch must. The first owner names the handle and checks its calls.
type pool struct {
	owner
	mu   gosync.Mutex
	idle []*owner // last in, first out
}

func (p *pool) init(c *Client, name, what string) {
	p.owner.init(c, name, what)
	p.idle = []*owner{&p.owner}
}

// request is owner.request on an idle owner, after the handle's checks. A request whose
// outcome stays unknown is settled in the background (settleLater), and its owner comes
// back only then.
func (p *pool) request(ctx context.Context, req func(lua.Numbered) lua.Request) (rueidis.RedisMessage, error) {
	if err := p.check(ctx); err != nil {
		return rueidis.RedisMessage{}, err
	}
	return p.run(ctx, req)
}

// release is request for a release, which runs, and is repeated within the retry budget,
// even when ctx is already cancelled (a deferred release after the request ended still
// releases); only a nil ctx, or the handle's other checks, refuse it.
func (p *pool) release(ctx context.Context, req func(lua.Numbered) lua.Request) (rueidis.RedisMessage, error) {
	if err := p.check(ctx); err != nil {
		return rueidis.RedisMessage{}, err
	}
	return p.run(context.WithoutCancel(ctx), req)
}

// run is request without the handle's checks, for a change that must reach Redis also
// once the Client is closed (see Semaphore.handOn).
func (p *pool) run(ctx context.Context, req func(lua.Numbered) lua.Request) (rueidis.RedisMessage, error) {
	p.mu.Lock()
	var o *owner
	if n := len(p.idle); n > 0 {
		o, p.idle = p.idle[n-1], p.idle[:n-1]
	} else {
		o = &owner{c: p.c, name: p.name, what: p.what, id: p.id, err: p.err, op: make(chan struct{}, 1)}
	}
	p.mu.Unlock()
	msg, err := o.request(ctx, req)
	if o.unsettled != nil {
		p.c.settleLater(o, func() { p.put(o) })
	} else {
		p.put(o)
	}
	return msg, err
}

// get reads the handle's key as an integer (0 when it does not exist), repeating the read
// within the retry budget while its reply is lost.
func (p *pool) get(ctx context.Context) (int, error) {
	n, err := p.getInt(ctx, p.name)
	return int(n), err
}

// getInt reads key, one of the object's, as an integer (0 when it does not exist).
func (o *owner) getInt(ctx context.Context, key string) (int64, error) {
	msg, err := o.get(ctx, func(b rueidis.Builder) rueidis.Completed { return b.Get().Key(key).Build() })
	if err != nil || msg.IsNil() {
		return 0, o.wrap(err)
	}
	n, err := msg.AsInt64()
	return n, o.wrapKey(key, err)
}

func (p *pool) put(o *owner) {
	p.mu.Lock()
	p.idle = append(p.idle, o)
	p.mu.Unlock()
}

// settle repeats a request whose outcome is unknown (retried within the budget and ctx). Until
// a repeat gets a reply — not a refusal: a refused repeat did not run, and the first run may
// still — the owner makes no other request, so a late run of it can never act on a hold
// taken since, and the owner counts the holds it counted when the request was made. It
// reports whether the repeat's reply was nil. Caller holds op.
func (o *owner) settle(ctx context.Context) (nothing bool, err error) {
	r := o.unsettled
	if r == nil {
		return false, nil
	}
	msg, err := o.c.exec(ctx, r.call)
	if err != nil && !errors.Is(err, ErrNotReplicated) { // unconfirmed, it ran all the same
		return false, fmt.Errorf("%w (a request of the handle whose outcome is unknown is still unsettled)", o.wrap(err))
	}
	o.unsettled = nil
	o.c.obs.outcome(o, true, nil)
	return msg.IsNil(), nil
}

// wrap names the object in an error (see objectError; an error that names it already is
// returned as is), and turns a reply that says the object's key holds a value of another
// type or kind — a WRONGTYPE refusal, a script's own (see lib.lua's wrong_type), an
// increment of a word, a count that does not parse — into ErrWrongType naming the key.
func (o *owner) wrap(err error) error { return o.wrapKey(o.name, err) }

// wrapKey is wrap for an error about key, one of the object's keys.
func (o *owner) wrapKey(key string, err error) error {
	if err == nil {
		return nil
	}
	if oe, ok := err.(*objectError); ok && oe.name == o.name {
		return err
	}
	var num *strconv.NumError
	if rerr, ok := rueidis.IsRedisErr(err); ok && wrongTypeText(rerr.Error()) || errors.As(err, &num) {
		return o.wrongType(key)
	}
	return &objectError{what: o.what, name: o.name, err: err}
}

// releasedHanded is a release script's reply when the lock went to the heir (0: a hold
// dropped; 1: freed).
const releasedHanded int64 = 2
