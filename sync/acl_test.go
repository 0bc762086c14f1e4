package sync

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/names"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/rueidis"
)

// docACL is what docs/acl.md says a user needs: the commands of every Client, and the
// commands of each primitive's scripts by its table row.
type docACL struct {
	common string
	rows   map[string]string
}

func readACLDoc(t *testing.T) docACL {
	t.Helper()
	b, err := os.ReadFile("../docs/acl.md")
	if err != nil {
		t.Fatal(err)
	}
	d := docACL{rows: map[string]string{}}
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(line, "    +ping ") {
			d.common = strings.TrimSpace(line)
		}
		if cells := strings.Split(line, "|"); len(cells) == 4 && strings.TrimSpace(cells[1]) != "primitive" && !strings.HasPrefix(cells[1], "-") {
			cmds := strings.Fields(cells[2])
			for i := range cmds {
				cmds[i] = "+" + cmds[i]
			}
			d.rows[strings.TrimSpace(cells[1])] = strings.Join(cmds, " ")
		}
	}
	if d.common == "" || len(d.rows) == 0 {
		t.Fatal("docs/acl.md: no commands of every Client, or no table of the primitives")
	}
	return d
}

// aclClients makes a Redis user with rules (ACL SETUSER), and two Clients of it.
func aclClients(t *testing.T, b *redistest.Backend, admin rueidis.Client, user, rules string) (*Client, *Client) {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	args := append([]string{"ACL", "SETUSER", user, "reset", "on", ">pw"}, strings.Fields(rules)...)
	must(t, admin.Do(ctx, admin.B().Arbitrary(args...).Build()).Error())
	clients := make([]*Client, 2)
	for i := range clients {
		opt := b.ClientOption()
		opt.Username, opt.Password = user, "pw"
		rdb, err := rueidis.NewClient(opt)
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		t.Cleanup(rdb.Close)
		if clients[i], err = New(rdb); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { clients[i].Close() })
	}
	return clients[0], clients[1]
}

// aclRuns are a run of each primitive by docs/acl.md's rows: every call that reaches Redis,
// a waiter on the second Client woken by a release on the first.
var aclRuns = map[string]func(t *testing.T, ctx context.Context, c1, c2 *Client, n string){
	"Lock, FencedLock, MultiLock, RedLock": func(t *testing.T, ctx context.Context, c1, c2 *Client, n string) {
		l := c1.Lock(n)
		must(t, l.Lock(ctx))
		got := lockAsync(ctx, c2.Lock(n))
		eventually(t, 10*time.Second, "the waiter waiting, subscribed", func() bool { return subscribedWaiters(c2, waitChannel(c2, n)) == 1 })
		if _, err := l.IsLocked(ctx); err != nil {
			t.Error(err)
		}
		if _, err := l.HoldCount(ctx); err != nil {
			t.Error(err)
		}
		if _, err := l.RemainingTTL(ctx); err != nil {
			t.Error(err)
		}
		must(t, l.Unlock(ctx))
		must(t, <-got)
		if _, err := c2.Lock(n).ForceUnlock(ctx); err != nil {
			t.Error(err)
		}
		f := c1.FencedLock("{" + n + "}:fenced")
		if _, err := f.LockToken(ctx); err != nil {
			t.Error(err)
		}
		must(t, f.Unlock(ctx))
		m := MultiLock(c1.Lock("{"+n+"}:a"), c1.Lock("{"+n+"}:b"))
		must(t, m.Lock(ctx))
		must(t, m.Unlock(ctx))
	},
	"FairLock": func(t *testing.T, ctx context.Context, c1, c2 *Client, n string) {
		l := c1.FairLock(n)
		must(t, l.Lock(ctx))
		got := holdAsync(ctx, c2.FairLock(n))
		eventually(t, 10*time.Second, "the waiter queued", func() bool {
			q, err := c1.rdb.Do(ctx, c1.rdb.B().Llen().Key(names.Prefix("redisson_lock_queue", n)).Build()).AsInt64()
			return err == nil && q == 1
		})
		must(t, l.Unlock(ctx))
		must(t, <-got)
		if _, err := c1.FairLock(n).ForceUnlock(ctx); err != nil {
			t.Error(err)
		}
	},
	"RWLock": func(t *testing.T, ctx context.Context, c1, c2 *Client, n string) {
		l := c1.RWLock(n)
		must(t, l.RLock(ctx))
		w := c2.RWLock(n)
		got := holdAsync(ctx, w)
		eventually(t, 10*time.Second, "the writer waiting, subscribed", func() bool { return subscribedWaiters(c2, rwChannel(n)) == 1 })
		must(t, l.RUnlock(ctx))
		must(t, <-got)
	},
	"Semaphore": func(t *testing.T, ctx context.Context, c1, c2 *Client, n string) {
		s := c1.Semaphore(n)
		if _, err := s.TrySetPermits(ctx, 1); err != nil {
			t.Fatal(err)
		}
		must(t, s.Acquire(ctx, 1))
		got := make(chan error, 1)
		go func() { got <- c2.Semaphore(n).Acquire(ctx, 1) }()
		eventually(t, 10*time.Second, "the waiter waiting, subscribed", func() bool { return subscribedWaiters(c2, c2.Semaphore(n).q.clientCh) == 1 })
		must(t, s.Release(ctx, 1))
		must(t, <-got)
		if _, err := s.AvailablePermits(ctx); err != nil {
			t.Error(err)
		}
		if _, err := s.DrainPermits(ctx); err != nil {
			t.Error(err)
		}
	},
	"PermitSemaphore": func(t *testing.T, ctx context.Context, c1, c2 *Client, n string) {
		s := c1.PermitSemaphore(n)
		if _, err := s.TrySetPermits(ctx, 1); err != nil {
			t.Fatal(err)
		}
		p, err := s.Acquire(ctx, 1)
		must(t, err)
		if _, err := s.AvailablePermits(ctx); err != nil {
			t.Error(err)
		}
		if _, err := s.UpdateLeaseTime(ctx, p.IDs()[0], time.Minute); err != nil {
			t.Error(err)
		}
		must(t, p.Release(ctx))
	},
	"CountDownLatch": func(t *testing.T, ctx context.Context, c1, c2 *Client, n string) {
		l := c1.CountDownLatch(n)
		if _, err := l.TrySetCount(ctx, 1); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() { got <- c2.CountDownLatch(n).Await(ctx) }()
		eventually(t, 10*time.Second, "the awaiter waiting, subscribed", func() bool { return subscribedWaiters(c2, l.channel) == 1 })
		must(t, l.CountDown(ctx))
		must(t, <-got)
		if _, err := l.Count(ctx); err != nil {
			t.Error(err)
		}
		if _, err := l.Delete(ctx); err != nil {
			t.Error(err)
		}
	},
}

