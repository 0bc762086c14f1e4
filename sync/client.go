package sync

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	gosync "sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/latchkey/latchkey/lua"
	"github.com/latchkey/latchkey/pubsub"
	"github.com/latchkey/latchkey/watchdog"
	"github.com/redis/rueidis"
	"go.uber.org/zap"
)

// subscriptionLinger is how long a channel stays subscribed after its last local waiter
// left: long enough for a handle taking its lock in a loop to find its channel subscribed.
const subscriptionLinger = time.Second

// DefaultWatchdogTimeout is the lease a lock taken without an explicit lease gets, renewed
// every third of it while held; Redisson's lockWatchdogTimeout default.
const DefaultWatchdogTimeout = 30 * time.Second

// PubSubMode selects the commands used to publish and subscribe to release messages. It must
// match what the other processes sharing the locks use (Redisson: sharded only in cluster
// mode on Redis 7+, when shardedSubscriptionMode is AUTO or ON).
type PubSubMode int

const (
	// PubSubPlain publishes with PUBLISH and listens with SUBSCRIBE. The default, and what
	// Redisson uses with a single server, Sentinel or replicated servers.
	PubSubPlain PubSubMode = iota
	// PubSubSharded publishes with SPUBLISH and listens with SSUBSCRIBE (Redis 7+). Not yet
	// on a Cluster client, where each shard channel must be subscribed on its slot's node:
	// New refuses it there.
	PubSubSharded
)

func (m PubSubMode) String() string {
	switch m {
	case PubSubPlain:
		return "plain"
	case PubSubSharded:
		return "sharded"
	}
	return "PubSubMode(" + strconv.Itoa(int(m)) + ")"
}

// Option configures a Client.
type Option func(*config) error

type config struct {
	watchdogTimeout time.Duration
	log             *zap.Logger
	id              string
	mode            PubSubMode
	maxHandoff      int
	retryBudget     time.Duration
	fairWait        time.Duration // 0: the watchdog timeout
	replicas        int
	replicaWait     time.Duration
}

// WithWatchdogTimeout sets the lease of locks taken without an explicit lease; the watchdog
// renews it every timeout/3 while the lock is held. Default 30 s. It must be at least 3 ms
// and is truncated to whole milliseconds, as Redis keeps it.
func WithWatchdogTimeout(timeout time.Duration) Option {
	return func(c *config) error {
		if timeout < 3*time.Millisecond {
			return invalid("watchdog timeout", "must be >= 3ms, got %v", timeout)
		}
		c.watchdogTimeout = timeout.Truncate(time.Millisecond)
		return nil
	}
}

// WithLogger sets the logger for lost leases, failed renewals and pub/sub reconnects.
// Default: no logging.
func WithLogger(log *zap.Logger) Option {
	return func(c *config) error {
		if log == nil {
			return invalid("logger", "must not be nil")
		}
		c.log = log
		return nil
	}
}

// WithClientID sets the client UUID that prefixes every owner ID this Client makes
// ("<uuid>:<n>", Redisson's "<uuid>:<threadId>"). Two live Clients must never share one, or
// their handles would be the same owners. Default: a random UUID.
func WithClientID(id string) Option {
	return func(c *config) error {
		u, err := uuid.Parse(id)
		if err != nil || len(id) != 36 {
			return invalid("client ID", "must be a UUID in 8-4-4-4-12 form, got %q", id)
		}
		c.id = u.String()
		return nil
	}
}

// WithPubSubMode selects plain or sharded pub/sub. Default PubSubPlain. New refuses
// PubSubSharded on a Cluster client (see PubSubSharded).
func WithPubSubMode(mode PubSubMode) Option {
	return func(c *config) error {
		if mode != PubSubPlain && mode != PubSubSharded {
			return invalid("pub/sub mode", "must be PubSubPlain or PubSubSharded, got %v", mode)
		}
		c.mode = mode
		return nil
	}
}

// DefaultRetryBudget is how long a request is repeated while its reply is lost or Redis says
// it did not run it (see WithRetryBudget).
const DefaultRetryBudget = 10 * time.Second

