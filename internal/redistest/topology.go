package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	gosync "sync"
	"syscall"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/keyslot"
	"github.com/redis/rueidis"
)

// Topology names, as used for Backend.Name and for the subtests run by Topologies.Each.
const (
	NameCluster  = "cluster"
	NameSentinel = "sentinel"
)

// SentinelMaster is the name of the master set the shared Sentinel set monitors.
const SentinelMaster = "latchkey"

const (
	// topologyTimeout bounds the start of a whole topology, readiness included: about
	// 2–3 s here, the slack for a loaded machine running tests with -race.
	topologyTimeout = 60 * time.Second
	// nodeTimeout is the Cluster's node timeout and the Sentinels' down-after time by
	// default: long enough that a stall of a loaded machine (several test binaries, each
	// with its servers, on 2 CPUs) never fails a shared master over on its own, which would
	// move the shards the tests name. A test of failover makes topologies of its own (see
	// WithNodeTimeout), or asks for one (CLUSTER FAILOVER, SENTINEL FAILOVER), which waits
	// for no timeout.
	nodeTimeout = 10 * time.Second
)

// A Shard is a master with its replicas: one of a Cluster's masters, the Sentinel set's
// master, or a single server (without replicas).
type Shard struct {
	// Master is the master's host:port.
	Master string
	// Replicas are the host:port of the master's replicas.
	Replicas []string
	// Slots are the hash slots the master serves in a Cluster, as [first, last] ranges;
	// nil outside a Cluster.
	Slots [][2]int
}

// Serves reports whether the shard's master serves key: in a Cluster, whether key's hash
// slot is one of its slots; outside a Cluster, always.
func (s Shard) Serves(key string) bool {
	if s.Slots == nil {
		return true
	}
	slot := int(keyslot.Of(key))
	return slices.ContainsFunc(s.Slots, func(r [2]int) bool { return r[0] <= slot && slot <= r[1] })
}

// topology is what a Backend of a Cluster or a Sentinel set knows besides Addr.
type topology struct {
	option rueidis.ClientOption
	shards []Shard
	// sentinels are the Sentinels' host:port, for a Sentinel set.
	sentinels []string
	procs     []*redisProcess
	startup   time.Duration // from the first server's start until the topology was up
}

// Shards returns the backend's masters with their replicas, as the topology was started
// (a test that fails a master over knows better).
func (b *Backend) Shards() []Shard {
	if b.topo == nil {
		return []Shard{{Master: b.Addr}}
	}
	return b.topo.shards
}

// ShardOf returns the shard whose master serves key.
func (b *Backend) ShardOf(key string) Shard {
	for _, s := range b.Shards() {
		if s.Serves(key) {
			return s
		}
	}
	panic(fmt.Sprintf("redistest: no shard of %s serves %q", b.Name, key)) // a Cluster up has every slot
}

// Sentinels returns the host:port of the Sentinel set's Sentinels; nil for other backends.
func (b *Backend) Sentinels() []string {
	if b.topo == nil {
		return nil
	}
	return b.topo.sentinels
}

// PIDs returns the process IDs of the topology's servers, Sentinels included; nil for a
// single server, which is the test's own.
func (b *Backend) PIDs() []int {
	if b.topo == nil {
		return nil
	}
	var pids []int
	for _, p := range b.topo.procs {
		pids = append(pids, p.cmd.Process.Pid)
	}
	return pids
}

// Kill kills the topology's server at addr with SIGKILL, as a crash would, and waits until
// it is gone.
func (b *Backend) Kill(addr string) error {
	if b.topo != nil {
		for _, p := range b.topo.procs {
			if p.addr == addr {
				p.stop()
				return nil
			}
		}
	}
	return fmt.Errorf("redistest: no server of the %s at %s", b.Name, addr)
}

