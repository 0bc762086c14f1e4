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
	"github.com/latchkey/latchkey/lua"
	"github.com/redis/rueidis"
)

// parked waits until every heir of channel is parked and no wake-up is pending.
func parked(t *testing.T, c *Client, s *Semaphore, n int) {
	t.Helper()
	channel := s.q.clientCh
	eventually(t, waitFor, "the waiters parked", func() bool {
		c.permitHeirs.mu.Lock()
		defer c.permitHeirs.mu.Unlock()
		if len(c.permitHeirs.queue[s.q.channel]) != n {
			return false
		}
		for _, h := range c.permitHeirs.queue[s.q.channel] {
			if h.state.Load() != heirParked {
				return false
			}
		}
		return c.mux.Subscribed(channel) && c.mux.Pending(channel) == 0
	})
}

// A waiter handed permits after its attempt found some in Redis, too few for it, wakes the
// waiter behind it: a hand-off sends no message, and that one, which never attempted (it
// was not first), would otherwise wait for its 30 s re-check although Redis has the permit
// it wants.
func TestSemaphoreHandoffWakesNextWaiter(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		const name = "r2-strand"
		c, _ := newClient(t, b.Addr)
		s := c.Semaphore(name)
		must(t, s.SetPermits(ctx, 1)) // one permit in Redis
		big := make(chan error, 1)
		go func() { big <- c.Semaphore(name).Acquire(ctx, 2) }() // cannot be served: 1 < 2
		waitersOn(t, c, s.q.clientCh, 1)
		smallCtx, cancel := context.WithTimeout(ctx, waitFor) // its re-check is 30 s away
		defer cancel()
		small := make(chan error, 1)
		go func() { small <- c.Semaphore(name).Acquire(smallCtx, 1) }() // queued behind big
		waitersOn(t, c, s.q.clientCh, 2)
		parked(t, c, s, 2)
		must(t, s.Release(ctx, 2)) // handed to big locally: no script, no message
		if err := <-big; err != nil {
			t.Fatalf("big: %v", err)
		}
		if err := <-small; err != nil {
			t.Fatalf("small (wants 1, Redis has 1) not served within %v (its re-check is 30 s away): %v", waitFor, err)
		}
	})
}

// The heirs' queue can lag the channel's order: a waiter that Listens (the channel lingering
// subscribed) is first on the channel but joins the heirs only after its attempt's round
// trip; a later waiter that Joins meanwhile is queued as heir first. A local Release must
// not hand it the permits: a small request would overtake a large one ahead of it.
func TestSemaphoreHandoffFollowsChannelOrder(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		if b.Name != redistest.NameRedis {
			t.Skip("needs a server busy in a script")
		}
		ctx := testCtx(t, 10*time.Second)
		const name = "r2-overtake"
		c, rdb := newClient(t, b.Addr)
		s := c.Semaphore(name)
		must(t, s.SetPermits(ctx, 0))
		// Subscribe the channel and leave it lingering.
		spy, err := c.mux.Subscribe(s.q.clientCh, semaphorePolicy)
		must(t, err)
		eventually(t, waitFor, "subscribed", func() bool { return c.mux.Subscribed(s.q.clientCh) })
		spy.Close()
		// Redis busy for a while: the large request's first attempt is slow.
		sleeper := redistest.ClientFor(t, b.Addr)
		busy := "local t0 = redis.call('TIME'); local s0 = t0[1]*1e6 + t0[2]; " +
			"for i = 1, 1e9 do local t = redis.call('TIME'); if t[1]*1e6 + t[2] - s0 > 500000 then break end end; return 1"
		must(t, sleeper.Do(ctx, sleeper.B().Ping().Build()).Error())
		go sleeper.Do(context.Background(), sleeper.B().Eval().Script(busy).Numkeys(0).Build())
		time.Sleep(50 * time.Millisecond)
		_ = rdb
		order := make(chan string, 2)
		go func() {
			if err := c.Semaphore(name).Acquire(ctx, 2); err == nil {
				order <- "large"
			}
		}()
		waitersOn(t, c, s.q.clientCh, 1) // listening, its attempt on its way
		go func() {
			if err := c.Semaphore(name).Acquire(ctx, 1); err == nil {
				order <- "small"
			}
		}()
		waitersOn(t, c, s.q.clientCh, 2)
		eventually(t, waitFor, "small queued as heir", func() bool {
			c.permitHeirs.mu.Lock()
			defer c.permitHeirs.mu.Unlock()
			return len(c.permitHeirs.queue[s.q.channel]) == 1
		})
		must(t, s.Release(ctx, 1)) // must go to Redis (the first waiter wants 2), not to small
		select {
		case who := <-order:
			t.Fatalf("%s served by a release of 1 while the large request (arrived first) waits", who)
		case <-time.After(700 * time.Millisecond):
		}
	})
}

