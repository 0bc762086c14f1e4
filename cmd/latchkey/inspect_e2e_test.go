package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	dsync "github.com/latchkey/latchkey/sync"
	"github.com/redis/rueidis"
)

// inspect runs "latchkey inspect --json names..." and decodes its output.
func inspectJSON(t *testing.T, url string, names ...string) []state {
	t.Helper()
	r := latchkey(t, url, append([]string{"inspect", "--json"}, names...)...)
	if r.code != 0 {
		t.Fatalf("inspect: exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	var out []state
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, r.stdout)
	}
	if len(out) != len(names) {
		t.Fatalf("inspect --json: %d objects for %d names:\n%s", len(out), len(names), r.stdout)
	}
	return out
}

// background runs f until the test ends, then cancels its context and waits for it.
func background(t *testing.T, f func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// count waits until cmd's integer reply is want.
func count(t *testing.T, rdb rueidis.Client, what string, want int64, cmd func(b rueidis.Builder) rueidis.Completed) {
	t.Helper()
	eventually(t, e2eTimeout, what, func() error {
		n, err := rdb.Do(context.Background(), cmd(rdb.B())).AsInt64()
		if err == nil && n != want {
			err = fmt.Errorf("%d, want %d", n, want)
		}
		return err
	})
}

// ttlWithin checks a TTL (ms) is above zero and at most limit.
func ttlWithin(t *testing.T, what string, ms *int64, limit time.Duration) {
	t.Helper()
	switch {
	case ms == nil:
		t.Errorf("%s: missing", what)
	case *ms <= 0 || *ms > limit.Milliseconds():
		t.Errorf("%s = %d ms, want in (0, %d]", what, *ms, limit.Milliseconds())
	}
}

// Each primitive set up through the library, then read back by inspect --json field by field.
func TestInspectJSON(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		url, rdb := "redis://"+b.Addr, b.Client(t)
		ctx := context.Background()
		const lease = 30 * time.Second // the watchdog timeout of holders without a lease
		c1, c2, c3 := dsyncClient(t, rdb), dsyncClient(t, rdb), dsyncClient(t, rdb)

		t.Run("lock", func(t *testing.T) {
			l := c1.Lock("L", dsync.Reentrant())
			for range 2 {
				if err := l.Lock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			background(t, func(ctx context.Context) { _ = c2.Lock("L").Lock(ctx) })
			count(t, rdb, "a waiting client", 1, func(b rueidis.Builder) rueidis.Completed { return b.Zcard().Key("{L}:lock_clients").Build() })
			s := inspectJSON(t, url, "L")[0]
			if s.Name != "L" || s.Kind != kindLock || s.RedisType != "hash" || s.Clients != 1 {
				t.Errorf("name %q kind %q type %q waiting clients %d, want L lock hash 1", s.Name, s.Kind, s.RedisType, s.Clients)
			}
			ttlWithin(t, "ttl_ms", s.TTLMs, lease)
			if len(s.Holders) != 1 || s.Holders[0].Owner != l.Owner() || s.Holders[0].Holds != 2 || s.Holders[0].Write {
				t.Errorf("holders %+v, want %s with 2 holds", s.Holders, l.Owner())
			}
		})

		t.Run("fair lock", func(t *testing.T) {
			l := c1.FairLock("F")
			if err := l.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			queue := func(n int64) {
				count(t, rdb, "queued waiters", n, func(b rueidis.Builder) rueidis.Completed { return b.Llen().Key("redisson_lock_queue:{F}").Build() })
			}
			background(t, func(ctx context.Context) { _ = c2.FairLock("F").Lock(ctx) })
			queue(1)
			background(t, func(ctx context.Context) { _ = c3.FairLock("F").Lock(ctx) })
			queue(2)
			s := inspectJSON(t, url, "F")[0]
			if s.Kind != kindFairLock || len(s.Holders) != 1 || s.Holders[0].Owner != l.Owner() || s.Holders[0].Holds != 1 {
				t.Errorf("kind %q holders %+v, want fair_lock held once by %s", s.Kind, s.Holders, l.Owner())
			}
			if len(s.Queue) != 2 {
				t.Fatalf("queue %+v, want 2 waiters", s.Queue)
			}
			for i, c := range []*dsync.Client{c2, c3} {
				w := s.Queue[i]
				if !strings.HasPrefix(w.Owner, c.ID()+":") {
					t.Errorf("waiter %d is %s, want one of client %s", i+1, w.Owner, c.ID())
				}
				in := w.InMs
				ttlWithin(t, fmt.Sprintf("waiter %d deadline_in_ms", i+1), &in, 3*lease)
				if d := time.UnixMilli(w.DeadlineMs); d.Before(time.Now()) || d.After(time.Now().Add(3*lease)) {
					t.Errorf("waiter %d deadline %v, want within the next %v", i+1, d, 3*lease)
				}
			}
		})

		t.Run("fenced lock", func(t *testing.T) {
			l := c1.FencedLock("T")
			token, err := l.LockToken(ctx)
			if err != nil {
				t.Fatal(err)
			}
			s := inspectJSON(t, url, "T")[0]
			if s.Kind != kindFencedLock || s.Token == nil || *s.Token != token {
				t.Errorf("kind %q token %v, want fenced_lock with token %d", s.Kind, s.Token, token)
			}
			if len(s.Holders) != 1 || s.Holders[0].Owner != l.Owner() {
				t.Errorf("holders %+v, want %s", s.Holders, l.Owner())
			}
			ttlWithin(t, "ttl_ms", s.TTLMs, lease)
		})

		t.Run("read-write lock", func(t *testing.T) {
			r1, r2 := c1.RWLock("RW"), c2.RWLock("RW")
			for _, r := range []*dsync.RWLock{r1, r2} {
				if err := r.RLock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			background(t, func(ctx context.Context) { _ = c3.RWLock("RW").Lock(ctx) })
			count(t, rdb, "a writer's claim", 1, func(b rueidis.Builder) rueidis.Completed { return b.Zcard().Key("{RW}:rwlock_writers").Build() })
			w := c1.RWLock("W")
			if err := w.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			got := inspectJSON(t, url, "RW", "W")
			s := got[0]
			if s.Kind != kindRWLock || s.Mode != "read" || len(s.Holders) != 2 {
				t.Fatalf("kind %q mode %q holders %+v, want rwlock read by 2", s.Kind, s.Mode, s.Holders)
			}
			owners := map[string]bool{}
			for i, h := range s.Holders {
				owners[h.Owner] = true
				if h.Holds != 1 || h.Write || len(h.ReadTTLsMs) != 1 {
					t.Errorf("reader %d: %+v, want one read hold with its TTL", i, h)
					continue
				}
				ttlWithin(t, "read_ttls_ms", &h.ReadTTLsMs[0], lease)
			}
			for _, r := range []*dsync.RWLock{r1, r2} {
				if !owners[r.Owner()] {
					t.Errorf("reader %s missing from %+v", r.Owner(), s.Holders)
				}
			}
			if len(s.Writers) != 1 || !strings.HasPrefix(s.Writers[0].Owner, c3.ID()+":") || !strings.HasSuffix(s.Writers[0].Owner, ":write") {
				t.Errorf("writer claims %+v, want one of client %s", s.Writers, c3.ID())
			}
			s = got[1]
			if s.Kind != kindRWLock || s.Mode != "write" || len(s.Holders) != 1 || !s.Holders[0].Write || s.Holders[0].Owner != w.Owner() {
				t.Errorf("kind %q mode %q holders %+v, want rwlock written by %s", s.Kind, s.Mode, s.Holders, w.Owner())
			}
		})

		t.Run("permit semaphore", func(t *testing.T) {
			sem := c1.PermitSemaphore("P")
			if err := sem.SetPermits(ctx, 3); err != nil {
				t.Fatal(err)
			}
			p, err := sem.Acquire(ctx, 1, dsync.Lease(20*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			s := inspectJSON(t, url, "P")[0]
			if s.Kind != kindPermitSemaphore || s.RedisType != "string" || s.Available == nil || *s.Available != 2 {
				t.Errorf("kind %q type %q available %v, want permit_semaphore string 2", s.Kind, s.RedisType, s.Available)
			}
			if len(s.Acquired) != 1 || s.Acquired[0].ID != p.IDs()[0] {
				t.Fatalf("acquired %+v, want permit %v", s.Acquired, p.IDs())
			}
			ttlWithin(t, "expires_in_ms", s.Acquired[0].InMs, 20*time.Second)
			if e := s.Acquired[0].ExpiresMs; e == nil || *e-*s.Acquired[0].InMs < time.Now().Add(-time.Minute).UnixMilli() {
				t.Errorf("expires_ms %v does not match expires_in_ms", e)
			}
		})

		t.Run("semaphore and latch", func(t *testing.T) {
			sem := c1.Semaphore("S")
			if err := sem.SetPermits(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if err := sem.Acquire(ctx, 1); err != nil {
				t.Fatal(err)
			}
			background(t, func(ctx context.Context) { _ = c2.Semaphore("S").Acquire(ctx, 1) })
			latch := c1.CountDownLatch("C")
			if _, err := latch.TrySetCount(ctx, 3); err != nil {
				t.Fatal(err)
			}
			if err := latch.CountDown(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := c1.CountDownLatch("N").TrySetCount(ctx, 4); err != nil {
				t.Fatal(err)
			}
			background(t, func(ctx context.Context) { _ = c2.CountDownLatch("C").Await(ctx) })
			subscribed(t, rdb, "redisson_sc:{S}") // the waiting Client, the listener
			count(t, rdb, "a waiting client", 1, func(b rueidis.Builder) rueidis.Completed { return b.Zcard().Key("{S}:sem_clients").Build() })
			subscribed(t, rdb, "redisson_countdownlatch__channel__{C}")
			got := inspectJSON(t, url, "S", "C", "N", "nothing")
			if s := got[0]; s.Kind != kindSemaphore || s.Available == nil || *s.Available != 0 || s.Count != nil || s.Clients != 1 {
				t.Errorf("S: kind %q available %v count %v waiting clients %d, want semaphore with 0 available, 1 client waiting",
					s.Kind, s.Available, s.Count, s.Clients)
			}
			if s := got[1]; s.Kind != kindLatch || s.Count == nil || *s.Count != 2 || s.Available != nil {
				t.Errorf("C: kind %q count %v available %v, want latch counting 2", s.Kind, s.Count, s.Available)
			}
			if s := got[2]; s.Kind != kindSemaphoreOrLatch || s.Count == nil || *s.Count != 4 {
				t.Errorf("N: kind %q count %v, want semaphore_or_latch with 4", s.Kind, s.Count)
			}
			if s := got[3]; s.Kind != kindNone || s.RedisType != "none" || s.TTLMs != nil || s.Holders != nil {
				t.Errorf("nothing: %+v, want kind none and nothing else", s)
			}
		})
	})
}

// The table shows the same state for people: a row per name, holders and waiters below.
func TestInspectTable(t *testing.T) {
	t.Parallel()
	url, rdb := server(t)
	c := dsyncClient(t, rdb)
	l := c.FencedLock("deploy")
	token, err := l.LockToken(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r := latchkey(t, url, "inspect", "deploy", "free")
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 {
		t.Fatalf("want a header, two rows for deploy and one for free:\n%s", r.stdout)
	}
	for i, want := range [][]string{
		{"NAME", "KIND", "TTL", "WHAT", "DETAIL"},
		{"deploy", "fenced_lock", "holder", l.Owner(), "(1", "hold)"},
		{"token", fmt.Sprint(token)},
		{"free", "none", "-"},
	} {
		if got := strings.Fields(lines[i]); !containsAll(got, want) {
			t.Errorf("line %d %q lacks %q", i, lines[i], want)
		}
	}
}

func containsAll(fields, want []string) bool {
	have := map[string]bool{}
	for _, f := range fields {
		have[f] = true
	}
	for _, w := range want {
		if !have[w] {
			return false
		}
	}
	return true
}

// inspect --watch says what its reads have seen of a name: two holders that came and went
// one after the other, and a Client that waited meanwhile. Each step is awaited in the
// printed reads themselves, so that no hold falls between two reads.
func TestInspectWatchSeen(t *testing.T) {
	t.Parallel()
	url, rdb := server(t)
	a, b := dsyncClient(t, rdb), dsyncClient(t, rdb)
	cmd := latchkeyCmd(t, url, "inspect", "--watch", "--interval", "20ms", "--json", "watched")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reads := make(chan state, 1024)
	go func() {
		defer close(reads)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var states []state
			if json.Unmarshal(sc.Bytes(), &states) == nil && len(states) == 1 {
				reads <- states[0]
			}
		}
	}()
	var last state
	await := func(what string, cond func(state) bool) {
		t.Helper()
		deadline := time.After(e2eTimeout)
		for {
			select {
			case st, ok := <-reads:
				if !ok {
					t.Fatalf("inspect --watch ended before %s", what)
				}
				if last = st; cond(st) {
					return
				}
			case <-deadline:
				t.Fatalf("no read showed %s; the last: %+v", what, last)
			}
		}
	}
	heldBy := func(owner string) func(state) bool {
		return func(st state) bool { return len(st.Holders) == 1 && st.Holders[0].Owner == owner }
	}
	ctx := context.Background()
	await("the first read", func(state) bool { return true })
	first := a.Lock("watched")
	if err := first.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	await("the first holder", heldBy(first.Owner()))
	second := b.Lock("watched")
	got := make(chan error, 1)
	go func() { got <- second.Lock(ctx) }()
	await("a Client waiting", func(st state) bool { return st.Clients == 1 })
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	await("the second holder", heldBy(second.Owner()))
	if err := second.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	await("the lock free", func(st state) bool { return len(st.Holders) == 0 })
	s := last.Seen
	if s == nil || s.Acquired != 2 || s.Released != 2 || s.WaitingMax != 1 || s.ReadsHeld < 2 || s.Reads <= s.ReadsHeld {
		t.Errorf("seen %+v, want 2 acquisitions, 2 releases, 1 waiting at most, and reads with and without a holder", s)
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	if code := exitCodeOf(t, cmd.Wait()); code != 0 {
		t.Errorf("inspect --watch interrupted: exit status %d, want 0", code)
	}
}
