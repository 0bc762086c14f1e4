package pubsub

import (
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

// A Sharded Mux on a Cluster client refuses every subscription with ErrShardedCluster: its
// goroutine would otherwise send an SSUBSCRIBE for another slot than its connection's, on
// which rueidis panics where no caller can recover.
func TestShardedOnClusterRefused(t *testing.T) {
	t.Parallel()
	b := redistest.Cluster(t)
	m := New(redistest.ClusterClient(t, b.Addr), Options{Mode: Sharded})
	defer m.Close()
	for _, name := range []string{"a", "b", "c"} { // three slots
		if _, err := m.Subscribe(name, AllPolicy); !errors.Is(err, ErrShardedCluster) {
			t.Fatalf("Subscribe(%q): %v, want ErrShardedCluster", name, err)
		}
		if _, _, err := m.Listen(name, AllPolicy); !errors.Is(err, ErrShardedCluster) {
			t.Fatalf("Listen(%q): %v, want ErrShardedCluster", name, err)
		}
	}
	select {
	case <-m.Done():
	case <-time.After(time.Second):
		t.Fatal("Done not closed")
	}
}