// WithRetryBudget sets how long a request is repeated, with backoff from 20 ms to 1 s, while
// its reply is lost to the network or Redis refuses it without running it (LOADING, BUSY,
// TRYAGAIN, MASTERDOWN, CLUSTERDOWN, READONLY). Every request is safe to repeat. A request
// still without a reply after it fails with ErrOutcomeUnknown (a read: with the network's
// error). Acquisitions also stop repeating when their context ends; releases do not. It also
// bounds every call whose context has no deadline while Redis is unreachable or hangs: no
// request is awaited longer than the budget (at least two seconds) and 25 ms. Default
// DefaultRetryBudget; it must not be negative (0: one try).
func WithRetryBudget(budget time.Duration) Option {
	return func(c *config) error {
		if budget < 0 {
			return invalid("retry budget", "must be >= 0, got %v", budget)
		}
		c.retryBudget = budget
		return nil
	}
}

// WithFairLockWaitTimeout sets how long a fair lock waiter's place in the queue outlives
// its last attempt (Redisson's fairLockWaitTimeout): a waiter attempts again at least every
// third of it, and a place whose waiter stopped lapses when it reaches the head and its time
// is up. A waiting writer's claim on an RWLock, and a Client's registration as a waiter of a
// Lock, lapse the same way, and so Lock waiters re-check at least every third of it too. Default: the watchdog timeout. Processes sharing a fair lock should all use the
// same value (Redisson's default is 5 minutes; see docs/redisson-interop.md). It must be at
// least 3 ms and is truncated to whole milliseconds.
func WithFairLockWaitTimeout(wait time.Duration) Option {
	return func(c *config) error {
		if wait < 3*time.Millisecond {
			return invalid("fair lock wait timeout", "must be >= 3ms, got %v", wait)
		}
		c.fairWait = wait.Truncate(time.Millisecond)
		return nil
	}
}

// WithSyncReplicas makes every change wait until n replicas have it (Redis WAIT, sent on the
// same connection right after the script, as Redisson's synced eval does), at most timeout
// each time, so that a failover to a replica cannot undo an acquisition the caller was told
// of. A change that fewer replicas confirmed fails with an error wrapping ErrNotReplicated:
//
//   - an acquisition (Lock, TryLock, RLock, a semaphore's Acquire…) is given back, with its
//     own release, before the call returns; a waiting one stops waiting;
//   - a release, or any other change, stands on the master (it is not repeated);
//   - a watchdog renewal does not count: the lease is not extended, the renewal is tried
//     again, and Lost closes if the lease runs out unconfirmed.
//
// Holds are then only ever taken by their owners' own scripts: no local hand-off, and a fair
// lock's grant is confirmed by the waiter's own attempt. Each change costs the replicas'
// acknowledgement, and up to timeout while one is missing; an unconfirmed acquisition costs
// up to twice timeout (its release waits too). Default 0: no waiting. n must be >= 0 and
// timeout at least 1 ms (WAIT's 0 would wait for ever).
func WithSyncReplicas(n int, timeout time.Duration) Option {
	return func(c *config) error {
		if n < 0 {
			return invalid("replicas", "must be >= 0, got %d", n)
		}
		if timeout < time.Millisecond {
			return invalid("replica timeout", "must be >= 1ms, got %v", timeout)
		}
		c.replicas, c.replicaWait = n, timeout.Truncate(time.Millisecond)
		return nil
	}
}

// DefaultLocalHandoff is how many times in a row a lock may be handed from one local handle
// to the next before it is freed for every Client to race for (see WithLocalHandoff).
const DefaultLocalHandoff = 8

// WithLocalHandoff bounds local hand-off. When a handle releases a lock that other handles of
// the same Client are waiting for, its release script hands the lock straight to the one that
// has waited longest: one round trip, no message, no race. Handles of one Client are served
// in arrival order. The heir's Lock returns when the release's reply comes; should Redis not
// have recorded the hand-off, the heir attempts itself.
//
// Other Clients and Java processes are woken only when the lock is freed, so a Client that
// always handed its lock on would starve them. After max consecutive hand-offs the release
// frees the lock and publishes, and all waiters race for it as they would without hand-off:
// a waiter elsewhere gets its chance at least once every max+1 releases instead of at every
// one (each chance is a race, as with Redisson's non-fair lock). 0 disables hand-off; default
// DefaultLocalHandoff.
func WithLocalHandoff(max int) Option {
	return func(c *config) error {
		if max < 0 {
			return invalid("local hand-off", "must be >= 0, got %d", max)
		}
		c.maxHandoff = max
		return nil
	}
}

