package redistest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EnvRedis is the environment variable that decides what happens to the
// real-Redis backend; see the package documentation for its values.
const EnvRedis = "LATCHKEY_REDIS"

const (
	// startAttempts bounds the retries when the chosen port is taken by
	// someone else between picking it and redis-server binding it.
	startAttempts = 5
	// startTimeout is how long one redis-server gets to answer PING. It
	// normally takes a few milliseconds; the slack is for a loaded CI
	// machine running tests with -race.
	startTimeout = 15 * time.Second
	// probeTimeout bounds one readiness probe, so a wedged connection
	// cannot eat the whole start-up budget.
	probeTimeout = time.Second
	// probeInterval is the pause between readiness probes.
	probeInterval = 5 * time.Millisecond
)

type redisMode int

const (
	redisAuto redisMode = iota
	redisRequired
	redisOff
)

func redisModeFromEnv() (redisMode, error) {
	switch v := os.Getenv(EnvRedis); v {
	case "":
		return redisAuto, nil
	case "required":
		return redisRequired, nil
	case "off":
		return redisOff, nil
	default:
		return 0, fmt.Errorf("%s=%q is not understood: want unset, \"\", \"required\" or \"off\"", EnvRedis, v)
	}
}

// errPortTaken reports that redis-server could not have the port it was
// given, which is worth retrying with another one.
var errPortTaken = errors.New("port already in use")

// Redis starts a fresh redis-server process on a free loopback port, with
// persistence off, and kills it when the test finishes. Its output is shown
// only if the test fails.
//
// If redis-server is not on PATH the test is skipped, unless LATCHKEY_REDIS
// is "required", in which case it fails. With LATCHKEY_REDIS=off the test is
// always skipped.
func Redis(t testing.TB) *Backend {
	t.Helper()
	return &Backend{Name: NameRedis, Addr: start(t).addr}
}

// start starts a redis-server with args besides the defaults, killed when the test
// finishes.
func start(t testing.TB, args ...string) *redisProcess {
	t.Helper()
	path := redisServerPath(t)
	dir := t.TempDir()
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		srv, err := startRedis(path, dir, port, args...)
		if err == nil {
			t.Cleanup(func() {
				srv.stop()
				if t.Failed() {
					t.Logf("redis-server on %s output:\n%s", srv.addr, srv.out.String())
				}
			})
			return srv
		}
		if errors.Is(err, errPortTaken) && attempt < startAttempts {
			continue
		}
		t.Fatalf("redistest: %v", err)
	}
}

// A Server is a real redis-server a test can crash or hang, started by RedisServer.
type Server struct {
	Backend
	t    testing.TB
	srv  *redisProcess
	tomb net.Listener // the killed server's port, kept (see Kill)
}

// RedisServer starts a fresh redis-server as Redis does, and returns it with the means to
// kill or pause it. It is killed when the test finishes, paused or not.
func RedisServer(t testing.TB) *Server {
	t.Helper()
	srv := start(t)
	return &Server{Backend: Backend{Name: NameRedis, Addr: srv.addr}, t: t, srv: srv}
}

// Kill kills the server at once, as a crash would: its connections are reset, and so is
// every new one, at once, until the test ends. The port stays the dead server's meanwhile:
// free, another server — of this test process or another, which take the ports the kernel
// has free — could take it and answer in its place (a red lock once counted a killed master
// as taken so, on a machine starting servers by the dozen).
func (s *Server) Kill() {
	s.t.Helper()
	if s.tomb != nil {
		return
	}
	s.srv.stop()
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		s.t.Fatalf("redistest: keep the killed server's port %s: %v (another process took it)", s.Addr, err)
	}
	s.tomb = ln
	s.t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // reset, not a clean close
			}
			_ = c.Close()
		}
	}()
}

// Pause stops the server (SIGSTOP), as a hung host or process does: its connections stay
// open and new ones are accepted by the kernel, but nothing is answered until Resume.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT): it then runs what it was sent meanwhile.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	select {
	case <-s.srv.exited:
	default:
		_ = s.srv.cmd.Process.Signal(sig)
	}
}

// ClusterNode starts a fresh redis-server in cluster mode, with no slots and no peers yet
// (CLUSTER MEET, ADDSLOTS and REPLICATE make a cluster of such nodes), killed when the test
// finishes. Its Backend's Name is NameRedis.
func ClusterNode(t testing.TB) *Backend {
	t.Helper()
	srv := start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--repl-diskless-sync-delay", "0")
	return &Backend{Name: NameRedis, Addr: srv.addr}
}

// A Replica is a redis-server replicating a real Redis backend, started by StartReplica.
type Replica struct {
	// Addr is the host:port the replica listens on.
	Addr string
	srv  *redisProcess
}

