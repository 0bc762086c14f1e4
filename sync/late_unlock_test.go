package sync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/rueidis"
)

// holdProxy is a TCP proxy that can hold back requests: the client's connection is cut at
// once (so the client sees a lost reply and retries on a new connection), while the request
// itself stays in the proxy and reaches Redis, on its original server connection, only when
// the test releases it. That is a first run reaching Redis after its retry — a delayed
// segment, a proxy in between.
type holdProxy struct {
	t      *testing.T
	ln     net.Listener
	target string

	mu     gosync.Mutex
	armed  bool
	all    bool // hold every matching request until disarmed, not just the next one
	marker []byte
	held   []heldReq
	conns  []net.Conn
	// stale are the client connections made before an arming with all was disarmed, with
	// the marker they still hold requests back for (see disarm).
	stale  map[net.Conn][]byte
	fenced chan struct{} // closed once disarm's own connection is read (see disarm)
}

// holdFence is what disarm sends on its connection to the proxy: no Redis request starts so.
const holdFence = "HOLDPROXY-FENCE\n"

type heldReq struct {
	server net.Conn
	data   []byte
	done   chan struct{} // closed when the server side has closed (it ran the request)
}

func newHoldProxy(t *testing.T, target string) *holdProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{t: t, ln: ln, target: target}
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	return p
}

func (p *holdProxy) addr() string { return p.ln.Addr().String() }

// arm holds back the next request that contains marker, or with all every one until disarm.
func (p *holdProxy) arm(marker string, all bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.all, p.marker = true, all, []byte(marker)
}

// disarm stops holding requests back. After an arming with all, a request the client had
// written by then — a send it gave up on at its deadline, which its client library may still
// write once its connection is up, a loaded machine later — would reach Redis now, a run the
// test took for lost: so every connection made until now goes on holding requests back for
// that marker (a loaded run saw a release held back "in every run" free the lock). The proxy
// learns of every such connection first: it connects to itself and waits until it has
// accepted that connection, and with it every one made before (the listen queue is first in,
// first out). A client's request on such a connection is held back, its connection cut, and
// sent again on a new one, which holds nothing back.
func (p *holdProxy) disarm() {
	p.mu.Lock()
	if !p.armed || !p.all {
		p.armed = false
		p.mu.Unlock()
		return
	}
	p.fenced = make(chan struct{})
	fenced := p.fenced
	p.mu.Unlock()
	fence, err := net.Dial("tcp", p.addr())
	if err == nil {
		_, err = fence.Write([]byte(holdFence))
		defer fence.Close()
	}
	if err != nil {
		p.t.Fatalf("holdProxy: connect to itself: %v", err)
	}
	select {
	case <-fenced: // accepted, and so every connection made before it
	case <-time.After(waitFor):
		p.t.Fatalf("holdProxy: its own connection not read within %v", waitFor)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for c, m := range p.stale {
		if m == nil {
			p.stale[c] = p.marker
		}
	}
	p.armed, p.fenced = false, nil
}

func (p *holdProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.stale == nil {
			p.stale = make(map[net.Conn][]byte)
		}
		p.stale[client] = nil
		p.mu.Unlock()
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		done := make(chan struct{})
		go func() { // server → client; after the client is cut, replies are discarded
			defer close(done)
			buf := make([]byte, 32<<10)
			for {
				n, err := server.Read(buf)
				if n > 0 {
					_, _ = client.Write(buf[:n])
				}
				if err != nil {
					client.Close()
					return
				}
			}
		}()
		go func() { // client → server
			buf := make([]byte, 32<<10)
			// The end of what was forwarded, so that a marker split across two reads is found
			// (a loaded machine splits writes at any point). The part of the request before it
			// has reached Redis then, which waits for the rest: held back, it is not run.
			const keep = 255 // longer than any marker
			var tail []byte
			for first := true; ; first = false {
				n, err := client.Read(buf)
				if first && bytes.HasPrefix(buf[:n], []byte(holdFence)) { // disarm's own
					p.mu.Lock()
					delete(p.stale, client)
					if p.fenced != nil {
						close(p.fenced)
						p.fenced = nil
					}
					p.mu.Unlock()
					client.Close()
					server.Close()
					return
				}
				if n > 0 {
					chunk := bytes.Clone(buf[:n])
					p.mu.Lock()
					seen := append(tail, chunk...)
					armed := p.armed && bytes.Contains(seen, p.marker)
					stale := p.stale[client]
					hold := armed || stale != nil && bytes.Contains(seen, stale)
					tail = bytes.Clone(seen[max(len(seen)-keep, 0):])
					if armed {
						p.armed = p.all
					}
					if hold {
						p.held = append(p.held, heldReq{server: server, data: chunk, done: done})
					}
					p.mu.Unlock()
					if hold {
						client.Close() // the client sees its reply lost now
						return
					}
					if _, err := server.Write(chunk); err != nil {
						return
					}
				}
				if err != nil {
					if errors.Is(err, io.EOF) {
						_ = server.(*net.TCPConn).CloseWrite()
					} else {
						server.Close()
					}
					return
				}
			}
		}()
	}
}

