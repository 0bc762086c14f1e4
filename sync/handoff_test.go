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
	c.lockHeirs.mu.Lock()
	defer c.lockHeirs.mu.Unlock()
	n := 0
	for _, h := range c.lockHeirs.queue[name] {
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
// state must hold across two looks 10 ms apart — a guess, which a loaded machine defeats
// (the woken waiter can wait longer than that for a CPU): a test whose verdict depends on
// the waiter not attempting again starts it with startHeir, which waits for an event.
func settled(t *testing.T, c *Client, name string, n int) {
	t.Helper()
	settledHeirs(t, c, name, n, n)
}

// settledHeirs is settled for n waiters of which heirs are queued to be handed the lock (a
// handle with a request of unknown outcome waits, but not as an heir).
func settledHeirs(t *testing.T, c *Client, name string, n, heirs int) {
	t.Helper()
	channel := waitChannel(c, name)
	quiet := func() bool {
		// The listener's subscription to the lock's channel is confirmed, and the check it
		// wakes a waiter for is done.
		listens := mustGet(t, c.rdb, listenerKey(name)) != c.lockToken || c.mux.Subscribed(lockChannel(name))
		return listens && c.mux.Subscribed(channel) && c.mux.Pending(channel) == 0 && c.mux.Waiters(channel) == n &&
			(c.maxHandoff == 0 || parkedHeirs(c, name) == heirs)
	}
	eventually(t, waitFor, fmt.Sprintf("%d waiters of %s parked (%d heirs)", n, name, heirs), func() bool {
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
// (miniredis orders a pattern's messages only among themselves: with a pattern, the fence
// is heard on both paths.)
type rawSub struct {
	rdb     rueidis.Client
	channel string
	fences  int // the fence messages one publish on the fence channel brings
	msgs    chan rueidis.PubSubMessage
}

const fenceChannel = "test:fence"

func rawSubscribe(t *testing.T, ctx context.Context, rdb rueidis.Client, channel string) *rawSub {
	t.Helper()
	return rawSubscribeAlso(t, ctx, rdb, channel, "")
}

// rawSubscribeAlso is rawSubscribe that also sees the channels matching pattern ("": none).
func rawSubscribeAlso(t *testing.T, ctx context.Context, rdb rueidis.Client, channel, pattern string) *rawSub {
	t.Helper()
	sub, cancel := rdb.Dedicate()
	t.Cleanup(cancel)
	s := &rawSub{rdb: rdb, channel: channel, fences: 1, msgs: make(chan rueidis.PubSubMessage, 64)}
	sub.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(m rueidis.PubSubMessage) { s.msgs <- m }})
	if err := sub.Do(ctx, sub.B().Subscribe().Channel(channel, fenceChannel).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if pattern != "" {
		if err := sub.Do(ctx, sub.B().Psubscribe().Pattern(pattern, fenceChannel).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		s.fences = 2
	}
	return s
}

// published returns the messages published on the lock channel since the last call; one
// on another channel (see rawSubscribeAlso) comes as "<channel> <payload>".
func (s *rawSub) published(t *testing.T, ctx context.Context) []string {
	t.Helper()
	if err := s.rdb.Do(ctx, s.rdb.B().Publish().Channel(fenceChannel).Message("x").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	var got []string
	fences := 0
	for {
		select {
		case m := <-s.msgs:
			if m.Channel == fenceChannel {
				if fences++; fences == s.fences {
					return got
				}
				continue
			}
			if m.Channel != s.channel {
				m.Message = m.Channel + " " + m.Message
			}
			got = append(got, m.Message)
		case <-time.After(waitFor):
			t.Fatalf("fence message not delivered within %v", waitFor)
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
	ms := heir.o.c.wdMs
	return []byte(heir.Owner() + "\r\n$" + strconv.Itoa(len(ms)) + "\r\n" + ms)
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

func startLossyRelay(t *testing.T, ctx, heirCtx context.Context, b *redistest.Backend, name string, opts ...Option) lossyRelay {
	t.Helper()
	r := lossyRelay{proxy: redistest.NewProxy(t, b.Addr), admin: b.Client(t)}
	r.c, _ = newClient(t, r.proxy.Addr(), opts...)
	attempts := countAttempts(r.c)
	warmScripts(t, ctx, r.c)
	r.holder, r.heir = r.c.Lock(name), r.c.Lock(name)
	if err := r.holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	r.heirDone = startHeir(t, heirCtx, r.c, r.heir, attempts)
	r.proxy.DropReplyAfter(handoffMarker(r.heir))
	return r
}

// startHeir starts mu.Lock (see startLock) as the first waiter of mu's lock on c, whose
// acquire replies attempts counts (countAttempts), and returns once the waiter is parked
// for good: it makes no attempt of its own again until a release or a message wakes it, so
// that a release finds it parked, and its owner as the test left it.
//
// The first waiter on a channel not yet subscribed attempts twice: first, and when the
// confirmation of its subscription wakes it, the one wake-up it gets unasked. Only its
// second attempt is waited for; settled's two looks alone would take a waiter that has
// taken the confirmation's wake-up but not yet run (for longer than 10 ms on a loaded
// machine) for parked, and it would attempt later — settling its owner's unknown
// release, say, after the test found it unsettled.
func startHeir(t *testing.T, ctx context.Context, c *Client, mu *Lock, attempts *atomic.Int64) <-chan error {
	t.Helper()
	ch := waitChannel(c, mu.Name())
	if c.mux.Subscribed(ch) || c.mux.Waiters(ch) != 0 {
		t.Fatalf("startHeir: %s has waiters or is subscribed already: the waiter would not attempt twice", ch)
	}
	before := attempts.Load()
	done := startLock(ctx, mu)
	eventually(t, waitFor, "the waiter's two attempts", func() bool { return attempts.Load()-before >= 2 })
	settled(t, c, mu.Name(), 1)
	return done
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
	case <-time.After(waitFor):
		t.Fatalf("%s: not within %v", what, waitFor)
	}
}

// mustNil fails the test on a non-nil error.

// A release hands the lock to the longest-waiting local waiter in its own script: the
// heir holds it at once, in Redisson's layout, and nothing is published, since the lock was
// never free. The last release, with nobody left waiting, frees it and publishes.
func TestHandoffToLongestWaitingLocalWaiter(t *testing.T) {
	t.Parallel()
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
		if got := sub.published(t, ctx); len(got) != 1 || got[0] != "00" {
			t.Fatalf("the last release, with no local waiter, published %q; want [00] (Redisson reads 0)", got)
		}
		if exists(t, rdb, "relay") {
			t.Fatal("lock alive after the last unlock")
		}
	})
}

// A lock handed over under the watchdog is kept by it, and one handed over with an explicit
// lease gets that lease and is not renewed.
func TestHandoffLeases(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		// Renewals every 2 s keep a 6 s lease with 4 s to spare on a loaded machine (a 1.5 s
		// lease ran out before a slow acquisition returned under two CPU hogs).
		const timeout = 6 * time.Second
		ctx := testCtx(t, 60*time.Second)
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
		// Both servers expire keys in real time: the watchdog must renew past the lease the
		// hand-off set.
		handed := time.Now()
		for time.Since(handed) < timeout+timeout/3 {
			if !exists(t, rdb, "leases") {
				t.Fatalf("handed-over lock expired %v after the hand-off: not kept by the watchdog", time.Since(handed))
			}
			time.Sleep(100 * time.Millisecond) // an expired key stays gone: no need to look more often
		}
		if held, err := kept.IsHeld(ctx); !held || err != nil {
			t.Fatalf("handed-over lock not kept by the watchdog past its lease: %v, %v", held, err)
		}
		if closed(kept.Lost()) {
			t.Fatal("Lost closed while the handed-over lock was kept")
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
	t.Parallel()
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
					case <-time.After(waitFor):
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
// the lock while the first Client's workers keep contending for it. Real Redis only: the
// holds take real time, and miniredis serialises every command through one lock.
func TestHandoffDoesNotStarveOtherClients(t *testing.T) {
	t.Parallel()
	b := redistest.Redis(t)
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
				time.Sleep(time.Millisecond) // the work done under the lock
				loops.Add(1)
				if err := mu.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	eventually(t, waitFor, "the busy Client contending", func() bool { return loops.Load() > 50 })
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
}

// A hand-off whose reply is lost is repeated with the same request number and reported as
// done: the releaser has let go, the heir holds the lock once — even when the heir's context
// ends while the release is repeating, since the lock was already its.
func TestHandoffReplyLost(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		heirCtx, cancelHeir := context.WithCancel(ctx)
		defer cancelHeir()
		r := startLossyRelay(t, ctx, heirCtx, b, "lossy-relay")
		proxy, admin, a, heirMu, done := r.proxy, r.admin, r.holder, r.heir, r.heirDone
		unlocked := make(chan error, 1)
		go func() { unlocked <- a.Unlock(ctx) }()
		eventually(t, waitFor, "release reply dropped", func() bool { return proxy.Dropped() == 1 })
		cancelHeir() // while the releaser backs off before its repeat
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
	t.Parallel()
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

// A waiting handle whose last unlock has an unknown outcome is not handed the lock, nor does
// it queue behind the waiters without an attempt: it may hold the lock in Redis without
// knowing. Its own attempt first repeats (settles) that unlock — which, on the owner's latch,
// replies what its first run did and changes nothing — and then waits; the release that finds
// no other heir frees the lock and publishes, and the handle takes it by its own attempt.
func TestHandoffSkipsHandleWithUnknownUnlock(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "unsure"
		proxy := redistest.NewProxy(t, b.Addr)
		// No retry budget: a lost reply is at once an unknown outcome.
		c, _ := newClient(t, proxy.Addr(), WithRetryBudget(0))
		admin := b.Client(t)
		warmScripts(t, ctx, c)
		sub := rawSubscribe(t, ctx, admin, lockChannel(name))
		a, first, unsure := c.Lock(name), c.Lock(name), c.Lock(name, Reentrant())
		must(t, unsure.Lock(ctx))
		proxy.DropReplyAfter([]byte(unlockLatchPrefix))
		if err := unsure.Unlock(ctx); !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("unlock with a lost reply and no retry budget: %v, want ErrOutcomeUnknown", err)
		}
		if proxy.Dropped() != 1 {
			t.Fatalf("the proxy dropped %d replies, want 1", proxy.Dropped())
		}
		unsettled := func() bool {
			must(t, unsure.o.lock(ctx))
			defer unsure.o.unlock()
			return unsure.o.unsettled != nil
		}
		if !unsettled() {
			t.Fatal("an unlock of unknown outcome was not kept for settling")
		}
		latch := unsure.o.latch
		mark := func() string {
			v, err := admin.Do(ctx, admin.B().Get().Key(latch).Build()).ToString()
			must(t, err)
			return v
		}
		if m := mark(); m != "1" {
			t.Fatalf("latch mark %q after the unknown unlock, want 1: its first run acted", m)
		}
		if got := sub.published(t, ctx); len(got) != 1 || got[0] != "00" {
			t.Fatalf("the unknown unlock's first run published %q, want [00]: it freed the lock", got)
		}

		must(t, a.Lock(ctx))
		firstDone := startLock(ctx, first)
		settled(t, c, name, 1)
		unsureDone := startLock(ctx, unsure) // attempts (settling its unlock), then waits
		settledHeirs(t, c, name, 2, 1)
		if unsettled() {
			t.Fatal("the unsure handle waits without having settled its unlock: it queued without an attempt")
		}
		if m := mark(); m != "1" {
			t.Fatalf("latch mark %q after the settling repeat, want 1", m)
		}
		sub.quiet(t, ctx, "the settling repeat of a release that freed the lock")

		must(t, a.Unlock(ctx))
		await(t, firstDone, "first handed the lock")
		sub.quiet(t, ctx, "hand-off a → first")
		must(t, first.Unlock(ctx))
		await(t, unsureDone, "the unsure handle took the lock")
		if got := sub.published(t, ctx); len(got) != 1 {
			t.Fatalf("release published %q: want a free (one message), not a hand-off", got)
		}
		if n, err := unsure.HoldCount(ctx); n != 1 || err != nil {
			t.Fatalf("the unsure handle's hold count %d (%v), want 1", n, err)
		}
		must(t, unsure.Unlock(ctx))
		if exists(t, admin, name) {
			t.Fatal("lock alive after the last unlock")
		}
	})
}

// A hand-off of a lock that is already gone from Redis (deleted behind the holder's back,
// without a message) hands over nothing: the releaser's Unlock reports the loss, and the
// heir, told by the release's reply that it was not handed the lock, makes its own attempt.
// When the lock is free it takes it — a real hold, kept and released as any other; when
// another Client took it meanwhile, the heir waits for that holder's release.
func TestHandoffOfLostLockHeirAttemptsItself(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		for _, taken := range []bool{false, true} {
			t.Run(fmt.Sprintf("takenByOther=%v", taken), func(t *testing.T) {
				ctx := testCtx(t, 20*time.Second)
				name := fmt.Sprintf("handoff-lost-%v", taken)
				c, rdb := newClient(t, b.Addr)
				other, _ := newClient(t, b.Addr)
				l, h := c.Lock(name), c.Lock(name)
				must(t, l.Lock(ctx))
				attempts := countAttempts(c)
				hDone := startLock(ctx, h)
				settled(t, c, name, 1)
				// And its two attempts answered (its first, and the one its subscription's
				// confirmation wakes): one still on its way would take the lock deleted below
				// before the other Client could (a loaded machine made it that late).
				eventually(t, waitFor, "the heir's two attempts answered", func() bool { return attempts.Load() >= 2 })
				must(t, rdb.Do(ctx, rdb.B().Del().Key(name).Build()).Error())
				o := other.Lock(name)
				if taken {
					if ok, err := o.TryLock(ctx); !ok || err != nil {
						t.Fatalf("another Client cannot take the deleted lock (TryLock %v, %v)", ok, err)
					}
				}

				if err := l.Unlock(ctx); !errors.Is(err, ErrLockLost) {
					t.Fatalf("releaser's Unlock: %v, want ErrLockLost", err)
				}
				if !isClosed(l.Lost()) {
					t.Fatal("releaser's Lost not closed after its Unlock found the lock gone")
				}
				if taken {
					// The heir's attempt found the other holder: it waits, as any waiter.
					settled(t, c, name, 1)
					select {
					case err := <-hDone:
						t.Fatalf("heir's Lock returned (%v) while another Client holds the lock", err)
					default:
					}
					if n := mustInt(t, rdb.Do(ctx, rdb.B().Hget().Key(name).Field(o.Owner()).Build())); n != 1 {
						t.Fatalf("the other Client's hold count %d, want 1", n)
					}
					must(t, o.Unlock(ctx))
				}
				await(t, hDone, "heir took the lock by its own attempt")
				if n, err := h.HoldCount(ctx); n != 1 || err != nil {
					t.Fatalf("heir's hold count %d (%v), want 1", n, err)
				}
				if isClosed(h.Lost()) || !h.Valid() {
					t.Fatal("heir's hold, taken by its own attempt, reported lost")
				}
				must(t, h.Unlock(ctx))
				if exists(t, rdb, name) {
					t.Fatal("lock alive after the heir's unlock")
				}
				if ok, err := o.TryLock(ctx); err != nil || !ok {
					t.Fatalf("another Client cannot take the free lock (TryLock %v, %v)", ok, err)
				}
				must(t, o.Unlock(ctx))
			})
		}
	})
}

// A releaser whose lease is near its end still hands the lock on: the release script gives
// the heir its own lease in the same call, so the heir's hold does not rest on what was left
// of the releaser's. (This replaces the rule that such a releaser freed the lock instead.)
func TestHandoffNearLeaseEndGivesHeirItsOwnLease(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		ctx := testCtx(t, 20*time.Second)
		const name = "handoff-near-end"
		c, rdb := newClient(t, b.Addr)
		sub := rawSubscribe(t, ctx, rdb, lockChannel(name))
		l, h := c.Lock(name), c.Lock(name)
		// Half of it left, 4 s: the release comes well before the end on a loaded machine (a
		// 2 s lease with 1.5 s left ran out before it under two CPU hogs).
		const lease = 8 * time.Second
		must(t, l.Lock(ctx, Lease(lease)))
		hDone := startLock(ctx, h)
		settled(t, c, name, 1)
		sub.published(t, ctx)
		eventually(t, waitFor, "releaser's lease near its end", func() bool {
			return pttl(t, rdb, name) < lease.Milliseconds()/2
		})

		must(t, l.Unlock(ctx))
		await(t, hDone, "heir handed the lock")
		sub.quiet(t, ctx, "hand-off near the releaser's lease end")
		if ttl := pttl(t, rdb, name); ttl <= lease.Milliseconds() || ttl > DefaultWatchdogTimeout.Milliseconds() {
			t.Fatalf("PTTL %d after the hand-off, want the heir's watchdog lease (%v)", ttl, DefaultWatchdogTimeout)
		}
		if d, ok := h.Deadline(); !ok || time.Until(d) < DefaultWatchdogTimeout-5*time.Second {
			t.Fatalf("heir's deadline %v ahead (%v), want its own watchdog lease", time.Until(d), ok)
		}
		if n, err := h.HoldCount(ctx); n != 1 || err != nil {
			t.Fatalf("heir's hold count %d (%v), want 1", n, err)
		}
		must(t, h.Unlock(ctx))
	})
}

// A local hand-off never goes to a waiting handle whose owner is busy: an Unlock of that
// handle holding nothing, in flight when the hand-off is made, would free the handed hold and
// return nil. Two goroutines share handle h: one waits in h.Lock behind holder a, the other's
// h.Unlock (count 0) is held back before it is sent while a releases. The lock is freed and
// published, h's Unlock finds it not held, and h's waiter takes the lock by its own attempt.
func TestNoHandoffToBusyHandle(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		const name = "no-handoff-busy"
		var h *Lock
		var hold atomic.Int32
		entered, release := make(chan struct{}), make(chan struct{})
		rdb := &hookedRDB{Client: redistest.ClientFor(t, b.Addr)}
		rdb.hook = func(ctx context.Context, cmd rueidis.Completed) (rueidis.RedisResult, bool) {
			if hold.Load() == 1 && isReleaseOf(cmd, h.Owner()) && hold.CompareAndSwap(1, 0) {
				close(entered)
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return rueidis.RedisResult{}, false
		}
		c, err := New(rdb)
		must(t, err)
		t.Cleanup(func() { c.Close() })
		admin := b.Client(t)
		other, _ := newClient(t, b.Addr)
		sub := rawSubscribe(t, ctx, admin, lockChannel(name))
		a := c.Lock(name, Reentrant())
		h = c.Lock(name, Reentrant())
		must(t, a.Lock(ctx))
		hDone := startLock(ctx, h) // G1: waits as an heir
		settled(t, c, name, 1)
		sub.published(t, ctx)

		hold.Store(1)
		unlocked := make(chan error, 1)
		go func() { unlocked <- h.Unlock(ctx) }() // G2: holds nothing
		select {
		case <-entered:
		case <-time.After(waitFor):
			t.Fatalf("h's Unlock not sent within %v", waitFor)
		}
		must(t, a.Unlock(ctx)) // while h's Unlock is in flight
		close(release)
		select {
		case err := <-unlocked:
			if !errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLockLost) {
				t.Fatalf("h.Unlock of a handle holding nothing: %v, want ErrNotHeld — it must not free a hold "+
					"handed to h meanwhile", err)
			}
		case <-time.After(waitFor):
			t.Fatalf("h's Unlock not done within %v", waitFor)
		}
		await(t, hDone, "h's waiter takes the lock")
		if n := hget(t, ctx, admin, name, h.Owner()); n != 1 || !h.Valid() {
			t.Fatalf("h's hold count in Redis %d, Valid %v; want 1, true", n, h.Valid())
		}
		if got := sub.published(t, ctx); len(got) != 1 {
			t.Fatalf("a's release published %q: want the lock freed (one message), not handed to h", got)
		}
		if ok, err := other.Lock(name, Reentrant()).TryLock(ctx); ok || err != nil {
			t.Fatalf("another Client's TryLock while h holds the lock: %v, %v; want false, nil", ok, err)
		}
		must(t, h.Unlock(ctx))
		if exists(t, admin, name) {
			t.Fatal("lock alive after h's Unlock")
		}
	})
}