// Client makes lock handles and runs what they share: the pub/sub connection, the watchdog
// and the unlock-latch janitor. It is safe for concurrent use.
type Client struct {
	rdb        rueidis.Client
	id         string
	log        *zap.Logger
	wdTimeout  time.Duration
	wdMs       string // wdTimeout in ms, as scripts take it
	publishCmd string
	maxHandoff int
	budget     time.Duration // see WithRetryBudget
	fairWait   time.Duration // see WithFairLockWaitTimeout
	fairWaitMs string
	replicas   int64 // see WithSyncReplicas; 0: none waited for
	replicaMs  int64
	cluster    bool       // rdb is a Cluster client: every name's keys must share a slot
	loaded     gosync.Map // *lua.Script: run once by this Client with WithSyncReplicas

	// afterAcquire, if set, runs when an acquire script has replied, before its hold is
	// recorded: tests stand a process pause in there. beforeRelease runs when a plain
	// lock's release has counted its Client's waiters, and beforeLeave when a last waiter
	// is about to drop its Client's registration: tests stand waiters coming and going
	// meanwhile in there.
	afterAcquire  func()
	beforeRelease func()
	beforeLeave   func()
	// leaveGrace is how long past its context's end a call awaits the withdrawal of its
	// waiter's claim (see Client.leaveBy): tests that need the withdrawal's reply to come in
	// time, whatever the machine's load, lengthen it.
	leaveGrace time.Duration

	heirs heirs // local waiters a release may hand its lock to

	lockOwners  lender[*owner]     // idle owners of lock handles (see lender)
	holders     registry[*owner]   // owners holding something (see Shutdown)
	permitsHeld registry[*Permits] // PermitSemaphore acquisitions not yet released
	shut        chan struct{}      // closed when Shutdown or Close begins: no more acquisitions
	shutOnce    gosync.Once
	rwOwners    lender[*rwPair] // idle owner pairs of read-write lock handles

	// lockToken registers this Client's waiters of plain locks and names the channel they
	// listen on (see lib.lua).
	lockToken string

	mux      *pubsub.Mux
	wd       *watchdog.Watchdog
	lockKind *watchdog.Kind // leases of exclusive holds: the field's TTL
	readKind *watchdog.Kind // leases of read holds: their timeout keys and the lock's TTL
	// leases of acquired permits: their scores in a permit-expirable semaphore's zset
	permitKind *watchdog.Kind
	janitor    *janitor

	owners    atomic.Int64
	waits     atomic.Uint64 // fair waits, numbered for their tokens
	requests  atomic.Uint64
	window    atomic.Pointer[sendWindow] // the latest sends' shared end (see sendContext)
	reqPrefix string                     // 16 random hex characters, the first half of every unlock request ID
	closed    chan struct{}
	closeOnce gosync.Once
}

