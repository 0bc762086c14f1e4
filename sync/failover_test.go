package sync

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

// failoverNodeTimeout is how long the failover tests' masters may be unreachable before a
// replica takes over: short, so that a test waits little for the failover it causes, and
// long enough that a loaded machine's stall fails nothing over before it.
const failoverNodeTimeout = 3 * time.Second

// failoverTopologies are a Cluster and a Sentinel set of the test's own, which fail a
// master over failoverNodeTimeout after it stops answering; closed when the test ends.
func failoverTopologies(t *testing.T) *redistest.Topologies {
	t.Helper()
	topos, err := redistest.NewTopologies(redistest.WithNodeTimeout(failoverNodeTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := topos.Close(); err != nil {
			t.Error(err)
		}
	})
	return topos
}

// When a master dies (kill -9) holding locks with waiters on them — on a Cluster and on a
// Sentinel set, each of the test's own — and a replica takes over:
//   - a lock released during the outage: the release completes or reports
//     ErrOutcomeUnknown (and is settled), and its waiters, on two Clients, get the lock in
//     turn, alone, the first of them soon after the promotion;
//   - a lock held through the outage: its holder either keeps its lease (renewed on the new
//     master) or sees Lost;
//   - a lock whose lease is shorter than the failover, never released: its waiters get it
//     once the lease ends, not stranded by a hold nobody has.
//
// The figures (kill to promotion, promotion to the first waiter served) are logged.
func TestFailover(t *testing.T) {
	t.Parallel()
	topos := failoverTopologies(t)
	for _, topo := range []struct {
		name string
		get  func(testing.TB) *redistest.Backend
	}{{redistest.NameCluster, topos.Cluster}, {redistest.NameSentinel, topos.Sentinel}} {
		t.Run(topo.name, func(t *testing.T) {
			t.Parallel()
			failover(t, topo.get(t))
		})
	}
}