// StartReplica starts a fresh redis-server replicating master (a real Redis backend: see
// Redis), and returns once the replica is in sync, so that the master's WAIT counts it. It
// is killed when the test finishes.
func StartReplica(t testing.TB, master *Backend) *Replica {
	t.Helper()
	if master.Name != NameRedis {
		t.Fatalf("redistest: a replica needs a real Redis master, got %s", master.Name)
	}
	host, port, err := net.SplitHostPort(master.Addr)
	if err != nil {
		t.Fatalf("redistest: master address %q: %v", master.Addr, err)
	}
	// A diskless full sync waits 5 s by default for more replicas to share it.
	m := ClientFor(t, master.Addr)
	if err := m.Do(context.Background(), m.B().ConfigSet().ParameterValue().
		ParameterValue("repl-diskless-sync-delay", "0").Build()).Error(); err != nil {
		t.Fatalf("redistest: master %s: %v", master.Addr, err)
	}
	srv := start(t, "--replicaof", host, port)
	c := ClientFor(t, srv.addr)
	// In sync once the replica says its link is up, the master counts it online, and a
	// write of the master's reaches every online replica: after a full sync the master
	// streams nothing to the replica until its first acknowledgement, up to a second later.
	_, ownPort, _ := net.SplitHostPort(srv.addr)
	ctx := context.Background()
	deadline := time.Now().Add(startTimeout)
	for {
		info, err := c.Do(ctx, c.B().Info().Section("replication").Build()).ToString()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			info, err = m.Do(ctx, m.B().Info().Section("replication").Build()).ToString()
			if err == nil && strings.Contains(info, "port="+ownPort+",state=online") {
				online := int64(strings.Count(info, ",state=online"))
				// PUBLISH is a write every replica gets, and leaves no key behind.
				rs := m.DoMulti(ctx, m.B().Publish().Channel("redistest:sync").Message("").Build(),
					m.B().Wait().Numreplicas(online).Timeout(100).Build())
				var n int64
				if n, err = rs[1].AsInt64(); err == nil && n >= online {
					return &Replica{Addr: srv.addr, srv: srv}
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: replica %s of %s not in sync after %v (%v); output:\n%s",
				srv.addr, master.Addr, startTimeout, err, srv.out.String())
		}
		time.Sleep(probeInterval)
	}
}

// Stop kills the replica at once, as a crash would: from then on the master's WAIT counts
// it out.
func (r *Replica) Stop() { r.srv.stop() }

// redisServerPath finds redis-server, or skips or fails the test as
// LATCHKEY_REDIS asks when it should not or cannot be used.
func redisServerPath(t testing.TB) string {
	t.Helper()
	mode, err := redisModeFromEnv()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	if mode == redisOff {
		t.Skipf("redistest: real Redis backend disabled by %s=off", EnvRedis)
	}
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if mode == redisRequired {
			t.Fatalf("redistest: %s=required but redis-server is not usable: %v", EnvRedis, err)
		}
		t.Skipf("redistest: skipping real Redis backend: redis-server not found on PATH "+
			"(install it, or set %s=required to make this a failure, or %s=off to skip silently)", EnvRedis, EnvRedis)
	}
	return path
}

// redisProcess is a started redis-server.
type redisProcess struct {
	addr   string
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{} // closed once cmd.Wait has returned
}

// startRedis starts redis-server on port and waits until that very process
// answers PING. The output is included in the error, because a server that
// fails to start has nothing else to say why.
func startRedis(path, dir string, port int, args ...string) (*redisProcess, error) {
	return startRedisConf(path, "", dir, port, args...)
}

// startRedisConf is startRedis with a configuration file, which redis-server wants as its
// first argument (a Sentinel must have one, which it rewrites); none if conf is "".
func startRedisConf(path, conf, dir string, port int, args ...string) (*redisProcess, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	out := &syncBuffer{}
	var head []string
	if conf != "" {
		head = []string{conf}
	}
	cmd := exec.Command(path, append(head,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		// No RDB snapshots or AOF: tests want a clean, disposable server,
		// and the files would only litter dir.
		"--save", "",
		"--appendonly", "no",
		"--protected-mode", "no",
		"--dir", dir,
	)...)
	cmd.Args = append(cmd.Args, args...)
	// Killed with the test process, should it die before its cleanups run (a panic, a
	// -timeout), rather than left listening.
	cmd.SysProcAttr = dieWithParent()
	cmd.Stdout = out
	cmd.Stderr = out
	// Should redis-server ever leave a child holding the output pipe (a
	// BGSAVE fork, say), don't let Wait hang on it.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	p := &redisProcess{addr: addr, cmd: cmd, out: out, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()

	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-p.exited:
			if strings.Contains(out.String(), "Address already in use") {
				return nil, fmt.Errorf("redis-server on %s: %w", addr, errPortTaken)
			}
			return nil, fmt.Errorf("redis-server on %s exited during start-up (%s); output:\n%s", addr, cmd.ProcessState, out.String())
		default:
		}
		pid, err := probe(addr)
		if err == nil {
			if pid == cmd.Process.Pid {
				return p, nil
			}
			// Some other server holds the port; ours will fail to bind.
			p.stop()
			return nil, fmt.Errorf("redis-server on %s: pid %d answered instead of ours (%d): %w", addr, pid, cmd.Process.Pid, errPortTaken)
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("redis-server on %s not ready after %v: %v; output:\n%s", addr, startTimeout, err, out.String())
		}
		select {
		case <-p.exited:
		case <-time.After(probeInterval):
		}
	}
}

// stop kills the server and waits for it to be gone, so that no process
// outlives the test that started it.
func (p *redisProcess) stop() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// freePort asks the kernel for a currently unused loopback port. Another
// process can grab it before redis-server binds it; Redis retries then.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// probe checks that the server at addr answers PING and returns the pid it
// reports, so the caller can tell its own server from a stranger that
// happens to hold the port. It speaks RESP2 by hand to stay independent of
// the client library under test.
func probe(addr string) (pid int, err error) {
	conn, err := net.DialTimeout("tcp", addr, probeTimeout)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(probeTimeout)); err != nil {
		return 0, err
	}
	if _, err := io.WriteString(conn, "*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return 0, err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if line != "+PONG\r\n" {
		return 0, fmt.Errorf("PING answered %q", line)
	}
	line, err = r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if !strings.HasPrefix(line, "$") {
		return 0, fmt.Errorf("INFO answered %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 0 || n > 1<<20 {
		return 0, fmt.Errorf("INFO answered bad length %q", line)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	for l := range strings.SplitSeq(string(body), "\r\n") {
		if v, ok := strings.CutPrefix(l, "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO server has no process_id")
}

// syncBuffer collects a process's output. os/exec writes to it from its own
// goroutine while a failing test may read it, hence the lock.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
