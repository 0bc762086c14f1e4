package redistest

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	// proxyDialTimeout bounds connecting to the target, so a test whose
	// server is gone fails fast instead of hanging a connection forever.
	proxyDialTimeout = 5 * time.Second
	// dropGrace is how long a dropped-reply connection waits for the server
	// to finish with the forwarded request before it is torn down anyway.
	dropGrace = 2 * time.Second
	// markerWindow is how many bytes of already forwarded data are kept per
	// connection, so a marker split across two reads is still found.
	// Markers longer than this are only found within a single read.
	markerWindow = 4096
	proxyBufSize = 32 << 10
)

// Proxy is a TCP proxy between clients and a test server that can inject
// network failures: replies lost in transit, the server becoming
// unreachable, and the server hanging. Create one with NewProxy and point clients at Addr.
type Proxy struct {
	target string
	ln     net.Listener
	done   chan struct{} // closed when the proxy shuts down
	wg     sync.WaitGroup

	mu        sync.Mutex
	conns     map[*proxyConn]struct{}
	closed    bool
	blackhole bool
	// unhung is nil while traffic flows, and while Hang is on a channel closed when it ends.
	unhung  chan struct{}
	armed   bool   // a DropReplyAfter fault is waiting for its marker
	marker  []byte // the armed fault's marker
	cutOff  bool   // the armed fault blackholes the proxy once it has dropped the reply
	dropped int
}

// NewProxy starts a proxy on a random 127.0.0.1 port that forwards every
// connection to target. It is shut down, with all its connections and
// goroutines, when the test finishes.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy listen: %v", err)
	}
	p := &Proxy{
		target: target,
		ln:     ln,
		done:   make(chan struct{}),
		conns:  make(map[*proxyConn]struct{}),
	}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(p.close)
	return p
}

// Addr returns the host:port clients should connect to.
func (p *Proxy) Addr() string {
	return p.ln.Addr().String()
}

// DropReplyAfter arms a one-shot fault: the next client-to-server read, on
// any connection, that contains marker is still forwarded, so the server
// executes the command, but the client never sees another byte on that
// connection; it is closed instead. The client therefore gets a connection
// error for a command that did take effect, which is what a reply lost in
// the network looks like.
//
// The client side is closed only after the server has finished with the
// request (it has closed its end after reading everything sent to it), or
// after a grace period, so when the client sees the error the command has
// already run. Arming again replaces a fault that has not fired yet. An
// empty marker matches the next request of any connection.
func (p *Proxy) DropReplyAfter(marker []byte) { p.arm(marker, false) }

// DropReplyAndBlackhole is DropReplyAfter, and Blackhole turned on as the reply is dropped:
// before the client sees its connection close, so that none of its repeats of the request
// gets through, whatever the machine's load.
func (p *Proxy) DropReplyAndBlackhole(marker []byte) { p.arm(marker, true) }

func (p *Proxy) arm(marker []byte, cutOff bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.cutOff = true, cutOff
	p.marker = bytes.Clone(marker)
}

// Dropped reports how many replies DropReplyAfter faults have dropped so
// far, so a test can check that its fault actually fired. A drop counts once
// the server is done with its request, and before the client sees its
// connection close.
func (p *Proxy) Dropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// Blackhole makes the server unreachable through the proxy while on: every
// open connection is closed, and new ones are accepted and immediately
// closed. Turning it off lets new connections through again; connections
// closed meanwhile stay closed, as they would after a real outage.
func (p *Proxy) Blackhole(on bool) { p.setBlackhole(on, nil) }

// setBlackhole is Blackhole, closing every open connection but except (nil: none).
func (p *Proxy) setBlackhole(on bool, except *proxyConn) {
	p.mu.Lock()
	p.blackhole = on
	var victims []*proxyConn
	if on {
		for pc := range p.conns {
			if pc != except {
				victims = append(victims, pc)
			}
		}
	}
	p.mu.Unlock()
	for _, pc := range victims {
		pc.close()
	}
}

// A drop is a DropReplyAfter fault that fired.
type drop struct {
	p      *Proxy
	cutOff bool // and blackholes the proxy (DropReplyAndBlackhole)
}

// dropDone counts the reply dropped on the cut connection pc, which is closing, and
// blackholes the proxy if cutOff.
func (p *Proxy) dropDone(pc *proxyConn, cutOff bool) {
	p.mu.Lock()
	p.dropped++
	p.mu.Unlock()
	if cutOff {
		p.setBlackhole(true, pc)
	}
}

// Hang makes the server hang while on, as a stopped process (SIGSTOP) or one stuck in a
// long command does: connections stay open and new ones are accepted, but nothing passes
// either way — requests and replies are held, and go on when Hang is turned off (a request
// held meanwhile then runs late, as it would on a server that resumes).
func (p *Proxy) Hang(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.unhung == nil:
		p.unhung = make(chan struct{})
	case !on && p.unhung != nil:
		close(p.unhung)
		p.unhung = nil
	}
}

// pass waits while the proxy hangs, and reports whether pc may go on: false once pc or the
// proxy is closed.
func (p *Proxy) pass(pc *proxyConn) bool {
	p.mu.Lock()
	unhung := p.unhung
	p.mu.Unlock()
	if unhung != nil {
		select {
		case <-unhung:
		case <-pc.done:
			return false
		case <-p.done:
			return false
		}
	}
	return true
}

