package sync

import (
	"strconv"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/rueidis"
)

// With WithSyncReplicas, every primitive's acquisition returns once a replica of the
// master that serves its name has it, and the replica does have it then: on a server with
// a replica of its own, a Cluster and a Sentinel set. On the Cluster, whose names here are
// spread over the 3 masters, each WAIT is that master's: the master's count of WAIT calls
// grows while a primitive is used, and no other master's does (the tests on the shared
// Cluster send WAIT through this test only).
func TestSyncReplicasConfirmOnTopologies(t *testing.T) {
	t.Parallel()
	topologies.Real(t, func(t *testing.T, b *redistest.Backend) {
		var ownReplica []string
		if b.Name == redistest.NameRedis {
			ownReplica = []string{redistest.StartReplica(t, b).Addr}
		}
		ctx := testCtx(t, 30*time.Second)
		// WAIT returns as soon as a replica has the write: the timeout only bounds a loaded
		// machine's delays.
		c, _ := newClientOn(t, b, WithSyncReplicas(1, 10*time.Second))
		names := namesOnShards(t, b, "confirm", 7)
		nodes := map[string]rueidis.Client{}
		// ask sends cmd to the node at addr; a Cluster replica's connection is made READONLY
		// first (on the same connection), else it redirects to its master.
		node := func(addr string) rueidis.Client {
			if nodes[addr] == nil {
				nodes[addr] = redistest.ClientFor(t, addr)
			}
			return nodes[addr]
		}
		ask := func(addr string, cmd func(rueidis.Builder) rueidis.Completed) rueidis.RedisResult {
			r := node(addr)
			if b.Name == redistest.NameCluster {
				return r.DoMulti(ctx, r.B().Readonly().Build(), cmd(r.B()))[1]
			}
			return r.Do(ctx, cmd(r.B()))
		}
		waits := func() map[string]int {
			n := map[string]int{}
			for _, s := range b.Shards() {
				n[s.Master] = waitCalls(t, node(s.Master))
			}
			return n
		}
		// confirmed runs op, which uses the primitive named name, then checks that a replica
		// of name's master answers cmd with want, and that the WAITs went to that master.
		confirmed := func(what, name string, op func(), cmd func(rueidis.Builder) rueidis.Completed, want int64) {
			t.Helper()
			before := waits()
			op()
			replicas := ownReplica
			if replicas == nil {
				replicas = b.ShardOf(name).Replicas
			}
			var got []string
			for _, r := range replicas {
				n, err := ask(r, cmd).AsInt64()
				if err == nil && n == want {
					got = nil
					break
				}
				got = append(got, strconv.FormatInt(n, 10)+" ("+r+")")
			}
			if got != nil {
				t.Fatalf("%s returned, but the replicas of %s's master answer %v, want %d", what, name, got, want)
			}
			after, master := waits(), b.ShardOf(name).Master
			for m, n := range after {
				if grew := n > before[m]; grew != (m == master) {
					t.Fatalf("%s on %s, served by %s: WAIT calls on %s went from %d to %d", what, name, master, m, before[m], n)
				}
			}
		}
		exists := func(key string) func(rueidis.Builder) rueidis.Completed {
			return func(b rueidis.Builder) rueidis.Completed { return b.Exists().Key(key).Build() }
		}
		get := func(key string) func(rueidis.Builder) rueidis.Completed {
			return func(b rueidis.Builder) rueidis.Completed { return b.Get().Key(key).Build() }
		}

		l := c.Lock(names[0])
		confirmed("Lock.Lock", names[0], func() { must(t, l.Lock(ctx)) }, exists(names[0]), 1)
		must(t, l.Unlock(ctx))

		f := c.FairLock(names[1])
		confirmed("FairLock.Lock", names[1], func() { must(t, f.Lock(ctx)) }, exists(names[1]), 1)
		must(t, f.Unlock(ctx))

		fl := c.FencedLock(names[2])
		var tok int64
		confirmed("FencedLock.LockToken", names[2], func() {
			var err error
			tok, err = fl.LockToken(ctx)
			must(t, err)
		}, exists(names[2]), 1)
		if n, err := ask(b.ShardOf(names[2]).Master, get("redisson_lock_token:{"+names[2]+"}")).AsInt64(); n != tok || err != nil {
			t.Fatalf("the fenced lock's token on its master: %d, %v; want %d", n, err, tok)
		}
		must(t, fl.Unlock(ctx))

		rw := c.RWLock(names[3])
		confirmed("RWLock.RLock", names[3], func() { must(t, rw.RLock(ctx)) }, exists(names[3]), 1)
		must(t, rw.RUnlock(ctx))
		confirmed("RWLock.Lock", names[3], func() { must(t, rw.Lock(ctx)) }, exists(names[3]), 1)
		must(t, rw.Unlock(ctx))

		sem := c.Semaphore(names[4])
		must(t, sem.SetPermits(ctx, 3))
		confirmed("Semaphore.Acquire", names[4], func() { must(t, sem.Acquire(ctx, 2)) }, get(names[4]), 1)
		must(t, sem.Release(ctx, 2))

		perm := c.PermitSemaphore(names[5])
		must(t, perm.SetPermits(ctx, 3))
		var p *Permits
		confirmed("PermitSemaphore.Acquire", names[5], func() {
			var err error
			p, err = perm.Acquire(ctx, 2)
			must(t, err)
		}, func(b rueidis.Builder) rueidis.Completed { return b.Zcard().Key(perm.timeouts).Build() }, 2)
		must(t, p.Release(ctx))

		latch := c.CountDownLatch(names[6])
		if ok, err := latch.TrySetCount(ctx, 2); !ok || err != nil {
			t.Fatalf("TrySetCount: %v, %v", ok, err)
		}
		confirmed("CountDownLatch.CountDown", names[6], func() { must(t, latch.CountDown(ctx)) }, get(names[6]), 1)
		must(t, latch.CountDown(ctx))
	})
}
