package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// childEnv marks a test process started by TestRedisEnvHandling.
const childEnv = "REDISTEST_CHILD"

// eventually polls cond until it returns nil or timeout passes, and fails
// the test with cond's last error in the latter case.
func eventually(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v: %v", timeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestRedisModeFromEnv(t *testing.T) {
	for _, tc := range []struct {
		value   string
		want    redisMode
		wantErr bool
	}{
		{"", redisAuto, false},
		{"required", redisRequired, false},
		{"off", redisOff, false},
		{"yes", 0, true},
		{"Required", 0, true},
	} {
		t.Setenv(EnvRedis, tc.value)
		got, err := redisModeFromEnv()
		if tc.wantErr {
			if err == nil {
				t.Errorf("%s=%q: got mode %v, want an error", EnvRedis, tc.value, got)
			} else if !strings.Contains(err.Error(), `"`+tc.value+`"`) {
				t.Errorf("%s=%q: error %q does not name the bad value", EnvRedis, tc.value, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s=%q: got %v, %v; want %v", EnvRedis, tc.value, got, err, tc.want)
		}
	}
}

// TestRedisEnvHandling runs Redis in a child test process, with an empty
// PATH and each LATCHKEY_REDIS value, because the interesting outcomes (a
// skip or a t.Fatal) end the test that calls it.
func TestRedisEnvHandling(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		Redis(t)
		t.Log("Redis returned a backend")
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		value    string
		wantFail bool
		wantOut  string
	}{
		{"", false, "redis-server not found on PATH"},
		{"off", false, "disabled by LATCHKEY_REDIS=off"},
		{"required", true, "LATCHKEY_REDIS=required but redis-server is not usable"},
		{"sometimes", true, `LATCHKEY_REDIS="sometimes" is not understood`},
	} {
		t.Run(fmt.Sprintf("%q", tc.value), func(t *testing.T) {
			cmd := exec.Command(exe, "-test.run=^TestRedisEnvHandling$", "-test.v")
			// GORACE: a -race binary otherwise sleeps a second on exit.
			cmd.Env = append(os.Environ(), childEnv+"=1", EnvRedis+"="+tc.value, "PATH="+t.TempDir(), "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
			out, err := cmd.CombinedOutput()
			if failed := err != nil; failed != tc.wantFail {
				t.Errorf("child failed = %v (%v), want %v", failed, err, tc.wantFail)
			}
			if !tc.wantFail && !strings.Contains(string(out), "--- SKIP") {
				t.Errorf("child was not skipped")
			}
			if !strings.Contains(string(out), tc.wantOut) {
				t.Errorf("child output does not contain %q", tc.wantOut)
			}
			if t.Failed() {
				t.Logf("child output:\n%s", out)
			}
		})
	}
}

func TestEachGivesFreshServers(t *testing.T) {
	var addrs []string
	Each(t, func(t *testing.T, b *Backend) {
		addrs = append(addrs, b.Addr)
		if (b.Name == NameMiniredis) != (b.Mini != nil) {
			t.Fatalf("backend %q has Mini = %v", b.Name, b.Mini)
		}
		c := b.Client(t)
		n, err := c.Do(testContext(t), c.B().Dbsize().Build()).AsInt64()
		if err != nil || n != 0 {
			t.Fatalf("DBSIZE of a fresh server = %d, %v; want 0", n, err)
		}
		if err := c.Do(testContext(t), c.B().Set().Key("left-over").Value("1").Build()).Error(); err != nil {
			t.Fatalf("SET: %v", err)
		}
	})
	if len(addrs) == 2 && addrs[0] == addrs[1] {
		t.Fatalf("both backends listen on %s", addrs[0])
	}
}

func TestClientBasics(t *testing.T) {
	Each(t, func(t *testing.T, b *Backend) {
		c := b.Client(t)
		ctx := testContext(t)

		if err := c.Do(ctx, c.B().Set().Key("k").Value("v").PxMilliseconds(150).Build()).Error(); err != nil {
			t.Fatalf("SET PX: %v", err)
		}
		if v, err := c.Do(ctx, c.B().Get().Key("k").Build()).ToString(); err != nil || v != "v" {
			t.Fatalf("GET = %q, %v; want \"v\"", v, err)
		}
		// Both backends must expire keys by themselves; the lock leases
		// depend on it.
		eventually(t, 2*time.Second, func() error {
			n, err := c.Do(ctx, c.B().Exists().Key("k").Build()).AsInt64()
			if err == nil && n != 0 {
				err = errors.New("key with PX 150 still exists")
			}
			return err
		})

		// The lock scripts go through rueidis' EVALSHA-then-EVAL path.
		script := rueidis.NewLuaScript(`
			redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
			return redis.call('PTTL', KEYS[1])`)
		pttl, err := script.Exec(ctx, c, []string{"lua"}, []string{"x", "10000"}).AsInt64()
		if err != nil {
			t.Fatalf("script: %v", err)
		}
		if pttl <= 0 || pttl > 10000 {
			t.Fatalf("script returned PTTL %d, want in (0, 10000]", pttl)
		}
	})
}

// TestDedicatedPubSub checks the way the lock library waits for unlock
// notifications: hooks on a dedicated connection, then Do(SUBSCRIBE).
func TestDedicatedPubSub(t *testing.T) {
	Each(t, func(t *testing.T, b *Backend) {
		c := b.Client(t)
		ctx := testContext(t)

		d, release := c.Dedicate()
		defer release()
		var confirmed atomic.Int64
		msgs := make(chan rueidis.PubSubMessage, 10)
		hookErr := d.SetPubSubHooks(rueidis.PubSubHooks{
			OnMessage: func(m rueidis.PubSubMessage) { msgs <- m },
			OnSubscription: func(s rueidis.PubSubSubscription) {
				if s.Kind == "subscribe" && s.Channel == "ch" {
					confirmed.Add(1)
				}
			},
		})

		if err := d.Do(ctx, d.B().Subscribe().Channel("ch").Build()).Error(); err != nil {
			t.Fatalf("SUBSCRIBE: %v", err)
		}
		// Do returns only once the server has confirmed the subscription,
		// and the confirmation hook has run by then: a publish right away
		// must find the subscriber, with no waiting.
		if n := confirmed.Load(); n != 1 {
			t.Fatalf("subscribe confirmations seen when Do returned: %d, want 1", n)
		}
		n, err := c.Do(ctx, c.B().Publish().Channel("ch").Message("released").Build()).AsInt64()
		if err != nil || n != 1 {
			t.Fatalf("PUBLISH right after SUBSCRIBE reached %d subscribers, %v; want 1", n, err)
		}
		select {
		case m := <-msgs:
			if m.Channel != "ch" || m.Message != "released" {
				t.Fatalf("got message %+v", m)
			}
		case err := <-hookErr:
			t.Fatalf("pub/sub connection ended: %v", err)
		case <-ctx.Done():
			t.Fatal("published message never arrived")
		}

		if err := d.Do(ctx, d.B().Unsubscribe().Channel("ch").Build()).Error(); err != nil {
			t.Fatalf("UNSUBSCRIBE: %v", err)
		}
		n, err = c.Do(ctx, c.B().Publish().Channel("ch").Message("again").Build()).AsInt64()
		if err != nil || n != 0 {
			t.Fatalf("PUBLISH after UNSUBSCRIBE reached %d subscribers, %v; want 0", n, err)
		}
	})
}

// TestDedicatedPubSubReportsConnectionLoss checks that a subscriber learns
// when its connection dies, which is what lets the lock library fall back
// to polling instead of waiting for a notification that cannot come.
func TestDedicatedPubSubReportsConnectionLoss(t *testing.T) {
	Each(t, func(t *testing.T, b *Backend) {
		p := NewProxy(t, b.Addr)
		c := ClientFor(t, p.Addr())
		ctx := testContext(t)

		d, release := c.Dedicate()
		defer release()
		hookErr := d.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(rueidis.PubSubMessage) {}})
		if err := d.Do(ctx, d.B().Subscribe().Channel("ch").Build()).Error(); err != nil {
			t.Fatalf("SUBSCRIBE: %v", err)
		}

		p.Blackhole(true)
		select {
		case err := <-hookErr:
			if err == nil {
				t.Fatal("hook channel closed without an error")
			}
		case <-ctx.Done():
			t.Fatal("connection loss was never reported on the SetPubSubHooks channel")
		}
	})
}

