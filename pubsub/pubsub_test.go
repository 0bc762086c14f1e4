package pubsub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/rueidis"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// waitFor bounds every wait for something that must happen: generous, for a loaded machine.
const waitFor = 20 * time.Second

// quiet is the window used to show that something does NOT happen. Ordering tricks (the
// sentinel channel) are preferred; this is only used where no event marks "done".
const quiet = 50 * time.Millisecond

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	t.Cleanup(cancel)
	return ctx
}

func newMux(t *testing.T, c rueidis.Client, opts Options) *Mux {
	t.Helper()
	m := New(c, opts)
	t.Cleanup(m.Close)
	return m
}

func subscribe(t *testing.T, m *Mux, name string, policy Policy) *Waiter {
	t.Helper()
	w, err := m.Subscribe(name, policy)
	if err != nil {
		t.Fatalf("Subscribe(%q): %v", name, err)
	}
	t.Cleanup(w.Close)
	return w
}

// subscribeN registers n waiters on name, oldest first, and waits until each one has
// been signalled for the confirmed subscription (consuming that signal).
func subscribeN(t *testing.T, m *Mux, name string, policy Policy, n int) []*Waiter {
	t.Helper()
	ws := make([]*Waiter, n)
	for i := range ws {
		ws[i] = subscribe(t, m, name, policy)
	}
	for i, w := range ws {
		waitSignal(t, w, fmt.Sprintf("%s waiter %d confirmation", name, i))
	}
	return ws
}

func waitSignal(t *testing.T, w *Waiter, what string) {
	t.Helper()
	select {
	case <-w.C():
	case <-time.After(waitFor):
		t.Fatalf("%s: not signalled within %v", what, waitFor)
	}
}

// take consumes a pending signal and reports whether there was one.
func take(w *Waiter) bool {
	select {
	case <-w.C():
		return true
	default:
		return false
	}
}

// signalled consumes the pending signals of ws and returns the indexes that had one.
func signalled(ws []*Waiter) []int {
	var got []int
	for i, w := range ws {
		if take(w) {
			got = append(got, i)
		}
	}
	return got
}

func wantSignalled(t *testing.T, what string, ws []*Waiter, want ...int) {
	t.Helper()
	got := signalled(ws)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: signalled waiters %v, want %v", what, got, want)
	}
}

func publish(t *testing.T, c rueidis.Client, channel, msg string) int64 {
	t.Helper()
	n, err := c.Do(ctxT(t), c.B().Publish().Channel(channel).Message(msg).Build()).AsInt64()
	if err != nil {
		t.Fatalf("PUBLISH %s %s: %v", channel, msg, err)
	}
	return n
}

func numsub(t *testing.T, c rueidis.Client, channel string) int64 {
	t.Helper()
	m, err := c.Do(ctxT(t), c.B().PubsubNumsub().Channel(channel).Build()).AsIntMap()
	if err != nil {
		t.Fatalf("PUBSUB NUMSUB %s: %v", channel, err)
	}
	return m[channel]
}

// eventually polls cond until it holds or waitFor passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true within %v", what, waitFor)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func waitNumsub(t *testing.T, c rueidis.Client, channel string, want int64) {
	t.Helper()
	var got int64
	eventually(t, fmt.Sprintf("PUBSUB NUMSUB %s == %d (last %d)", channel, want, got), func() bool {
		got = numsub(t, c, channel)
		return got == want
	})
}

// sentinel is a waiter on a channel of its own. Redis delivers one connection's messages in
// order, so once a message published on the sentinel after others has woken it, the Mux
// has handled every earlier message: a waiter not signalled by then never will be.
type sentinel struct {
	pub  rueidis.Client
	name string
	w    *Waiter
}

func newSentinel(t *testing.T, m *Mux, pub rueidis.Client) *sentinel {
	t.Helper()
	s := &sentinel{pub: pub, name: "sentinel", w: subscribe(t, m, "sentinel", LockPolicy)}
	waitSignal(t, s.w, "sentinel confirmation")
	return s
}

func (s *sentinel) flush(t *testing.T) {
	t.Helper()
	if n := publish(t, s.pub, s.name, "1"); n != 1 {
		t.Fatalf("PUBLISH %s reached %d subscribers, want 1", s.name, n)
	}
	waitSignal(t, s.w, "sentinel")
}

