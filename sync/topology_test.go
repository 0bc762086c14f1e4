package sync

import (
	"strconv"
	"testing"

	"github.com/google/uuid"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/rueidis"
)

// topologies are the Cluster and the Sentinel set the package's invariant tests share,
// besides a miniredis and a redis-server of each test's own: TestMain makes them and
// closes them. A test on them names its keys apart (topoName).
var topologies *redistest.Topologies

// newClientOn returns a Client on a fresh rueidis client of b, whatever its topology (a
// Cluster client of a Cluster, a Sentinel client of a Sentinel set), both closed at cleanup.
func newClientOn(t *testing.T, b *redistest.Backend, opts ...Option) (*Client, rueidis.Client) {
	t.Helper()
	rdb := b.Client(t)
	c, err := New(rdb, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c, rdb
}

// topoName is a name after base of test t's own, as the tests on a shared topology must not
// meet in its data: after the test, and with a random suffix, as a test run again (-count)
// finds what its last run left (a fenced lock's token counter, say).
func topoName(t *testing.T, base string) string {
	return base + "@" + t.Name() + "#" + uuid.NewString()[:8]
}

// ownServer reports whether b is the test's own server, whose whole data set (DBSIZE,
// KEYS *) is the test's to check; a shared topology's is not.
func ownServer(b *redistest.Backend) bool {
	return b.Name == redistest.NameMiniredis || b.Name == redistest.NameRedis
}

// namesOnShards returns n names after base, the i-th served by b's shard i (round the
// shards): on a Cluster, names whose slots are on different masters.
func namesOnShards(t *testing.T, b *redistest.Backend, base string, n int) []string {
	t.Helper()
	shards := b.Shards()
	var names []string
	for i := 0; len(names) < n; i++ {
		name := topoName(t, base+":"+strconv.Itoa(i))
		if shards[len(names)%len(shards)].Serves(name) {
			names = append(names, name)
		}
		if i > 100000 {
			t.Fatalf("no name after %s on shard %d of %s", base, len(names)%len(shards), b.Name)
		}
	}
	return names
}
