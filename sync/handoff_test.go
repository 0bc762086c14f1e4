package sync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/rueidis"
)

// parkedHeirs counts the waiters of name that a release could hand the lock to now.
func parkedHeirs(c *Client, name string) int {
	c.heirs.mu.Lock()
	defer c.heirs.mu.Unlock()
	n := 0
	for _, h := range c.heirs.queue[name] {
		if h.state.Load() == heirParked {
			n++
		}
	}
	return n
}

// settled waits until n waiters of name are parked with no wake-up left to take: a waiter
// that has a pending one (the confirmation of its subscription comes after it parks) would
// be making an attempt of its own when the next release looks for an heir. A waiter that has
// just taken its wake-up but not yet marked itself busy looks parked for a moment, so the
// state must hold across two looks 10 ms apart.
func settled(t *testing.T, c *Client, name string, n int) {
	t.Helper()
	settledHeirs(t, c, name, n, n)
}

// settledHeirs is settled for n waiters of which heirs are queued to be handed the lock (a
// handle with a request of unknown outcome waits, but not as an heir).
func settledHeirs(t *testing.T, c *Client, name string, n, heirs int) {
	t.Helper()
	channel := lockChannel(name)
	quiet := func() bool {
		return c.mux.Subscribed(channel) && c.mux.Pending(channel) == 0 && c.mux.Waiters(channel) == n &&
			(c.maxHandoff == 0 || parkedHeirs(c, name) == heirs)
	}
	eventually(t, 5*time.Second, fmt.Sprintf("%d waiters of %s parked (%d heirs)", n, name, heirs), func() bool {
		if !quiet() {
			return false
		}
		time.Sleep(10 * time.Millisecond)
		return quiet()
	})
}

// rawSub is a plain subscriber on a lock's channel, as a Java process would have, plus a
// fence channel: Redis delivers one connection's messages in publish order, so once the
// fence's message arrives, everything published on the lock channel before it has too.
type rawSub struct {
	rdb     rueidis.Client
	channel string
	msgs    chan rueidis.PubSubMessage
}

const fenceChannel = "test:fence"

func rawSubscribe(t *testing.T, ctx context.Context, rdb rueidis.Client, channel string) *rawSub {
	t.Helper()
	sub, cancel := rdb.Dedicate()
	t.Cleanup(cancel)
	s := &rawSub{rdb: rdb, channel: channel, msgs: make(chan rueidis.PubSubMessage, 64)}
	sub.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(m rueidis.PubSubMessage) { s.msgs <- m }})
	if err := sub.Do(ctx, sub.B().Subscribe().Channel(channel, fenceChannel).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	return s
}

// published returns the messages published on the lock channel since the last call.
func (s *rawSub) published(t *testing.T, ctx context.Context) []string {
	t.Helper()
	if err := s.rdb.Do(ctx, s.rdb.B().Publish().Channel(fenceChannel).Message("x").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		select {
		case m := <-s.msgs:
			if m.Channel == fenceChannel {
				return got
			}
			got = append(got, m.Message)
		case <-time.After(5 * time.Second):
			t.Fatal("fence message not delivered within 5 s")
		}
	}
}

// quiet fails if anything was published on the lock channel since the last check.
func (s *rawSub) quiet(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	if got := s.published(t, ctx); len(got) > 0 {
		t.Fatalf("%s: %q published, want nothing", what, got)
	}
}

// handoffMarker is what only a release that hands the lock to heir sends: the heir's owner
// ID followed by its lease as the next argument. (The heir's own attempts send its owner ID
// followed by its hold count.)
func handoffMarker(heir *Lock) []byte {
	return []byte(heir.Owner() + "\r\n$" + strconv.Itoa(len(heir.c.wdMs)) + "\r\n" + heir.c.wdMs)
}

