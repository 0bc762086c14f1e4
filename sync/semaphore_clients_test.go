package sync

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/names"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/lua"
	"github.com/redis/rueidis"
)

// A semaphore's change wakes one waiting Client, not one waiter in every Client: waiting
// Clients register in {name}:sem_clients with what their first waiter wants
// ({name}:sem_clients:wants), and a change that leaves permits wakes the first-registered one
// those permits can serve, on its own channel. Java's waiters hear the total on Redisson's
// channel, with a leading 0; one latchkey Client, the listener, carries what Java publishes
// there to its waiters.

// semRegistered returns the tokens of the Clients registered as waiting on the semaphore
// name, in order.
func semRegistered(t *testing.T, rdb rueidis.Client, name string) []string {
	t.Helper()
	tokens, err := rdb.Do(context.Background(), rdb.B().Zrange().Key(names.Suffix(name, "sem_clients")).Min("0").Max("-1").Build()).AsStrSlice()
	must(t, err)
	return tokens
}

// semWaiter is a Client with one waiter on a semaphore, registered and subscribed.
type semWaiter struct {
	c        *Client
	s        *Semaphore
	done     <-chan error
	attempts *atomic.Int64
	base     int64 // its attempts once it waited
}

// startSemWaiters starts one Client per want, each with a waiter wanting that many permits
// of the semaphore name, registered in turn: each is registered, subscribed and done with
// its attempts before the next starts.
func startSemWaiters(t *testing.T, ctx context.Context, b *redistest.Backend, rdb rueidis.Client, name string, wants ...int) []*semWaiter {
	t.Helper()
	var ws []*semWaiter
	var tokens []string
	for _, want := range wants {
		// Registrations are ordered by server time: one made in the same tick as the last
		// (miniredis's clock moves in steps of a few ms) may go either side of it.
		last := serverMs(t, rdb)
		eventually(t, waitFor, "the server's clock moving on", func() bool { return serverMs(t, rdb) > last })
		c, _ := newClient(t, b.Addr, fairSlow()...)
		w := &semWaiter{c: c, s: c.Semaphore(name), attempts: countAttempts(c)}
		done := make(chan error, 1)
		go func() { done <- w.s.Acquire(ctx, want) }()
		w.done = done
		tokens = append(tokens, c.lockToken)
		// Its attempt once subscribed registers it, and is its last until something wakes it.
		eventually(t, waitFor, "waiter "+strconv.Itoa(len(ws))+" registered and subscribed", func() bool {
			return slices.Equal(semRegistered(t, rdb, name), tokens) && numsub(t, b, c, w.s.q.clientCh) == 1 &&
				w.attempts.Load() >= 2
		})
		w.base = w.attempts.Load()
		ws = append(ws, w)
	}
	return ws
}

// A release wakes the first-registered Client alone, and only one the permits can serve: a
// Client whose waiter wants more is passed over, not woken to fail.
func TestSemaphoreReleaseWakesOneClient(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "sem-wake-one"
		hc, rdb := newClient(t, b.Addr)
		s := hc.Semaphore(name)
		must(t, s.SetPermits(ctx, 0))
		ws := startSemWaiters(t, ctx, b, rdb, name, 2, 1, 1)

		must(t, s.Release(ctx, 1)) // one permit: the first waiter wants two, the second is served
		wantResult(t, "the second waiter, the first a permit can serve", ws[1].done, waitFor)
		notYet(t, ws[0].done, "the first waiter, wanting two")
		notYet(t, ws[2].done, "the third waiter")
		must(t, s.Release(ctx, 2)) // two: the first is served
		wantResult(t, "the first waiter", ws[0].done, waitFor)
		notYet(t, ws[2].done, "the third waiter")
		must(t, s.Release(ctx, 1))
		wantResult(t, "the third waiter", ws[2].done, waitFor)
		for i, w := range ws {
			// Its attempt when woken, and none more: no Client was woken to fail.
			if d := w.attempts.Load() - w.base; d != 1 {
				t.Errorf("waiter %d's Client attempted %d times while waiting, want once (when woken)", i, d)
			}
		}
		for _, w := range ws {
			w.c.Close()
		}
		if keys := semKeys(t, rdb, name); len(keys) != 0 {
			t.Fatalf("registrations left once every waiter was served: %q", keys)
		}
	})
}