func pubsubClients(t *testing.T, c rueidis.Client) []string {
	t.Helper()
	s, err := c.Do(ctxT(t), c.B().ClientList().TypePubsub().Build()).ToString()
	if err != nil {
		t.Fatalf("CLIENT LIST TYPE pubsub: %v", err)
	}
	var lines []string
	for l := range strings.SplitSeq(strings.TrimSpace(s), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

func channelCount(m *Mux) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.channels)
}

func TestPolicies(t *testing.T) {
	for _, tc := range []struct {
		payload     string
		lock, count int
	}{
		{"0", 1, 0},
		{"1", All, 1},
		{"2", 0, 2},
		{"7", 0, 7},
		{"-1", 0, 0},
		{"", 0, 0},
		{"x", 0, 0},
		{" 1", 0, 0},
	} {
		if got := LockPolicy(tc.payload); got != tc.lock {
			t.Errorf("LockPolicy(%q) = %d, want %d", tc.payload, got, tc.lock)
		}
		if got := CountPolicy(tc.payload); got != tc.count {
			t.Errorf("CountPolicy(%q) = %d, want %d", tc.payload, got, tc.count)
		}
	}
}

func TestSubscribeSignalledOnConfirmation(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		pub := b.Client(t)
		m := newMux(t, b.Client(t), Options{})

		w1 := subscribe(t, m, "ch", LockPolicy)
		waitSignal(t, w1, "first waiter")
		// Signalled means confirmed: the server has the subscription, so a message
		// published from now on reaches the waiter.
		if n := numsub(t, pub, "ch"); n != 1 {
			t.Fatalf("NUMSUB after the confirmation signal = %d, want 1", n)
		}
		if n := publish(t, pub, "ch", "0"); n != 1 {
			t.Fatalf("PUBLISH right after confirmation reached %d subscribers, want 1", n)
		}
		waitSignal(t, w1, "first waiter, message published after confirmation")

		// The channel is already subscribed: a new waiter is signalled within Subscribe.
		w2, err := m.Subscribe("ch", LockPolicy)
		if err != nil {
			t.Fatal(err)
		}
		defer w2.Close()
		if !take(w2) {
			t.Fatal("waiter on an already subscribed channel was not signalled at once")
		}
		if take(w1) {
			t.Fatal("a new waiter's registration signalled an existing waiter")
		}
	})
}

func TestLockPolicyWakes(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		pub := b.Client(t)
		m := newMux(t, b.Client(t), Options{})
		s := newSentinel(t, m, pub)
		ws := subscribeN(t, m, "lock", LockPolicy, 5)

		// "0" (unlock) wakes exactly one idle waiter: the oldest.
		publish(t, pub, "lock", "0")
		s.flush(t)
		wantSignalled(t, `"0"`, ws, 0)

		// Again, consumed: the oldest is idle again and is the one woken.
		publish(t, pub, "lock", "0")
		s.flush(t)
		wantSignalled(t, `second "0"`, ws, 0)

		// A waiter that has not consumed its signal is not idle: the next one is woken.
		publish(t, pub, "lock", "0")
		publish(t, pub, "lock", "0")
		s.flush(t)
		wantSignalled(t, `two "0" unconsumed`, ws, 0, 1)

		// "1" (read unlock) wakes every waiter.
		publish(t, pub, "lock", "1")
		s.flush(t)
		wantSignalled(t, `"1"`, ws, 0, 1, 2, 3, 4)

		// Anything else wakes none.
		for _, msg := range []string{"7", "", "hello", "-1"} {
			publish(t, pub, "lock", msg)
		}
		s.flush(t)
		wantSignalled(t, "other payloads", ws)
	})
}

func TestCountPolicyWakes(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		pub := b.Client(t)
		m := newMux(t, b.Client(t), Options{})
		s := newSentinel(t, m, pub)
		ws := subscribeN(t, m, "sem", CountPolicy, 4)

		publish(t, pub, "sem", "2")
		s.flush(t)
		wantSignalled(t, `"2"`, ws, 0, 1)

		publish(t, pub, "sem", "9") // more than there are waiters: all of them, once
		s.flush(t)
		wantSignalled(t, `"9"`, ws, 0, 1, 2, 3)

		for _, msg := range []string{"0", "-2", "x"} {
			publish(t, pub, "sem", msg)
		}
		s.flush(t)
		wantSignalled(t, "0, negative and non-numeric payloads", ws)
	})
}

