package sync

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
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
// mode on Redis 7+, when shardedSubscriptionMode is AUTO, its default, or ON).
type PubSubMode int

const (
	// PubSubAuto, the default, is PubSubSharded on a Cluster of Redis 7 or later, as
	// Redisson's default is, and PubSubPlain elsewhere. New asks a Cluster its version (for
	// a second at most); one that does not say is given plain pub/sub, which every version
	// has.
	PubSubAuto PubSubMode = iota
	// PubSubPlain publishes with PUBLISH and listens with SUBSCRIBE: what Redisson uses with a
	// single server, Sentinel or replicated servers.
	PubSubPlain
	// PubSubSharded publishes with SPUBLISH and listens with SSUBSCRIBE (Redis 7+); on a
	// Cluster, each channel on the master serving its slot.
	PubSubSharded
)

// String returns the mode's name: auto, plain or sharded.
func (m PubSubMode) String() string {
	if names := [...]string{"auto", "plain", "sharded"}; m >= 0 && int(m) < len(names) {
		return names[m]
	}
	return "PubSubMode(" + strconv.Itoa(int(m)) + ")"
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

	leaveGrace time.Duration // see Client.leaveBy
	obs        *observing    // see WithObserver; nil: none

	lockHeirs   lockHeirs   // local waiters a release may hand its lock to
	permitHeirs permitHeirs // local waiters a Semaphore's Release may hand its permits to

	lockOwners  lender                  // idle owners of lock handles (see lender)
	holders     registry[*holder]       // owners holding something (see Shutdown)
	permitsHeld registry[*Permits]      // PermitSemaphore acquisitions not yet released
	underway    registry[chan struct{}] // acquisitions and background clean-ups under way (see begin)
	shut        chan struct{}           // closed when Shutdown or Close begins: no more acquisitions
	shutOnce    gosync.Once

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
	requests  atomic.Uint64
	window    atomic.Pointer[sendWindow] // the latest sends' shared end (see sendContext)
	reqPrefix string                     // 16 random hex characters, the first half of every unlock request ID
	closed    chan struct{}
	closeOnce gosync.Once
}

// New returns a Client on rdb, which may be a standalone, Sentinel or Cluster rueidis client.
// On a Cluster client every name's keys must share a hash slot: a name with a '{' but no
// hash tag is reported by its handle's methods (ErrInvalidArgument).
// Close the Client before rdb; the Client never closes rdb. Should rdb be closed first,
// waiting calls return an error wrapping rueidis.ErrClosing as soon as any request of the
// Client (a renewal included) finds it closed, which wakes them to re-check, and at their
// next re-check otherwise (the holder's TTL, at most the watchdog timeout): rueidis leaves
// the Client's subscriber connection open, so no message says so.
func New(rdb rueidis.Client, opts ...Option) (*Client, error) {
	if rdb == nil {
		return nil, invalid("client", "must not be nil")
	}
	cfg := config{watchdogTimeout: DefaultWatchdogTimeout, log: zap.NewNop(), mode: PubSubAuto,
		maxHandoff: DefaultLocalHandoff, retryBudget: DefaultRetryBudget, leaveGrace: leaveGrace}
	for i, opt := range opts {
		if opt == nil {
			return nil, invalid("option", "#%d must not be nil", i)
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	cluster := rdb.Mode() == rueidis.ClientModeCluster
	if cfg.mode == PubSubAuto {
		cfg.mode = PubSubPlain
		if cluster && shardedPubSub(rdb) {
			cfg.mode = PubSubSharded
		}
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
		leaveGrace: cfg.leaveGrace,
		obs:        cfg.obs,
		closed:     make(chan struct{}),
		shut:       make(chan struct{}),
	}
	var random [16]byte
	rand.Read(random[:]) // never fails (Go 1.24+)
	c.reqPrefix = hex.EncodeToString(random[:8])
	c.lockToken = strconv.FormatUint(binary.BigEndian.Uint64(random[8:]), 10)
	mode := pubsub.Plain
	if cfg.mode == PubSubSharded {
		c.publishCmd, mode = "SPUBLISH", pubsub.Sharded
	}
	c.lockKind = &watchdog.Kind{Name: "lock", Renew: c.renewer(func(ms string, b watchdog.Batch) lua.Request {
		return lua.LockRenew{Locks: b.Keys, LeaseMs: ms, Owners: b.Owners}
	})}
	c.readKind = &watchdog.Kind{Name: "read lock", Renew: c.renewer(func(ms string, b watchdog.Batch) lua.Request {
		return lua.ReadRenew{Locks: b.Keys, Timeouts: readTimeoutKeys(b), LeaseMs: ms, Owners: b.Owners}
	})}
	c.permitKind = &watchdog.Kind{Name: "permits", Renew: c.renewer(func(ms string, b watchdog.Batch) lua.Request {
		return lua.PermitRenew{Acquired: permitKeys(b), LeaseMs: ms, NowMs: nowMs(), Permits: b.Owners}
	})}
	wopts := watchdog.Options{Timeout: cfg.watchdogTimeout, Logger: cfg.log, Cluster: cluster}
	if c.obs != nil {
		wopts.OnLease = c.obs.lease
	}
	wd, err := watchdog.New(wopts)
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
// calls return ErrClosed, and a lock that an acquisition under way takes meanwhile is given
// back. Close does not close the rueidis client. It is
// idempotent.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.stopAcquiring()
		close(c.closed)
		c.lockOwners.close()
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
func (c *Client) closing() bool { return done(c.shut) }

func (c *Client) isClosed() bool { return done(c.closed) }

// done reports whether ch is closed.
func done(ch <-chan struct{}) bool {
	select {
	case <-ch:
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

// renewer renews one kind of hold: one pipelined round of the batched renewals that renew
// makes for the lease in ms.
func (c *Client) renewer(renew func(ms string, b watchdog.Batch) lua.Request) watchdog.RenewFunc {
	return func(ctx context.Context, lease time.Duration, batches []watchdog.Batch) []watchdog.Result {
		ms := msOf(lease)
		calls := make([]lua.Call, len(batches))
		for i, b := range batches {
			calls[i] = renew(ms, b).Call()
		}
		out := make([]watchdog.Result, len(batches))
		if c.replicas == 0 {
			resps := lua.ExecMulti(ctx, c.rdb, calls...)
			for i, res := range resps { // DoMulti replies once per command
				out[i] = c.renewed(res, 0)
			}
			return out
		}
		// Each batch goes to one node (on a Cluster its keys share a slot), and its WAIT with it.
		var wg gosync.WaitGroup
		for i, call := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, confirmed := (&scriptCall{c, call}).send(ctx)
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

// shardedPubSub reports whether the Cluster rdb says it runs Redis 7 or later, which has
// sharded pub/sub, asking a node for a second at most.
func shardedPubSub(rdb rueidis.Client) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := rdb.Do(ctx, rdb.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return false
	}
	_, v, ok := strings.Cut(info, "redis_version:")
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(major)
	return ok && err == nil && n >= 7
}
