package sync

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

// TestChaosExclusionUnderLostReplies has several Clients contend for a few locks — local
// hand-offs, re-entry, waiters woken by messages — while their connections keep losing
// replies after Redis ran the command. A lost reply closes the connection, so every command
// in flight on it fails at once, some applied and some not: acquires (repeated, adopting
// what the first run did), releases and hand-offs (repeated with their number on the latch,
// or settled before the handle's next request), subscriptions (re-made). Some re-entries
// take a short explicit lease; leases only grow, so it cannot cut the hold short. Now and
// then a Client also loses Redis for up to 150 ms.
//
// A second holder while the first one's lease deadline (Lock.Deadline) is still ahead is a
// bug, as is an Unlock reporting "not held" to a handle whose lease was not lost, a Lock that
// waits out its 20 s, or a lock still held once everyone is done. It runs twice: each worker
// with Reentrant handles of its own (which re-enter), and every worker of a Client sharing
// one handle per lock, as goroutines share a sync.Mutex.
func TestChaosExclusionUnderLostReplies(t *testing.T) {
	t.Parallel()
	for _, shared := range []bool{false, true} {
		mode := "reentrant handles"
		if shared {
			mode = "shared handles"
		}
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			chaosExclusion(t, shared)
		})
	}
}

func chaosExclusion(t *testing.T, shared bool) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		cpuBound(t)
		const clients, workers, locks = 3, 4, 2
		const chaos = 1500 * time.Millisecond
		ctx := testCtx(t, 90*time.Second)

		proxies := make([]*redistest.Proxy, clients)
		cs := make([]*Client, clients)
		for i := range clients {
			proxies[i] = redistest.NewProxy(t, b.Addr)
			cs[i], _ = newClient(t, proxies[i].Addr())
		}
		names := make([]string, locks)
		for k := range names {
			names[k] = fmt.Sprintf("chaos:%d", k)
		}
		sharedHandles := make([][]*Lock, clients) // a Client's one handle per lock
		for ci := range sharedHandles {
			for _, name := range names {
				sharedHandles[ci] = append(sharedHandles[ci], cs[ci].Lock(name))
			}
		}

		// Who is inside each lock's critical section, and that holder's handle and Lost
		// channel.
		type holder struct {
			who      string
			deadline func() (time.Time, bool)
			lost     <-chan struct{}
		}
		var mu gosync.Mutex
		inside := make([]*holder, locks)
		var violations []string
		violate := func(format string, args ...any) {
			mu.Lock()
			violations = append(violations, fmt.Sprintf(format, args...))
			mu.Unlock()
		}

		stop := make(chan struct{})
		var blackholes atomic.Int64
		var faults gosync.WaitGroup
		seed := uint64(time.Now().UnixNano())
		t.Logf("fault seed %d", seed)
		faults.Go(func() {
			rng := rand.New(rand.NewPCG(seed, 2))
			// A release (it names the latch); any script; any command on the locks; the next
			// request of any kind, subscriptions included.
			markers := [][]byte{[]byte(unlockLatchPrefix), []byte("EVALSHA"), []byte("chaos:"), nil}
			for {
				p := proxies[rng.IntN(clients)]
				if rng.IntN(30) > 0 {
					// A fault armed for a moment: it drops the reply of a matching request
					// sent meanwhile, if any. Left armed, it would lie in wait for the next
					// one, a retry included, however long that takes.
					p.DropReplyAfter(markers[rng.IntN(len(markers))])
					select {
					case <-stop:
						return
					case <-time.After(time.Duration(3+rng.IntN(12)) * time.Millisecond):
					}
					p.DropReplyAfter(noMarker)
					continue
				}
				// Now and then a Client loses Redis altogether for a moment: every
				// connection breaks and redials fail, far shorter than a lease and than
				// the retry budget.
				p.Blackhole(true)
				time.Sleep(time.Duration(20+rng.IntN(130)) * time.Millisecond)
				p.Blackhole(false)
				blackholes.Add(1)
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(3+rng.IntN(12)) * time.Millisecond):
				}
			}
		})

		var acquired, nested, lockErrs, unlockErrs atomic.Int64
		var wg gosync.WaitGroup
		for ci := range clients {
			for w := range workers {
				wg.Go(func() {
					who := fmt.Sprintf("client %d worker %d", ci, w)
					rng := rand.New(rand.NewPCG(uint64(ci), uint64(w)))
					handles := sharedHandles[ci]
					if !shared {
						handles = make([]*Lock, locks)
						for k := range handles {
							handles[k] = cs[ci].Lock(names[k], Reentrant())
						}
					}
					for n := 0; ; n++ {
						select {
						case <-stop:
							if n > 0 {
								return
							}
						default:
						}
						k := rng.IntN(locks)
						h := handles[k]
						lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
						err := h.Lock(lctx)
						cancel()
						if errors.Is(err, context.DeadlineExceeded) {
							violate("%s: Lock(%s) waited 20 s", who, names[k])
							return
						}
						if err != nil {
							lockErrs.Add(1) // outcome unknown, or a re-entry found the hold gone
							continue
						}
						lost := h.Lost()
						now := time.Now()
						mu.Lock()
						// The holder inside is entitled to the lock until its lease's deadline,
						// when Lost closes (a moment later: the watchdog's timer). A deadline
						// still ahead (beyond miniredis' clock ticks) means the handle believed
						// in more than Redis had.
						if cur := inside[k]; cur != nil && !isClosed(cur.lost) {
							if d, ok := cur.deadline(); ok && d.After(now.Add(expirySlack(b))) {
								violations = append(violations, fmt.Sprintf("%s took %s while %s held it, its lease %v from running out",
									who, names[k], cur.who, d.Sub(now)))
							}
						}
						me := &holder{who: who, deadline: h.Deadline, lost: lost}
						if shared {
							// The handle's Deadline is its newest hold's, which may soon be
							// another worker's: this hold's is fixed now (kept by the
							// watchdog, it is a watchdog timeout ahead).
							d, ok := h.Deadline()
							me.deadline = func() (time.Time, bool) { return d, ok }
						}
						inside[k] = me
						mu.Unlock()
						acquired.Add(1)

						if !shared && rng.IntN(4) == 0 { // re-enter, then drop the inner hold
							var opts []LockOption
							if rng.IntN(2) == 0 {
								// A short explicit lease: leases only grow, so the lock's TTL
								// stays what the outer hold (kept by the watchdog) has.
								opts = append(opts, Lease(time.Duration(200+rng.IntN(600))*time.Millisecond))
							}
							if err := h.Lock(ctx, opts...); err == nil {
								nested.Add(1)
								checkUnlock(h, lost, who+" (inner)", violate, &unlockErrs)
							}
						}
						for range rng.IntN(3) {
							time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
						}

						mu.Lock()
						if inside[k] == me {
							inside[k] = nil
						}
						mu.Unlock()
						checkUnlock(h, lost, who, violate, &unlockErrs)
					}
				})
			}
		}
		// The faults run for chaos, and on until enough replies were dropped to make the run
		// count (a slow machine makes fewer requests: 9 in 8 s under two CPU hogs), within
		// waitFor.
		dropped := func() int { return proxies[0].Dropped() + proxies[1].Dropped() + proxies[2].Dropped() }
		end := time.Now().Add(chaos)
		for time.Now().Before(end) || (dropped() < 20 && time.Since(end) < waitFor) {
			time.Sleep(50 * time.Millisecond) // how long the faults run, not a synchronisation
		}
		close(stop)
		faults.Wait()
		wg.Wait()

		t.Logf("%d acquisitions (%d re-entered), %d Lock and %d Unlock errors, replies dropped: %d %d %d, %d outages",
			acquired.Load(), nested.Load(), lockErrs.Load(), unlockErrs.Load(),
			proxies[0].Dropped(), proxies[1].Dropped(), proxies[2].Dropped(), blackholes.Load())
		for _, v := range violations {
			t.Error(v)
		}
		if n := dropped(); n < 20 {
			t.Errorf("only %d replies dropped: the faults did not happen", n)
		}
		if acquired.Load() < clients*workers {
			t.Errorf("%d acquisitions by %d workers", acquired.Load(), clients*workers)
		}
		// Every worker is done and released. A release whose outcome stayed unknown would
		// leave a hold until its lease runs out, but the outages are far shorter than the
		// retry budget, so every release gets its reply in the end.
		admin := b.Client(t)
		for _, name := range names {
			eventually(t, waitFor, name+" released", func() bool { return !exists(t, admin, name) })
		}
	})
}