func TestOneSubscriptionPerChannel(t *testing.T) {
	const channels, perChannel = 20, 50
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		pub := b.Client(t)
		m := newMux(t, b.Client(t), Options{})
		all := make([][]*Waiter, channels)
		for i := range all {
			for range perChannel {
				all[i] = append(all[i], subscribe(t, m, fmt.Sprintf("ch%d", i), LockPolicy))
			}
		}
		for i, ws := range all {
			for j, w := range ws {
				waitSignal(t, w, fmt.Sprintf("ch%d waiter %d confirmation", i, j))
			}
		}
		for i := range all {
			name := fmt.Sprintf("ch%d", i)
			if n := numsub(t, pub, name); n != 1 {
				t.Errorf("NUMSUB %s = %d with %d local waiters, want 1", name, n, perChannel)
			}
			if n := publish(t, pub, name, "0"); n != 1 {
				t.Errorf("PUBLISH %s reached %d subscribers, want 1", name, n)
			}
		}
		for i, ws := range all {
			waitSignal(t, ws[0], fmt.Sprintf("ch%d oldest waiter", i))
		}
		if b.Mini != nil {
			t.Log("miniredis has no CLIENT LIST; the one-connection check runs on real Redis only")
			return
		}
		if got := pubsubClients(t, pub); len(got) != 1 {
			t.Fatalf("CLIENT LIST TYPE pubsub shows %d connections, want 1:\n%s", len(got), strings.Join(got, "\n"))
		}
	})
}

func TestUnsubscribeAfterLastWaiter(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		pub := b.Client(t)
		m := newMux(t, b.Client(t), Options{})
		ws := subscribeN(t, m, "ch", LockPolicy, 3)
		waitNumsub(t, pub, "ch", 1)

		ws[0].Close()
		ws[1].Close()
		time.Sleep(quiet) // a subscription must NOT be dropped while a waiter remains
		if n := numsub(t, pub, "ch"); n != 1 {
			t.Fatalf("NUMSUB = %d with one waiter left, want 1", n)
		}
		if n := publish(t, pub, "ch", "0"); n != 1 {
			t.Fatalf("PUBLISH reached %d subscribers with one waiter left, want 1", n)
		}
		waitSignal(t, ws[2], "remaining waiter")

		ws[2].Close()
		waitNumsub(t, pub, "ch", 0)
		eventually(t, "channel state dropped after unsubscribing", func() bool { return channelCount(m) == 0 })

		// Subscribing again later works.
		w := subscribe(t, m, "ch", LockPolicy)
		waitSignal(t, w, "re-subscribed waiter confirmation")
		if n := numsub(t, pub, "ch"); n != 1 {
			t.Fatalf("NUMSUB after re-subscribing = %d, want 1", n)
		}
		publish(t, pub, "ch", "0")
		waitSignal(t, w, "re-subscribed waiter, message")
	})
}

