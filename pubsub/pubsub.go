// Package pubsub multiplexes Redis pub/sub channels for local waiters.
//
// A Mux holds one dedicated subscriber connection and at most one Redis subscription per
// channel, shared by every local waiter of that channel and reference-counted: the first
// waiter subscribes, the last one leaves. A message wakes as many waiters as the channel's
// Policy says. Every waiter of a channel is also woken whenever its subscription is confirmed
// (the first time, and again after a reconnect), because a message may have been missed
// while the channel was not subscribed; waiters re-check state on every wake, so a wake is a
// hint, never a grant.
package pubsub

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/zap"
)

// Mode selects the pub/sub commands.
type Mode int

const (
	// Plain uses SUBSCRIBE and UNSUBSCRIBE (scripts publish with PUBLISH).
	Plain Mode = iota
	// Sharded uses SSUBSCRIBE and SUNSUBSCRIBE (scripts publish with SPUBLISH); Redis 7+.
	Sharded
)

// All, returned by a Policy, wakes every waiter of the channel.
const All = -1

// Policy maps a message payload to the number of local waiters it wakes: n > 0 wakes n,
// All wakes all, 0 wakes none.
type Policy func(payload string) int

// LockPolicy is the policy of Redisson's lock channels: 0 (unlock) wakes one waiter,
// 1 (read unlock) wakes all, anything else none.
func LockPolicy(payload string) int {
	switch payload {
	case "0":
		return 1
	case "1":
		return All
	}
	return 0
}

// AllPolicy wakes every waiter on any message: for a channel whose waiters want different
// things (a read-write lock's readers and writers), where the one waiter a 0 would wake may
// be one that cannot proceed.
func AllPolicy(string) int { return All }