func (p *Proxy) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	conns := make([]*proxyConn, 0, len(p.conns))
	for pc := range p.conns {
		conns = append(conns, pc)
	}
	p.mu.Unlock()

	close(p.done)
	_ = p.ln.Close()
	for _, pc := range conns {
		pc.close()
	}
	p.wg.Wait()
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Anything else (say, out of file descriptors) is transient
			// from the proxy's point of view; back off briefly instead of
			// spinning, unless we are shutting down.
			select {
			case <-p.done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve forwards one client connection until either side closes it, the
// proxy blackholes it, or a fault tears it down.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	if p.isBlackholed() {
		_ = client.Close()
		return
	}
	server, err := net.DialTimeout("tcp", p.target, proxyDialTimeout)
	if err != nil {
		_ = client.Close()
		return
	}
	pc := &proxyConn{client: client, server: server, serverDone: make(chan struct{}), done: make(chan struct{})}
	if !p.register(pc) {
		pc.close()
		return
	}
	defer p.unregister(pc)

	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.serverToClient(pc)
	}()
	p.clientToServer(pc)
	<-pc.serverDone
}

func (p *Proxy) isBlackholed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.blackhole || p.closed
}

// register adds pc to the live connections, unless the proxy was closed or
// blackholed while pc was being dialled.
func (p *Proxy) register(pc *proxyConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.blackhole || p.closed {
		return false
	}
	p.conns[pc] = struct{}{}
	return true
}

func (p *Proxy) unregister(pc *proxyConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, pc)
}

// claimFault reports whether the armed fault's marker occurs in chunk,
// disarming the fault if so, and whether the fault blackholes the proxy once
// it dropped the reply. tail holds the bytes forwarded just before chunk; only
// enough of it is searched to catch a marker that straddles the two, never a
// marker that lies wholly in data sent earlier.
func (p *Proxy) claimFault(tail, chunk []byte) (fired, cutOff bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.armed {
		return false, false
	}
	if keep := len(p.marker) - 1; len(tail) > keep {
		tail = tail[len(tail)-max(keep, 0):]
	}
	window := append(bytes.Clone(tail), chunk...)
	if !bytes.Contains(window, p.marker) {
		return false, false
	}
	p.armed = false
	p.marker = nil
	return true, p.cutOff
}

func (p *Proxy) clientToServer(pc *proxyConn) {
	buf := make([]byte, proxyBufSize)
	var tail []byte
	for {
		n, err := pc.client.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if fired, cutOff := p.claimFault(tail, chunk); fired {
				p.dropReply(pc, chunk, cutOff)
				return
			}
			if !p.pass(pc) {
				return
			}
			if _, werr := pc.server.Write(chunk); werr != nil {
				pc.close()
				return
			}
			tail = append(tail, chunk...)
			if len(tail) > markerWindow {
				tail = append(tail[:0], tail[len(tail)-markerWindow:]...)
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				// Pass a half-close on, so a client that shuts its write
				// side and then waits for replies still gets them;
				// serverToClient closes everything once the server is done.
				if closeWrite(pc.server) == nil {
					return
				}
			}
			pc.close()
			return
		}
	}
}

// dropReply forwards the request in chunk while making sure no reply to it
// can reach the client, then closes the connection.
func (p *Proxy) dropReply(pc *proxyConn, chunk []byte, cutOff bool) {
	// Cut the server-to-client direction first. Only then is it safe to
	// send the request: everything the server sends from now on, the reply
	// included, is discarded.
	pc.dropped.Store(&drop{p: p, cutOff: cutOff})
	pc.wmu.Lock()
	pc.cut = true
	pc.wmu.Unlock()

	if _, err := pc.server.Write(chunk); err == nil {
		// Half-close rather than close: the server reads the request,
		// executes it, sees EOF and hangs up, which tells us it is done. A
		// full close could instead reset the connection and make the server
		// throw the unread request away.
		if closeWrite(pc.server) == nil {
			select {
			case <-pc.serverDone:
			case <-p.done:
			case <-time.After(dropGrace):
			}
		}
	}
	pc.close()
}

func (p *Proxy) serverToClient(pc *proxyConn) {
	defer close(pc.serverDone)
	// Whatever ends this direction ends the connection: a server that
	// hung up has nothing more to say, and after a dropped reply this is
	// the moment the client may learn about it.
	defer pc.close()
	buf := make([]byte, proxyBufSize)
	for {
		n, err := pc.server.Read(buf)
		if n > 0 {
			if !p.pass(pc) {
				return
			}
			pc.wmu.Lock()
			var werr error
			if !pc.cut {
				_, werr = pc.client.Write(buf[:n])
			}
			pc.wmu.Unlock()
			if werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// proxyConn is one proxied client connection and its server connection.
type proxyConn struct {
	client, server net.Conn
	serverDone     chan struct{} // closed when serverToClient returns

	// wmu is held across the check of cut and the write to the client, so
	// that once dropReply has set cut no server bytes can still be on
	// their way to the client.
	wmu sync.Mutex
	cut bool
	// dropped, once set, is the fault whose drop is counted when the cut connection
	// closes: once the server is done with the request (or the grace is over), and before
	// the client can learn of the loss, so that a test that sees the count and cuts the
	// server off then finds the request run and its repeats cut off. Atomic: close must
	// not wait for wmu, which a write to a client that does not read holds.
	dropped atomic.Pointer[drop]

	closeOnce sync.Once
	done      chan struct{} // closed by close
}

func (pc *proxyConn) close() {
	pc.closeOnce.Do(func() {
		if d := pc.dropped.Load(); d != nil {
			d.p.dropDone(pc, d.cutOff)
		}
		close(pc.done)
		_ = pc.client.Close()
		_ = pc.server.Close()
	})
}

// closeWrite shuts the write side of c, where c supports it.
func closeWrite(c net.Conn) error {
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok {
		return errors.New("connection does not support half-close")
	}
	return cw.CloseWrite()
}