// Promoted waits until a replica of sh has become a master (its master killed, say) and
// returns its host:port. On a Sentinel set it waits until a Sentinel names it too, as
// clients find the master through them.
func (b *Backend) Promoted(ctx context.Context, sh Shard) (string, error) {
	clients, closeAll, err := nodeClients(append(slices.Clone(sh.Replicas), b.Sentinels()...))
	if err != nil {
		return "", err
	}
	defer closeAll()
	var promoted string
	err = until(ctx, func() error {
		for i, r := range sh.Replicas {
			role, err := clients[i].Do(ctx, clients[i].B().Role().Build()).ToArray()
			if err != nil || len(role) == 0 {
				continue
			}
			if s, _ := role[0].ToString(); s == "master" {
				promoted = r
			}
		}
		if promoted == "" {
			return fmt.Errorf("no replica of %s is a master yet", sh.Master)
		}
		if len(clients) == len(sh.Replicas) {
			return nil // no Sentinels
		}
		// One Sentinel's word: a client asks the first that answers.
		c := clients[len(sh.Replicas)]
		got, err := c.Do(ctx, c.B().SentinelGetMasterAddrByName().Master(SentinelMaster).Build()).AsStrSlice()
		if err != nil || len(got) != 2 || net.JoinHostPort(got[0], got[1]) != promoted {
			return fmt.Errorf("a sentinel names %v as the master, not %s", got, promoted)
		}
		return nil
	})
	return promoted, err
}

// Topologies holds the Cluster and the Sentinel set that the tests of one test binary
// share: starting them takes seconds, too long to do per test. A package's TestMain makes
// it with NewTopologies and closes it after m.Run; each topology is started on its first
// use, and both at once, as a test that wants one wants the other too.
//
// Tests that share a topology share its data: each must name its keys apart (after the
// test, say) and must not look at the whole data set (DBSIZE, KEYS *).
type Topologies struct {
	dir         string        // under reapRoot: the servers' working directories and pid files
	nodeTimeout time.Duration // the Cluster's node timeout, the Sentinels' down-after time

	once     gosync.Once
	done     chan struct{} // closed once both topologies are up or have failed
	cluster  sharedTopology
	sentinel sharedTopology

	mu     gosync.Mutex
	procs  []*redisProcess
	closed bool
}

// reapRoot is where every Topologies keeps its servers' directories, so that the next
// run can find what a crashed one left behind.
func reapRoot() string { return filepath.Join(os.TempDir(), "latchkey-redistest") }

// A TopologyOption configures the topologies NewTopologies makes.
type TopologyOption func(*Topologies)

// WithNodeTimeout sets how long a master may be unreachable before it is failed over: the
// Cluster's node timeout and the Sentinels' down-after time (10 s by default). A test that
// kills a master makes topologies of its own with a short one.
func WithNodeTimeout(d time.Duration) TopologyOption {
	return func(s *Topologies) { s.nodeTimeout = d }
}

