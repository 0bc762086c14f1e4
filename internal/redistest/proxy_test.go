package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

func TestProxyForwards(t *testing.T) {
	Each(t, func(t *testing.T, b *Backend) {
		direct := b.Client(t)
		ctx := testContext(t)
		if err := direct.Do(ctx, direct.B().Set().Key("k").Value("v").Build()).Error(); err != nil {
			t.Fatalf("SET: %v", err)
		}

		p := NewProxy(t, b.Addr)
		c := ClientFor(t, p.Addr())
		if v, err := c.Do(ctx, c.B().Get().Key("k").Build()).ToString(); err != nil || v != "v" {
			t.Fatalf("GET through proxy = %q, %v; want \"v\"", v, err)
		}
		if p.Dropped() != 0 {
			t.Fatalf("Dropped() = %d with no fault armed", p.Dropped())
		}
	})
}

func TestProxyDropReplyAfter(t *testing.T) {
	Each(t, func(t *testing.T, b *Backend) {
		direct := b.Client(t)
		p := NewProxy(t, b.Addr)
		c := ClientFor(t, p.Addr())
		ctx := testContext(t)

		p.DropReplyAfter([]byte("SET"))
		err := c.Do(ctx, c.B().Set().Key("k").Value("v").Build()).Error()
		if err == nil {
			t.Fatal("SET through a reply-dropping proxy succeeded")
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("SET timed out instead of seeing the connection close: %v", err)
		}
		if got := p.Dropped(); got != 1 {
			t.Fatalf("Dropped() = %d, want 1", got)
		}
		// The proxy only lets the client see the error once the server is
		// done with the request, so the write is visible without waiting.
		if v, err := direct.Do(ctx, direct.B().Get().Key("k").Build()).ToString(); err != nil || v != "v" {
			t.Fatalf("GET on the server after the dropped SET = %q, %v; want \"v\"", v, err)
		}

		// The fault is one-shot, and the client reconnects by itself.
		if err := c.Do(ctx, c.B().Set().Key("k2").Value("v2").Build()).Error(); err != nil {
			t.Fatalf("second SET through the proxy: %v", err)
		}
		if v, err := c.Do(ctx, c.B().Get().Key("k2").Build()).ToString(); err != nil || v != "v2" {
			t.Fatalf("GET through the proxy = %q, %v; want \"v2\"", v, err)
		}
		if got := p.Dropped(); got != 1 {
			t.Fatalf("Dropped() = %d after the fault was used up, want 1", got)
		}
	})
}