// noMarker is a DropReplyAfter marker no request contains: arming it disarms the fault.
var noMarker = []byte("\x00no request has this\x00")

// expirySlack is how late past its TTL a key may still be seen: miniredis' clock moves in
// ticks; Redis expires on access, by its own (wall) clock.
func expirySlack(b *redistest.Backend) time.Duration {
	if b.Name == redistest.NameMiniredis {
		return 15 * time.Millisecond
	}
	return 3 * time.Millisecond
}

// checkUnlock releases one hold of h and records a false "not held": one reported to a
// handle whose lease (lost) was not reported lost. An Unlock whose outcome stayed unknown
// (every repeat failed) counts its hold as released, as does the caller here; its repeat
// goes out before the handle's next request.
func checkUnlock(h *Lock, lost <-chan struct{}, who string, violate func(string, ...any), errs *atomic.Int64) {
	err := h.Unlock(context.Background())
	switch {
	case err == nil:
	case errors.Is(err, ErrNotHeld) && !isClosed(lost):
		violate("%s: Unlock: %v, but the lease was not lost", who, err)
	case errors.Is(err, ErrLockLost):
		errs.Add(1) // Lost is closed: the hold was gone
	case errors.Is(err, ErrOutcomeUnknown):
		errs.Add(1)
	default:
		violate("%s: Unlock: unexpected error %v", who, err)
	}
}
