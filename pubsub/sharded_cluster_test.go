package pubsub

import (
	"fmt"
	"testing"

	"github.com/latchkey/latchkey/internal/redistest"
	"go.uber.org/zap"
)

// A Sharded Mux of a Cluster client subscribes each channel on the master serving its slot
// (one channel per master here), and an SPUBLISH on any of them wakes its waiters; the last
// waiter's leaving unsubscribes it there.
func TestShardedOnCluster(t *testing.T) {
	t.Parallel()
	b := redistest.Cluster(t)
	pub := redistest.ClusterClient(t, b.Addr)
	lg, _ := zap.NewDevelopment()
	m := newMux(t, redistest.ClusterClient(t, b.Addr), Options{Mode: Sharded, Logger: lg})
	var names []string
	for _, sh := range b.Shards() {
		for i := 0; ; i++ {
			if name := fmt.Sprintf("shard-%s-%d", t.Name(), i); sh.Serves(name) {
				names = append(names, name)
				break
			}
		}
	}
	waiters := make(map[string]*Waiter)
	for _, name := range names {
		waiters[name] = subscribe(t, m, name, AllPolicy)
	}
	shardNumsub := func(name string) int64 {
		r, err := pub.Do(ctxT(t), pub.B().PubsubShardnumsub().Channel(name).Build()).AsIntMap()
		if err != nil {
			t.Fatalf("PUBSUB SHARDNUMSUB %s: %v", name, err)
		}
		return r[name]
	}
	for _, name := range names {
		waitSignal(t, waiters[name], name+" subscribed")
		if n := shardNumsub(name); n != 1 {
			t.Fatalf("SHARDNUMSUB %s = %d, want 1", name, n)
		}
		if n, err := pub.Do(ctxT(t), pub.B().Spublish().Channel(name).Message("1").Build()).AsInt64(); err != nil || n != 1 {
			t.Fatalf("SPUBLISH %s = %d, %v; want 1 subscriber", name, n, err)
		}
		waitSignal(t, waiters[name], name+" published")
	}
	for _, name := range names {
		waiters[name].Close()
		eventually(t, "SHARDNUMSUB "+name+" 0 after its waiter left", func() bool { return shardNumsub(name) == 0 })
	}
}