// CountPolicy wakes as many waiters as the payload's integer value (semaphore releases).
func CountPolicy(payload string) int {
	n, err := strconv.Atoi(payload)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// ErrClosed is returned by Subscribe after Close.
var ErrClosed = errors.New("pubsub: mux closed")

// Options configure a Mux.
type Options struct {
	// Mode selects plain or sharded pub/sub.
	Mode Mode
	// Logger receives connection and subscription events; nil means no logging.
	Logger *zap.Logger
	// commandTimeout bounds each SUBSCRIBE/UNSUBSCRIBE round trip; 0 means 5 s (tests
	// lengthen it).
	commandTimeout time.Duration
	// Linger keeps a channel subscribed that long after its last waiter left, so that a
	// waiter coming back soon (a handle taking its lock in a loop) finds it subscribed: no
	// SUBSCRIBE and UNSUBSCRIBE per wait, and no re-check for a message it could have missed
	// while subscribing (see Listen). 0: unsubscribe at once.
	Linger time.Duration
}

// Mux is a channel multiplexer over one subscriber connection. It is safe for concurrent use.
type Mux struct {
	client  rueidis.Client
	mode    Mode
	routes  *routes // a Sharded Mux of a Cluster client's; nil for one connection
	log     *zap.Logger
	timeout time.Duration

	linger time.Duration

	mu       sync.Mutex
	channels map[string]*channel
	dirty    map[string]struct{}
	next     time.Time // when the earliest lingering channel is due to be left
	closed   bool
	err      error // why the Mux stopped: ErrClosed, or the rueidis client closed

	kick chan struct{} // the run loop has work in dirty
	stop chan struct{} // closed by Close
	dead chan struct{} // closed when the Mux stops for good: Close, or the client closed
	done chan struct{} // closed when the run loop has returned
	// ctx is the parent of every command's context; Close cancels it, so that Close does not
	// wait up to its command timeout for a command stuck on an unresponsive server.
	ctx    context.Context
	cancel context.CancelFunc
}

// channel is the local state of one Redis channel. Guarded by Mux.mu.
type channel struct {
	name       string
	policy     Policy
	waiters    []*Waiter // in registration order: wake-one picks the longest-waiting first
	subscribed bool      // confirmed by the server on the current connection
	node       string    // the master it is subscribed on (see routes); "" for the one connection
	hint       time.Time // when the awaited state may change with no message; see Hint
	idle       time.Time // when its last waiter left
	last       string    // the latest message's payload
	messages   uint64    // messages received
	to         string    // the channel whose waiters its messages wake too (see Forward)
	from       string    // the channel forwarding to it, if any
	cue        *cue      // a message that makes it forward another channel (see Cue)
}

// A cue is a payload on a channel that starts a forward to it (see Cue).
type cue struct {
	payload, from string
	policy        Policy
}

// wanted reports whether ch must be subscribed: it has waiters, or forwards to a channel.
func (ch *channel) wanted() bool { return len(ch.waiters) > 0 || ch.to != "" }

// deleteLocked forgets ch, and a forward to it. Caller holds m.mu.
func (m *Mux) deleteLocked(ch *channel) {
	delete(m.channels, ch.name)
	if f := m.channels[ch.from]; f != nil && f.to == ch.name {
		f.to = ""
		f.idle = time.Time{} // not to linger
		m.markDirty(f.name)
	}
}

// Waiter is one local waiter's registration on a channel.
type Waiter struct {
	m    *Mux
	ch   *channel
	c    chan struct{}
	left *channel // the channel it left, once closed: whose waiters Requeue signals then
	seen uint64   // the channel's message count when the waiter registered
}

// New returns a Mux on client and starts its connection goroutine. client is not closed by
// the Mux. A Sharded Mux of a Cluster client subscribes each channel on the master serving
// its slot, over a connection per master.
func New(client rueidis.Client, opts Options) *Mux {
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	timeout := opts.commandTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Mux{
		ctx:      ctx,
		cancel:   cancel,
		client:   client,
		mode:     opts.Mode,
		log:      log,
		timeout:  timeout,
		linger:   opts.Linger,
		channels: make(map[string]*channel),
		dirty:    make(map[string]struct{}),
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		dead:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	if m.mode == Sharded && client.Mode() == rueidis.ClientModeCluster {
		m.routes = &routes{client: client}
	}
	go m.run()
	return m
}

// Subscribe registers a waiter on name. It does not wait for Redis: the waiter's channel is
// signalled once the subscription is confirmed, or at once if it already is, so that the
// caller's next check cannot miss a message published before it registered. Every waiter of
// one channel must pass the same policy; the first one's is kept.
func (m *Mux) Subscribe(name string, policy Policy) (*Waiter, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return nil, m.err
	}
	ch := m.channels[name]
	if ch == nil {
		ch = &channel{name: name, policy: policy}
		m.channels[name] = ch
	}
	w := m.addLocked(ch)
	if ch.subscribed {
		w.signal()
	} else {
		m.markDirty(name)
	}
	return w, nil
}

// Listen registers a waiter on name before the caller's first check, and reports whether
// the channel is already subscribed. If it is, every message from now on reaches the waiter,
// which is not signalled now: a check made after Listen cannot miss a message. If it is not,
// the waiter is signalled once the subscription is confirmed, as with Subscribe, and must
// check again then.
func (m *Mux) Listen(name string, policy Policy) (*Waiter, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return nil, false, m.err
	}
	ch := m.channels[name]
	if ch == nil {
		ch = &channel{name: name, policy: policy}
		m.channels[name] = ch
	}
	w := m.addLocked(ch)
	if !ch.subscribed {
		m.markDirty(name)
	}
	return w, ch.subscribed, nil
}

// Last returns the payload of the latest message on the waiter's channel since it
// registered, or "" if none came.
func (w *Waiter) Last() string {
	m := w.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if w.ch == nil || w.ch.messages == w.seen {
		return ""
	}
	return w.ch.last
}

// First reports whether w is the longest-waiting waiter of its channel: for waiters served
// in arrival order, where only the first may act on a wake-up.
func (w *Waiter) First() bool {
	m := w.m
	m.mu.Lock()
	defer m.mu.Unlock()
	return w.ch != nil && w.ch.waiters[0] == w
}

// Place returns w's place in its channel's queue (0: the longest-waiting; -1: closed), and
// whether it holds a signal it has not taken yet.
func (w *Waiter) Place() (int, bool) {
	m := w.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if w.ch != nil {
		for i, x := range w.ch.waiters {
			if x == w {
				return i, len(w.c) > 0
			}
		}
	}
	return -1, false
}

// Waiters returns how many local waiters name has.
func (m *Mux) Waiters(name string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ch := m.channels[name]; ch != nil {
		return len(ch.waiters)
	}
	return 0
}

// Pending returns how many of name's local waiters have a signal they have not taken yet:
// zero when every waiter of the channel is parked, waiting for a message.
func (m *Mux) Pending(name string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	if ch := m.channels[name]; ch != nil {
		for _, w := range ch.waiters {
			n += len(w.c)
		}
	}
	return n
}