// lossyRelay is a hand-off about to lose its reply: a Client reaching Redis through a TCP
// proxy, its lock held by holder, heir parked waiting for it (its Lock's result on
// heirDone), and the proxy set to drop the reply of the release that hands the lock over.
type lossyRelay struct {
	proxy        *redistest.Proxy
	c            *Client
	admin        rueidis.Client
	holder, heir *Lock
	heirDone     <-chan error
}

func startLossyRelay(t *testing.T, ctx, heirCtx context.Context, b *redistest.Backend, name string) lossyRelay {
	t.Helper()
	r := lossyRelay{proxy: redistest.NewProxy(t, b.Addr), admin: b.Client(t)}
	r.c, _ = newClient(t, r.proxy.Addr())
	warmScripts(t, ctx, r.c)
	r.holder, r.heir = r.c.Lock(name), r.c.Lock(name)
	if err := r.holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	r.heirDone = startLock(heirCtx, r.heir)
	settled(t, r.c, name, 1)
	r.proxy.DropReplyAfter(handoffMarker(r.heir))
	return r
}

// startLock runs mu.Lock in a goroutine and returns its result.
func startLock(ctx context.Context, mu *Lock, opts ...LockOption) <-chan error {
	done := make(chan error, 1)
	go func() { done <- mu.Lock(ctx, opts...) }()
	return done
}

func await(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not within 10 s", what)
	}
}

// A release hands the lock to the longest-waiting local waiter in its own script: the
// heir holds it at once, in Redisson's layout, and nothing is published, since the lock was
// never free. The last release, with nobody left waiting, frees it and publishes.
func TestHandoffToLongestWaitingLocalWaiter(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		c, rdb := newClient(t, b.Addr)
		sub := rawSubscribe(t, ctx, rdb, lockChannel("relay"))
		a, bb, cc := c.Lock("relay"), c.Lock("relay"), c.Lock("relay")
		if err := a.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		bDone := startLock(ctx, bb)
		settled(t, c, "relay", 1)
		cDone := startLock(ctx, cc)
		settled(t, c, "relay", 2)

		if err := a.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		await(t, bDone, "B handed the lock")
		fields, err := rdb.Do(ctx, rdb.B().Hgetall().Key("relay").Build()).AsStrMap()
		if err != nil || len(fields) != 1 || fields[bb.Owner()] != "1" {
			t.Fatalf("lock hash after the hand-off %v (%v), want {%s: 1}", fields, err, bb.Owner())
		}
		if ttl := pttl(t, rdb, "relay"); ttl <= 0 || ttl > DefaultWatchdogTimeout.Milliseconds() {
			t.Fatalf("PTTL %d after the hand-off, want B's watchdog lease", ttl)
		}
		sub.quiet(t, ctx, "hand-off A → B")
		select {
		case err := <-cDone:
			t.Fatalf("C acquired (%v) while B holds the lock", err)
		default:
		}

		if err := bb.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		await(t, cDone, "C handed the lock")
		sub.quiet(t, ctx, "hand-off B → C")
		if n, err := cc.HoldCount(ctx); n != 1 || err != nil {
			t.Fatalf("C's hold count %d (%v), want 1", n, err)
		}
		if err := cc.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if got := sub.published(t, ctx); len(got) != 1 || got[0] != "0" {
			t.Fatalf("the last release, with no local waiter, published %q; want [0]", got)
		}
		if exists(t, rdb, "relay") {
			t.Fatal("lock alive after the last unlock")
		}
	})
}