// TestChurn joins and leaves one channel from many goroutines at once; whatever the
// interleaving of SUBSCRIBE and UNSUBSCRIBE, a channel with a waiter ends up subscribed and
// a channel without one ends up unsubscribed and forgotten.
func TestChurn(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		pub := b.Client(t)
		m := newMux(t, b.Client(t), Options{})
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() {
				for range 50 {
					w, err := m.Subscribe("ch", LockPolicy)
					if err != nil {
						errs <- err
						return
					}
					w.Close()
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		waitNumsub(t, pub, "ch", 0)
		eventually(t, "channel state dropped after churn", func() bool { return channelCount(m) == 0 })

		// Churn that ends with waiters registered leaves the channel subscribed.
		keep := make([]*Waiter, 8)
		errs = make(chan error, len(keep))
		for i := range keep {
			wg.Go(func() {
				for range 50 {
					w, err := m.Subscribe("ch", LockPolicy)
					if err != nil {
						errs <- err
						return
					}
					w.Close()
				}
				w, err := m.Subscribe("ch", LockPolicy)
				if err != nil {
					errs <- err
					return
				}
				keep[i] = w
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for _, w := range keep {
			t.Cleanup(w.Close)
		}
		for i, w := range keep {
			waitSignal(t, w, fmt.Sprintf("kept waiter %d", i))
		}
		waitNumsub(t, pub, "ch", 1)
		if n := publish(t, pub, "ch", "1"); n != 1 {
			t.Fatalf("PUBLISH reached %d subscribers, want 1", n)
		}
		for i, w := range keep {
			waitSignal(t, w, fmt.Sprintf("kept waiter %d, message", i))
		}
	})
}

func TestCloseForwardsUnconsumedSignal(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		pub := b.Client(t)
		m := newMux(t, b.Client(t), Options{})
		s := newSentinel(t, m, pub)
		ws := subscribeN(t, m, "lock", LockPolicy, 4)

		publish(t, pub, "lock", "0")
		s.flush(t)
		// ws[0] holds the one wake-up of the unlock and leaves without consuming it: the
		// next waiter gets it, and only that one.
		ws[0].Close()
		wantSignalled(t, "after the woken waiter closed", ws[1:], 0)

		// Closing an idle waiter passes nothing on.
		ws[3].Close()
		wantSignalled(t, "after an idle waiter closed", ws[1:3])

		// Close is idempotent: a second Close neither forwards nor breaks anything.
		ws[0].Close()
		ws[3].Close()
		wantSignalled(t, "after closing twice", ws[1:3])

		// The channel still works for those left.
		publish(t, pub, "lock", "0")
		s.flush(t)
		wantSignalled(t, `"0" after the closes`, ws[1:3], 0)
	})
}

// checkResubscribed waits until every waiter has been signalled again and the server has one
// subscription per channel, then checks that a message still wakes the oldest waiter.
func checkResubscribed(t *testing.T, pub rueidis.Client, s *sentinel, chans map[string][]*Waiter) {
	t.Helper()
	waitSignal(t, s.w, "sentinel after reconnect")
	for name, ws := range chans {
		for i, w := range ws {
			waitSignal(t, w, fmt.Sprintf("%s waiter %d after reconnect", name, i))
		}
		if n := numsub(t, pub, name); n != 1 {
			t.Fatalf("NUMSUB %s after reconnect = %d, want 1", name, n)
		}
	}
	for name, ws := range chans {
		publish(t, pub, name, "0")
		s.flush(t)
		wantSignalled(t, name+` "0" after reconnect`, ws, 0)
	}
}

func TestReconnectAfterClientKill(t *testing.T) {
	b := redistest.Redis(t)
	pub := b.Client(t)
	m := newMux(t, b.Client(t), Options{})
	s := newSentinel(t, m, pub)
	chans := map[string][]*Waiter{
		"a": subscribeN(t, m, "a", LockPolicy, 3),
		"b": subscribeN(t, m, "b", LockPolicy, 2),
	}

	n, err := pub.Do(ctxT(t), pub.B().ClientKill().TypePubsub().Build()).AsInt64()
	if err != nil || n != 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub = %d, %v; want 1 connection killed", n, err)
	}
	checkResubscribed(t, pub, s, chans)
	if got := pubsubClients(t, pub); len(got) != 1 {
		t.Fatalf("CLIENT LIST TYPE pubsub shows %d connections after reconnect, want 1:\n%s", len(got), strings.Join(got, "\n"))
	}
}

// A Mux whose connection is cut resubscribes every channel once it can, wakes every
// waiter, and says so once, at info.
func TestReconnectThroughProxy(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		pub := b.Client(t)
		p := redistest.NewProxy(t, b.Addr)
		core, logs := observer.New(zapcore.InfoLevel)
		m := newMux(t, redistest.ClientFor(t, p.Addr()), Options{Logger: zap.New(core)})
		s := newSentinel(t, m, pub)
		chans := map[string][]*Waiter{
			"a": subscribeN(t, m, "a", LockPolicy, 3),
			"b": subscribeN(t, m, "b", LockPolicy, 2),
		}

		p.Blackhole(true)
		// The server sees the subscriber go; from here on nothing can be confirmed until
		// the proxy lets connections through again.
		waitNumsub(t, pub, "sentinel", 0)
		waitNumsub(t, pub, "a", 0)
		waitNumsub(t, pub, "b", 0)
		take(s.w)
		for _, ws := range chans {
			signalled(ws)
		}
		p.Blackhole(false)
		checkResubscribed(t, pub, s, chans)
		resubscribed := func() int { return logs.FilterMessage("pubsub resubscribed").FilterLevelExact(zapcore.InfoLevel).Len() }
		eventually(t, "the resubscription logged", func() bool { return resubscribed() > 0 })
		if n := resubscribed(); n != 1 {
			t.Errorf("%d resubscriptions logged at info, want 1: %v", n, logs.All())
		}
	})
}