// NewTopologies returns the shared topologies of a test binary, none started yet. It first
// kills the servers of earlier runs that died without closing theirs (a crash, a -timeout),
// by the PIDs they recorded, and removes their directories. Close it when the tests are
// done.
func NewTopologies(opts ...TopologyOption) (*Topologies, error) {
	root := reapRoot()
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	reap(root)
	dir, err := os.MkdirTemp(root, "run-")
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	s := &Topologies{dir: dir, nodeTimeout: nodeTimeout, done: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// reap kills the servers recorded under root by runs whose test process is gone, and
// removes their directories. A server is killed only if it still works in the directory
// it was started in (redis-server changes to its --dir), so that a PID reused since by
// another process is spared.
func reap(root string) {
	runs, _ := filepath.Glob(filepath.Join(root, "run-*"))
	for _, run := range runs {
		owner, err := os.ReadFile(filepath.Join(run, "owner"))
		if err != nil {
			continue // being created, or not ours
		}
		if pid, err := strconv.Atoi(string(owner)); err == nil && alive(pid) {
			continue
		}
		nodes, _ := filepath.Glob(filepath.Join(run, "*", "pid"))
		for _, f := range nodes {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			pid, err := strconv.Atoi(string(b))
			if err != nil {
				continue
			}
			if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err == nil && cwd == filepath.Dir(f) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_ = os.RemoveAll(run)
	}
}

// alive reports whether a process pid exists (a zombie included).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Close kills every server of the topologies by its PID, waits for each to be gone, and
// removes their directories. It waits for a start under way to end first.
func (s *Topologies) Close() error {
	s.once.Do(func() { close(s.done) }) // never started: nothing will be
	<-s.done
	s.mu.Lock()
	s.closed = true
	procs := s.procs
	s.procs = nil
	s.mu.Unlock()
	var wg gosync.WaitGroup
	for _, p := range procs {
		wg.Go(p.stop)
	}
	wg.Wait()
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	return nil
}

// Each runs fn as subtests on every backend: "miniredis" and "redis", each a fresh server
// of the subtest's own as with the package function Each, then "cluster" and "sentinel",
// the shared ones (see Topologies). The real-Redis subtests are skipped or failed
// according to LATCHKEY_REDIS when no real Redis is available.
func (s *Topologies) Each(t *testing.T, fn func(t *testing.T, b *Backend)) {
	t.Helper()
	Each(t, fn)
	s.Shared(t, fn)
}

// Real runs fn as subtests on every real-Redis backend: "redis", a fresh server of the
// subtest's own, then the shared "cluster" and "sentinel".
func (s *Topologies) Real(t *testing.T, fn func(t *testing.T, b *Backend)) {
	t.Helper()
	t.Run(NameRedis, func(t *testing.T) { fn(t, Redis(t)) })
	s.Shared(t, fn)
}

// Shared runs fn as subtests "cluster" and "sentinel", on the shared topologies.
func (s *Topologies) Shared(t *testing.T, fn func(t *testing.T, b *Backend)) {
	t.Helper()
	t.Run(NameCluster, func(t *testing.T) { fn(t, s.Cluster(t)) })
	t.Run(NameSentinel, func(t *testing.T) { fn(t, s.Sentinel(t)) })
}

// Cluster returns the shared Cluster: 3 masters with a replica each, every node on
// loopback, every replica linked to its master. Its Backend's Addr is a master's; its
// Client and ClientOption make Cluster clients of every node.
func (s *Topologies) Cluster(t testing.TB) *Backend {
	t.Helper()
	return s.ready(t, &s.cluster)
}

// Sentinel returns the shared Sentinel set: a master with 2 replicas, watched by 3
// Sentinels as SentinelMaster, every replica linked and every Sentinel aware of the
// master, its replicas and the other Sentinels. Its Backend's Addr is the master's; its
// Client and ClientOption make Sentinel clients, which find the master through the
// Sentinels.
func (s *Topologies) Sentinel(t testing.TB) *Backend {
	t.Helper()
	return s.ready(t, &s.sentinel)
}

// sharedTopology is one of the shared topologies as start left it: its Backend, or the
// error it failed to start with.
type sharedTopology struct {
	backend *Backend
	err     error
}

// ready starts the topologies (start) and returns topo's Backend, failing t if it did not
// start.
func (s *Topologies) ready(t testing.TB, topo *sharedTopology) *Backend {
	t.Helper()
	s.start(t)
	if topo.err != nil {
		t.Fatalf("redistest: %v", topo.err)
	}
	return topo.backend
}

// start starts both topologies once, unless LATCHKEY_REDIS or a missing redis-server or
// redis-cli skips or fails the test, and waits until they are up or have failed.
func (s *Topologies) start(t testing.TB) {
	t.Helper()
	path := redisServerPath(t)
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		mode, _ := redisModeFromEnv()
		if mode == redisRequired {
			t.Fatalf("redistest: %s=required but redis-cli (which makes the Cluster) is not usable: %v", EnvRedis, err)
		}
		t.Skipf("redistest: skipping the Cluster and Sentinel topologies: redis-cli not found on PATH")
	}
	s.once.Do(func() {
		go func() {
			defer close(s.done)
			var wg gosync.WaitGroup
			start := time.Now()
			wg.Go(func() {
				if s.cluster.backend, s.cluster.err = s.startCluster(path, cli); s.cluster.err == nil {
					s.cluster.backend.topo.startup = time.Since(start)
				}
			})
			wg.Go(func() {
				if s.sentinel.backend, s.sentinel.err = s.startSentinel(path); s.sentinel.err == nil {
					s.sentinel.backend.topo.startup = time.Since(start)
				}
			})
			wg.Wait()
		}()
	})
	<-s.done
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		t.Fatal("redistest: the topologies are closed")
	}
}

// node starts one redis-server of a topology in a directory of its own named after it,
// where it records its PID for reap, with args besides the defaults; conf, if not "", is
// its configuration file, written there.
func (s *Topologies) node(path, name, conf string, args ...string) (*redisProcess, error) {
	dir := filepath.Join(s.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var confPath string
	if conf != "" {
		confPath = filepath.Join(dir, "redis.conf")
		if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
			return nil, err
		}
	}
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		p, err := startRedisConf(path, confPath, dir, port, args...)
		if errors.Is(err, errPortTaken) && attempt < startAttempts {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		s.mu.Lock()
		s.procs = append(s.procs, p)
		s.mu.Unlock()
		// Recorded once it answers: a process that never did has been killed already.
		if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(p.cmd.Process.Pid)), 0o644); err != nil {
			return nil, err
		}
		return p, nil
	}
}