// A lock handed over under the watchdog is kept by it, and one handed over with an explicit
// lease gets that lease and is not renewed.
func TestHandoffLeases(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const timeout = 300 * time.Millisecond
		ctx := testCtx(t, 30*time.Second)
		c, rdb := newClient(t, b.Addr, WithWatchdogTimeout(timeout))
		a, kept, timed := c.Lock("leases"), c.Lock("leases"), c.Lock("leases")
		if err := a.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		keptDone := startLock(ctx, kept)
		settled(t, c, "leases", 1)
		timedDone := startLock(ctx, timed, Lease(5*timeout))
		settled(t, c, "leases", 2)
		if err := a.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		await(t, keptDone, "kept handed the lock")
		if b.Mini == nil {
			time.Sleep(4 * timeout) // real expiry: the watchdog must renew across several leases
		} else {
			// miniredis's clock moves only when told to: age the lease, then see it renewed.
			b.Mini.FastForward(2 * timeout / 3)
			eventually(t, 5*timeout, "handed-over lease renewed", func() bool {
				return pttl(t, rdb, "leases") > timeout.Milliseconds()/2
			})
		}
		if held, err := kept.IsHeld(ctx); !held || err != nil {
			t.Fatalf("handed-over lock not kept by the watchdog after 4 leases: %v, %v", held, err)
		}
		if err := kept.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		await(t, timedDone, "timed handed the lock")
		if ttl := pttl(t, rdb, "leases"); ttl <= timeout.Milliseconds() || ttl > 5*timeout.Milliseconds() {
			t.Fatalf("PTTL %d after handing over with Lease(%v)", ttl, 5*timeout)
		}
		if n, err := timed.HoldCount(ctx); n != 1 || err != nil {
			t.Fatalf("hold count %d (%v), want 1", n, err)
		}
		if err := timed.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// After max hand-offs in a row the release frees the lock and publishes, so that waiters of
// other Clients get their turn; WithLocalHandoff(0) never hands over.
func TestHandoffRunIsCapped(t *testing.T) {
	for _, max := range []int{0, 2} {
		t.Run(fmt.Sprintf("max=%d", max), func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
				ctx := testCtx(t, 30*time.Second)
				c, rdb := newClient(t, b.Addr, WithLocalHandoff(max))
				sub := rawSubscribe(t, ctx, rdb, lockChannel("capped"))
				holder := c.Lock("capped")
				if err := holder.Lock(ctx); err != nil {
					t.Fatal(err)
				}
				const waiters = 5
				acquired := make(chan *Lock, waiters)
				for i := range waiters {
					mu := c.Lock("capped")
					go func() {
						if err := mu.Lock(ctx); err != nil {
							t.Error(err)
						}
						acquired <- mu
					}()
					settled(t, c, "capped", i+1)
				}
				// Each release of the relay: a hand-off publishes nothing, a free publishes 0.
				var published []bool
				for range waiters {
					if err := holder.Unlock(ctx); err != nil {
						t.Fatal(err)
					}
					select {
					case holder = <-acquired:
					case <-time.After(10 * time.Second):
						t.Fatal("no waiter acquired after a release")
					}
					published = append(published, len(sub.published(t, ctx)) > 0)
				}
				if err := holder.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				// With max 2: hand, hand, free, hand, hand. With 0: free every time.
				want := []bool{false, false, true, false, false}
				if max == 0 {
					want = []bool{true, true, true, true, true}
				}
				if fmt.Sprint(published) != fmt.Sprint(want) {
					t.Fatalf("published per release %v, want %v", published, want)
				}
			})
		})
	}
}