func failover(t *testing.T, b *redistest.Backend) {
	ctx := testCtx(t, 90*time.Second)
	// Leases of 15 s, renewed every 5 s: they outlast the failover (some 5 s).
	const lease = 15 * time.Second
	holderC, rdb := newClientOn(t, b, WithWatchdogTimeout(lease))
	waiterC, _ := newClientOn(t, b)
	sh := b.Shards()[0]
	var released, kept, short string
	for short == "" {
		n := topoName(t, "failover")
		switch {
		case !sh.Serves(n):
		case released == "":
			released = n
		case kept == "":
			kept = n
		default:
			short = n
		}
	}
	const shortLease = 2 * time.Second
	releasedL := holderC.Lock(released)
	must(t, releasedL.Lock(ctx))
	keptL := holderC.Lock(kept)
	must(t, keptL.Lock(ctx))
	must(t, holderC.Lock(short).Lock(ctx, Lease(shortLease)))
	shortTaken := time.Now()

	type served struct {
		name string
		at   time.Time
		err  error
	}
	const perName = 3 // waiters on each lock: two on one Client, one on the other
	results := make(chan served, 2*perName)
	for _, name := range []string{released, short} {
		var in atomic.Int32
		for i, c := range []*Client{waiterC, waiterC, holderC} {
			go func() {
				l := c.Lock(name)
				err := l.Lock(ctx)
				at := time.Now()
				if err == nil {
					if in.Add(1) != 1 {
						err = errors.New("two holders at once")
					}
					in.Add(-1)
					if uerr := l.Unlock(ctx); uerr != nil && err == nil {
						err = uerr
					}
				}
				if err != nil {
					err = fmt.Errorf("waiter %d: %w", i, err)
				}
				results <- served{name, at, err}
			}()
		}
	}
	eventually(t, 30*time.Second, "every waiter waiting", func() bool {
		return waiterC.mux.Waiters(waitChannel(waiterC, released)) == 2 && waiterC.mux.Waiters(waitChannel(waiterC, short)) == 2 &&
			holderC.mux.Waiters(waitChannel(holderC, released)) == 1 && holderC.mux.Waiters(waitChannel(holderC, short)) == 1
	})

	killed := time.Now()
	must(t, b.Kill(sh.Master))
	unlocked := make(chan error, 1)
	go func() { unlocked <- releasedL.Unlock(ctx) }()
	promoted, err := b.Promoted(ctx, sh)
	if err != nil {
		t.Fatalf("no replica of %s took over: %v", sh.Master, err)
	}
	promotedAt := time.Now()
	t.Logf("%s: killed %s; %s took over %v later", b.Name, sh.Master, promoted, promotedAt.Sub(killed).Round(time.Millisecond))

	first := map[string]time.Time{}
	for n := range 2 * perName {
		select {
		case r := <-results:
			if r.err != nil {
				t.Errorf("a waiter on %s: %v", r.name, r.err)
			}
			if f, ok := first[r.name]; !ok || r.at.Before(f) {
				first[r.name] = r.at
			}
		case <-ctx.Done():
			t.Fatalf("waiters stranded: %d of %d served", n, 2*perName)
		}
	}
	if err := <-unlocked; err != nil && !errors.Is(err, ErrOutcomeUnknown) && !(errors.Is(err, ErrLockLost) && closed(releasedL.Lost())) {
		t.Errorf("the release during the outage: %v, want nil, ErrOutcomeUnknown, or the lease's loss", err)
	}
	// Served once the Client sees the new master: its subscriptions are back within a second
	// (and wake every waiter), and a request under way is repeated at least every second.
	// The bound is wide, for a loaded machine; a waiter left to its periodic re-check (a
	// third of the wait time, 10 s) would miss it.
	for name, free := range map[string]time.Time{released: promotedAt, short: maxTime(promotedAt, shortTaken.Add(shortLease))} {
		after := first[name].Sub(free)
		t.Logf("%s: %s, free at the promotion or its lease's end, served its first waiter %v later", b.Name, name, after.Round(time.Millisecond))
		if after > failoverServeBound {
			t.Errorf("%s served its first waiter %v after it was free, want at most %v", name, after, failoverServeBound)
		}
	}

	// The lock held through the outage: renewed on the new master (its TTL back to about the
	// lease, which it was not since the kill), or lost.
	for !closed(keptL.Lost()) {
		if ms, err := rdb.Do(ctx, rdb.B().Pttl().Key(kept).Build()).AsInt64(); err == nil && ms > (lease-time.Second).Milliseconds() {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the lock held through the outage was neither renewed on the new master nor lost")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := keptL.Unlock(ctx); err != nil {
		if !closed(keptL.Lost()) {
			t.Errorf("the lock held through the outage: Unlock %v, and it was not lost", err)
		}
		t.Logf("%s: the lock held through the outage was lost: %v", b.Name, err)
	} else {
		t.Logf("%s: the lock held through the outage kept its lease, renewed on the new master", b.Name)
	}
	if b.Name == redistest.NameCluster {
		handOver(t, ctx, b, holderC, waiterC)
	}
}

// handOver moves another shard's slots to its replica by a manual failover (CLUSTER
// FAILOVER: no write lost, the old master a replica now), with a lock of that shard held
// and a waiter on it: the master drops the waiter's shard channel, which its Client
// subscribes again on the new one, where the release wakes it.
func handOver(t *testing.T, ctx context.Context, b *redistest.Backend, holderC, waiterC *Client) {
	sh := b.Shards()[1]
	var name string
	for name == "" {
		if n := topoName(t, "handover"); sh.Serves(n) {
			name = n
		}
	}
	l := holderC.Lock(name)
	must(t, l.Lock(ctx))
	got := lockAsync(ctx, waiterC.Lock(name))
	ch := waitChannel(waiterC, name)
	eventually(t, 10*time.Second, "the waiter subscribed", func() bool { return waiterC.mux.Subscribed(ch) })
	replica := redistest.ClientFor(t, sh.Replicas[0])
	must(t, replica.Do(ctx, replica.B().ClusterFailover().Build()).Error())
	if promoted, err := b.Promoted(ctx, sh); err != nil || promoted != sh.Replicas[0] {
		t.Fatalf("the manual failover: %s promoted, %v; want %s", promoted, err, sh.Replicas[0])
	}
	moved := redistest.ClientFor(t, sh.Replicas[0])
	eventually(t, 10*time.Second, "the waiter's channel subscribed on the new master", func() bool {
		n, err := moved.Do(ctx, moved.B().PubsubShardnumsub().Channel(ch).Build()).AsIntMap()
		return err == nil && n[ch] == 1
	})
	must(t, l.Unlock(ctx))
	released := time.Now()
	wantResult(t, "the waiter after the hand-over", got, failoverServeBound)
	t.Logf("%s: after a manual failover, the waiter was served %v after the release", b.Name, time.Since(released).Round(time.Millisecond))
}

// failoverServeBound is how soon after a lock is free again on a new master its waiters
// must be served.
const failoverServeBound = 5 * time.Second

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// A hold whose write the replicas never got is lost with the master: here the replicas are
// cut off (REPLICAOF an address nobody serves) as a lock is taken, and the master killed.
// Without replica confirmation the lock is then held twice — taken again on the new master
// while its first holder still believes it holds — until the first holder's next renewal
// finds its hold gone and its Lost closes: that window is measured. With
// WithSyncReplicas(1, …) the same acquisition is refused (ErrNotReplicated) and given back:
// no one believes a hold the replicas do not have.
func TestFailoverLostWrite(t *testing.T) {
	t.Parallel()
	topos := failoverTopologies(t)
	b := topos.Sentinel(t)
	ctx := testCtx(t, 120*time.Second)
	sh := b.Shards()[0]
	const lease = 6 * time.Second // renewed every 2 s
	first, _ := newClientOn(t, b, WithWatchdogTimeout(lease))
	confirmed, _ := newClientOn(t, b, WithWatchdogTimeout(lease), WithSyncReplicas(1, 300*time.Millisecond))
	second, _ := newClientOn(t, b)
	// The replicas follow a master nobody serves: nothing the master writes reaches them.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	for _, r := range sh.Replicas {
		rc := redistest.ClientFor(t, r)
		if err := rc.Do(ctx, rc.B().Replicaof().Host(host).Port(mustAtoi(t, port)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}

	name := topoName(t, "lost-write")
	if err := confirmed.Lock(name).Lock(ctx); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("an acquisition no replica confirmed: %v, want ErrNotReplicated", err)
	}
	held := first.Lock(name)
	must(t, held.Lock(ctx)) // on the master only
	must(t, b.Kill(sh.Master))
	if _, err := b.Promoted(ctx, sh); err != nil {
		t.Fatalf("no replica took over: %v", err)
	}
	again := second.Lock(name)
	must(t, again.Lock(ctx)) // the new master never had the first hold
	twice := time.Now()
	select {
	case <-held.Lost():
		t.Logf("held twice for %v: from the second acquisition to the first holder's Lost (lease %v, renewed every %v)",
			time.Since(twice).Round(time.Millisecond), lease, lease/3)
	case <-ctx.Done():
		t.Fatal("the first holder never learned that its hold was gone")
	}
	if held.Valid() {
		t.Error("the lost hold is still valid")
	}
	must(t, again.Unlock(ctx))
}

func mustAtoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
