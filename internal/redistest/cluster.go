package redistest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// Cluster starts a one-node Redis Cluster — a ClusterNode holding every slot — and returns
// it once the cluster is up. Its Backend's Name is NameRedis; reach it with ClusterClient
// (ClientFor makes a single-node client, which the node would answer with MOVED for nothing
// but would not treat as a cluster client).
func Cluster(t testing.TB) *Backend {
	t.Helper()
	b := ClusterNode(t)
	c := ClientFor(t, b.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Do(ctx, c.B().Arbitrary("CLUSTER", "ADDSLOTSRANGE", "0", "16383").Build()).Error(); err != nil {
		t.Fatalf("redistest: CLUSTER ADDSLOTSRANGE: %v", err)
	}
	for {
		info, err := c.Do(ctx, c.B().Arbitrary("CLUSTER", "INFO").Build()).ToString()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return b
		}
		if ctx.Err() != nil {
			t.Fatalf("redistest: cluster not up within 10s: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ClusterClient returns a rueidis Cluster client of the cluster at addr, closed when the
// test finishes.
func ClusterClient(t testing.TB, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true,
		ClientSetInfo: rueidis.DisableClientSetInfo})
	if err != nil {
		t.Fatalf("redistest: connect rueidis cluster client to %s: %v", addr, err)
	}
	if c.Mode() != rueidis.ClientModeCluster {
		c.Close()
		t.Fatalf("redistest: %s: a %s client, not a cluster one", addr, c.Mode())
	}
	t.Cleanup(c.Close)
	return c
}