// nodes starts the named nodes at once, as node does each.
func (s *Topologies) nodes(path string, names []string, conf func(i int) string, args func(i int) []string) ([]*redisProcess, error) {
	procs := make([]*redisProcess, len(names))
	errs := make([]error, len(names))
	var wg gosync.WaitGroup
	for i, name := range names {
		wg.Go(func() { procs[i], errs[i] = s.node(path, name, conf(i), args(i)...) })
	}
	wg.Wait()
	return procs, errors.Join(errs...)
}

// startCluster starts 6 cluster nodes at once, has redis-cli make them a Cluster of 3
// masters with a replica each, and waits until every node says the cluster is ok and every
// replica's master counts it online.
func (s *Topologies) startCluster(path, cli string) (*Backend, error) {
	ctx, cancel := context.WithTimeout(context.Background(), topologyTimeout)
	defer cancel()
	names := []string{"cluster-1", "cluster-2", "cluster-3", "cluster-4", "cluster-5", "cluster-6"}
	procs, err := s.nodes(path, names, func(int) string { return "" }, func(int) []string {
		return []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(s.nodeTimeout.Milliseconds(), 10),
			// A diskless full sync waits 5 s by default for more replicas to share it.
			"--repl-diskless-sync-delay", "0"}
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	addrs := make([]string, len(procs))
	for i, p := range procs {
		addrs[i] = p.addr
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("cluster: redis-cli --cluster create: %v; output:\n%s", err, out)
	}
	clients, closeAll, err := nodeClients(addrs)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	defer closeAll()
	var shards []Shard
	err = until(ctx, func() error {
		for i, c := range clients {
			info, err := c.Do(ctx, c.B().ClusterInfo().Build()).ToString()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:6") {
				return fmt.Errorf("node %s: cluster not ok or not every node known", addrs[i])
			}
		}
		nodes, err := clients[0].Do(ctx, clients[0].B().ClusterNodes().Build()).ToString()
		if err != nil {
			return err
		}
		if shards, err = parseClusterNodes(nodes); err != nil {
			return fmt.Errorf("%w; CLUSTER NODES:\n%s", err, nodes)
		}
		for _, sh := range shards {
			if err := linked(ctx, clients[slices.Index(addrs, sh.Master)], sh.Master, sh.Replicas, clients, addrs); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cluster of %v not up within %v: %w", addrs, topologyTimeout, err)
	}
	return &Backend{Name: NameCluster, Addr: shards[0].Master, topo: &topology{
		option: rueidis.ClientOption{InitAddress: addrs, DisableCache: true, ClientSetInfo: rueidis.DisableClientSetInfo},
		shards: shards, procs: procs}}, nil
}

// parseClusterNodes reads CLUSTER NODES: 3 masters with their slots, a replica each.
func parseClusterNodes(nodes string) ([]Shard, error) {
	type node struct {
		addr, master string
		slots        [][2]int
	}
	byID := map[string]*node{}
	var ids []string
	// Under RESP3 the reply is a verbatim string, which rueidis gives with its format.
	nodes = strings.TrimPrefix(nodes, "txt:")
	for line := range strings.SplitSeq(strings.TrimSpace(nodes), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES line %q", line)
		}
		n := &node{addr: f[1][:strings.IndexAny(f[1]+"@", "@")]}
		if f[3] != "-" {
			n.master = f[3]
		}
		for _, r := range f[8:] {
			first, last, _ := strings.Cut(r, "-")
			if last == "" {
				last = first
			}
			a, err1 := strconv.Atoi(first)
			b, err2 := strconv.Atoi(last)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("CLUSTER NODES slots %q", r)
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		byID[f[0]] = n
		ids = append(ids, f[0])
	}
	var shards []Shard
	for _, id := range ids {
		n := byID[id]
		if n.master != "" || n.slots == nil {
			continue
		}
		sh := Shard{Master: n.addr, Slots: n.slots}
		for _, rid := range ids {
			if byID[rid].master == id {
				sh.Replicas = append(sh.Replicas, byID[rid].addr)
			}
		}
		if len(sh.Replicas) != 1 {
			return nil, fmt.Errorf("master %s has replicas %v, want 1", n.addr, sh.Replicas)
		}
		shards = append(shards, sh)
	}
	if len(shards) != 3 {
		return nil, fmt.Errorf("%d masters with slots, want 3", len(shards))
	}
	slices.SortFunc(shards, func(a, b Shard) int { return a.Slots[0][0] - b.Slots[0][0] })
	return shards, nil
}

// linked checks that each of master's replicas says its link is up and that the master
// counts them all online and has them confirm a write: after a full sync the master streams
// nothing to a replica until its first acknowledgement, up to a second later, and a WAIT
// meanwhile counts it out.
func linked(ctx context.Context, m rueidis.Client, master string, replicas []string, clients []rueidis.Client, addrs []string) error {
	for _, r := range replicas {
		c := clients[slices.Index(addrs, r)]
		info, err := c.Do(ctx, c.B().Info().Section("replication").Build()).ToString()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "master_link_status:up") {
			return fmt.Errorf("replica %s of %s: link not up", r, master)
		}
	}
	info, err := m.Do(ctx, m.B().Info().Section("replication").Build()).ToString()
	if err != nil {
		return err
	}
	if n := strings.Count(info, ",state=online"); n != len(replicas) {
		return fmt.Errorf("master %s: %d replicas online, want %d", master, n, len(replicas))
	}
	// PUBLISH is a write every replica gets, and leaves no key behind.
	rs := m.DoMulti(ctx, m.B().Publish().Channel("redistest:sync").Message("").Build(),
		m.B().Wait().Numreplicas(int64(len(replicas))).Timeout(100).Build())
	if n, err := rs[1].AsInt64(); err != nil || n < int64(len(replicas)) {
		return fmt.Errorf("master %s: WAIT counted %d replicas (%v), want %d", master, n, err, len(replicas))
	}
	return nil
}

// startSentinel starts a master, then its 2 replicas at once, then 3 Sentinels at once,
// and waits until the replicas are linked and until every Sentinel knows the master, both replicas and
// the 2 other Sentinels.
func (s *Topologies) startSentinel(path string) (*Backend, error) {
	ctx, cancel := context.WithTimeout(context.Background(), topologyTimeout)
	defer cancel()
	// A diskless full sync waits 5 s by default for more replicas to share it.
	master, err := s.node(path, "sentinel-master", "", "--repl-diskless-sync-delay", "0")
	if err != nil {
		return nil, fmt.Errorf("sentinel: %w", err)
	}
	host, port, _ := net.SplitHostPort(master.addr)
	replicaProcs, err := s.nodes(path, []string{"sentinel-replica-1", "sentinel-replica-2"},
		func(int) string { return "" },
		func(int) []string { return []string{"--replicaof", host, port, "--repl-diskless-sync-delay", "0"} })
	if err != nil {
		return nil, fmt.Errorf("sentinel: %w", err)
	}
	replicas := []string{replicaProcs[0].addr, replicaProcs[1].addr}
	addrs := append([]string{master.addr}, replicas...)
	// The Sentinels are told of the replicas (known-replica), not left to learn of them
	// from the master's INFO, which they read as they connect — before the replicas are
	// online — and then only every 10 s.
	sentinelConf := fmt.Sprintf("sentinel monitor %s %s %s 2\n"+
		"sentinel down-after-milliseconds %[1]s %[4]d\n"+
		"sentinel failover-timeout %[1]s %[5]d\n",
		SentinelMaster, host, port, s.nodeTimeout.Milliseconds(), (10 * s.nodeTimeout).Milliseconds())
	for _, r := range replicas {
		rh, rp, _ := net.SplitHostPort(r)
		sentinelConf += fmt.Sprintf("sentinel known-replica %s %s %s\n", SentinelMaster, rh, rp)
	}
	sentinelProcs, err := s.nodes(path, []string{"sentinel-1", "sentinel-2", "sentinel-3"},
		func(int) string { return sentinelConf }, func(int) []string { return []string{"--sentinel"} })
	if err != nil {
		return nil, fmt.Errorf("sentinel: %w", err)
	}
	var sentinels []string
	for _, p := range sentinelProcs {
		sentinels = append(sentinels, p.addr)
	}
	clients, closeAll, err := nodeClients(addrs)
	if err != nil {
		return nil, fmt.Errorf("sentinel: %w", err)
	}
	defer closeAll()
	if err := until(ctx, func() error { return linked(ctx, clients[0], master.addr, replicas, clients, addrs) }); err != nil {
		return nil, fmt.Errorf("sentinel: replicas of %s not linked within %v: %w", master.addr, topologyTimeout, err)
	}
	sclients, closeSentinels, err := nodeClients(sentinels)
	if err != nil {
		return nil, fmt.Errorf("sentinel: %w", err)
	}
	defer closeSentinels()
	// The Sentinels learn of each other from their hellos on the master, every 2 s.
	err = until(ctx, func() error {
		for i, c := range sclients {
			got, err := c.Do(ctx, c.B().SentinelGetMasterAddrByName().Master(SentinelMaster).Build()).AsStrSlice()
			if err != nil {
				return fmt.Errorf("sentinel %s: %w", sentinels[i], err)
			}
			if len(got) != 2 || net.JoinHostPort(got[0], got[1]) != master.addr {
				return fmt.Errorf("sentinel %s: master at %v, want %s", sentinels[i], got, master.addr)
			}
			m, err := c.Do(ctx, c.B().Arbitrary("SENTINEL", "MASTER", SentinelMaster).Build()).AsStrMap()
			if err != nil {
				return fmt.Errorf("sentinel %s: %w", sentinels[i], err)
			}
			if m["num-slaves"] != "2" || m["num-other-sentinels"] != "2" || m["flags"] != "master" {
				return fmt.Errorf("sentinel %s: knows %s replicas and %s other sentinels, master flags %q; want 2, 2, master",
					sentinels[i], m["num-slaves"], m["num-other-sentinels"], m["flags"])
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sentinel set of %v (sentinels %v) not up within %v: %w", addrs, sentinels, topologyTimeout, err)
	}
	return &Backend{Name: NameSentinel, Addr: master.addr, topo: &topology{
		option: rueidis.ClientOption{InitAddress: sentinels, DisableCache: true, ClientSetInfo: rueidis.DisableClientSetInfo,
			Sentinel: rueidis.SentinelOption{MasterSet: SentinelMaster}},
		shards:    []Shard{{Master: master.addr, Replicas: replicas}},
		sentinels: sentinels,
		procs:     append(append([]*redisProcess{master}, replicaProcs...), sentinelProcs...)}}, nil
}

// nodeClients connects a single-node client to each of addrs, for the readiness checks.
func nodeClients(addrs []string) ([]rueidis.Client, func(), error) {
	var clients []rueidis.Client
	closeAll := func() {
		for _, c := range clients {
			c.Close()
		}
	}
	for _, a := range addrs {
		c, err := rueidis.NewClient(ClientOptionFor(a))
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("connect to %s: %w", a, err)
		}
		clients = append(clients, c)
	}
	return clients, closeAll, nil
}

// until polls check until it returns nil, or returns its last error once ctx ends.
func until(ctx context.Context, check func() error) error {
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}