// Join registers a waiter on name only if the channel already has local waiters, and
// returns nil otherwise. The waiter is not signalled on registration: it queues behind the
// others, and since a wake-one goes to the longest-waiting waiter, a message published
// before it joined went to one of them. A caller that joins can skip its own first attempt;
// a caller that gets nil attempts first and then calls Subscribe.
//
// Join also returns the channel's hint (zero if none): a state change that comes with no
// message, such as a holder's lease running out, is the one thing the waiters ahead cannot
// hand on, so a joined waiter must re-check by then itself.
//
// Join is for waiters that all want the same thing, such as an exclusive lock, or that are
// served in arrival order (a semaphore's: see First): a waiter that could succeed where
// those ahead cannot (a reader behind a writer) must not join.
func (m *Mux) Join(name string) (*Waiter, time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := m.channels[name]
	if m.err != nil || ch == nil || len(ch.waiters) == 0 {
		return nil, time.Time{}
	}
	return m.addLocked(ch), ch.hint
}

// addLocked registers a new waiter at the end of ch's queue. Caller holds m.mu.
func (m *Mux) addLocked(ch *channel) *Waiter {
	w := &Waiter{m: m, ch: ch, c: make(chan struct{}, 1), seen: ch.messages}
	ch.waiters = append(ch.waiters, w)
	return w
}

// Hint records, for waiters that join later, when the awaited state may next change with no
// message (for a lock: when its holder's lease runs out, as the last attempt saw it). The
// latest hint replaces earlier ones.
func (w *Waiter) Hint(at time.Time) {
	m := w.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if w.ch != nil {
		w.ch.hint = at
	}
}

// Subscribed reports whether name's subscription is confirmed.
func (m *Mux) Subscribed(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := m.channels[name]
	return ch != nil && ch.subscribed
}

// Forward subscribes from, and has each message on it wake waiters of to, as many as policy
// says, until Unforward (or until to has no waiters left and is left itself): for waiters that
// must also hear a channel that carries news for them only now and then, without each of
// them registering on it. A message published on from before the subscription is confirmed
// is not heard. A channel forwards to one channel at most, the latest named.
func (m *Mux) Forward(from, to string, policy Policy) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return m.err
	}
	m.forwardLocked(from, to, policy)
	return nil
}

// forwardLocked is Forward. Caller holds m.mu.
func (m *Mux) forwardLocked(from, to string, policy Policy) {
	ch := m.channels[from]
	if ch == nil {
		ch = &channel{name: from, policy: policy}
		m.channels[from] = ch
	}
	if t := m.channels[to]; t != nil && ch.to != to {
		ch.to, t.from = to, from
		if !ch.subscribed {
			m.markDirty(from)
		}
	}
}

// Cue has a message on to whose payload is payload start Forward(from, to, policy), waking
// no waiter: how Redis tells a channel's waiters to listen to another from now on. The cue
// lasts as long as to's waiters.
func (m *Mux) Cue(to, payload, from string, policy Policy) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ch := m.channels[to]; ch != nil && ch.cue == nil {
		ch.cue = &cue{payload: payload, from: from, policy: policy}
	}
}

// Unforward ends from's forward (see Forward); without waiters of its own, from is left at
// once.
func (m *Mux) Unforward(from string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ch := m.channels[from]; ch != nil && ch.to != "" {
		ch.to = ""
		ch.idle = time.Time{}
		m.markDirty(from)
	}
}

// C is signalled (capacity one, so signals coalesce) when the waiter should re-check.
func (w *Waiter) C() <-chan struct{} { return w.c }

// Requeue gives back a signal the waiter took from C but cannot use (its attempt failed for
// a reason of its own, such as its context ending): Close then passes it on, so the wake-up
// is not lost to the other waiters. On a waiter closed already it goes to the channel's
// longest-waiting waiter without a signal at once.
func (w *Waiter) Requeue() {
	m := w.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if w.ch == nil && w.left != nil {
		if ch := m.channels[w.left.name]; ch != nil {
			wakeN(ch, 1)
		}
		return
	}
	w.signal()
}

// signal reports whether the waiter had no pending signal and now has one.
func (w *Waiter) signal() bool {
	select {
	case w.c <- struct{}{}:
		return true
	default:
		return false
	}
}