// release delivers the held requests to Redis and waits until Redis has run them.
func (p *holdProxy) release() int {
	p.mu.Lock()
	held := p.held
	p.held = nil
	p.mu.Unlock()
	for _, h := range held {
		if _, err := h.server.Write(h.data); err != nil {
			p.t.Fatalf("deliver held request: %v", err)
		}
		_ = h.server.(*net.TCPConn).CloseWrite() // Redis runs it, sees EOF, hangs up
		select {
		case <-h.done:
		case <-time.After(waitFor):
			p.t.Fatalf("held request not run")
		}
	}
	return len(held)
}

func (p *holdProxy) holding() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.held)
}

// A first run of an unlock that reaches Redis after its retry freed the lock, and after the
// handle took the lock again — with or without an unlock in between — changes nothing: the
// latch keeps the handle's highest request number, and an older or repeated one is a no-op.
// (Counts being set from the handle, such a run would otherwise free the current hold, and
// another Client could take the lock while this handle holds it.)
func TestLateUnlockRunChangesNothing(t *testing.T) {
	t.Parallel()
	for _, between := range []bool{false, true} {
		t.Run(fmt.Sprintf("unlock-between=%v", between), func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
				ctx := testCtx(t, 20*time.Second)
				p, l, other := heldBackHandle(t, ctx, b, "late-unlock")

				must(t, l.Lock(ctx))
				p.arm("PUBLISH", false) // only the release script's arguments carry it
				must(t, l.Unlock(ctx))  // first run held back; the retry frees the lock
				if p.holding() != 1 {
					t.Fatalf("no request held back")
				}
				if between {
					must(t, l.Lock(ctx))
					must(t, l.Unlock(ctx)) // a later unlock overwrites the latch
				}
				must(t, l.Lock(ctx)) // the handle holds the lock

				p.release() // the first run of the earlier unlock reaches Redis now

				if held, err := l.IsHeld(ctx); err != nil || !held {
					t.Errorf("a late run of an unlock that already completed freed the handle's current hold (IsHeld %v, %v)", held, err)
				}
				if ok, err := other.Lock("late-unlock", Reentrant()).TryLock(ctx); err != nil || ok {
					t.Errorf("another Client took the lock while the handle holds it (TryLock %v, %v)", ok, err)
				}
				must(t, l.Unlock(ctx))
			})
		})
	}
}

// An unlock none of whose runs answered (every one held back) fails with its outcome
// unknown; the hold counts as given up. The handle's next Lock first repeats that release
// (settling it: the repeat frees the lock, and the latch's mark is now its number), then
// takes the lock afresh. When the held runs reach Redis at last they are repeats of a
// settled request and change nothing: the handle still holds the lock, and its Unlock frees
// it.
func TestUnknownUnlockThenLateRunsChangeNothing(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		p, l, other := heldBackHandle(t, ctx, b, "unknown-unlock", WithRetryBudget(shortBudget))
		must(t, l.Lock(ctx))
		p.arm("PUBLISH", true)
		err := l.Unlock(ctx)
		if !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("Unlock with every run held back: %v, want ErrOutcomeUnknown", err)
		}
		p.disarm()
		if !exists(t, other.rdb, "unknown-unlock") {
			// The latch's mark is the number of the last release that ran: the failed one's
			// if a run of it reached Redis after all.
			mark, merr := other.rdb.Do(ctx, other.rdb.B().Get().Key(l.o.latch).Build()).ToString()
			t.Fatalf("the lock is gone though no run of the release reached Redis (%d runs held back; the latch's mark %q (%v), the failed release's number %d)",
				p.holding(), mark, merr, l.o.reqs)
		}
		must(t, l.Lock(ctx))
		if n := p.release(); n == 0 {
			t.Fatal("no run held back")
		}
		if held, err := l.IsHeld(ctx); err != nil || !held {
			t.Fatalf("late runs of the failed unlock freed the lock the handle took since (IsHeld %v, %v)", held, err)
		}
		if n, err := l.HoldCount(ctx); n != 1 || err != nil {
			t.Fatalf("hold count %d (%v), want 1", n, err)
		}
		if ok, err := other.Lock("unknown-unlock", Reentrant()).TryLock(ctx); err != nil || ok {
			t.Fatalf("another Client took the lock while the handle holds it (TryLock %v, %v)", ok, err)
		}
		must(t, l.Unlock(ctx))
		if ok, err := other.Lock("unknown-unlock", Reentrant()).TryLock(ctx); err != nil || !ok {
			t.Fatalf("the lock not free after the handle's Unlock (TryLock %v, %v)", ok, err)
		}
	})
}

