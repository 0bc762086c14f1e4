package sync

import (
	"context"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/names"
	"github.com/latchkey/latchkey/watchdog"
	"github.com/redis/rueidis"
)

// newClient returns a Client on a fresh rueidis client to addr, both closed at cleanup.
func newClient(t *testing.T, addr string, opts ...Option) (*Client, rueidis.Client) {
	t.Helper()
	rdb := newHookedRDB(t, addr)
	c, err := New(rdb, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c, rdb
}

// testCtx is a context bounded by a deadline, so no test hangs forever: three times d, so
// that a test whose steps fit in d on a quiet machine is not cut short on one three times as
// loaded (a 10 s context ended a test that took 11 s under two CPU hogs). It bounds waits
// that must end, never what a test asserts about time.
func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*d)
	t.Cleanup(cancel)
	return ctx
}

// waitFor bounds a wait for something that must happen, not how soon it must: generous, so
// that a loaded machine does not fail a test that waits for an event.
const waitFor = 20 * time.Second

// cpuTurns are the turns of the CPU-bound tests (see cpuBound): one under the race detector,
// which makes them several times as costly, three otherwise.
var cpuTurns = make(chan struct{}, cpuTurnCount())

func cpuTurnCount() int {
	if raceDetector {
		return 1
	}
	return 3
}

// cpuBound makes the test, a CPU-bound one (hundreds of goroutines contending for a lock,
// thousands of permits in one script, scripts repeated under faults), wait for a turn and
// keep it to its end: such tests run one or three at a time (cpuTurns), beside the package's
// other tests but not beside all the others of their kind. All at once they kept both CPUs
// busy for tens of seconds under -race, and the tests beside them, which time leases,
// renewals and waits, saw their process's goroutines run seconds late (under two CPU hogs a
// miniredis reply took over 10 s, and a renewal round 1 s late lost a 1.5 s lease).
//
// Call it first thing in a test that starts no parallel subtests after it (a leaf): a
// holder never waits for a parallel slot, so that the turn cannot deadlock the slots, even
// with -parallel 1.
func cpuBound(t *testing.T) {
	t.Helper()
	cpuTurns <- struct{}{}
	t.Cleanup(func() { <-cpuTurns })
}

// shortBudget is the retry budget of a Client whose requests a test makes go unanswered
// (Redis unreachable, or hung): short, so that they end soon, yet long enough for the
// answers a loaded machine does give (every request is awaited 2 s at least whatever the
// budget, which under two CPU hogs and -race was not always enough).
const shortBudget = 5 * time.Second

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// signalled waits for ch to be closed, failing the test if ctx ends first.
func signalled(t *testing.T, ctx context.Context, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatalf("%s: not before the test's deadline", what)
	}
}

func mustInt(t *testing.T, r rueidis.RedisResult) int64 {
	t.Helper()
	n, err := r.AsInt64()
	if err != nil {
		t.Fatalf("redis: %v", err)
	}
	return n
}

// dbsize counts the keys in the server's database.
func dbsize(t *testing.T, rdb rueidis.Client) int64 {
	t.Helper()
	return mustInt(t, rdb.Do(context.Background(), rdb.B().Dbsize().Build()))
}

func pttl(t *testing.T, rdb rueidis.Client, key string) int64 {
	t.Helper()
	return mustInt(t, rdb.Do(context.Background(), rdb.B().Pttl().Key(key).Build()))
}

func exists(t *testing.T, rdb rueidis.Client, key string) bool {
	t.Helper()
	return mustInt(t, rdb.Do(context.Background(), rdb.B().Exists().Key(key).Build())) == 1
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// isClosed reports whether c is closed (nil never is).
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// waitChannel is the channel c's waiters of the plain lock name listen on.
func waitChannel(c *Client, name string) string { return c.Lock(name).plain().clientCh }

// lockChannel is the channel a lock's releases are published on.
func lockChannel(name string) string { return names.Prefix(lockChannelPrefix, name) }

// must fails the test on an error; a Redis nil reply (a script's "no") is no error.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil && !rueidis.IsRedisNil(err) {
		t.Fatal(err)
	}
}

// renewals records the watchdog's renewal rounds of a Client, so that a test waits for a
// hold's renewal instead of sleeping past its renewal time. Set it up before the Client
// takes a hold.
type renewals struct {
	mu       gosync.Mutex
	carried  map[string]int // the rounds that carried each key, counted as they start
	inflight int
}

func watchRenewals(c *Client) *renewals {
	r := &renewals{carried: make(map[string]int)}
	for _, k := range []*watchdog.Kind{c.lockKind, c.readKind, c.permitKind} {
		renew := k.Renew
		k.Renew = func(ctx context.Context, lease time.Duration, batches []watchdog.Batch) []watchdog.Result {
			r.mu.Lock()
			r.inflight++
			for _, b := range batches {
				for _, key := range b.Keys {
					r.carried[key]++
				}
			}
			r.mu.Unlock()
			defer func() {
				r.mu.Lock()
				r.inflight--
				r.mu.Unlock()
			}()
			return renew(ctx, lease, batches)
		}
	}
	return r
}

// of returns how many renewal rounds carrying key have started.
func (r *renewals) of(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.carried[key]
}

// idle reports whether no renewal round is on its way.
func (r *renewals) idle() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inflight == 0
}

// wakeCh is the channel the waits of l's owner o listen on.
func (l *exclusive) wakeCh(o *holder) string { return l.v.wakeCh(o) }

// plain is l's plain-lock variant (a Lock's, or a FencedLock's).
func (l *exclusive) plain() *plainLock {
	return l.v.(*plainLock)
}

// isReleaseOf reports whether cmd is a run of lua.LockRelease by owner (its own release, not
// one that hands the lock to it): EVALSHA|EVAL, script, 4, name, channel, latch, clients,
// lease, owner, ...
func isReleaseOf(cmd rueidis.Completed, owner string) bool {
	args := cmd.Commands() // EVALSHA sha 5 lock channel latch clients listener leaseMs owner ...
	return len(args) > 9 && strings.HasPrefix(args[5], unlockLatchPrefix) && args[9] == owner
}

// hget is the hold count owner has on name in Redis; 0 when it has no field.
func hget(t *testing.T, ctx context.Context, rdb rueidis.Client, name, owner string) int64 {
	t.Helper()
	n, err := rdb.Do(ctx, rdb.B().Hget().Key(name).Field(owner).Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0
	}
	must(t, err)
	return n
}

// hashLatch turns the owner's unlock latch into a hash, so that every release of the owner is
// refused with WRONGTYPE, without running, until the latch is deleted.
func hashLatch(t *testing.T, ctx context.Context, admin rueidis.Client, latch string) {
	t.Helper()
	if latch == "" {
		t.Fatal("the owner has no unlock latch yet")
	}
	must(t, admin.Do(ctx, admin.B().Del().Key(latch).Build()).Error())
	must(t, admin.Do(ctx, admin.B().Hset().Key(latch).FieldValue().FieldValue("x", "1").Build()).Error())
}

// unsettledOf reports, under the owner's op, whether l has a release of unknown outcome.
func unsettledOf(t *testing.T, ctx context.Context, l *Lock) bool {
	t.Helper()
	must(t, l.o.lock(ctx))
	defer l.o.unlock()
	return l.o.unsettled != nil
}
