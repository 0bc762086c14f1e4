// Package redistest provides the Redis servers that the repository's tests
// run against: an embedded miniredis with a real-time clock, a throw-away
// real redis-server process, and a TCP proxy that injects network faults
// between a client and either of them.
//
// Most tests should use Each, which runs the same test body against both
// servers: miniredis is always there and fast, while real Redis catches the
// places where miniredis' emulation (Lua, pub/sub, expiry) differs.
//
// The invariant tests run on real topologies as well, through a package's
// Topologies (see NewTopologies): a Cluster of 3 masters with a replica each,
// and a Sentinel set of a master, 2 replicas and 3 Sentinels, each started once
// per test binary and shared by its tests.
//
// Whether the real-Redis half runs is controlled by the LATCHKEY_REDIS
// environment variable:
//
//	unset or ""  use redis-server if it is on PATH, otherwise skip
//	"required"   a missing or broken redis-server (or redis-cli, for the
//	             topologies) fails the test (for CI)
//	"off"        always skip the real-Redis backend
package redistest

import (
	"crypto/tls"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/internal/embedredis"
	"github.com/redis/rueidis"
)

// Backend names, as used for Backend.Name and for the subtests run by Each.
const (
	NameMiniredis = "miniredis"
	NameRedis     = "redis"
)

// Backend is one running test server.
type Backend struct {
	// Name is NameMiniredis or NameRedis for a single server, NameCluster or
	// NameSentinel for a shared topology (see Topologies).
	Name string
	// Addr is the host:port the server listens on: a Cluster's first master, or a
	// Sentinel set's master.
	Addr string
	// Mini gives direct access to the data set when Name is NameMiniredis;
	// it is nil for a real Redis server.
	Mini *miniredis.Miniredis
	// CACert is the file of the certificate a TLS server presents (see RedisTLS); "" for a
	// server without TLS.
	CACert string

	tls *tls.Config // trusts CACert
	// topo is the rest of a Cluster or a Sentinel set (see Topologies); nil for a
	// single server.
	topo *topology
}

// ClientOptionFor returns the rueidis options the tests use to reach a test
// server at addr. Use it instead of Backend.ClientOption when the client
// must go somewhere else, such as through a Proxy.
//
// Each setting is there because one of the backends needs it:
//   - DisableCache: miniredis has no CLIENT TRACKING, and rueidis refuses to
//     start with client-side caching enabled without it.
//   - ForceSingleClient: miniredis answers CLUSTER SLOTS and CLUSTER SHARDS,
//     so without this rueidis builds a cluster client for it, which
//     then connects to the address miniredis advertises and so bypasses any
//     proxy in between.
//   - ClientSetInfo: neither miniredis nor Redis 7.0 knows CLIENT SETINFO.
//     rueidis ignores the errors, but the command text contains "SET",
//     which would trip a Proxy fault armed on that marker during the
//     connection handshake.
func ClientOptionFor(addr string) rueidis.ClientOption {
	return rueidis.ClientOption{
		InitAddress:       []string{addr},
		DisableCache:      true,
		ForceSingleClient: true,
		ClientSetInfo:     rueidis.DisableClientSetInfo,
	}
}

// ClientOption returns the rueidis options for a client of this backend: a
// single-server client of Addr, a Cluster client of every node of a Cluster, or a
// Sentinel client of a Sentinel set's Sentinels.
func (b *Backend) ClientOption() rueidis.ClientOption {
	if b.topo != nil {
		return b.topo.option
	}
	opt := ClientOptionFor(b.Addr)
	opt.TLSConfig = b.tls
	return opt
}

// Client returns a new rueidis client connected to the backend, made from ClientOption.
// It is closed when the test finishes.
func (b *Backend) Client(t testing.TB) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(b.ClientOption())
	if err != nil {
		t.Fatalf("redistest: connect rueidis client to %s (%s): %v", b.Name, b.Addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

// ClientFor returns a new rueidis client for the test server (or proxy) at
// addr, built from ClientOptionFor. It is closed when the test finishes.
func ClientFor(t testing.TB, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(ClientOptionFor(addr))
	if err != nil {
		t.Fatalf("redistest: connect rueidis client to %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

// Miniredis starts an embedded miniredis whose clock runs in real time, so
// keys expire on their own as on a real server. It is shut down when the
// test finishes.
func Miniredis(t testing.TB) *Backend {
	t.Helper()
	s, err := embedredis.Start()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Close)
	return &Backend{Name: NameMiniredis, Addr: s.Addr(), Mini: s.Miniredis()}
}

// Each runs fn as two subtests, "miniredis" and "redis", each against its
// own freshly started server. The "redis" subtest is skipped or failed
// according to LATCHKEY_REDIS when no real Redis is available.
func Each(t *testing.T, fn func(t *testing.T, b *Backend)) {
	t.Helper()
	t.Run(NameMiniredis, func(t *testing.T) {
		fn(t, Miniredis(t))
	})
	t.Run(NameRedis, func(t *testing.T) {
		fn(t, Redis(t))
	})
}