// The cap is what keeps a busy Client from starving others: a waiter on another Client gets
// the lock while the first Client's workers keep contending for it.
func TestHandoffDoesNotStarveOtherClients(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		if b.Mini != nil {
			t.Skip("real Redis only: the holds take real time")
		}
		ctx := testCtx(t, 60*time.Second)
		busy, _ := newClient(t, b.Addr)
		other, _ := newClient(t, b.Addr)
		stop := make(chan struct{})
		var loops atomic.Int64
		errs := make(chan error, 8)
		for range 8 {
			mu := busy.Lock("hot")
			go func() {
				for {
					select {
					case <-stop:
						errs <- nil
						return
					default:
					}
					if err := mu.Lock(ctx); err != nil {
						errs <- err
						return
					}
					time.Sleep(time.Millisecond)
					loops.Add(1)
					if err := mu.Unlock(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		eventually(t, 10*time.Second, "the busy Client contending", func() bool { return loops.Load() > 50 })
		mu := other.Lock("hot")
		if ok, err := mu.TryLock(ctx, WaitTime(20*time.Second)); !ok || err != nil {
			t.Fatalf("the other Client's waiter starved: %v, %v (busy Client made %d acquisitions)", ok, err, loops.Load())
		}
		if err := mu.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		close(stop)
		for range 8 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A hand-off whose reply is lost is retried with the same request ID and reported as done:
// the releaser has let go, the heir holds the lock once — even when the heir's context ends
// while the release is retrying, since the lock was already its.
func TestHandoffReplyLost(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		heirCtx, cancelHeir := context.WithCancel(ctx)
		defer cancelHeir()
		r := startLossyRelay(t, ctx, heirCtx, b, "lossy-relay")
		proxy, admin, a, heirMu, done := r.proxy, r.admin, r.holder, r.heir, r.heirDone
		unlocked := make(chan error, 1)
		go func() { unlocked <- a.Unlock(ctx) }()
		eventually(t, 5*time.Second, "release reply dropped", func() bool { return proxy.Dropped() == 1 })
		cancelHeir() // while the releaser backs off before its retry
		if err := <-unlocked; err != nil {
			t.Fatalf("unlock with a lost hand-off reply: %v", err)
		}
		if err := <-done; err != nil {
			t.Fatalf("heir: %v, want the lock it was handed", err)
		}
		if n := mustInt(t, admin.Do(ctx, admin.B().Hget().Key("lossy-relay").Field(heirMu.Owner()).Build())); n != 1 {
			t.Fatalf("heir's hold count %d, want 1", n)
		}
		if held, _ := a.IsHeld(ctx); held {
			t.Fatal("releaser still holds the lock")
		}
		if err := heirMu.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if exists(t, admin, "lossy-relay") {
			t.Fatal("lock alive after the heir's unlock")
		}
	})
}

// A waiter whose wait ends while no release has reserved it leaves the queue: later
// releases neither hand it the lock nor wait for it.
func TestHandoffSkipsWaitersThatLeft(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		c, rdb := newClient(t, b.Addr)
		a, gone, stays := c.Lock("left"), c.Lock("left"), c.Lock("left")
		if err := a.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		goneCtx, cancel := context.WithCancel(ctx)
		goneDone := startLock(goneCtx, gone)
		settled(t, c, "left", 1)
		staysDone := startLock(ctx, stays)
		settled(t, c, "left", 2)
		cancel()
		if err := <-goneDone; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled waiter: %v, want context.Canceled", err)
		}
		if err := a.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		await(t, staysDone, "remaining waiter handed the lock")
		if held, _ := gone.IsHeld(ctx); held {
			t.Fatal("the waiter that left holds the lock")
		}
		if err := stays.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if exists(t, rdb, "left") {
			t.Fatal("lock alive after the last unlock")
		}
	})
}