// TestStartRedisPortTaken checks that losing the race for a port is
// reported as errPortTaken, the error Redis retries on.
func TestStartRedisPortTaken(t *testing.T) {
	path := redisServerPath(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// Hang up on the readiness probes so they fail fast, as they would
	// against a port nobody listens on.
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()

	srv, err := startRedis(path, t.TempDir(), l.Addr().(*net.TCPAddr).Port)
	if err == nil {
		srv.stop()
		t.Fatal("redis-server started on a port that was already taken")
	}
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("got %v, want errPortTaken", err)
	}
}

// A started replica is in sync at once: the master's WAIT counts it for the first write,
// and no longer once it is stopped.
func TestStartReplica(t *testing.T) {
	t.Parallel()
	master := Redis(t)
	r := StartReplica(t, master)
	ctx := context.Background()
	m := master.Client(t)
	wait := func() int64 {
		t.Helper()
		rs := m.DoMulti(ctx, m.B().Set().Key("k").Value("v").Build(), m.B().Wait().Numreplicas(1).Timeout(50).Build())
		n, err := rs[1].AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := wait(); n != 1 {
		t.Fatalf("WAIT after the replica started: %d, want 1", n)
	}
	rc := ClientFor(t, r.Addr)
	if v, err := rc.Do(ctx, rc.B().Get().Key("k").Build()).ToString(); v != "v" || err != nil {
		t.Fatalf("the replica's copy: %q, %v", v, err)
	}
	r.Stop()
	if n := wait(); n != 0 {
		t.Fatalf("WAIT after the replica stopped: %d, want 0", n)
	}
}

// A killed server answers nothing, and keeps its port until the test ends: no server started
// meanwhile can take it and answer in its place.
func TestKillKeepsThePort(t *testing.T) {
	t.Parallel()
	s := RedisServer(t)
	c := ClientFor(t, s.Addr)
	ctx := testContext(t)
	if err := c.Do(ctx, c.B().Set().Key("k").Value("v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := c.Do(short, c.B().Get().Key("k").Build()).Error(); err == nil {
		t.Fatal("a killed server answered")
	}
	if l, err := net.Listen("tcp", s.Addr); err == nil {
		l.Close()
		t.Fatalf("the killed server's port %s could be taken", s.Addr)
	}
	path := redisServerPath(t)
	port := s.Addr[strings.LastIndexByte(s.Addr, ':')+1:]
	// It exits at once, the port taken; were it not, it is killed at the deadline.
	cmd := exec.CommandContext(ctx, path, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "Address already in use") {
		t.Fatalf("a redis-server started on the killed server's port: %s", out)
	}
	s.Kill() // again: nothing more
}