func TestClose(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		pub := b.Client(t)
		c := b.Client(t)
		if err := c.Do(ctxT(t), c.B().Ping().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		before := runtime.NumGoroutine()

		m := New(c, Options{})
		ws := subscribeN(t, m, "ch", LockPolicy, 3)
		waitNumsub(t, pub, "ch", 1)

		closed := make(chan struct{})
		go func() {
			defer close(closed)
			var wg sync.WaitGroup
			for range 3 {
				wg.Go(m.Close) // concurrent Closes all return
			}
			wg.Wait()
			m.Close() // and so does a later one
		}()
		select {
		case <-closed:
		case <-time.After(waitFor):
			t.Fatal("Close did not return")
		}

		if _, err := m.Subscribe("ch", LockPolicy); !errors.Is(err, ErrClosed) {
			t.Fatalf("Subscribe after Close: err = %v, want ErrClosed", err)
		}
		if _, err := m.Subscribe("other", LockPolicy); !errors.Is(err, ErrClosed) {
			t.Fatalf("Subscribe of a new channel after Close: err = %v, want ErrClosed", err)
		}
		for _, w := range ws {
			w.Close() // closing waiters after the Mux is harmless
		}
		// The subscriber connection is gone with the Mux.
		waitNumsub(t, pub, "ch", 0)
		var now int
		eventually(t, "goroutines back to the count before New", func() bool {
			now = runtime.NumGoroutine()
			return now <= before
		})
	})
}

// TestCloseWhileReconnecting checks that Close returns while the run loop is retrying a
// connection that cannot be made.
func TestCloseWhileReconnecting(t *testing.T) {
	b := redistest.Miniredis(t)
	p := redistest.NewProxy(t, b.Addr)
	m := New(redistest.ClientFor(t, p.Addr()), Options{})
	w := subscribe(t, m, "ch", LockPolicy)
	waitSignal(t, w, "confirmation")
	p.Blackhole(true)
	pub := b.Client(t)
	waitNumsub(t, pub, "ch", 0)

	closed := make(chan struct{})
	go func() {
		m.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(waitFor):
		t.Fatal("Close did not return while the connection was down")
	}
}

// freezer is a TCP forwarder that can stop passing client bytes to the server while
// keeping every connection open: an unresponsive server, which Proxy.Blackhole (it closes
// connections) does not model.
type freezer struct {
	target string
	ln     net.Listener

	mu   sync.Mutex
	gate chan struct{} // closed while bytes flow
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{target: target, ln: ln, gate: make(chan struct{})}
	close(f.gate)
	var wg sync.WaitGroup
	var conns []net.Conn
	var cmu sync.Mutex
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			cmu.Lock()
			conns = append(conns, c, s)
			cmu.Unlock()
			wg.Go(func() { _, _ = io.Copy(c, s); c.Close() })
			wg.Go(func() { f.pump(s, c); s.Close() })
		}
	})
	t.Cleanup(func() {
		f.freeze(false)
		ln.Close()
		cmu.Lock()
		for _, c := range conns {
			c.Close()
		}
		cmu.Unlock()
		wg.Wait()
	})
	return f
}

func (f *freezer) addr() string { return f.ln.Addr().String() }

// pump copies src to dst, holding each chunk while frozen.
func (f *freezer) pump(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			f.mu.Lock()
			gate := f.gate
			f.mu.Unlock()
			<-gate
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (f *freezer) freeze(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.gate: // flowing
		if on {
			f.gate = make(chan struct{})
		}
	default: // frozen
		if !on {
			close(f.gate)
		}
	}
}