// New returns a Client on rdb, which may be a standalone, Sentinel or Cluster rueidis client.
// On a Cluster client every name's keys must share a hash slot: a name with a '{' but no
// hash tag is reported by its handle's methods (ErrInvalidArgument), and PubSubSharded is
// refused.
// Close the Client before rdb; the Client never closes rdb. Should rdb be closed first,
// waiting calls return an error wrapping rueidis.ErrClosing as soon as any request of the
// Client (a renewal included) finds it closed, which wakes them to re-check, and at their
// next re-check otherwise (the holder's TTL, at most the watchdog timeout): rueidis leaves
// the Client's subscriber connection open, so no message says so.
func New(rdb rueidis.Client, opts ...Option) (*Client, error) {
	if rdb == nil {
		return nil, invalid("client", "must not be nil")
	}
	cfg := config{watchdogTimeout: DefaultWatchdogTimeout, log: zap.NewNop(), mode: PubSubPlain,
		maxHandoff: DefaultLocalHandoff, retryBudget: DefaultRetryBudget}
	for i, opt := range opts {
		if opt == nil {
			return nil, invalid("option", "#%d must not be nil", i)
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	cluster := rdb.Mode() == rueidis.ClientModeCluster
	if cluster && cfg.mode == PubSubSharded {
		// Every SSUBSCRIBE must go to its channel's node, which one subscriber connection
		// cannot do.
		return nil, invalid("pub/sub mode", "%v is not supported on a Cluster client yet; use PubSubPlain", cfg.mode)
	}
	if cfg.id == "" {
		cfg.id = uuid.NewString()
	}
	if cfg.fairWait == 0 {
		cfg.fairWait = cfg.watchdogTimeout
	}
	if cfg.replicas > 0 {
		cfg.maxHandoff = 0 // a handed hold was written by the releaser's script, not confirmed by the heir's
	}
	c := &Client{
		rdb:        rdb,
		id:         cfg.id,
		log:        cfg.log,
		wdTimeout:  cfg.watchdogTimeout,
		wdMs:       strconv.FormatInt(cfg.watchdogTimeout.Milliseconds(), 10),
		publishCmd: "PUBLISH",
		maxHandoff: cfg.maxHandoff,
		budget:     cfg.retryBudget,
		fairWait:   cfg.fairWait,
		fairWaitMs: strconv.FormatInt(cfg.fairWait.Milliseconds(), 10),
		replicas:   int64(cfg.replicas),
		replicaMs:  cfg.replicaWait.Milliseconds(),
		cluster:    cluster,
		leaveGrace: leaveGrace,
		closed:     make(chan struct{}),
		shut:       make(chan struct{}),
	}
	var prefix [8]byte
	if _, err := rand.Read(prefix[:]); err != nil {
		return nil, fmt.Errorf("dsync: random request-ID prefix: %w", err)
	}
	c.reqPrefix = hex.EncodeToString(prefix[:])
	var token [8]byte
	if _, err := rand.Read(token[:]); err != nil {
		return nil, fmt.Errorf("dsync: random client token: %w", err)
	}
	c.lockToken = strconv.FormatUint(binary.BigEndian.Uint64(token[:]), 10)
	mode := pubsub.Plain
	if cfg.mode == PubSubSharded {
		c.publishCmd, mode = "SPUBLISH", pubsub.Sharded
	}
	c.lockKind = &watchdog.Kind{Name: "lock", Renew: c.renewer(lua.LockRenew, func(b watchdog.Batch) []string { return b.Keys }, false)}
	c.readKind = &watchdog.Kind{Name: "read lock", Renew: c.renewer(lua.ReadRenew, readKeys, false)}
	c.permitKind = &watchdog.Kind{Name: "permits", Renew: c.renewer(lua.PermitRenew, permitKeys, true)}
	wd, err := watchdog.New(watchdog.Options{Timeout: cfg.watchdogTimeout, Logger: cfg.log,
		Cluster: rdb.Mode() == rueidis.ClientModeCluster})
	if err != nil {
		return nil, err
	}
	c.wd = wd
	c.mux = pubsub.New(rdb, pubsub.Options{Mode: mode, Logger: cfg.log, Linger: subscriptionLinger})
	c.janitor = newJanitor(rdb, cfg.log)
	return c, nil
}

// ID returns the client UUID that prefixes this Client's owner IDs.
func (c *Client) ID() string { return c.id }

// Close stops the watchdog, the subscriptions and the janitor. Locks still held are no
// longer renewed (their Lost channels close) and expire when their leases run out; waiting
// calls return ErrClosed, and a lock that an acquisition under way takes meanwhile (a fair
// lock's grant included) is given back. Close does not close the rueidis client. It is
// idempotent.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.stopAcquiring()
		close(c.closed)
		c.lockOwners.close()
		c.rwOwners.close()
		c.wd.Close()
		c.mux.Close()
		c.janitor.close()
	})
	return nil
}