// semKeys returns the keys of the semaphore name's waiting Clients.
func semKeys(t *testing.T, rdb rueidis.Client, name string) []string {
	t.Helper()
	keys, err := rdb.Do(context.Background(), rdb.B().Keys().Pattern(names.Suffix(name, "sem_clients")+"*").Build()).AsStrSlice()
	must(t, err)
	return keys
}

// A Java process's release — INCRBY and the total on Redisson's channel, without a leading
// 0 — reaches a latchkey waiter through the listener, well before its re-check.
func TestSemaphoreJavaReleaseWakesAWaiter(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 20*time.Second)
		const name = "sem-java-release"
		_, rdb := newClient(t, b.Addr)
		must(t, rdb.Do(ctx, rdb.B().Set().Key(name).Value("0").Build()).Error())
		ws := startSemWaiters(t, ctx, b, rdb, name, 1, 1)
		channel := names.Prefix(semaphoreChannelPrefix, name)
		eventually(t, waitFor, "one Client listening on Redisson's channel", func() bool {
			return numsub(t, b, ws[0].c, channel) == 1
		})
		for i := range ws {
			must(t, rdb.Do(ctx, rdb.B().Incrby().Key(name).Increment(1).Build()).Error())
			must(t, rdb.Do(ctx, rdb.B().Publish().Channel(channel).Message("1").Build()).Error())
			// The re-check is a minute away (fairSlow): only the message meets the deadline.
			wantResult(t, "waiter "+strconv.Itoa(i)+" after a Java release", ws[i].done, 5*time.Second)
			if i == 0 {
				// The listener, served with no waiter left, hands the role to the other Client.
				eventually(t, waitFor, "the role passed on", func() bool {
					return mustGet(t, rdb, names.Suffix(name, "sem_clients")+":listener") == ws[1].c.lockToken &&
						numsub(t, b, ws[1].c, channel) == 1 && ws[1].c.mux.Subscribed(channel) && !ws[0].c.mux.Subscribed(channel)
				})
			}
		}
	})
}

// The last waiter of a Client drops the Client's registration, also when it was served at
// its first attempt: a waiter that joined the queue attempts first only when woken, and its
// attempt, made while another waiter was still there, keeps the registration for that one.
// If that one gives up before the attempt ends, seeing a waiter left, the registration is
// the taker's to drop; kept, it would have the Client woken for permits it no longer waits
// for, until it lapses.
func TestSemaphoreLastWaiterServedAtFirstAttemptLeaves(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 10*time.Second)
		name := "sem-last-first-" + b.Name
		var hold atomic.Bool
		entered, proceed := make(chan struct{}, 1), make(chan struct{})
		rdb := newHookedRDB(t, b.Addr)
		rdb.hook = func(_ context.Context, cmd rueidis.Completed) (rueidis.RedisResult, bool) {
			if sha(cmd) == shaOf(lua.SemAcquire{}) && hold.CompareAndSwap(true, false) {
				entered <- struct{}{}
				<-proceed
			}
			return rueidis.RedisResult{}, false
		}
		c, err := New(rdb, fairSlow()...) // the registration lapses minutes after its last renewal
		must(t, err)
		t.Cleanup(func() { c.Close() })
		s := c.Semaphore(name)
		must(t, s.SetPermits(ctx, 0))
		acquire := func(ctx context.Context) <-chan error {
			done := make(chan error, 1)
			go func() { done <- c.Semaphore(name).Acquire(ctx, 1) }()
			return done
		}
		ctxA, cancelA := context.WithCancel(ctx)
		a := acquire(ctxA)
		parked(t, c, s, 1)
		b2 := acquire(ctx) // joins behind a: no attempt
		parked(t, c, s, 2)
		ctxC, cancelC := context.WithCancel(ctx)
		cc := acquire(ctxC)
		parked(t, c, s, 3)
		admin := b.Client(t)
		must(t, admin.Do(ctx, admin.B().Set().Key(name).Value("1").Build()).Error()) // a permit, no wake
		hold.Store(true)
		cancelA() // a gives up and wakes b, whose first attempt counts c as another waiter
		if err := <-a; err == nil {
			t.Fatal("a acquired with no permit to take")
		}
		signalled(t, ctx, entered, "b's attempt held")
		cancelC() // c gives up while b's attempt is on its way, and leaves it to b
		if err := <-cc; err == nil {
			t.Fatal("c acquired with no permit to take")
		}
		close(proceed)
		must(t, <-b2)
		eventually(t, waitFor, "the Client's registration dropped", func() bool {
			return len(semRegistered(t, admin, name)) == 0
		})
	})
}