// TestCloseWhileServerUnresponsive checks that Close does not wait out the command timeout for a
// SUBSCRIBE the server never answers. (rueidis itself gives a silent connection up to 1 s
// to close gracefully.)
func TestCloseWhileServerUnresponsive(t *testing.T) {
	b := redistest.Miniredis(t)
	fz := newFreezer(t, b.Addr)
	core, logs := observer.New(zapcore.DebugLevel)
	m := New(redistest.ClientFor(t, fz.addr()), Options{commandTimeout: time.Minute, Logger: zap.New(core)})
	w := subscribe(t, m, "warm", LockPolicy)
	waitSignal(t, w, "confirmation")

	fz.freeze(true)
	subscribe(t, m, "stuck", LockPolicy) // its SUBSCRIBE never reaches the server
	eventually(t, "the SUBSCRIBE in flight", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		_, queued := m.dirty["stuck"]
		return !queued
	})
	closed := make(chan struct{})
	start := time.Now()
	go func() {
		m.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second): // promptly on a loaded machine; blocked, it never returns
		fz.freeze(false)
		<-closed
		t.Fatalf("Close blocked %v on a SUBSCRIBE the server did not answer", time.Since(start))
	}
	fz.freeze(false) // let the client's own Close be quick
	// The SUBSCRIBE that Close cancelled is no failure to retry or report.
	if n := logs.FilterMessageSnippet("subscribe failed").Len(); n != 0 {
		t.Fatalf("Close logged %d subscribe failures: %v", n, logs.All())
	}
}

func TestSharded(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		if b.Mini != nil {
			t.Skip("miniredis has no SSUBSCRIBE/SPUBLISH")
		}
		pub := b.Client(t)
		m := newMux(t, b.Client(t), Options{Mode: Sharded})
		ws := subscribeN(t, m, "{x}lock", LockPolicy, 3)

		shardNumsub := func() int64 {
			r, err := pub.Do(ctxT(t), pub.B().PubsubShardnumsub().Channel("{x}lock").Build()).AsIntMap()
			if err != nil {
				t.Fatalf("PUBSUB SHARDNUMSUB: %v", err)
			}
			return r["{x}lock"]
		}
		if n := shardNumsub(); n != 1 {
			t.Fatalf("SHARDNUMSUB = %d, want 1", n)
		}
		if n := numsub(t, pub, "{x}lock"); n != 0 {
			t.Fatalf("sharded mode made a plain subscription: NUMSUB = %d", n)
		}
		spublish := func(msg string) {
			t.Helper()
			if n, err := pub.Do(ctxT(t), pub.B().Spublish().Channel("{x}lock").Message(msg).Build()).AsInt64(); err != nil || n != 1 {
				t.Fatalf("SPUBLISH = %d, %v; want 1 subscriber", n, err)
			}
		}
		spublish("0")
		waitSignal(t, ws[0], "oldest waiter, SPUBLISH 0")
		spublish("1")
		for i, w := range ws {
			waitSignal(t, w, fmt.Sprintf("waiter %d, SPUBLISH 1", i))
		}

		for _, w := range ws {
			w.Close()
		}
		eventually(t, "SHARDNUMSUB 0 after the last waiter left", func() bool { return shardNumsub() == 0 })
	})
}

// Join queues behind existing waiters only: nil on a channel without waiters, and no signal
// on registration (the waiters before it are woken first), so a contended caller can skip an
// attempt that could only fail. Wake-one then serves waiters in arrival order.
func TestJoinQueuesBehindWaiters(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		pub := b.Client(t)
		m := newMux(t, b.Client(t), Options{})
		s := newSentinel(t, m, pub)
		if w, _ := m.Join("queue"); w != nil {
			t.Fatal("Join on a channel without waiters returned a waiter")
		}
		first := subscribeN(t, m, "queue", LockPolicy, 1)[0] // subscribed, confirmation consumed
		joined, _ := m.Join("queue")
		if joined == nil {
			t.Fatal("Join behind a waiter returned nil")
		}
		defer joined.Close()
		s.flush(t)
		if take(joined) {
			t.Fatal("a joined waiter was signalled on registration")
		}
		if m.Waiters("queue") != 2 {
			t.Fatalf("Waiters = %d, want 2", m.Waiters("queue"))
		}
		publish(t, pub, "queue", "0")
		s.flush(t)
		wantSignalled(t, `"0" with a joined waiter`, []*Waiter{first, joined}, 0)
		first.Close()
		publish(t, pub, "queue", "0")
		s.flush(t)
		wantSignalled(t, `"0" after the first left`, []*Waiter{joined}, 0)
	})
}

