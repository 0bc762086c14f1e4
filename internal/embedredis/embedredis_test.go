package embedredis

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

func newClient(t *testing.T, s *Server) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{s.Addr()},
		// miniredis has no CLIENT TRACKING, and it answers CLUSTER SLOTS,
		// which would otherwise make rueidis treat it as a cluster.
		DisableCache:      true,
		ForceSingleClient: true,
		ClientSetInfo:     rueidis.DisableClientSetInfo,
	})
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func startServer(t *testing.T) *Server {
	t.Helper()
	s, err := Start()
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestKeyExpiresInRealTime(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	const ttl = 200 * time.Millisecond
	setAt := time.Now()
	if err := c.Do(ctx, c.B().Set().Key("k").Value("v").PxMilliseconds(ttl.Milliseconds()).Build()).Error(); err != nil {
		t.Fatalf("SET PX: %v", err)
	}
	if v, err := c.Do(ctx, c.B().Get().Key("k").Build()).ToString(); err != nil || v != "v" {
		t.Fatalf("GET right after SET = %q, %v; want \"v\"", v, err)
	}
	pttl, err := c.Do(ctx, c.B().Pttl().Key("k").Build()).AsInt64()
	if err != nil {
		t.Fatalf("PTTL: %v", err)
	}
	if pttl <= 0 || pttl > ttl.Milliseconds() {
		t.Fatalf("PTTL right after SET = %d, want in (0, %d]", pttl, ttl.Milliseconds())
	}

	deadline := time.Now().Add(time.Second)
	for {
		n, err := c.Do(ctx, c.B().Exists().Key("k").Build()).AsInt64()
		if err != nil {
			t.Fatalf("EXISTS: %v", err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("key with PX %v still present after %v", ttl, time.Since(setAt))
		}
		time.Sleep(time.Millisecond)
	}
	// The clock advances in ticks, so the key may go up to one tick early,
	// but never much earlier: that would mean time runs too fast.
	if gone := time.Since(setAt); gone < ttl-2*tickInterval {
		t.Fatalf("key with PX %v expired after only %v", ttl, gone)
	}
}

// TestClockCurrentWhileTickerStalls stands a ticker starved by a loaded machine: the
// commands themselves keep the clock current, so a key set meanwhile is neither charged
// for time that passed before it was set nor kept past its TTL.
func TestClockCurrentWhileTickerStalls(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Stop the ticker, and leave Close something to stop.
	close(s.stop)
	<-s.done
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	close(s.done)

	time.Sleep(50 * time.Millisecond) // time the ticker did not forward
	const ttl = 200 * time.Millisecond
	setAt := time.Now()
	if err := c.Do(ctx, c.B().Set().Key("k").Value("v").PxMilliseconds(ttl.Milliseconds()).Build()).Error(); err != nil {
		t.Fatalf("SET PX: %v", err)
	}
	for {
		n, err := c.Do(ctx, c.B().Exists().Key("k").Build()).AsInt64()
		if err != nil {
			t.Fatalf("EXISTS with PX %v, %v after the SET: %v", ttl, time.Since(setAt), err)
		}
		if n == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if gone := time.Since(setAt); gone < ttl {
		t.Fatalf("key with PX %v expired after only %v", ttl, gone)
	}
}

func TestTimeFollowsWallClock(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	serverTime := func() time.Time {
		t.Helper()
		parts, err := c.Do(ctx, c.B().Time().Build()).AsStrSlice()
		if err != nil {
			t.Fatalf("TIME: %v", err)
		}
		if len(parts) != 2 {
			t.Fatalf("TIME returned %q, want 2 parts", parts)
		}
		sec, err1 := strconv.ParseInt(parts[0], 10, 64)
		usec, err2 := strconv.ParseInt(parts[1], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("TIME returned unparsable %q", parts)
		}
		return time.Unix(sec, usec*1000)
	}

	wall1, t1 := time.Now(), serverTime()
	if d := t1.Sub(wall1); d < -time.Second || d > time.Second {
		t.Fatalf("TIME = %v, wall clock %v: off by %v", t1, wall1, d)
	}
	// Let real time pass, then check the server clock moved along with it
	// and was not merely set once at start-up.
	const gap = 100 * time.Millisecond
	time.Sleep(gap)
	advanced := serverTime().Sub(t1)
	realElapsed := time.Since(wall1)
	if advanced < gap-2*tickInterval || advanced > realElapsed+2*tickInterval {
		t.Fatalf("server clock advanced %v while real time advanced %v", advanced, realElapsed)
	}
}

// TestClockFrozenDuringScript pins down why the clock is moved by a ticker:
// as on real Redis, a key must not expire halfway through a Lua script.
func TestClockFrozenDuringScript(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The loop keeps the script busy for far longer than the 1ms TTL and
	// several clock ticks; the key must still be there at the end.
	script := rueidis.NewLuaScript(`
		redis.call('SET', KEYS[1], 'v', 'PX', 1)
		local x = 0
		for i = 1, 300000 do x = x + i end
		return redis.call('EXISTS', KEYS[1])`)
	start := time.Now()
	n, err := script.Exec(ctx, c, []string{"k"}, nil).AsInt64()
	if err != nil {
		t.Fatalf("script: %v", err)
	}
	if took := time.Since(start); took < 2*tickInterval {
		t.Logf("script took only %v; the test proves little on this machine", took)
	}
	if n != 1 {
		t.Fatal("key with PX 1 expired while the script that set it was still running")
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	s, err := Start()
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	s.Close()
	s.Close()
}
