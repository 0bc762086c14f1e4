package sync

import (
	"context"
	"errors"
	gosync "sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

// A wait whose context ends withdraws the claim its attempts made — the Client's
// registration for a plain lock and a semaphore, its place in the queue for a fair lock —
// also when its first attempt was made inside the wait, on a channel still subscribed from
// the Client's previous wait (which listens before it attempts). A claim left behind would
// hold others up until it lapsed: a fair lock's next caller would wait a whole fair wait time
// behind a place nobody keeps. When the context ends while the attempt's reply is on its
// way, past the time a call awaits it (ErrOutcomeUnknown), the call returns at once and the
// withdrawal follows the late reply, in the background. (The waiters' Client keeps a claim
// alive for minutes: within the test, only a withdrawal removes it.)
func TestWaitEndedByContextWithdrawsItsClaim(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		admin := b.Client(t)
		lock := func(handle func(c *Client, name string) waitingLocker) waiting {
			return waiting{
				take: func(ctx context.Context, c *Client, name string) { must(t, handle(c, name).Lock(ctx)) },
				try: func(ctx context.Context, c *Client, name string) (bool, error) {
					return handle(c, name).TryLock(ctx, WaitTime(50*time.Millisecond))
				},
				wait: func(ctx context.Context, c *Client, name string) error { return handle(c, name).Lock(ctx) },
			}
		}
		semaphore := waiting{
			take: func(ctx context.Context, c *Client, name string) { must(t, c.Semaphore(name).SetPermits(ctx, 0)) },
			try: func(ctx context.Context, c *Client, name string) (bool, error) {
				return c.Semaphore(name).TryAcquire(ctx, 1, WaitTime(50*time.Millisecond))
			},
			wait: func(ctx context.Context, c *Client, name string) error { return c.Semaphore(name).Acquire(ctx, 1) },
		}
		for _, tc := range []struct {
			kind   string
			w      waiting
			claims func(name string) []string // the claims in Redis
		}{
			{"lock", lock(func(c *Client, name string) waitingLocker { return c.Lock(name) }), func(name string) []string { return registered(t, admin, name) }},
			{"fair lock", lock(func(c *Client, name string) waitingLocker { return c.FairLock(name) }), func(name string) []string { return fairQueue(t, admin, name) }},
			{"semaphore", semaphore, func(name string) []string { return semRegistered(t, admin, name) }},
		} {
			for _, late := range []bool{false, true} {
				kind := tc.kind
				if late {
					kind += " reply late"
				}
				t.Run(kind, func(t *testing.T) {
					name := "withdraw:" + kind
					ctx := testCtx(t, waitFor)
					hc, _ := newClient(t, b.Addr)
					// withLeaveGrace: a call returns once its withdrawal ran.
					wc, _ := newClient(t, b.Addr, fairSlow(withLeaveGrace(time.Minute))...)
					tc.w.take(ctx, hc, name)

					// A first wait subscribes the waiters' channel, which stays subscribed after it.
					if ok, err := tc.w.try(ctx, wc, name); ok || err != nil {
						t.Fatalf("a wait with a wait time, for what is taken: %v, %v", ok, err)
					}
					if got := tc.claims(name); len(got) != 0 {
						t.Fatalf("claims after a wait whose time ran out: %v, want none", got)
					}
					wctx, cancel := context.WithCancel(ctx)
					ran := make(chan struct{})
					var once gosync.Once
					if late {
						// The reply of the attempt that claimed comes a second after the context
						// ended: far past the time the call awaits a reply (replyGrace), so its
						// outcome is unknown to the call. (A first attempt claims nothing if the
						// channel was left meanwhile: not subscribed, the Client is not registered.)
						hooks(wc).afterAcquire.set(func([]string) {
							if len(tc.claims(name)) == 0 {
								return
							}
							once.Do(func() {
								close(ran)
								<-wctx.Done()
								time.Sleep(time.Second)
							})
						})
					}
					got := make(chan error, 1)
					go func() { got <- tc.w.wait(wctx, wc, name) }()
					if late {
						signalled(t, ctx, ran, "the attempt that claimed")
					}
					eventually(t, waitFor, "the second wait's claim", func() bool { return len(tc.claims(name)) == 1 })
					cancel()
					err := <-got
					if !errors.Is(err, context.Canceled) {
						t.Fatalf("a wait whose context was cancelled: %v, want context.Canceled", err)
					}
					switch unknown := errors.Is(err, ErrOutcomeUnknown); {
					case late && !unknown:
						t.Fatalf("a wait whose attempt's reply came late: %v, want ErrOutcomeUnknown: the situation this test is about did not arise", err)
					case unknown: // under load, also without the hook
						eventually(t, waitFor, "the withdrawal after the late reply", func() bool { return len(tc.claims(name)) == 0 })
					default:
						if got := tc.claims(name); len(got) != 0 {
							t.Fatalf("claims after a wait its context ended: %v, want none", got)
						}
					}
				})
			}
		}
	})
}

