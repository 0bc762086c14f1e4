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
	"github.com/latchkey/latchkey/watchdog"
)

// TestChaosExclusionUnderLostReplies has several Clients contend for a few locks — local
// hand-offs, re-entry, waiters woken by messages — while their connections keep losing
// replies after Redis ran the command. A lost reply closes the connection, so every command
// in flight on it fails at once, some applied and some not: acquires (undone), releases and
// hand-offs (retried on the latch, or settled), subscriptions (re-made). Some re-entries
// take a short explicit lease, which sets the lock's TTL. A second holder while the first
// one's Lost is open is a bug, as is an Unlock reporting "not held" to a handle whose lease
// was not lost, a Lock that waits out its 20 s, or a lock still held once everyone is done. Now and then a
// Client also loses Redis for up to 150 ms.
func TestChaosExclusionUnderLostReplies(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		const clients, workers, locks = 3, 4, 2
		const chaos = 2 * time.Second
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

		// Who is inside each lock's critical section, and that holder's Lost channel.
		type holder struct {
			who   string
			lost  <-chan struct{}
			lease *watchdog.Lease
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
			// A release, undo or settlement (they name the latch); any script; any command on
			// the locks; the next request of any kind, subscriptions included.
			markers := [][]byte{[]byte(unlockLatchPrefix), []byte("EVALSHA"), []byte("chaos:"), nil}
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(3+rng.IntN(12)) * time.Millisecond):
				}
				p := proxies[rng.IntN(clients)]
				if rng.IntN(30) > 0 {
					p.DropReplyAfter(markers[rng.IntN(len(markers))])
					continue
				}
				// Now and then a Client loses Redis altogether for a moment: every
				// connection breaks and redials fail, far shorter than a lease.
				p.Blackhole(true)
				time.Sleep(time.Duration(20+rng.IntN(130)) * time.Millisecond)
				p.Blackhole(false)
				blackholes.Add(1)
			}
		})

		var acquired, nested, lockErrs, unlockErrs atomic.Int64
		var wg gosync.WaitGroup
		for ci := range clients {
			for w := range workers {
				wg.Go(func() {
					who := fmt.Sprintf("client %d worker %d", ci, w)
					rng := rand.New(rand.NewPCG(uint64(ci), uint64(w)))
					handles := make([]*Lock, locks)
					for k := range handles {
						handles[k] = cs[ci].Lock(names[k])
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
							lockErrs.Add(1) // a lost reply; nothing held
							continue
						}
						lost, lease := h.Lost(), h.lease
						now := time.Now()
						mu.Lock()
						// The holder inside is entitled to the lock until its lease's deadline,
						// when Lost closes (a moment later: the watchdog's timer). A deadline
						// still ahead (beyond miniredis' clock ticks) means the watchdog
						// believed in more than Redis had.
						if cur := inside[k]; cur != nil && !isClosed(cur.lost) {
							if d, ok := cur.lease.Deadline(); ok && d.After(now.Add(expirySlack(b))) {
								violations = append(violations, fmt.Sprintf("%s took %s while %s held it, its lease %v from running out",
									who, names[k], cur.who, d.Sub(now)))
							}
						}
						me := &holder{who: who, lost: lost, lease: lease}
						inside[k] = me
						mu.Unlock()
						acquired.Add(1)

						if rng.IntN(4) == 0 { // re-enter, then drop the inner hold
							var opts []LockOption
							if rng.IntN(2) == 0 {
								// An explicit lease sets the lock's TTL to it; the outer hold,
								// taken under the watchdog, stays kept (Redisson's rule).
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
		time.Sleep(chaos)
		close(stop)
		faults.Wait()
		wg.Wait()

		t.Logf("%d acquisitions (%d re-entered), %d Lock and %d Unlock errors, replies dropped: %d %d %d, %d outages",
			acquired.Load(), nested.Load(), lockErrs.Load(), unlockErrs.Load(),
			proxies[0].Dropped(), proxies[1].Dropped(), proxies[2].Dropped(), blackholes.Load())
		for _, v := range violations {
			t.Error(v)
		}
		if dropped := proxies[0].Dropped() + proxies[1].Dropped() + proxies[2].Dropped(); dropped < 20 {
			t.Errorf("only %d replies dropped: the faults did not happen", dropped)
		}
		if acquired.Load() < clients*workers {
			t.Errorf("%d acquisitions by %d workers", acquired.Load(), clients*workers)
		}
		// Every worker is done and released. A release whose outcome stayed unknown may leave
		// a hold until its lease runs out, but one-shot faults leave the retries a clean
		// connection, so none should.
		admin := b.Client(t)
		for _, name := range names {
			eventually(t, 2*time.Second, name+" released", func() bool { return !exists(t, admin, name) })
		}
	})
}

// checkUnlock releases one hold of h and records a false "not held": one reported to a
// handle whose lease (lost) was not reported lost.
func checkUnlock(h *Lock, lost <-chan struct{}, who string, violate func(string, ...any), errs *atomic.Int64) {
	err := h.Unlock(context.Background())
	switch {
	case err == nil:
	case errors.Is(err, ErrNotHeld) && !isClosed(lost): // a lost hand-off closes it before the heir's Unlock returns
		violate("%s: Unlock: %v, but the lease was not lost", who, err)
	default:
		errs.Add(1)
	}
}