// Listen on a channel not yet subscribed: not ready, and signalled once the subscription is
// confirmed (the caller's check made before then could have missed a message); a message
// published afterwards reaches the waiter, and Last tells its payload.
func TestListenNotReadySignalledOnConfirmation(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		pub := b.Client(t)
		m := newMux(t, b.Client(t), Options{})
		w, ready, err := m.Listen("own", AllPolicy)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if ready {
			t.Fatal("Listen on a channel never subscribed reported it ready")
		}
		waitSignal(t, w, "confirmation")
		if !m.Subscribed("own") {
			t.Fatal("signalled before the subscription was confirmed")
		}
		if got := w.Last(); got != "" {
			t.Fatalf("Last before any message = %q, want \"\" (the confirmation is no message)", got)
		}
		if n := publish(t, pub, "own", "2"); n != 1 {
			t.Fatalf("PUBLISH reached %d subscribers, want 1", n)
		}
		waitSignal(t, w, "message after Listen")
		if got := w.Last(); got != "2" {
			t.Fatalf("Last = %q, want \"2\"", got)
		}
	})
}

// Listen on a subscribed channel: ready, and not signalled (nothing can have been missed);
// every message from then on reaches it. Last is the latest payload since the waiter
// registered: a waiter registered after a message does not see it.
func TestListenOnSubscribedChannelReadyNotSignalled(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		pub := b.Client(t)
		m := newMux(t, b.Client(t), Options{})
		s := newSentinel(t, m, pub)
		first := subscribeN(t, m, "own", AllPolicy, 1)[0]
		w, ready, err := m.Listen("own", AllPolicy)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if !ready {
			t.Fatal("Listen on a subscribed channel reported it not ready")
		}
		s.flush(t)
		if take(w) {
			t.Fatal("Listen on a subscribed channel signalled the waiter")
		}
		if take(first) {
			t.Fatal("a new waiter's registration signalled an existing waiter")
		}
		if got := w.Last(); got != "" {
			t.Fatalf("Last before any message = %q, want \"\"", got)
		}

		// Two messages before the waiter looks: it is signalled once, and Last is the latest.
		publish(t, pub, "own", "0")
		publish(t, pub, "own", "2")
		s.flush(t)
		wantSignalled(t, "two messages", []*Waiter{first, w}, 0, 1)
		if got := w.Last(); got != "2" {
			t.Fatalf("Last after 0 then 2 = %q, want \"2\"", got)
		}

		// A waiter registered after the message: Last is "" until a message comes after it.
		late, ready, err := m.Listen("own", AllPolicy)
		if err != nil {
			t.Fatal(err)
		}
		defer late.Close()
		if !ready {
			t.Fatal("Listen on a subscribed channel reported it not ready")
		}
		if got := late.Last(); got != "" {
			t.Fatalf("Last of a waiter registered after a message = %q, want \"\"", got)
		}
		if got := w.Last(); got != "2" {
			t.Fatalf("Last of the earlier waiter = %q after another registered, want \"2\"", got)
		}
		publish(t, pub, "own", "0")
		s.flush(t)
		wantSignalled(t, "message after the late waiter", []*Waiter{first, w, late}, 0, 1, 2)
		for i, x := range []*Waiter{first, w, late} {
			if got := x.Last(); got != "0" {
				t.Fatalf("waiter %d: Last = %q, want \"0\"", i, got)
			}
		}
		w.Close()
		if got := w.Last(); got != "" {
			t.Fatalf("Last of a closed waiter = %q, want \"\"", got)
		}
	})
}

