package sync

// Options: of a Client (New), of a lock handle (Reentrant), and of an acquisition (Lease,
// WaitTime).

import (
	"context"
	"time"

	"github.com/google/uuid"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// HandleOption configures a lock handle as it is made.
type HandleOption interface{ applyHandle(*handleConfig) }

type handleConfig struct{ reentrant bool }

type reentrantOption struct{}

func (reentrantOption) applyHandle(c *handleConfig) { c.reentrant = true }

// Reentrant makes a lock handle one owner, as a Java thread is to Redisson's locks: a Lock
// through a handle that holds the lock takes a further hold at once (re-entry), each hold
// matched by one Unlock, and HoldCount counts them. Goroutines sharing a reentrant handle
// share its holds and do not exclude each other: give each goroutine that must be excluded a
// handle of its own. Without it, a handle is a mutex (see Lock).
func Reentrant() HandleOption { return reentrantOption{} }

// handleOptions applies a handle's options; a nil one is reported by every call, through err.
func handleOptions(opts []HandleOption) (cfg handleConfig, err error) {
	for i, opt := range opts {
		if opt == nil {
			return cfg, invalid("option", "#%d must not be nil", i)
		}
		opt.applyHandle(&cfg)
	}
	return cfg, nil
}

// LockOption configures Lock and TryLock.
type LockOption interface{ applyLock(*lockConfig) }

// TryLockOption configures TryLock.
type TryLockOption interface{ applyTry(*lockConfig) }

type lockConfig struct {
	lease    time.Duration // 0: kept by the watchdog
	wait     time.Duration
	leaseSet bool
	waitSet  bool
}

type leaseOption time.Duration

func (o leaseOption) applyLock(c *lockConfig) { c.lease, c.leaseSet = time.Duration(o), true }

func (o leaseOption) applyTry(c *lockConfig) { o.applyLock(c) }

// Lease gives the acquisition a fixed lease: the lock expires lease after it is taken unless
// released first, and the watchdog does not renew it. Leases only grow: a re-entry, or the
// release of an inner hold, sets the lock's TTL to the larger of what is left and the new
// lease, never lower. A hold taken under the watchdog stays kept by it whatever the leases of
// re-entries (Redisson's rule). It must be at least 1 ms and is truncated to whole
// milliseconds.
func Lease(lease time.Duration) interface {
	LockOption
	TryLockOption
} {
	return leaseOption(lease)
}

type waitOption time.Duration

func (o waitOption) applyTry(c *lockConfig) { c.wait, c.waitSet = time.Duration(o), true }

func (o waitOption) applyAcquire(c *lockConfig) { o.applyTry(c) }

// WaitTime lets TryLock, or a semaphore's TryAcquire, wait up to wait (default: one attempt,
// no waiting). The context's deadline, if earlier, still applies. It must not be negative.
func WaitTime(wait time.Duration) interface {
	TryLockOption
	TryAcquireOption
} {
	return waitOption(wait)
}

// configure applies an acquisition's options, and checks them with what every call checks.
// (An acquisition begun once Shutdown has begun is refused by Client.begin.)
func configure[O comparable](ctx context.Context, o *owner, opts []O, apply func(O, *lockConfig)) (lockConfig, error) {
	cfg, err := options(opts, apply)
	if err != nil {
		return cfg, err
	}
	return cfg, o.check(ctx)
}

// options applies an acquisition's options, refusing a nil one and values out of range.
func options[O comparable](opts []O, apply func(O, *lockConfig)) (lockConfig, error) {
	var cfg lockConfig
	var none O
	for _, opt := range opts {
		if opt == none {
			return cfg, invalid("option", "must not be nil")
		}
		apply(opt, &cfg)
	}
	return cfg, cfg.check()
}

// leaseMs is the lease as scripts take it: the watchdog timeout when there is none.
func (c *Client) leaseMs(lease time.Duration) string {
	if lease == 0 {
		return c.wdMs
	}
	return msOf(lease)
}

// leaseOr is the TTL a hold taken with lease gets: lease, or the watchdog timeout for 0 (a
// hold the watchdog keeps).
func (c *Client) leaseOr(lease time.Duration) time.Duration {
	if lease == 0 {
		return c.wdTimeout
	}
	return lease
}

func (cfg *lockConfig) check() error {
	if cfg.leaseSet && cfg.lease < time.Millisecond {
		return invalid("lease", "must be >= 1ms, got %v", cfg.lease)
	}
	// Redis keeps whole milliseconds; the watchdog must not believe in the fraction.
	cfg.lease = cfg.lease.Truncate(time.Millisecond)
	if cfg.waitSet && cfg.wait < 0 {
		return invalid("wait time", "must be >= 0, got %v", cfg.wait)
	}
	return nil
}

// TryAcquireOption configures a semaphore's TryAcquire: WaitTime.
type TryAcquireOption interface{ applyAcquire(*lockConfig) }

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
	leaveGrace      time.Duration // see Client.leaveBy
	obs             *observing    // see WithObserver
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

// WithLogger sets the logger for what goes wrong: lost leases, failed renewals, pub/sub
// reconnects, outcomes that stay unknown. Default: no logging. The happy path logs nothing,
// and a message is logged at most once a second (logSample): an outage that fails every
// call does not flood the log. Each line about a primitive names it: fields name, kind and
// owner.
func WithLogger(log *zap.Logger) Option {
	return func(c *config) error {
		if log == nil {
			return invalid("logger", "must not be nil")
		}
		c.log = log.WithOptions(zap.WrapCore(func(core zapcore.Core) zapcore.Core {
			return zapcore.NewSamplerWithOptions(core, logSample, 1, 0)
		}))
		return nil
	}
}

// logSample is how often one message may be logged: once, then not again until the next.
const logSample = time.Second

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

// WithPubSubMode selects plain or sharded pub/sub (see PubSubMode). Default PubSubAuto.
func WithPubSubMode(mode PubSubMode) Option {
	return func(c *config) error {
		if mode != PubSubAuto && mode != PubSubPlain && mode != PubSubSharded {
			return invalid("pub/sub mode", "must be PubSubAuto, PubSubPlain or PubSubSharded, got %v", mode)
		}
		c.mode = mode
		return nil
	}
}

// DefaultRetryBudget is how long a request is repeated while its reply is lost or Redis says
// it did not run it (see WithRetryBudget).
const DefaultRetryBudget = 10 * time.Second

// WithRetryBudget sets how long a request is repeated, with backoff from 20 ms to 500 ms,
// while its reply is lost to the network or Redis refuses it without running it (LOADING,
// BUSY, TRYAGAIN, MASTERDOWN, CLUSTERDOWN, READONLY). Every request is safe to repeat. A request
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
// Holds are then only ever taken by their owners' own scripts: no local hand-off. Each change costs the replicas'
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