// A DropReplyAndBlackhole fault drops the reply of a request that ran, and the proxy is
// blackholed before the client sees its connection close: its repeat does not get through
// until Blackhole is turned off.
func TestProxyDropReplyAndBlackhole(t *testing.T) {
	Each(t, func(t *testing.T, b *Backend) {
		direct := b.Client(t)
		p := NewProxy(t, b.Addr)
		c := ClientFor(t, p.Addr())
		ctx := testContext(t)

		p.DropReplyAndBlackhole([]byte("INCR"))
		if err := c.Do(ctx, c.B().Incr().Key("n").Build()).Error(); err == nil {
			t.Fatal("INCR through a reply-dropping proxy succeeded")
		}
		if got := p.Dropped(); got != 1 {
			t.Fatalf("Dropped() = %d, want 1", got)
		}
		// The repeat finds the proxy blackholed.
		if err := c.Do(ctx, c.B().Incr().Key("n").Build()).Error(); err == nil {
			t.Fatal("a repeat of the INCR got through the blackholed proxy")
		}
		if n, err := direct.Do(ctx, direct.B().Get().Key("n").Build()).AsInt64(); err != nil || n != 1 {
			t.Fatalf("n on the server = %d, %v; want 1: the dropped INCR ran, its repeat did not", n, err)
		}
		// Once it is off, the client reconnects (its first try may find the connection the
		// blackhole closed).
		p.Blackhole(false)
		for {
			n, err := c.Do(ctx, c.B().Incr().Key("n").Build()).AsInt64()
			if err == nil {
				if n != 2 {
					t.Fatalf("INCR once the blackhole is off = %d, want 2", n)
				}
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("INCR once the blackhole is off: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// TestProxyDropReplyMarkerAcrossReads checks that a marker split over two
// TCP reads is still found, and that bytes sent before the fault was armed
// do not trigger it.
func TestProxyDropReplyMarkerAcrossReads(t *testing.T) {
	b := Miniredis(t)
	p := NewProxy(t, b.Addr)
	conn, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	send := func(s string) {
		t.Helper()
		if _, err := fmt.Fprint(conn, s); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	expect := func(want string) {
		t.Helper()
		buf := make([]byte, len(want))
		if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != want {
			t.Fatalf("read %q, %v; want %q", buf, err, want)
		}
	}

	// "marker" goes through before the fault is armed.
	send("*2\r\n$4\r\nECHO\r\n$6\r\nmarker\r\n")
	expect("$6\r\nmarker\r\n")
	p.DropReplyAfter([]byte("marker"))
	send("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$6\r\nmar")
	// Give the proxy a chance to forward the first half on its own, so
	// the marker really straddles two reads; correctness does not depend
	// on it.
	time.Sleep(20 * time.Millisecond)
	send("ker\r\n")
	buf := make([]byte, 1)
	if n, err := conn.Read(buf); err == nil {
		t.Fatalf("read %q after the marker, want the connection closed", buf[:n])
	}
	if p.Dropped() != 1 {
		t.Fatalf("Dropped() = %d, want 1", p.Dropped())
	}
	if v, err := b.Mini.Get("k"); err != nil || v != "marker" {
		t.Fatalf("server has k = %q, %v; want \"marker\"", v, err)
	}
}

func TestProxyBlackhole(t *testing.T) {
	Each(t, func(t *testing.T, b *Backend) {
		p := NewProxy(t, b.Addr)
		c := ClientFor(t, p.Addr())
		ctx := testContext(t)
		ping := func(c rueidis.Client) error {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			return c.Do(ctx, c.B().Ping().Build()).Error()
		}
		if err := ping(c); err != nil {
			t.Fatalf("PING through proxy: %v", err)
		}

		p.Blackhole(true)
		if err := ping(c); err == nil {
			t.Fatal("PING succeeded through a blackholed proxy")
		}
		if nc, err := rueidis.NewClient(ClientOptionFor(p.Addr())); err == nil {
			nc.Close()
			t.Fatal("new client connected through a blackholed proxy")
		}

		p.Blackhole(false)
		// The existing client reconnects on its own...
		eventually(t, 5*time.Second, func() error { return ping(c) })
		// ...and a new one can connect again.
		if err := ping(ClientFor(t, p.Addr())); err != nil {
			t.Fatalf("PING from a new client after the blackhole: %v", err)
		}
	})
}

func TestClaimFault(t *testing.T) {
	for _, tc := range []struct {
		name        string
		marker      string
		tail, chunk string
		want        bool
	}{
		{"in chunk", "SET", "", "*1\r\n$3\r\nSET\r\n", true},
		{"straddles", "marker", "$6\r\nmar", "ker\r\n", true},
		{"only in old data", "SET", "SET\r\n", "$1\r\nk\r\n", false},
		{"absent", "SET", "GET", "GET", false},
		{"empty marker", "", "", "PING", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Proxy{}
			if fired, _ := p.claimFault([]byte(tc.tail), []byte(tc.chunk)); fired {
				t.Fatal("fired while not armed")
			}
			p.DropReplyAfter([]byte(tc.marker))
			if got, _ := p.claimFault([]byte(tc.tail), []byte(tc.chunk)); got != tc.want {
				t.Fatalf("claimFault = %v, want %v", got, tc.want)
			}
			if fired, _ := p.claimFault([]byte(tc.tail), []byte(tc.chunk)); tc.want && fired {
				t.Fatal("fired twice")
			}
		})
	}
}

// A hung proxy answers nothing on open connections or new ones, and what it held back goes
// through once it stops hanging: a SET sent meanwhile runs then.
func TestProxyHang(t *testing.T) {
	Each(t, func(t *testing.T, b *Backend) {
		p := NewProxy(t, b.Addr)
		c := ClientFor(t, p.Addr())
		direct := b.Client(t)
		ctx := testContext(t)
		if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
			t.Fatalf("PING through proxy: %v", err)
		}

		p.Hang(true)
		raw, err := net.DialTimeout("tcp", p.Addr(), time.Second)
		if err != nil {
			t.Fatalf("dial a hung proxy: %v (a hung server's kernel still accepts)", err)
		}
		defer raw.Close()
		if _, err := io.WriteString(raw, "*3\r\n$3\r\nSET\r\n$4\r\nhung\r\n$1\r\nv\r\n"); err != nil {
			t.Fatal(err)
		}
		_ = raw.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if n, err := raw.Read(make([]byte, 16)); n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a new connection to a hung proxy got %d bytes, %v; want nothing", n, err)
		}
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		if err := c.Do(pctx, c.B().Ping().Build()).Error(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("PING on an open connection to a hung proxy: %v, want no answer", err)
		}
		if n, err := direct.Do(ctx, direct.B().Exists().Key("hung").Build()).AsInt64(); n != 0 || err != nil {
			t.Fatalf("EXISTS hung = %d, %v while the proxy hangs: the SET went through", n, err)
		}

		p.Hang(false)
		_ = raw.SetReadDeadline(time.Now().Add(5 * time.Second))
		if line, err := bufio.NewReader(raw).ReadString('\n'); err != nil || line != "+OK\r\n" {
			t.Fatalf("the held SET, once the proxy stops hanging: %q, %v; want +OK", line, err)
		}
		eventually(t, 5*time.Second, func() error { return c.Do(ctx, c.B().Ping().Build()).Error() })
	})
}