// heldBackHandle returns a handle on name whose Client reaches Redis through a holdProxy
// (hand-off off, and opts), the proxy, and another Client that reaches Redis directly. The
// handle has taken and released the lock once, so the scripts are cached and a held EVALSHA
// runs when it is delivered.
func heldBackHandle(t *testing.T, ctx context.Context, b *redistest.Backend, name string, opts ...Option) (*holdProxy, *Lock, *Client) {
	t.Helper()
	p := newHoldProxy(t, b.Addr)
	c, _ := newClient(t, p.addr(), append([]Option{WithLocalHandoff(0)}, opts...)...)
	other, _ := newClient(t, b.Addr)
	l := c.Lock(name, Reentrant())
	must(t, l.Lock(ctx))
	must(t, l.Unlock(ctx))
	return p, l, other
}

// unknownUnlock runs l.Unlock with every run of it held back by p, so that it fails with its
// outcome unknown, and disarms p. With deliver, the held runs then reach Redis (the first
// one acts, the others are repeats of it) before unknownUnlock returns; otherwise they stay
// held for the caller to release.
func unknownUnlock(t *testing.T, ctx context.Context, p *holdProxy, l *Lock, deliver bool) {
	t.Helper()
	p.arm("PUBLISH", true) // only the release script's arguments carry it
	err := l.Unlock(ctx)
	p.disarm()
	if !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("Unlock with every run held back: %v, want ErrOutcomeUnknown", err)
	}
	if errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock with its outcome unknown reported the lock not held: %v", err)
	}
	if p.holding() == 0 {
		t.Fatal("no run of the release held back")
	}
	if deliver {
		p.release()
	}
}

// A nested Unlock whose outcome stays unknown counts its hold as given up: the caller's
// outer (last) Unlock first settles it — repeats it, which drops the inner hold if no run did
// — and then frees the lock. Whether the failed release's runs reached Redis before the
// outer Unlock or only after, the lock is free once the outer Unlock returns, and the late
// runs change nothing. (When the failed Unlock left the handle's count as it was, the outer
// Unlock went out as a partial release and the watchdog renewed the lock for as long as the
// process lived.)
func TestUnknownNestedUnlockThenOuterUnlockFrees(t *testing.T) {
	t.Parallel()
	for _, delivered := range []bool{true, false} {
		t.Run(fmt.Sprintf("ran-before-outer=%v", delivered), func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
				ctx := testCtx(t, 30*time.Second)
				const name = "nested-unknown"
				p, l, other := heldBackHandle(t, ctx, b, name, WithRetryBudget(shortBudget))
				admin := other.rdb
				must(t, l.Lock(ctx))
				must(t, l.Lock(ctx))
				unknownUnlock(t, ctx, p, l, delivered)
				want := int64(2) // no run reached Redis yet
				if delivered {
					want = 1 // the first run dropped one hold, its repeats nothing
				}
				if n := mustInt(t, admin.Do(ctx, admin.B().Hget().Key(name).Field(l.Owner()).Build())); n != want {
					t.Fatalf("Redis counts %d holds after the failed inner Unlock, want %d", n, want)
				}
				if err := l.Unlock(ctx); err != nil { // the caller's last Unlock
					t.Fatalf("outer Unlock after an inner one with unknown outcome: %v", err)
				}
				if exists(t, admin, name) {
					t.Fatalf("every Lock was matched by an Unlock (one of unknown outcome), yet the lock is still held (PTTL %d ms)",
						pttl(t, admin, name))
				}
				mine := other.Lock(name, Reentrant())
				if ok, err := mine.TryLock(ctx); err != nil || !ok {
					t.Fatalf("another Client cannot take the lock after the outer Unlock (TryLock %v, %v)", ok, err)
				}
				p.release() // any runs still held reach Redis now
				if held, err := mine.IsHeld(ctx); err != nil || !held {
					t.Fatalf("late runs of the failed release freed another Client's hold (IsHeld %v, %v)", held, err)
				}
				must(t, mine.Unlock(ctx))
			})
		})
	}
}

