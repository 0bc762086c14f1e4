package sync

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/rueidis"
)

// In a cluster, the WAIT that confirms a script is the script's node's even when the
// script's slot has moved (MOVED): a script redirected alone to the slot's new node, its
// WAIT answered by the old one, would count the old node's replicas.
func TestSyncReplicasClusterRedirect(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 30*time.Second)
	a, b, r := redistest.ClusterNode(t), redistest.ClusterNode(t), redistest.ClusterNode(t)
	ac, bc, rc := redistest.ClientFor(t, a.Addr), redistest.ClientFor(t, b.Addr), redistest.ClientFor(t, r.Addr)
	do := func(c rueidis.Client, args ...string) rueidis.RedisResult {
		return c.Do(ctx, c.B().Arbitrary(args...).Build())
	}
	host, port, _ := net.SplitHostPort(a.Addr)
	must(t, do(bc, "CLUSTER", "MEET", host, port).Error())
	must(t, do(rc, "CLUSTER", "MEET", host, port).Error())
	aID, _ := do(ac, "CLUSTER", "MYID").ToString()
	bID, _ := do(bc, "CLUSTER", "MYID").ToString()
	// a has a replica (r) and every slot but warmb's, which b has; b has no replica.
	wb, _ := do(ac, "CLUSTER", "KEYSLOT", "warmb").AsInt64()
	if wb > 0 {
		must(t, do(ac, "CLUSTER", "ADDSLOTSRANGE", "0", strconv.FormatInt(wb-1, 10)).Error())
	}
	if wb < 16383 {
		must(t, do(ac, "CLUSTER", "ADDSLOTSRANGE", strconv.FormatInt(wb+1, 10), "16383").Error())
	}
	must(t, do(bc, "CLUSTER", "ADDSLOTS", strconv.FormatInt(wb, 10)).Error())
	eventually(t, 10*time.Second, "r replicates a", func() bool { return do(rc, "CLUSTER", "REPLICATE", aID).Error() == nil })
	eventually(t, 10*time.Second, "the cluster is up, r online", func() bool {
		up := true
		for _, c := range []rueidis.Client{ac, bc, rc} {
			s, _ := do(c, "CLUSTER", "INFO").ToString()
			up = up && strings.Contains(s, "cluster_state:ok")
		}
		s, _ := do(ac, "INFO", "replication").ToString()
		return up && strings.Contains(s, "state=online")
	})
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rdb.Close)
	c, err := New(rdb, WithSyncReplicas(1, time.Second)) // r confirms within it on a loaded machine
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	eventually(t, 10*time.Second, "a lock on a is confirmed by r", func() bool {
		l := c.Lock("warm")
		return l.Lock(ctx) == nil && l.Unlock(ctx) == nil
	})
	// Unconfirmed on b, but b has the script now: a redirect to b finds it there.
	if err := c.Lock("warmb").Lock(ctx); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("Lock on b, which has no replica: %v, want ErrNotReplicated", err)
	}

	// The slot of "moved" goes to b, which has no replica; the client's slot map says a.
	n, _ := do(ac, "CLUSTER", "KEYSLOT", "moved").AsInt64()
	slot := strconv.FormatInt(n, 10)
	must(t, do(bc, "CLUSTER", "SETSLOT", slot, "IMPORTING", aID).Error())
	must(t, do(ac, "CLUSTER", "SETSLOT", slot, "MIGRATING", bID).Error())
	must(t, do(bc, "CLUSTER", "SETSLOT", slot, "NODE", bID).Error())
	must(t, do(ac, "CLUSTER", "SETSLOT", slot, "NODE", bID).Error())
	ok, err := c.Lock("moved").TryLock(ctx)
	if ok || !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("TryLock on a node without replicas, after a redirect: %v, %v; want false, ErrNotReplicated", ok, err)
	}
	if exists(t, bc, "moved") {
		t.Fatal("the unconfirmed lock was left on b")
	}
}