// waiting is how a test makes one kind of primitive wait: take makes it unavailable, try
// waits a short time for it, wait waits until ctx ends.
type waiting struct {
	take func(ctx context.Context, c *Client, name string)
	try  func(ctx context.Context, c *Client, name string) (bool, error)
	wait func(ctx context.Context, c *Client, name string) error
}

// A waitingLocker is a lock handle with a blocking Lock.
type waitingLocker interface {
	Locker
	Lock(context.Context, ...LockOption) error
}

// Two goroutines of a Reentrant FairLock handle wait in its owner's one place. When one's
// context ends, the other keeps the place: the release wakes it, ahead of a caller who
// queued later. (Its Client re-checks minutes apart: a place lost would cost it the test's
// deadline, not a keep-alive's 10 s.)
func TestFairWaitEndedKeepsASiblingsPlace(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name = "fair:sibling-place"
		ctx := testCtx(t, waitFor)
		admin := b.Client(t)
		hc, _ := newClient(t, b.Addr, fairSlowRechecks...)
		wc, _ := newClient(t, b.Addr, fairSlow(withLeaveGrace(time.Minute))...)
		lc, _ := newClient(t, b.Addr, fairSlowRechecks...)
		holder, w, later := hc.FairLock(name), wc.FairLock(name, Reentrant()), lc.FairLock(name, Reentrant())
		must(t, holder.Lock(ctx))
		first := fairStartLock(ctx, w)
		fairAwaitQueue(t, admin, name, w.Owner())
		sctx, cancel := context.WithCancel(ctx)
		second := fairStartLock(sctx, w)
		eventually(t, waitFor, "both goroutines waiting", func() bool { return wc.mux.Waiters(w.wakeCh(&w.o)) == 2 })
		cancel()
		if err := <-second; !errors.Is(err, context.Canceled) {
			t.Fatalf("Lock whose context was cancelled: %v, want context.Canceled", err)
		}
		if got := fairQueue(t, admin, name); len(got) != 1 || got[0] != w.Owner() {
			t.Fatalf("queue after one goroutine's wait ended: %v, want the handle's place [%s] kept", got, w.Owner())
		}
		third := fairStartLock(ctx, later)
		fairAwaitQueue(t, admin, name, w.Owner(), later.Owner())
		must(t, holder.Unlock(ctx))
		if err := <-first; err != nil {
			t.Fatalf("the goroutine still waiting in the handle's place: %v", err)
		}
		notYet(t, third, "the caller who queued later")
		must(t, w.Unlock(ctx))
		must(t, <-third)
		must(t, later.Unlock(ctx))
		fairNoPlaces(t, admin, name, "at the end")
	})
}