// With Linger the channel stays subscribed after its last waiter leaves, for that long
// after the last one leaves: a waiter coming back within it is ready at once, and a message
// reaches it with no new SUBSCRIBE; after the linger the channel is left and forgotten.
func TestLingerKeepsChannelSubscribed(t *testing.T) {
	// Long enough for the steps between a waiter leaving and coming back on a loaded
	// machine (200 ms was not always).
	const linger = 2 * time.Second
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		pub := b.Client(t)
		m := newMux(t, b.Client(t), Options{Linger: linger})
		s := newSentinel(t, m, pub)
		w, ready, err := m.Listen("own", AllPolicy)
		if err != nil {
			t.Fatal(err)
		}
		if ready {
			t.Fatal("Listen on a new channel reported it ready")
		}
		waitSignal(t, w, "confirmation")
		w.Close()
		if !m.Subscribed("own") || numsub(t, pub, "own") != 1 {
			t.Fatalf("right after the last waiter left: Subscribed %v, NUMSUB %d; want it lingering", m.Subscribed("own"), numsub(t, pub, "own"))
		}
		if n := publish(t, pub, "own", "2"); n != 1 {
			t.Fatalf("PUBLISH to a lingering channel reached %d subscribers, want 1", n)
		}
		// Delivered before the waiter comes back. (PUBLISH's reply comes before the message
		// reaches the Mux: without the fence a waiter registered right after it may still be
		// signalled by it, and see it as Last.)
		s.flush(t)

		// Back within the linger: ready, not signalled, and the message of the time nobody
		// listened is not its own.
		back, ready, err := m.Listen("own", AllPolicy)
		if err != nil {
			t.Fatal(err)
		}
		if !ready {
			t.Fatal("Listen within the linger reported the channel not ready")
		}
		s.flush(t)
		if take(back) {
			t.Fatal("a waiter coming back within the linger was signalled")
		}
		if got := back.Last(); got != "" {
			t.Fatalf("Last of a waiter coming back = %q, want \"\": the message came before it", got)
		}
		publish(t, pub, "own", "0")
		waitSignal(t, back, "message to a waiter that came back")
		if got := back.Last(); got != "0" {
			t.Fatalf("Last = %q, want \"0\"", got)
		}
		back.Close()
		left := time.Now()
		var gone time.Duration
		eventually(t, "the channel left after the linger", func() bool {
			if numsub(t, pub, "own") != 0 || m.Subscribed("own") {
				return false
			}
			gone = time.Since(left)
			return true
		})
		if gone < linger {
			t.Fatalf("the channel was left %v after its last waiter, before the %v linger", gone, linger)
		}
		eventually(t, "the channel forgotten", func() bool { return channelCount(m) == 1 }) // the sentinel's
		t.Logf("%s: left %v after the last waiter (linger %v)", b.Name, gone, linger)

		// After the linger, Listen is not ready again and is signalled on confirmation.
		again, ready, err := m.Listen("own", AllPolicy)
		if err != nil {
			t.Fatal(err)
		}
		defer again.Close()
		if ready {
			t.Fatal("Listen after the linger reported the channel ready")
		}
		waitSignal(t, again, "confirmation after the linger")
	})
}

// A forward has one channel's messages wake another's waiters, by its own policy, while it
// lasts: started by Forward or by a cue on the waiters' channel (which wakes nobody), ended
// by Unforward, which leaves the channel at once, or by the waiters' channel being left.
func TestForward(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		pub := b.Client(t)
		m := newMux(t, b.Client(t), Options{})
		s := newSentinel(t, m, pub)
		ws := subscribeN(t, m, "mine", LockPolicy, 2)

		if err := m.Forward("shared", "mine", LockPolicy); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the forwarded channel subscribed", func() bool { return m.Subscribed("shared") })
		publish(t, pub, "shared", "0")
		s.flush(t)
		wantSignalled(t, `"0" on the forwarded channel`, ws, 0)
		publish(t, pub, "shared", "00")
		s.flush(t)
		wantSignalled(t, `"00" on the forwarded channel`, ws)

		m.Unforward("shared")
		waitNumsub(t, pub, "shared", 0)
		publish(t, pub, "shared", "0")
		s.flush(t)
		wantSignalled(t, "a message after Unforward", ws)

		m.Cue("mine", "00", "shared", LockPolicy)
		publish(t, pub, "mine", "00")
		s.flush(t)
		wantSignalled(t, "the cue", ws)
		eventually(t, "the cued channel subscribed", func() bool { return m.Subscribed("shared") })
		publish(t, pub, "shared", "1")
		s.flush(t)
		wantSignalled(t, `"1" on the channel the cue forwarded`, ws, 0, 1)

		for _, w := range ws {
			w.Close()
		}
		waitNumsub(t, pub, "mine", 0)
		waitNumsub(t, pub, "shared", 0)
		eventually(t, "both channels forgotten", func() bool { return channelCount(m) == 1 }) // the sentinel's left
	})
}