// The count of hand-offs in a row goes with a semaphore's last waiter: with many short-lived
// semaphore names it would otherwise only grow.
func TestSemaphoreHandoffRunsForgotten(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		c, _ := newClient(t, b.Addr)
		for i := range 20 {
			name := "r2-runs-" + string(rune('a'+i))
			s := c.Semaphore(name)
			must(t, s.SetPermits(ctx, 0))
			got := make(chan error, 1)
			go func() { got <- c.Semaphore(name).Acquire(ctx, 1) }()
			parked(t, c, s, 1)
			must(t, s.Release(ctx, 1))
			must(t, <-got)
		}
		eventually(t, waitFor, "heirs removed", func() bool {
			c.permitHeirs.mu.Lock()
			defer c.permitHeirs.mu.Unlock()
			return len(c.permitHeirs.queue) == 0
		})
		c.permitHeirs.mu.Lock()
		n := len(c.permitHeirs.runs)
		c.permitHeirs.mu.Unlock()
		if n != 0 {
			t.Errorf("permitHeirs.runs holds %d entries with no waiter left", n)
		}
	})
}

// A busyWaiter is a Client whose one waiter of a semaphore with no permits has an attempt
// of its own on its way (held back), while Redis is given redisHas permits: a Release then
// meets the waiter busy.
type busyWaiter struct {
	c        *Client
	s        *Semaphore
	admin    rueidis.Client
	got      <-chan error  // the waiter's TryAcquire: nil once acquired
	releases *atomic.Int32 // release scripts sent
	proceed  func()        // lets the attempt go on
}

func newBusyWaiter(t *testing.T, ctx context.Context, b *redistest.Backend, name string, redisHas int) *busyWaiter {
	t.Helper()
	var hold atomic.Bool
	w := &busyWaiter{releases: new(atomic.Int32), admin: b.Client(t)}
	entered, proceed := make(chan struct{}, 1), make(chan struct{})
	w.proceed = func() { close(proceed) }
	rdb := newHookedRDB(t, b.Addr)
	rdb.hook = func(_ context.Context, cmd rueidis.Completed) (rueidis.RedisResult, bool) {
		switch sha(cmd) {
		case shaOf(lua.SemAcquire{}):
			if hold.CompareAndSwap(true, false) {
				entered <- struct{}{}
				<-proceed
			}
		case shaOf(lua.SemRelease{}):
			w.releases.Add(1)
		}
		return rueidis.RedisResult{}, false
	}
	c, err := New(rdb)
	must(t, err)
	t.Cleanup(func() { c.Close() })
	w.c, w.s = c, c.Semaphore(name)
	must(t, w.s.SetPermits(ctx, 0))
	got := make(chan error, 1)
	w.got = got
	go func() {
		ok, err := c.Semaphore(name).TryAcquire(ctx, 1, WaitTime(time.Minute))
		if err == nil && !ok {
			err = errors.New("not acquired")
		}
		got <- err
	}()
	parked(t, c, w.s, 1)
	hold.Store(true)
	c.mux.Wake(w.s.q.clientCh) // the waiter attempts again
	signalled(t, ctx, entered, "the waiter's attempt held")
	must(t, w.admin.Do(ctx, w.admin.B().Set().Key(name).Value(strconv.Itoa(redisHas)).Build()).Error())
	return w
}