// The same with a final Unlock of unknown outcome: the caller's next Lock settles it (its
// repeat frees the lock if no run did) and is then a fresh acquisition, not a re-entry; its
// Unlock frees the lock. Late runs of the failed release, delivered while the handle holds
// the lock again, change nothing.
func TestUnknownFinalUnlockThenLockUnlockFrees(t *testing.T) {
	t.Parallel()
	for _, delivered := range []bool{true, false} {
		t.Run(fmt.Sprintf("ran-before-lock=%v", delivered), func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
				ctx := testCtx(t, 30*time.Second)
				const name = "final-unknown"
				p, l, other := heldBackHandle(t, ctx, b, name, WithRetryBudget(shortBudget))
				admin := other.rdb
				must(t, l.Lock(ctx))
				unknownUnlock(t, ctx, p, l, delivered)
				if got := exists(t, admin, name); got == delivered {
					t.Fatalf("lock exists %v after the failed Unlock, runs delivered %v", got, delivered)
				}
				must(t, l.Lock(ctx))
				p.release() // any runs still held reach Redis now, while the handle holds the lock
				if n, err := l.HoldCount(ctx); n != 1 || err != nil {
					t.Fatalf("hold count %d (%v) after Lock following a failed final Unlock, want 1", n, err)
				}
				if err := l.Unlock(ctx); err != nil {
					t.Fatalf("Unlock: %v", err)
				}
				if exists(t, admin, name) {
					t.Fatalf("Lock/Unlock after a failed Unlock left the lock held (PTTL %d ms)", pttl(t, admin, name))
				}
			})
		})
	}
}

// A nested Unlock whose outcome stays unknown, on a lock deleted meanwhile (a force unlock):
// the outer Unlock settles the inner release first, and its repeat, finding nothing, tells
// that the hold is gone: ErrLockLost, and Lost closes — even though the outer release itself
// would get no reply.
func TestUnknownNestedUnlockOnDeletedLockIsLost(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "nested-unknown-deleted"
		p := newHoldProxy(t, b.Addr)
		c, _ := newClient(t, p.addr(), WithLocalHandoff(0), WithRetryBudget(shortBudget))
		admin := b.Client(t)
		l := c.Lock(name, Reentrant())
		must(t, l.Lock(ctx))
		must(t, l.Unlock(ctx)) // Redis has the release script: a held-back EVALSHA of it runs
		must(t, l.Lock(ctx))
		must(t, l.Lock(ctx))
		unknownUnlock(t, ctx, p, l, false)
		must(t, admin.Do(ctx, admin.B().Del().Key(name).Build()).Error())
		// Every run of the outer release (of the one hold left; the settling repeat releases
		// one of two) is held back.
		hooks(c).beforeRelease.set(func(cmd []string) {
			if cmd[3+5+4] == "1" { // EVALSHA sha 5 keys… lease owner publish latchMs holds
				p.arm(unlockLatchPrefix, true)
			}
		})
		if err := l.Unlock(ctx); !errors.Is(err, ErrLockLost) {
			t.Fatalf("outer Unlock of a deleted lock: %v, want ErrLockLost", err)
		}
		if !closed(l.Lost()) {
			t.Fatal("Lost is open after Unlock found the hold gone")
		}
		if exists(t, admin, name) {
			t.Fatal("the deleted lock is back")
		}
	})
}

