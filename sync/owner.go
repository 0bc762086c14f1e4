package sync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	gosync "sync"
	"sync/atomic"
	"time"

	"github.com/latchkey/latchkey/lua"
	"github.com/latchkey/latchkey/watchdog"
	"github.com/redis/rueidis"
	"go.uber.org/zap"
)

// The core every primitive is built on: an owner (its ID, unlock latch, numbered requests
// and the one retry loop), its hold (count, lease, Lost), the wait (wait.go) and the janitor
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
	retryBackoff  = 20 * time.Millisecond
	maxBackoff    = time.Second
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
	// requests counts the owner's requests: a lock granted to the owner after an attempt is
	// the owner's only if no request came since (see takeGrant).
	requests uint64
}

// holder is an owner that holds a lock: how many holds, their lease, and whether it is lost.
type holder struct {
	owner
	kind *watchdog.Kind
	// releaser makes the primitive's numbered release of one hold when Redis counts holds of
	// the owner's: how a hold too few replicas confirmed (WithSyncReplicas) is given back.
	releaser func(holds int, latch, n string) script
	unsure   bool          // an acquire's outcome is unknown: Redis may count a hold the owner does not
	count    int           // holds as last known
	leaseD   time.Duration // the latest hold's explicit lease; 0: kept by the watchdog
	run      int           // consecutive local hand-offs that led to the current hold
	lease    atomic.Pointer[watchdog.Lease]
}

// init makes h a fresh holder of c on the what called name, its holds leased as kind.
func (h *holder) init(c *Client, name, what string, kind *watchdog.Kind) {
	h.owner.init(c, name, what)
	h.kind = kind
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
		// Redisson's rule (see names.go) trusts any '{' to be a tag: the channel and
		// latch keys then hash elsewhere, which a cluster rejects as CROSSSLOT.
		c.log.Warn("name has '{' but no valid hash tag; its derived keys may fall in another slot",
			zap.String("name", name))
	}
}

// hasHashTag reports whether name has a non-empty Redis Cluster hash tag.
func hasHashTag(name string) bool {
	i := strings.IndexByte(name, '{')
	return i >= 0 && strings.IndexByte(name[i+1:], '}') > 0
}

// doubtful reports whether Redis may count a hold of the owner's that the owner does not know
// of: an acquire's outcome is unknown, or a request's is (a release not yet run drops a hold
// later). Such an owner attempts before it waits, which adopts or settles it. Caller holds op.
func (o *holder) doubtful() bool { return o.unsure || o.unsettled != nil }

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

// holds returns how many holds the owner knows it has.
func (o *holder) holds(ctx context.Context) (int, error) {
	if err := o.lock(ctx); err != nil {
		return 0, err
	}
	defer o.unlock()
	return o.count, nil
}

// exists reports whether the object's key, a lock's hash, exists: whether anyone holds the
// lock. A key of another type is ErrWrongType. (TYPE costs what EXISTS does.)
func (o *holder) exists(ctx context.Context) (bool, error) {
	if err := o.check(ctx); err != nil {
		return false, err
	}
	msg, err := o.get(ctx, func(b rueidis.Builder) rueidis.Completed { return b.Type().Key(o.name).Build() })
	if err != nil {
		return false, o.wrap(err)
	}
	t, err := msg.ToString()
	switch {
	case err != nil:
		return false, o.wrap(err)
	case t == "none":
		return false, nil
	case t != "hash":
		return false, o.wrongType(o.name)
	}
	return true, nil
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
	script     *lua.Script
	keys, args []string
	sent       time.Time // when it was first sent: its mark lasts unlockLatch from about then
}

// nextRequest numbers the owner's next request on its latch, made at the first one. Caller
// holds op and has settled.
func (o *owner) nextRequest() (latch, n string) {
	if o.latch == "" {
		o.latch = prefixName(unlockLatchPrefix, o.name) + ":" + o.c.newRequestID()
		o.c.janitor.track(o)
	}
	o.reqs++
	return o.latch, strconv.FormatUint(o.reqs, 10)
}

