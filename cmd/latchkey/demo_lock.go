package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	dsync "github.com/latchkey/latchkey/sync"
	"github.com/redis/rueidis"
)

const (
	wakeLockKey  = "demo:wake"
	leaseLockKey = "demo:lease"
)

// lockChannel is the channel Redisson, and so dsync, publishes a lock's releases on. The
// demo spells it out itself to listen in, as a Java service's Redisson would.
func lockChannel(name string) string { return "redisson_lock__channel:{" + name + "}" }

// clientChannels is the pattern of the channels on which a release wakes one waiting
// latchkey Client alone: {name}:lock_clients:<the Client's token>.
func clientChannels(name string) string { return "{" + name + "}:lock_clients:*" }

// published is one message seen on a lock channel, and when.
type published struct {
	channel, payload string
	at               time.Time
}

// wake shows a blocked Lock returning as soon as the holder unlocks, long before the
// holder's lease would have run out.
func (d *demo) wake(ctx context.Context) error {
	rdbA, err := d.connect()
	if err != nil {
		return err
	}
	defer rdbA.Close()
	rdbB, err := d.connect()
	if err != nil {
		return err
	}
	defer rdbB.Close()
	a, err := dsync.New(rdbA)
	if err != nil {
		return err
	}
	defer a.Close()
	b, err := dsync.New(rdbB)
	if err != nil {
		return err
	}
	defer b.Close()

	channel := lockChannel(wakeLockKey)
	msgs, stopSpy, err := d.listen(ctx, channel, clientChannels(wakeLockKey))
	if err != nil {
		return err
	}
	defer stopSpy()

	la := a.Lock(wakeLockKey)
	if err := la.Lock(ctx); err != nil {
		return fmt.Errorf("client A: %w", err)
	}
	d.printf("Client A holds %q with no lease, so the watchdog keeps it (default timeout %v).\n",
		wakeLockKey, dsync.DefaultWatchdogTimeout)

	type outcome struct {
		at  time.Time
		err error
	}
	got := make(chan outcome, 1)
	bctx, cancelB := context.WithCancel(ctx)
	defer cancelB()
	lb := b.Lock(wakeLockKey)
	go func() {
		err := lb.Lock(bctx)
		got <- outcome{time.Now(), err}
	}()

	if err := sleep(ctx, d.cfg.wakeHold); err != nil {
		return err
	}
	select {
	case o := <-got:
		if o.err != nil {
			return fmt.Errorf("client B: %w", o.err)
		}
		return errors.New("client B got the lock while A still held it")
	default:
	}
	ttl, err := la.RemainingTTL(ctx)
	if err != nil {
		return err
	}
	d.printf("Client B has been blocked in Lock for %v. The lock's TTL is %v: if no message came,\n",
		d.cfg.wakeHold, ttl.Round(100*time.Millisecond))
	d.printf("B would re-check only every third of the watchdog timeout (10s), as a lost message costs.\n")

	unlockAt := time.Now()
	if err := la.Unlock(ctx); err != nil {
		return fmt.Errorf("client A: %w", err)
	}
	var o outcome
	select {
	case o = <-got:
	case <-time.After(d.cfg.wakeLimit):
		return fmt.Errorf("client B was not woken within %v of A's unlock", d.cfg.wakeLimit)
	case <-ctx.Done():
		return ctx.Err()
	}
	if o.err != nil {
		return fmt.Errorf("client B: %w", o.err)
	}
	defer func() { _ = lb.Unlock(context.WithoutCancel(ctx)) }()

	d.printf("A unlocked.\n")
	// The listener is only a witness; B's wake-up is the invariant.
	for range 2 {
		select {
		case m := <-msgs:
			what := "Redisson's unlock message, 00, which Java reads as 0: for Java waiters; latchkey's waiters let it pass"
			if m.channel != channel {
				what = "client B's own channel: the release wakes B's client alone"
			}
			d.printf("  +%s  message %q published on %s (%s)\n", ms(m.at.Sub(unlockAt)), m.payload, m.channel, what)
		case <-time.After(100 * time.Millisecond):
			d.printf("  (the listener saw no more messages on %s)\n", channel)
		}
	}
	waited := o.at.Sub(unlockAt)
	d.printf("  +%s  B has the lock\n", ms(waited))
	d.printf("B got the lock %s after the unlock instead of up to 10s later: the unlock message woke it.\n",
		ms(waited))
	return nil
}