// permits waits until Redis holds want permits of name.
func (w *busyWaiter) permits(t *testing.T, ctx context.Context, name string, want int64, why string) {
	t.Helper()
	eventually(t, waitFor, fmt.Sprintf("%d permit(s) in Redis (%s)", want, why), func() bool {
		n, err := w.admin.Do(ctx, w.admin.B().Get().Key(name).Build()).AsInt64()
		return err == nil && n == want
	})
}

// A local Release while the Client's first waiter is busy with an attempt of its own hands it
// the permits rather than send them to Redis, which would wake the waiter to attempt again:
// an attempt that finds too few takes them, and one that finds enough in Redis passes them
// on. Either way every permit is accounted for: held by the waiter or back in Redis.
func TestSemaphoreHandoffToWaiterBusyAttempting(t *testing.T) {
	t.Parallel()
	for _, redisHas := range []int{0, 1} {
		redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
			ctx := testCtx(t, 10*time.Second)
			name := fmt.Sprintf("busy-heir-%d", redisHas)
			w := newBusyWaiter(t, ctx, b, name, redisHas)
			must(t, w.s.Release(ctx, 1))
			if n := w.releases.Load(); n != 0 {
				t.Fatalf("%d release scripts for a Release while the Client's waiter attempted, want 0 (handed to it)", n)
			}
			w.proceed()
			if err := <-w.got; err != nil {
				t.Fatalf("the waiter: %v", err)
			}
			// The waiter holds one permit; Redis has what it had (the waiter took it, and the
			// handed one went back).
			w.permits(t, ctx, name, int64(redisHas), "the waiter holding one")
		})
	}
}

// A local release passes over the Client's first waiter while a wake is on its way to it —
// Redis has permits for it, which it is about to attempt for — and serves the next; the
// waiter it serves leaves the channel at once. Otherwise a wake rides the queue in front of
// the local releases: each waiter it reaches has been handed permits before it runs, passes
// the wake on, and the permits in Redis wait for the next release to Redis.
func TestSemaphoreHandoffPassesOverAWokenWaiter(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		c, _ := newClient(t, b.Addr)
		s := c.Semaphore("handoff-woken")
		ch := s.q.clientCh
		hs := make([]*permitsHeir, 3)
		for i := range hs {
			sub, err := c.mux.Subscribe(ch, semaphorePolicy)
			must(t, err)
			t.Cleanup(sub.Close)
			hs[i] = &permitsHeir{heir: heir{key: s.q.channel, sub: sub}, permits: 1}
			c.permitHeirs.add(hs[i])
		}
		eventually(t, waitFor, "subscribed", func() bool { return c.mux.Subscribed(ch) })
		for _, h := range hs {
			select { // the subscription's confirmation
			case <-h.sub.C():
			default:
			}
		}
		c.mux.Wake(ch) // the first is woken, and has not run yet
		if !c.permitHeirs.give(s.q.channel, 1, DefaultLocalHandoff) {
			t.Fatal("a release of 1 with three waiters for 1 was not handed on")
		}
		if st := hs[0].state.Load(); st != heirParked {
			t.Errorf("the woken first waiter is in state %d, want parked: it attempts for Redis's permits", st)
		}
		if st := hs[1].state.Load(); st != heirReserved {
			t.Fatalf("the second waiter is in state %d, want reserved (handed the permit)", st)
		}
		if v := <-hs[1].verdict; !v.handed {
			t.Fatalf("the second waiter's verdict %+v, want handed", v)
		}
		if place, _ := hs[1].sub.Place(); place != -1 || c.mux.Waiters(ch) != 2 {
			t.Fatalf("the served waiter is at place %d of the channel's %d waiters; want it gone", place, c.mux.Waiters(ch))
		}
		// A wake it took and cannot use goes on to one still waiting.
		<-hs[0].sub.C()
		hs[1].sub.Requeue()
		if place, woken := hs[0].sub.Place(); place != 0 || !woken {
			t.Fatalf("the first waiter (place %d) has no wake after the served one gave its back", place)
		}
	})
}