// Two goroutines of a Reentrant FairLock handle give up while its owner is busy (another
// request of the owner's under way): one that waited in the owner's place, and one that
// came while it waited and never got to attempt. Whichever of them looks last, the place is
// withdrawn once the owner is free, and holds the queue up no longer.
func TestFairSiblingsGivingUpLeaveNoPlace(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name = "fair:sibling-never-attempted"
		ctx := testCtx(t, waitFor)
		admin := b.Client(t)
		hc, _ := newClient(t, b.Addr, fairSlowRechecks...)
		wc, _ := newClient(t, b.Addr, fairSlowRechecks...)
		holder, w := hc.FairLock(name), wc.FairLock(name, Reentrant())
		must(t, holder.Lock(ctx))
		actx, cancelA := context.WithCancel(ctx)
		first := fairStartLock(actx, w)
		fairAwaitQueue(t, admin, name, w.Owner())
		eventually(t, waitFor, "the first goroutine waiting", func() bool { return wc.mux.Waiters(w.wakeCh(&w.o)) == 1 })
		must(t, w.o.lock(ctx)) // the owner busy: the second goroutine waits for it, and attempts nothing
		bctx, cancelB := context.WithCancel(ctx)
		second := fairStartLock(bctx, w)
		cancelA()
		if err := <-first; !errors.Is(err, context.Canceled) {
			t.Fatalf("the first goroutine's Lock: %v, want context.Canceled", err)
		}
		cancelB()
		if err := <-second; !errors.Is(err, context.Canceled) {
			t.Fatalf("the second goroutine's Lock: %v, want context.Canceled", err)
		}
		w.o.unlock()
		eventually(t, waitFor, "the owner's place withdrawn", func() bool { return len(fairQueue(t, admin, name)) == 0 })
		must(t, holder.Unlock(ctx))
		fairNothingLeft(t, admin, name, "at the end")
	})
}

// Two goroutines of a Reentrant RWLock handle wait for the write lock under its writer's one
// claim. When one's context ends, the other keeps the claim: new readers still wait for it,
// and it takes the lock once the reader ahead of it leaves.
func TestWriteWaitEndedKeepsASiblingsClaim(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const name = "rw:sibling-claim"
		ctx := testCtx(t, waitFor)
		admin := b.Client(t)
		rc, _ := newClient(t, b.Addr)
		wc, _ := newClient(t, b.Addr, withLeaveGrace(time.Minute))
		reader, w := rc.RWLock(name), wc.RWLock(name, Reentrant())
		must(t, reader.RLock(ctx))
		first := make(chan error, 1)
		go func() { first <- w.Lock(ctx) }()
		eventually(t, waitFor, "the writer's claim", func() bool { return len(rwWriters(t, admin, name)) == 1 })
		sctx, cancel := context.WithCancel(ctx)
		second := make(chan error, 1)
		go func() { second <- w.Lock(sctx) }()
		eventually(t, waitFor, "both goroutines waiting", func() bool { return wc.mux.Waiters(rwChannel(name)) == 2 })
		cancel()
		if err := <-second; !errors.Is(err, context.Canceled) {
			t.Fatalf("Lock whose context was cancelled: %v, want context.Canceled", err)
		}
		if got := rwWriters(t, admin, name); len(got) != 1 {
			t.Fatalf("writer claims after one goroutine's wait ended: %v, want the handle's claim kept", got)
		}
		if ok, err := rc.RWLock(name).TryRLock(ctx); ok || err != nil {
			t.Fatalf("TryRLock of a new reader while the writer's claim stands: %v, %v; want false", ok, err)
		}
		must(t, reader.RUnlock(ctx))
		if err := <-first; err != nil {
			t.Fatalf("the goroutine still waiting under the claim: %v", err)
		}
		must(t, w.Unlock(ctx))
		if got := rwWriters(t, admin, name); len(got) != 0 {
			t.Fatalf("writer claims at the end: %v, want none", got)
		}
	})
}