// A user with exactly the permissions docs/acl.md gives a primitive uses it — over TLS, as
// a server that wants users wants encryption too; one without a command its scripts run, or
// on a name outside its key patterns, gets an error that says it was refused.
func TestACLDocumented(t *testing.T) {
	t.Parallel()
	b := redistest.RedisTLS(t)
	admin := b.Client(t)
	doc := readACLDoc(t)
	for row, run := range aclRuns {
		cmds, ok := doc.rows[row]
		if !ok {
			t.Fatalf("docs/acl.md has no row %q", row)
		}
		primitive := strings.TrimSuffix(strings.Fields(row)[0], ",")
		t.Run(primitive, func(t *testing.T) {
			ctx := testCtx(t, 30*time.Second)
			n := "acl-" + strings.ToLower(primitive)
			keys := "~" + n + " ~*{" + n + "}* &*{" + n + "}*"
			c1, c2 := aclClients(t, b, admin, n, "-@all "+doc.common+" "+cmds+" "+keys)
			run(t, ctx, c1, c2, n)

			// Without a command its first change runs.
			missing := map[string]string{"Semaphore": "+set", "PermitSemaphore": "+set", "CountDownLatch": "+set"}[row]
			if missing == "" {
				missing = "+pexpire"
			}
			d1, d2 := aclClients(t, b, admin, n+"-short", "-@all "+doc.common+" "+cmds+" -"+missing[1:]+" "+keys)
			wantRefused(t, row+" without "+missing, "can't run this command", func() error { return firstErr(ctx, d1, d2, row, "{"+n+"}:new") })

			// A name outside its key patterns.
			e1, e2 := aclClients(t, b, admin, n+"-other", "-@all "+doc.common+" "+cmds+" "+keys)
			wantRefused(t, row+" on another name", "NOPERM", func() error { return firstErr(ctx, e1, e2, row, n+"-other") })
		})
	}
}

// subscribedWaiters is how many waiters c has on channel once Redis confirmed the
// subscription (0 before): a user who may not subscribe never gets there.
func subscribedWaiters(c *Client, channel string) int {
	if !c.mux.Subscribed(channel) {
		return 0
	}
	return c.mux.Waiters(channel)
}

// holdAsync takes l and releases it, in the background, and sends what came of it.
func holdAsync(ctx context.Context, l interface {
	Lock(context.Context, ...LockOption) error
	Unlock(context.Context) error
}) <-chan error {
	got := make(chan error, 1)
	go func() {
		err := l.Lock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	return got
}

// firstErr makes the first change of the primitive of row, named n, and returns its error.
func firstErr(ctx context.Context, c1, _ *Client, row, n string) error {
	switch row {
	case "FairLock":
		return c1.FairLock(n).Lock(ctx)
	case "RWLock":
		return c1.RWLock(n).Lock(ctx)
	case "Semaphore":
		_, err := c1.Semaphore(n).TrySetPermits(ctx, 1)
		return err
	case "PermitSemaphore":
		_, err := c1.PermitSemaphore(n).TrySetPermits(ctx, 1)
		return err
	case "CountDownLatch":
		_, err := c1.CountDownLatch(n).TrySetCount(ctx, 1)
		return err
	}
	return c1.Lock(n).Lock(ctx)
}

// wantRefused checks that call fails with an error that says so (Redis's own words).
func wantRefused(t *testing.T, what, says string, call func() error) {
	t.Helper()
	if err := call(); err == nil || !strings.Contains(err.Error(), says) {
		t.Errorf("%s: %v, want an error saying %q", what, err, says)
	}
}