// listen subscribes a connection of its own to the channels matching patterns and returns
// the messages it sees, once every subscription is confirmed, so no message published
// afterwards can be missed. stop ends the subscription and waits for it to be gone.
func (d *demo) listen(ctx context.Context, patterns ...string) (msgs <-chan published, stop func(), err error) {
	rdb, err := d.connect()
	if err != nil {
		return nil, nil, err
	}
	out := make(chan published, 16)
	subscribed := make(chan struct{})
	var mu sync.Mutex
	confirmed := 0
	hook := func(s rueidis.PubSubSubscription) {
		mu.Lock()
		defer mu.Unlock()
		if s.Kind == "psubscribe" {
			if confirmed++; confirmed == len(patterns) {
				close(subscribed)
			}
		}
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- rdb.Receive(rueidis.WithOnSubscriptionHook(lctx, hook), rdb.B().Psubscribe().Pattern(patterns...).Build(),
			func(m rueidis.PubSubMessage) {
				select {
				case out <- published{channel: m.Channel, payload: m.Message, at: time.Now()}:
				default: // A witness must never hold up the connection.
				}
			})
	}()
	stop = func() {
		cancel()
		<-done
		rdb.Close()
	}
	select {
	case <-subscribed:
		return out, stop, nil
	case err := <-done:
		cancel()
		rdb.Close()
		return nil, nil, fmt.Errorf("subscribe %q: %w", patterns, err)
	case <-time.After(d.cfg.wakeLimit):
		stop()
		return nil, nil, fmt.Errorf("subscribe %q: not confirmed within %v", patterns, d.cfg.wakeLimit)
	}
}

// watchdog shows a lock taken without a lease outliving its watchdog timeout several times
// over, because the watchdog renews it, and vanishing at Unlock.
func (d *demo) watchdog(ctx context.Context) error {
	rdb, err := d.connect()
	if err != nil {
		return err
	}
	defer rdb.Close()
	c, err := dsync.New(rdb, dsync.WithWatchdogTimeout(d.cfg.leaseTimeout))
	if err != nil {
		return err
	}
	defer c.Close()

	l := c.Lock(leaseLockKey)
	if err := l.Lock(ctx); err != nil {
		return err
	}
	locked := time.Now()
	d.printf("Locked %q with no lease on a Client with WithWatchdogTimeout(%v):\n", leaseLockKey, d.cfg.leaseTimeout)
	d.printf("its TTL starts at %v and the watchdog resets it every %v. Holding it %v:\n",
		d.cfg.leaseTimeout, d.cfg.leaseTimeout/3, d.cfg.leaseHold)
	step := d.cfg.leaseHold / time.Duration(d.cfg.leaseSamples)
	for range d.cfg.leaseSamples {
		if err := sleep(ctx, step); err != nil {
			return err
		}
		pttl, err := rdb.Do(ctx, rdb.B().Pttl().Key(leaseLockKey).Build()).AsInt64()
		if err != nil {
			return err
		}
		d.printf("  held %5dms  PTTL %4dms\n", time.Since(locked).Milliseconds(), pttl)
		if pttl < 0 {
			return fmt.Errorf("lease lost: PTTL %s is %d after %v", leaseLockKey, pttl, time.Since(locked).Round(time.Millisecond))
		}
	}
	select {
	case <-l.Lost():
		return errors.New("lease lost: Lost() closed while the lock was held")
	default:
	}
	held := time.Since(locked)
	d.printf("Held %v, %.1fx the watchdog timeout, and Lost() is still open: the lease was renewed.\n",
		held.Round(time.Millisecond), float64(held)/float64(d.cfg.leaseTimeout))

	if err := l.Unlock(ctx); err != nil {
		return err
	}
	if err := checkGone(ctx, rdb, leaseLockKey, "Unlock"); err != nil {
		return err
	}
	d.printf("Unlocked: EXISTS %s = 0, the key is gone and the watchdog has stopped renewing it.\n", leaseLockKey)
	return nil
}