// Close removes the waiter. A signal it had not consumed is passed to the next waiter of the
// channel: it may have been the one wake-up of an unlock, and dropping it would strand the
// others until their timers fire. The last waiter to leave unsubscribes the channel in the
// background. Close is idempotent.
func (w *Waiter) Close() {
	m := w.m
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := w.ch
	if ch == nil {
		return
	}
	w.ch, w.left = nil, ch
	for i, x := range ch.waiters {
		if x == w {
			ch.waiters = append(ch.waiters[:i], ch.waiters[i+1:]...)
			break
		}
	}
	select {
	case <-w.c:
		wakeN(ch, 1)
	default:
	}
	if len(ch.waiters) == 0 && !m.closed {
		ch.idle = time.Now()
		m.markDirty(ch.name)
	}
}

// Wake signals the longest-waiting waiter of name that has no pending signal, if any, to
// re-check now: for news that no message carries.
func (m *Mux) Wake(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ch := m.channels[name]; ch != nil {
		wakeN(ch, 1)
	}
}

// WakeAll signals every waiter of every channel to re-check now: for news that no message
// carries (the client was found closed).
func (m *Mux) WakeAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ch := range m.channels {
		wakeN(ch, All)
	}
}

// wakeN signals up to n waiters (All: every one) that have no pending signal, oldest first.
func wakeN(ch *channel, n int) {
	for _, w := range ch.waiters {
		if n == 0 {
			return
		}
		if w.signal() && n > 0 {
			n--
		}
	}
}

// markDirty queues a channel for the run loop. Caller holds m.mu.
func (m *Mux) markDirty(name string) {
	m.dirty[name] = struct{}{}
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Close stops the connection goroutine and drops every subscription. Waiters are not
// signalled: their owners watch Done. Close is idempotent.
func (m *Mux) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		<-m.done
		return
	}
	m.closed = true
	m.dieLocked(ErrClosed)
	m.mu.Unlock()
	close(m.stop)
	m.cancel()
	<-m.done
}

// dieLocked marks the Mux stopped for good, for err. Caller holds m.mu.
func (m *Mux) dieLocked(err error) {
	if m.err == nil {
		m.err = err
		close(m.dead)
	}
}

// Done is closed when the Mux has stopped for good: Close was called, or it found its
// rueidis client closed (its own connection broke, or could not be made, with
// rueidis.ErrClosing; rueidis leaves a dedicated connection open when the client closes, so
// the Mux may not notice while that connection stays up). Waiters should watch it: no
// message will wake them any more.
func (m *Mux) Done() <-chan struct{} { return m.dead }

// Err returns why the Mux stopped (ErrClosed, or an error wrapping rueidis.ErrClosing when
// its client was closed), or nil while it runs.
func (m *Mux) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// clientClosed stops the Mux if err says its rueidis client is closed: nothing can be
// subscribed any more. It reports whether it did.
func (m *Mux) clientClosed(err error) bool {
	if !errors.Is(err, rueidis.ErrClosing) {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dieLocked(fmt.Errorf("pubsub: %w", err))
	return true
}

// onMessage runs on rueidis's reader goroutine; it must not block.
func (m *Mux) onMessage(msg rueidis.PubSubMessage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Also while its SUBSCRIBE is on its way back: the server sends the confirmation first, but
	// rueidis may hand over a message before the reply that confirms.
	if ch := m.channels[msg.Channel]; ch != nil {
		if c := ch.cue; c != nil && msg.Message == c.payload {
			m.forwardLocked(c.from, ch.name, c.policy)
			return
		}
		n := ch.policy(msg.Message)
		ch.last = msg.Message
		ch.messages++
		wakeN(ch, n)
		if t := m.channels[ch.to]; t != nil && ch.to != "" {
			wakeN(t, n)
		}
	}
}

// onSubscription notices a server-side unsubscribe we did not ask for (Redis sends one for
// sharded channels when their slot moves) so that the run loop subscribes again.
func (m *Mux) onSubscription(s rueidis.PubSubSubscription) {
	if s.Kind != "unsubscribe" && s.Kind != "sunsubscribe" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if ch := m.channels[s.Channel]; ch != nil && ch.subscribed && ch.wanted() {
		ch.subscribed = false
		m.markDirty(s.Channel)
		if m.routes != nil {
			m.routes.stale() // its slot went to another master
		}
	}
}