// A waiting handle whose last unlock has an unknown outcome is not handed the lock: it takes
// it through its own acquire script, which first raises its latch's mark so that a late run
// of that unlock cannot release the hold. Nor does it queue behind the waiters without an
// attempt: it may hold the lock in Redis without knowing.
func TestHandoffSkipsHandleWithUnknownUnlock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		c, rdb := newClient(t, b.Addr)
		sub := rawSubscribe(t, ctx, rdb, lockChannel("unsure"))
		a, first, unsure := c.Lock("unsure"), c.Lock("unsure"), c.Lock("unsure")
		for range 3 { // unlock requests 1..3; pretend the third one's outcome is unknown
			must(t, unsure.Lock(ctx))
			must(t, unsure.Unlock(ctx))
		}
		unsure.op.Lock()
		unsure.fences = []latchFence{{key: unsure.latch, n: "3"}}
		unsure.op.Unlock()
		must(t, a.Lock(ctx))
		firstDone := startLock(ctx, first)
		settled(t, c, "unsure", 1)
		unsureDone := startLock(ctx, unsure) // attempts (raising its mark), then waits
		settledHeirs(t, c, "unsure", 2, 1)
		sub.published(t, ctx)

		must(t, a.Unlock(ctx))
		await(t, firstDone, "first handed the lock")
		sub.quiet(t, ctx, "hand-off a → first")
		must(t, first.Unlock(ctx))
		await(t, unsureDone, "the unsure handle took the lock")
		if got := sub.published(t, ctx); len(got) != 1 {
			t.Fatalf("release published %q: want a free (one message), not a hand-off", got)
		}
		if v, err := rdb.Do(ctx, rdb.B().Get().Key(unsure.latch).Build()).ToString(); err != nil || v != "3" {
			t.Fatalf("latch %q (%v), want the mark raised to 3", v, err)
		}
		must(t, unsure.Unlock(ctx))
	})
}

// A hand-off of a lock that is already gone from Redis (deleted behind the holder's back,
// without a message) hands over nothing: the releaser's Unlock reports the loss, and the
// heir — told it held the lock when the release was sent — has its lease reported lost by
// the time that Unlock returns, and its own Unlock reports the loss too. The lock is free.
func TestHandoffOfLostLockLosesHeir(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "handoff-lost"
		c, rdb := newClient(t, b.Addr)
		other, _ := newClient(t, b.Addr)
		l, h := c.Lock(name), c.Lock(name)
		must(t, l.Lock(ctx))
		hDone := startLock(ctx, h)
		settled(t, c, name, 1)
		must(t, rdb.Do(ctx, rdb.B().Del().Key(name).Build()).Error())

		if err := l.Unlock(ctx); !errors.Is(err, ErrLockLost) {
			t.Fatalf("releaser's Unlock: %v, want ErrLockLost", err)
		}
		await(t, hDone, "heir handed the lock")
		if !isClosed(h.Lost()) {
			t.Fatal("heir's lease not reported lost after a hand-off that Redis did not record")
		}
		if err := h.Unlock(ctx); !errors.Is(err, ErrLockLost) {
			t.Fatalf("heir's Unlock: %v, want ErrLockLost", err)
		}
		if ok, err := other.Lock(name).TryLock(ctx); err != nil || !ok {
			t.Fatalf("another Client cannot take the free lock (TryLock %v, %v)", ok, err)
		}
	})
}

// A releaser whose lease is close to its end does not hand the lock on (the heir's hold would
// rest on that lease until Redis records the hand-off): it frees the lock and publishes, and
// the waiter takes it by its own attempt.
func TestNoHandoffNearLeaseEnd(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "handoff-near-end"
		c, rdb := newClient(t, b.Addr)
		sub := rawSubscribe(t, ctx, rdb, lockChannel(name))
		l, h := c.Lock(name), c.Lock(name)
		must(t, l.Lock(ctx, Lease(time.Minute)))
		hDone := startLock(ctx, h)
		settled(t, c, name, 1)
		sub.published(t, ctx)
		// As far as the handle knows, the lease ends in less than handoffMinLeft (Redis still
		// gives it a minute: only the handle's knowledge decides).
		l.op.Lock()
		l.lease.Reset(time.Now().Add(-time.Minute+handoffMinLeft/2), time.Minute, false)
		l.op.Unlock()

		must(t, l.Unlock(ctx))
		await(t, hDone, "waiter took the lock")
		if got := sub.published(t, ctx); len(got) != 1 {
			t.Fatalf("release published %q: want a free (one message), not a hand-off", got)
		}
		if n, err := h.HoldCount(ctx); n != 1 || err != nil {
			t.Fatalf("waiter's hold count %d (%v), want 1", n, err)
		}
		must(t, h.Unlock(ctx))
	})
}