// sawClosing reports whether err says the rueidis client is closed, and if so wakes every
// waiter to re-check now and find it closed: no message will tell them.
func (c *Client) sawClosing(err error) bool {
	if !errors.Is(err, rueidis.ErrClosing) {
		return false
	}
	c.mux.WakeAll()
	return true
}

// stopAcquiring makes every acquisition from now on fail with ErrClosed, and wakes the waiting
// ones to end so: a hold taken now would not be given back by Shutdown.
func (c *Client) stopAcquiring() { c.shutOnce.Do(func() { close(c.shut) }) }

// closing reports whether the Client takes no more holds: Shutdown or Close has begun. A hold
// an acquisition under way takes now is given back.
func (c *Client) closing() bool {
	select {
	case <-c.shut:
		return true
	default:
		return false
	}
}

func (c *Client) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// newRequestID returns an unlock request ID in the form of Redisson's generateId(), 32
// lowercase hex characters: a random per-Client half and a counter. It need only be unique —
// Java reads only the latches it wrote itself — and a counter costs no randomness per unlock.
func (c *Client) newRequestID() string {
	var b [32]byte
	copy(b[:16], c.reqPrefix)
	n := c.requests.Add(1)
	const digits = "0123456789abcdef"
	for i := 31; i >= 16; i-- {
		b[i] = digits[n&0xf]
		n >>= 4
	}
	return string(b[:])
}

// renewer renews one kind of hold: one pipelined round of batched renewal scripts, each
// given keys(batch) and as arguments the lease, the time (epoch ms) if now, and the owners.
func (c *Client) renewer(s *lua.Script, keys func(watchdog.Batch) []string, now bool) watchdog.RenewFunc {
	return func(ctx context.Context, lease time.Duration, batches []watchdog.Batch) []watchdog.Result {
		ms := strconv.FormatInt(lease.Milliseconds(), 10)
		execs := make([]rueidis.LuaExec, len(batches))
		for i, b := range batches {
			args := make([]string, 0, len(b.Owners)+2)
			args = append(args, ms)
			if now {
				args = append(args, nowMs())
			}
			args = append(args, b.Owners...)
			execs[i] = rueidis.LuaExec{Keys: keys(b), Args: args}
		}
		out := make([]watchdog.Result, len(batches))
		if c.replicas == 0 {
			resps := s.ExecMulti(ctx, c.rdb, execs...)
			for i := range out {
				if i >= len(resps) {
					out[i].Err = errors.New("dsync: missing renewal reply")
					continue
				}
				out[i] = c.renewed(resps[i], 0)
			}
			return out
		}
		// Each batch goes to one node (on a Cluster its keys share a slot), and its WAIT with it.
		var wg gosync.WaitGroup
		for i, e := range execs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, confirmed := c.run(ctx, s, e.Keys, e.Args)
				out[i] = c.renewed(res, confirmed)
			}()
		}
		wg.Wait()
		return out
	}
}

// renewed reads a renewal's reply, which confirmed replicas confirmed. An unconfirmed one
// counts as failed: its leases are not extended.
func (c *Client) renewed(res rueidis.RedisResult, confirmed int64) watchdog.Result {
	vals, err := res.AsIntSlice()
	if err == nil {
		err = c.confirmed(confirmed)
	}
	if err != nil {
		c.sawClosing(err)
		return watchdog.Result{Err: err}
	}
	held := make([]bool, len(vals))
	for j, v := range vals {
		held[j] = v == 1
	}
	return watchdog.Result{Held: held}
}

// readKeys are a batch of read holds' keys for lua.ReadRenew: each lock with its owner's
// timeout key prefix.
func readKeys(b watchdog.Batch) []string {
	keys := make([]string, 0, 2*len(b.Keys))
	for i, k := range b.Keys {
		keys = append(keys, k, readTimeouts(k, b.Owners[i]))
	}
	return keys
}

// permitKeys are a batch of permit acquisitions' keys for lua.PermitRenew: each
// semaphore's zset of acquired permits.
func permitKeys(b watchdog.Batch) []string {
	keys := make([]string, len(b.Keys))
	for i, k := range b.Keys {
		keys[i] = suffixName(k, "timeout")
	}
	return keys
}