// numbered runs a request numbered by nextRequest. When its outcome stays unknown it is kept
// in o.unsettled, to be repeated before the owner's next request (settle). Caller holds op.
func (o *owner) numbered(ctx context.Context, script *lua.Script, keys, args []string) (rueidis.RedisMessage, error) {
	sent := time.Now()
	msg, err := o.exec(ctx, script, keys, args)
	if errors.Is(err, ErrOutcomeUnknown) {
		o.unsettled = &request{script: script, keys: keys, args: args, sent: sent}
	}
	return msg, o.wrap(err)
}

// request runs a numbered request that req makes for the latch and number it is given: how
// a primitive without holds (a semaphore, a countdown latch) makes each state change safe
// to repeat. The owner has no request of unknown outcome (pool.request lends none). When
// this one's outcome stays unknown it is kept in o.unsettled, to be repeated (see
// settleLater) with the arguments cancel makes of its own, if cancel is not nil. When too
// few replicas confirmed it (WithSyncReplicas), it is withdrawn so at once, and the error
// wraps ErrNotReplicated; a withdrawal that gets no reply, or is refused, stays unsettled
// and is repeated too. A release (ctx without cancellation) is repeated within the retry
// budget whatever the caller's ctx says.
func (o *owner) request(ctx context.Context, req func(latch, n string) script, cancel func(args []string) []string) (rueidis.RedisMessage, error) {
	if err := o.check(ctx); err != nil {
		return rueidis.RedisMessage{}, err
	}
	if err := o.lock(ctx); err != nil {
		return rueidis.RedisMessage{}, err
	}
	defer o.unlock()
	latch, n := o.nextRequest()
	r := req(latch, n)
	sent := time.Now()
	msg, err := o.numbered(ctx, r.s, r.keys, r.args)
	if cancel == nil {
		return msg, err
	}
	if u := o.unsettled; u != nil {
		u.args = cancel(slices.Clone(u.args))
	} else if errors.Is(err, ErrNotReplicated) {
		// Too few replicas confirmed it: withdrawn at once, as a request of unknown outcome
		// is (what it took, if anything, is given back), whatever ctx says.
		o.unsettled = &request{script: r.s, keys: r.keys, args: cancel(slices.Clone(r.args)), sent: sent}
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

// request is owner.request on an idle owner. A request whose outcome stays unknown is
// settled in the background (settleLater), and its owner comes back only then.
func (p *pool) request(ctx context.Context, req func(latch, n string) script, cancel func(args []string) []string) (rueidis.RedisMessage, error) {
	p.mu.Lock()
	var o *owner
	if n := len(p.idle); n > 0 {
		o, p.idle = p.idle[n-1], p.idle[:n-1]
	} else {
		o = &owner{c: p.c, name: p.name, what: p.what, id: p.id, err: p.err, op: make(chan struct{}, 1)}
	}
	p.mu.Unlock()
	msg, err := o.request(ctx, req, cancel)
	if o.unsettled != nil {
		go p.c.settleLater(o, func() { p.put(o) })
	} else {
		p.put(o)
	}
	return msg, err
}

// get reads the handle's key as an integer (0 when it does not exist), repeating the read
// within the retry budget while its reply is lost.
func (p *pool) get(ctx context.Context) (int, error) {
	c := p.c
	msg, err := c.read(ctx, func(ctx context.Context) rueidis.RedisResult {
		return c.rdb.Do(ctx, c.rdb.B().Get().Key(p.name).Build())
	})
	if err != nil || msg.IsNil() {
		return 0, p.wrap(err)
	}
	n, err := msg.AsInt64()
	return int(n), p.wrap(err)
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
	msg, err := o.exec(ctx, r.script, r.keys, r.args)
	if err != nil && !errors.Is(err, ErrNotReplicated) { // unconfirmed, it ran all the same
		return false, fmt.Errorf("%w (a request of the handle whose outcome is unknown is still unsettled)", o.wrap(err))
	}
	o.unsettled = nil
	return msg.IsNil(), nil
}

// settle is owner.settle for a holder. A reply of nil says the owner held nothing (every
// release script's "not held"): holds it still counts — besides one an inner release
// dropped, or a give-back gave — are lost. (The next request would find that out too, but
// it may get no reply.) Caller holds op.
func (o *holder) settle(ctx context.Context) error {
	nothing, err := o.owner.settle(ctx)
	if err == nil && nothing && o.count > 0 {
		return o.lost("a release of the handle's, repeated, found the lock gone")
	}
	return err
}

// disown gives back a hold the owner must not keep — too few replicas confirmed it, or the
// Client closed as it was taken: err says which — which Redis counts as the owner's
// holds-th, and returns the error of the acquisition: the owner's own state (count, lease)
// never saw the hold, so a failover cannot undo anything the caller was told.
// The release is numbered: should its outcome stay unknown, the owner repeats it before its
// next request; should Redis refuse it, the hold lapses with its lease (not renewed), or the
// owner's next acquire adopts it. Caller holds op.
func (o *holder) disown(ctx context.Context, err error, holds int) error {
	if gerr := o.giveBack(ctx, holds); gerr != nil {
		return o.wrap(errors.Join(err, fmt.Errorf("giving it back: %w", gerr)))
	}
	return o.wrap(err)
}

// giveBack releases, numbered, the holds-th hold Redis counts of the owner's, which the owner
// does not count (see disown). Caller holds op.
func (o *holder) giveBack(ctx context.Context, holds int) error {
	latch, n := o.nextRequest()
	r := o.releaser(holds, latch, n)
	_, err := o.numbered(context.WithoutCancel(ctx), r.s, r.keys, r.args)
	if replied(err) {
		return nil
	}
	if !errors.Is(err, ErrOutcomeUnknown) && holds == 1 {
		o.unsure = true // refused: Redis has the hold still, which the next acquire adopts
	}
	return err
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

// A script is one request: a script with its keys and arguments.
type script struct {
	s          *lua.Script
	keys, args []string
}

// Replies of the acquire and release scripts.
const (
	acquireLost    int64 = -3 // a re-entry found the owner's field gone
	releasedHanded int64 = 2  // the lock went to the heir (0: a hold dropped; 1: freed)
)

// acquireOut is what an acquire script's reply says besides taken or not.
type acquireOut struct {
	requests uint64    // the owner's request count at the attempt (see takeGrant)
	sent     time.Time // when the attempt was sent, if it got a reply
	listen   bool      // a plain lock's Client is the listener (see lib.lua's listen)
	token    int64     // a fenced lock's token, of the hold taken
}

// attempt runs an acquire script once (repeated while its reply is lost), after settling a
// release of unknown outcome, and records the hold it took with lease (0: kept by the
// watchdog). r is the request, whose argument holdsArg is set, under op, to the holds the
// owner knows it has; every acquire script replies nil (or
// a fenced lock's {-1, token}) when it took or re-entered, acquireLost when the owner knows
// of holds but Redis has none, or else a wait hint in ms (negative: unknown) — or {hint}
// when a plain lock's Client is the listener (lock_acquire.lua). out, if not nil, is given
// what the reply says besides.
//
// A hold taken that too few replicas confirmed (WithSyncReplicas), or once the Client was
// closed, is given back at once (see giveBack) and the attempt fails with an error wrapping
// ErrNotReplicated or ErrClosed.
func (o *holder) attempt(ctx context.Context, lease time.Duration, r script, holdsArg int, out *acquireOut) (int64, bool, error) {
	if err := o.lock(ctx); err != nil {
		return 0, false, err
	}
	var pending <-chan sent // the script's reply, which ctx ended before
	defer func() {
		if pending == nil {
			o.unlock()
		}
	}()
	if err := o.settle(ctx); err != nil {
		return 0, false, err
	}
	if o.leaseLost() {
		return 0, false, o.lost("re-entry after the lease was lost")
	}
	sent := time.Now()
	r.args[holdsArg] = strconv.Itoa(o.count)
	o.requests++
	if out != nil {
		out.requests = o.requests
	}
	msg, pending, err := o.c.try(ctx, true, true, &scriptCall{o.c, r.s, r.keys, r.args})
	var disowned error // a reply, but a hold taken goes back: why (see disown)
	if errors.Is(err, ErrNotReplicated) {
		disowned, err = err, nil
	}
	if err != nil {
		o.unsure = o.unsure || errors.Is(err, ErrOutcomeUnknown)
		if pending != nil {
			go o.late(pending, o.count+1) // it takes op over
		}
		return 0, false, o.wrap(err)
	}
	if out != nil {
		out.sent = sent
	}
	// A reply: whatever an earlier acquire did, this one adopted or saw gone. (A first run of
	// a hand-off to this owner reaching Redis even later can still hand it over; the owner
	// adopts that at its next re-check, or it lapses with its lease.)
	o.unsure = false
	taken := msg.IsNil()
	arr, aerr := msg.ToArray()
	if aerr == nil && len(arr) == 2 { // a fenced lock's {-1, token}
		token, err := arr[1].AsInt64()
		if err != nil {
			return 0, false, o.wrap(err)
		}
		if out != nil {
			out.token = token
		}
		taken = true
	}
	if taken && disowned == nil && o.c.closing() {
		// Closed before or while the script ran (a wait that a wake-up and Close ended at
		// once may attempt): nobody would renew or release the hold.
		disowned = ErrClosed
	}
	if taken && disowned != nil {
		return 0, false, o.disown(ctx, disowned, o.count+1)
	}
	if taken {
		if err := o.took(sent, lease, 0); err != nil {
			return 0, false, err
		}
		return o.ttl().Milliseconds(), true, nil
	}
	if out != nil {
		out.listen = aerr == nil && len(arr) == 1
	}
	if aerr == nil && len(arr) == 1 {
		msg = arr[0]
	}
	ttl, err := msg.AsInt64()
	if err != nil {
		return 0, false, o.wrap(err)
	}
	if ttl == acquireLost {
		return 0, false, o.lost("re-entry found the hold gone")
	}
	return ttl, false, nil
}

// late awaits, in the background, the reply of an acquire whose caller's ctx ended first —
// the caller was told it took nothing — and gives back the hold it shows taken, the
// holds-th Redis counts of the owner's (see giveBack). Until then the owner makes no other
// request: its next call waits for op, and so finds Redis as its caller was told. With no
// reply (the send's end), the acquire's outcome stays unknown (unsure). Caller holds op,
// which late gives back.
func (o *holder) late(pending <-chan sent, holds int) {
	defer o.unlock()
	msg, err := (<-pending).res.ToMessage()
	if err != nil && !rueidis.IsRedisNil(err) {
		return
	}
	o.unsure = false // a reply: whatever an earlier acquire did, this one adopted or saw gone
	arr, aerr := msg.ToArray()
	if !msg.IsNil() && (aerr != nil || len(arr) != 2) { // not taken (a fenced lock's is {-1, token})
		return
	}
	if gerr := o.giveBack(context.Background(), holds); gerr != nil {
		o.c.log.Warn("a hold taken after its acquire's caller gave up was not given back; it lapses with its lease",
			zap.String("name", o.name), zap.Error(o.wrap(gerr)))
	}
}

// release drops one hold with a numbered request (see Lock.Unlock for what each outcome
// means). req, called under op once a last hold's lease is stopped, makes the request for
// the latch and request number it is given, and may reserve an heir to hand the lock to
// (whose two arguments come last); every release script replies nil when the owner held
// nothing, releasedHanded when it handed the lock to the heir, 0 or 1 otherwise.
func (o *holder) release(ctx context.Context, req func(last bool, latch, n string) (script, *heir)) error {
	if err := o.check(ctx); err != nil {
		return err
	}
	if ctx.Done() != nil {
		ctx = context.WithoutCancel(ctx) // a release must run even when the caller's request ended
	}
	_ = o.lock(ctx)
	defer o.unlock()
	if err := o.settle(ctx); err != nil {
		return err
	}
	lease := o.lease.Load()
	last, inner := o.count == 1, o.count > 1
	lostBefore := o.leaseLost()
	if last {
		// Before the script is sent, and after any renewal already on its way has landed, so
		// that no renewal can follow the release (Redisson #7272).
		if round := lease.Stop(); round != nil {
			<-round
		}
	}
	latch, n := o.nextRequest()
	r, h := req(last, latch, n)
	sent := time.Now()
	msg, err := o.numbered(ctx, r.s, r.keys, r.args)
	var unconfirmed error // ran, but too few replicas confirmed it: it stands all the same
	if errors.Is(err, ErrNotReplicated) {
		unconfirmed, err = err, nil
	}
	v, verr := msg.AsInt64()
	unknown := errors.Is(err, ErrOutcomeUnknown)
	if h != nil {
		h.decide(err == nil && verr == nil && v == releasedHanded, unknown, sent, o.run+1)
	}
	if u := o.unsettled; u != nil {
		if h != nil {
			// The heir attempts itself now: should the release first run when repeated at the
			// next call, it frees the lock and publishes rather than hand it to a waiter that
			// would not know.
			u.args = u.args[:len(u.args)-2]
		}
	}
	switch {
	case unknown:
		// The hold counts as given up: a last one is no longer renewed or timed (Redis frees
		// it by its lease at the latest), and the handle holds nothing it could call valid.
		o.setCount(max(o.count-1, 0))
		return err
	case err != nil:
		// Refused: nothing ran, and the handle still holds the lock; a last hold is no
		// longer renewed, and lapses with its lease unless Unlock is called again.
		if last {
			lease.Lapse()
		}
		return err
	case msg.IsNil():
		if o.count == 0 {
			return o.wrap(fmt.Errorf("%w by owner %s", ErrNotHeld, o.id))
		}
		return o.lost("the release found the lock gone")
	case inner:
		o.setCount(o.count - 1)
		if unconfirmed == nil { // unconfirmed, the TTL it set is not one a failover keeps
			lease.Hold(sent, o.ttl(), false)
		}
	default:
		o.setCount(0)
	}
	if lostBefore {
		// Released, but the lease had been lost before: the critical section was not
		// covered throughout, even though the field was back.
		return o.lostErr("the lease was lost before the release")
	}
	return unconfirmed
}

// exec runs one request of the owner's, counting it. Caller holds op.
func (o *owner) exec(ctx context.Context, s *lua.Script, keys, args []string) (rueidis.RedisMessage, error) {
	o.requests++
	return o.c.exec(ctx, s, keys, args)
}

// withdraw runs s, which withdraws a waiter's claim on the object (a fair lock's place, a
// writer's claim, a plain lock's Client registration) after a wait that did not end in a
// hold — whatever ctx says: a claim left behind would hold others up until it lapsed. It
// runs in the background, holding op (so that the owner's next request waits for it, or
// settles it), within the retry budget; the caller waits for it until until at most (the
// zero time: not at all), so that neither a Redis that is unreachable nor one that hangs
// delays the caller. If Redis cannot be told, the claim lapses by itself (see FairLock and
// RWLock for when).
//
// then, if not nil, is given the reply, under op — a request of unknown outcome is settled
// first, or the reply could show a hold that request will still drop — and late, whether
// the caller has stopped waiting: a hold the reply shows, which a release granted as the
// wait ended, the caller takes when it still waits (then's result is withdraw's), and
// then gives back when it does not (late): a hold the caller is not told of must not be
// kept. after, if not nil, runs last in the background, whatever came of the withdrawal.
func (o *holder) withdraw(ctx context.Context, until time.Time, s script,
	then func(msg rueidis.RedisMessage, late bool) (bool, error), after func()) (bool, error) {
	w := &withdrawal{done: make(chan struct{})}
	held := o.tryLock() // in the caller's order, if op is free
	go func() {
		defer close(w.done)
		if after != nil {
			defer after()
		}
		ctx := context.WithoutCancel(ctx)
		if !held {
			_ = o.lock(ctx)
		}
		defer o.unlock()
		w.ok, w.err = o.withdrawing(ctx, s, then, w)
	}()
	if d := time.Until(until); d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-w.done:
		case <-timer.C:
		}
	}
	w.mu.Lock()
	taken := w.taken
	w.abandoned = !taken
	w.mu.Unlock()
	if !taken {
		select {
		case <-w.done: // over, with no hold found
			return w.ok, w.err
		default:
			return false, nil // what it finds is its own business
		}
	}
	<-w.done // then is taking the hold for the caller: no request is left
	return w.ok, w.err
}

// A withdrawal is the state a withdraw shares with its caller.
type withdrawal struct {
	mu        gosync.Mutex
	taken     bool // the reply came while the caller waited: then takes what it shows, for it
	abandoned bool // the caller stopped waiting first: then gives back what the reply shows
	ok        bool
	err       error
	done      chan struct{}
}

// withdrawing is withdraw's background part. Caller holds op.
func (o *holder) withdrawing(ctx context.Context, s script, then func(rueidis.RedisMessage, bool) (bool, error), w *withdrawal) (bool, error) {
	if o.count > 0 {
		return false, nil // a re-entry, which never claims
	}
	if then != nil {
		if err := o.settle(ctx); err != nil {
			o.c.log.Debug("waiter's claim not withdrawn; it lapses by itself", zap.String("name", o.name), zap.Error(err))
			return false, nil
		}
	}
	msg, err := o.exec(ctx, s.s, s.keys, s.args)
	if err != nil && !errors.Is(err, ErrNotReplicated) {
		o.unsure = o.unsure || errors.Is(err, ErrOutcomeUnknown)
		o.c.log.Debug("waiter's claim not withdrawn; it lapses by itself", zap.String("name", o.name), zap.Error(o.wrap(err)))
		return false, nil
	}
	if then == nil {
		return false, nil
	}
	w.mu.Lock()
	late := w.abandoned
	w.taken = !late
	w.mu.Unlock()
	ok, err := then(msg, late)
	if late && err != nil {
		o.c.log.Warn("a hold granted as a wait ended was not given back; it lapses with its lease",
			zap.String("name", o.name), zap.Error(err))
	}
	return ok, err
}

// leaveGrace is how long past its context's end a call awaits the withdrawal of its waiter's
// claim (see Client.leaveBy): as long as a reply to a request already sent.
const leaveGrace = replyGrace

// leaveBy is until when a call whose wait ended with err (nil: its wait time ran out) waits
// for the withdrawal of its claim (see withdraw): not at all when err says that Redis did not
// answer, or refused to run a script, within the retry budget (the withdrawal would most
// likely fare no better); leaveGrace past ctx's end; and while ctx lasts, as a request would
// (its deadline or the retry budget, and replyGrace).
func (c *Client) leaveBy(ctx context.Context, err error) time.Time {
	var rerr *rueidis.RedisError
	switch {
	case errors.Is(err, ErrOutcomeUnknown) || errors.As(err, &rerr) && notRun(rerr):
		return time.Time{}
	case ctx.Err() != nil:
		if d, ok := ctx.Deadline(); ok && !d.After(time.Now()) {
			return d.Add(c.leaveGrace)
		}
		return time.Now().Add(c.leaveGrace)
	}
	return c.bound(ctx).Add(replyGrace)
}

// ttl is the lease of the latest hold: the TTL a partial release keeps at least.
func (o *holder) ttl() time.Duration { return o.c.leaseOr(o.leaseD) }

// took records a hold that a script sent at sent granted with lease (0: kept by the
// watchdog) and registers it with the watchdog before the caller learns of it. A hold whose
// lease ran out before it could be reported (the process paused) is lost, not reported
// taken. Caller holds op.
func (o *holder) took(sent time.Time, lease time.Duration, run int) error {
	if o.count == 0 {
		o.run = run
	}
	o.setCount(o.count + 1)
	o.leaseD = lease
	keep := lease == 0
	// A lease not lost is reused from hold to hold: its Lost channel is still open, and a
	// lock taken in a loop costs no new lease.
	l := o.lease.Load()
	hold := (*watchdog.Lease).Hold
	if o.count == 1 {
		hold = (*watchdog.Lease).Restart // a new hold: a given-up hold's deadline is not its own
	}
	if l == nil || !hold(l, sent, o.ttl(), keep) {
		if o.count > 1 {
			return o.lost("the lease was lost while re-entering") // a lost lease stays lost
		}
		l = o.c.wd.Start(o.kind, o.name, o.id, sent, o.ttl(), keep)
		o.lease.Store(l)
	}
	if !o.valid() {
		return o.tookTooLate("the lease ran out before the acquire returned")
	}
	return nil
}

// tookTooLate reports lost a hold whose lease ran out before its acquisition could return,
// and, if it was a new hold, gives it back (giveBackLater). Caller holds op.
func (o *holder) tookTooLate(reason string) error {
	first := o.count == 1
	err := o.lost(reason)
	if first && o.unsettled == nil {
		o.giveBackLater()
	}
	return err
}

// giveBackLater queues the release of a new hold the owner does not report — its lease,
// timed from the first run of the acquire, ran out before the acquire returned — as a
// request of unknown outcome: Redis may have the hold still, with the TTL of a later run
// (an acquire repeated across an outage), and nobody to release it. It goes out before the
// owner's next request, or in the background for an owner lent to an acquisition (see
// Client.giveBack). Caller holds op.
func (o *holder) giveBackLater() {
	latch, n := o.nextRequest()
	r := o.releaser(1, latch, n)
	o.unsettled = &request{script: r.s, keys: r.keys, args: r.args, sent: time.Now()}
}

// lost records that the owner's hold is gone from Redis: Lost closes, and the error to
// return says so. Caller holds op.
func (o *holder) lost(reason string) error {
	o.setCount(0)
	if l := o.lease.Load(); l != nil {
		l.Lose(reason)
	}
	return o.lostErr(reason)
}

// lostErr is the error of a hold found lost.
func (o *holder) lostErr(reason string) error {
	return o.wrap(tag(fmt.Sprintf("lease lost (owner %s): %s", o.id, reason), ErrLockLost, ErrNotHeld))
}

// leaseLost reports whether the current hold's lease was lost: a hold the owner still counts
// is gone, even if a field of its name is back in Redis (a late acquire) — the gap in
// between was not covered.
func (o *holder) leaseLost() bool {
	l := o.lease.Load()
	if l == nil || o.count == 0 {
		return false
	}
	select {
	case <-l.Lost():
		return true
	default:
		return false
	}
}

// valid reports whether the current hold's lease is ahead, now, by the monotonic clock.
func (o *holder) valid() bool { return live(o.lease.Load()) }

// live reports whether lease (nil: none) is ahead, now, by the monotonic clock, as last
// confirmed by Redis, and no loss of it is known.
func live(lease *watchdog.Lease) bool {
	if lease == nil {
		return false
	}
	d, ok := lease.Deadline()
	return ok && time.Now().Before(d)
}

// lostCh is Lost: the current (or last) hold's Lost channel, nil before the first.
func (o *holder) lostCh() <-chan struct{} {
	if l := o.lease.Load(); l != nil {
		return l.Lost()
	}
	return nil
}