// A last Unlock whose reply is lost leaves its release unsettled. When the settling
// repeat is refused (WRONGTYPE: it did not run, so the first run may still), the release is
// still unsettled: the next acquire fails and does not proceed. Once the repeat gets a reply
// (the release frees the given-up hold), the next hold is a new one with its own lease — not
// the deadline of the given-up hold's lapsing lease, an hour ahead.
func TestRefusedSettleKeepsReleaseUnsettled(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "refused-settle"
		var l *Lock
		var drop, dropped atomic.Int32
		rdb := &hookedRDB{Client: redistest.ClientFor(t, b.Addr)}
		rdb.hook = func(_ context.Context, cmd rueidis.Completed) (rueidis.RedisResult, bool) {
			if drop.Load() == 1 && isReleaseOf(cmd, l.Owner()) {
				dropped.Add(1)
				return rueidis.NewErrorResult(io.ErrUnexpectedEOF), true // lost, and never sent
			}
			return rueidis.RedisResult{}, false
		}
		c, err := New(rdb, WithRetryBudget(100*time.Millisecond))
		must(t, err)
		t.Cleanup(func() { c.Close() })
		other, _ := newClient(t, b.Addr)
		admin := b.Client(t)
		l = c.Lock(name, Reentrant())
		if ok, err := l.TryLock(ctx, Lease(time.Hour)); !ok || err != nil {
			t.Fatalf("TryLock: %v, %v", ok, err)
		}

		drop.Store(1) // every try of the release is lost
		if err := l.Unlock(ctx); !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("Unlock with every reply lost: %v, want ErrOutcomeUnknown", err)
		}
		drop.Store(0)
		if dropped.Load() < 2 {
			t.Fatalf("the release was tried %d times, want it repeated within the retry budget", dropped.Load())
		}
		if n := hget(t, ctx, admin, name, l.Owner()); n != 1 {
			t.Fatalf("the given-up hold's count in Redis %d, want 1: no release reached Redis", n)
		}

		hashLatch(t, ctx, admin, l.o.latch) // the settling repeat is refused
		ok, err := l.TryLock(ctx, Lease(time.Second))
		if ok || err == nil {
			d, _ := l.Deadline()
			t.Fatalf("TryLock while the earlier release's repeat is refused: %v, %v (deadline %v ahead); "+
				"want an error: a refused repeat did not settle the release", ok, err, time.Until(d).Round(time.Millisecond))
		}
		if !errors.Is(err, ErrWrongType) {
			t.Errorf("TryLock while the repeat is refused with WRONGTYPE: %v, want ErrWrongType", err)
		}
		if !unsettledOf(t, ctx, l) {
			t.Fatal("the release is no longer kept for settling after its repeat was refused")
		}
		if n := hget(t, ctx, admin, name, l.Owner()); n != 1 {
			t.Fatalf("hold count in Redis %d after the refused settle, want 1 (nothing ran)", n)
		}

		must(t, admin.Do(ctx, admin.B().Del().Key(l.o.latch).Build()).Error())
		// A lease of its own, short beside the given-up hold's hour, long enough to last
		// through the checks below on a loaded machine (1 s did not).
		const lease = 10 * time.Second
		ok, err = l.TryLock(ctx, Lease(lease))
		took := time.Now()
		if !ok || err != nil {
			t.Fatalf("TryLock once the latch is back: %v, %v", ok, err)
		}
		if unsettledOf(t, ctx, l) {
			t.Fatal("the release is still unsettled after its repeat got a reply")
		}
		d, dok := l.Deadline()
		if !dok || d.After(took.Add(lease)) {
			t.Fatalf("deadline %v ahead (%v) after TryLock(Lease(%v)), want at most %[3]v: the new hold's own lease",
				d.Sub(took).Round(time.Millisecond), dok, lease)
		}
		if ms := pttl(t, admin, name); ms <= 0 || ms > lease.Milliseconds() {
			t.Fatalf("PTTL %d ms after TryLock(Lease(%v)), want (0, %d]: the given-up hold was released first", ms, lease, lease.Milliseconds())
		}
		if n := hget(t, ctx, admin, name, l.Owner()); n != 1 {
			t.Fatalf("hold count in Redis %d, want 1", n)
		}
		if ok, err := other.Lock(name, Reentrant()).TryLock(ctx); ok || err != nil {
			t.Fatalf("another Client's TryLock while the handle holds the lock: %v, %v; want false, nil", ok, err)
		}
		if !l.Valid() {
			t.Fatal("the new hold is not valid")
		}
		must(t, l.Unlock(ctx))
		if exists(t, admin, name) {
			t.Fatal("lock alive after its Unlock")
		}
	})
}

// A request written, on a connection made before the proxy was disarmed, only after it was
// (a send its client gave up on, still written once its connection was up), is held back
// still; one on a connection made since goes through.
func TestHoldProxyHoldsBackLateWrites(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0") // the server: what reaches it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 1024)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						got <- string(buf[:n])
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	p := newHoldProxy(t, ln.Addr().String())
	p.arm("MARK", true)
	early, err := net.Dial("tcp", p.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()
	p.disarm()
	if _, err := early.Write([]byte("late MARK")); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitFor, "the late write held back", func() bool { return p.holding() == 1 })
	later, err := net.Dial("tcp", p.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer later.Close()
	if _, err := later.Write([]byte("new MARK")); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if s != "new MARK" {
			t.Fatalf("the server got %q, want only the request on the connection made since", s)
		}
	case <-time.After(waitFor):
		t.Fatal("the request on a connection made since did not go through")
	}
}
