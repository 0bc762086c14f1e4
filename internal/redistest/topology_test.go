package redistest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/keyslot"
	"github.com/redis/rueidis"
)

// The Cluster comes up with 3 masters that serve every slot between them, each with a
// linked replica; the Sentinel set with a master, 2 linked replicas and 3 Sentinels that
// know the master; clients of both reach the master that serves a key. Once closed, no
// process of either is left, by PID, and neither is their directory.
func TestTopologiesUpAndDown(t *testing.T) {
	topos, err := NewTopologies()
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = topos.Close()
		}
	})
	start := time.Now()
	cl, se := topos.Cluster(t), topos.Sentinel(t)
	t.Logf("both topologies up in %v (the Cluster in %v, the Sentinel set in %v)", time.Since(start), cl.topo.startup, se.topo.startup)
	ctx := testContext(t)
	do := func(addr string, args ...string) rueidis.RedisResult {
		c := ClientFor(t, addr)
		return c.Do(ctx, c.B().Arbitrary(args...).Build())
	}

	shards := cl.Shards()
	if len(shards) != 3 {
		t.Fatalf("cluster shards %+v, want 3", shards)
	}
	covered := 0
	for _, sh := range shards {
		for _, r := range sh.Slots {
			covered += r[1] - r[0] + 1
		}
		if len(sh.Replicas) != 1 {
			t.Fatalf("master %s has replicas %v, want 1", sh.Master, sh.Replicas)
		}
		for _, n := range append([]string{sh.Master}, sh.Replicas...) {
			info, err := do(n, "CLUSTER", "INFO").ToString()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				t.Fatalf("node %s: CLUSTER INFO %q, %v; want cluster_state:ok", n, info, err)
			}
		}
		info, err := do(sh.Replicas[0], "INFO", "replication").ToString()
		_, port, _ := net.SplitHostPort(sh.Master)
		if err != nil || !strings.Contains(info, "master_link_status:up") || !strings.Contains(info, "master_port:"+port) {
			t.Fatalf("replica %s of %s: %q, %v; want its link to that master up", sh.Replicas[0], sh.Master, info, err)
		}
	}
	if covered != keyslot.Count {
		t.Fatalf("the masters serve %d slots, want %d", covered, keyslot.Count)
	}
	// A key lands on the master ShardOf names: a Cluster client routes it there.
	cc := cl.Client(t)
	if cc.Mode() != rueidis.ClientModeCluster {
		t.Fatalf("cluster client mode %s", cc.Mode())
	}
	for i := range 30 {
		key := "redistest:up:" + strconv.Itoa(i)
		if err := cc.Do(ctx, cc.B().Set().Key(key).Value("1").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if n, err := do(cl.ShardOf(key).Master, "EXISTS", key).AsInt64(); n != 1 || err != nil {
			t.Fatalf("%s not on the master ShardOf names (%s): %d, %v", key, cl.ShardOf(key).Master, n, err)
		}
	}

	sh := se.Shards()
	if len(sh) != 1 || len(sh[0].Replicas) != 2 || sh[0].Master != se.Addr || len(se.Sentinels()) != 3 {
		t.Fatalf("sentinel set %+v with sentinels %v, want a master at Addr with 2 replicas, 3 sentinels", sh, se.Sentinels())
	}
	for _, r := range sh[0].Replicas {
		if info, err := do(r, "INFO", "replication").ToString(); err != nil || !strings.Contains(info, "master_link_status:up") {
			t.Fatalf("replica %s: %q, %v; want its link up", r, info, err)
		}
	}
	for _, s := range se.Sentinels() {
		got, err := do(s, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster).AsStrSlice()
		if err != nil || len(got) != 2 || net.JoinHostPort(got[0], got[1]) != se.Addr {
			t.Fatalf("sentinel %s: master %v, %v; want %s", s, got, err, se.Addr)
		}
	}
	sc := se.Client(t)
	if sc.Mode() != rueidis.ClientModeSentinel {
		t.Fatalf("sentinel client mode %s", sc.Mode())
	}
	if err := sc.Do(ctx, sc.B().Set().Key("redistest:up").Value("1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if n, err := do(se.Addr, "EXISTS", "redistest:up").AsInt64(); n != 1 || err != nil {
		t.Fatalf("the sentinel client's write is not on the master: %d, %v", n, err)
	}

	pids := append(cl.PIDs(), se.PIDs()...)
	if len(pids) != 12 {
		t.Fatalf("%d server PIDs, want 6 cluster nodes and 6 of the sentinel set", len(pids))
	}
	for _, pid := range pids {
		if !alive(pid) {
			t.Fatalf("server %d is not running", pid)
		}
	}
	dir := topos.dir
	closed = true
	if err := topos.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("server %d still running after Close", pid)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the topologies' directory %s: %v, want it removed", dir, err)
	}
}

// A run whose test process died without closing its topologies has its servers killed and
// its directory removed by the next NewTopologies; a live run's are left alone, and so is
// a process that merely has a recorded PID (PIDs are reused).
func TestNewTopologiesReapsDeadRuns(t *testing.T) {
	path := redisServerPath(t)
	root := reapRoot()
	mkRun := func(owner int) string {
		t.Helper()
		if err := os.MkdirAll(root, 0o755); err != nil {
			t.Fatal(err)
		}
		run, err := os.MkdirTemp(root, "run-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(run) })
		if err := os.WriteFile(filepath.Join(run, "owner"), []byte(strconv.Itoa(owner)), 0o644); err != nil {
			t.Fatal(err)
		}
		return run
	}
	// A dead owner: a process that has exited, and been waited for.
	dead := deadPID(t, "true")
	orphanRun, liveRun := mkRun(dead), mkRun(os.Getpid())
	server := func(run string) *redisProcess {
		t.Helper()
		dir := filepath.Join(run, "node")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		p, err := startRedis(path, dir, mustFreePort(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.stop)
		if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(p.cmd.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	orphan, live := server(orphanRun), server(liveRun)
	// A stranger: recorded under the dead run, but working elsewhere.
	stranger, err := startRedis(path, t.TempDir(), mustFreePort(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stranger.stop)
	if err := os.MkdirAll(filepath.Join(orphanRun, "other"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(orphanRun, "other", "pid"), []byte(strconv.Itoa(stranger.cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}

	topos, err := NewTopologies()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = topos.Close() })
	select {
	case <-orphan.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the dead run's server is still running")
	}
	if _, err := os.Stat(orphanRun); !os.IsNotExist(err) {
		t.Fatalf("the dead run's directory: %v, want it removed", err)
	}
	for what, p := range map[string]*redisProcess{"the live run's server": live, "the stranger": stranger} {
		if _, err := probe(p.addr); err != nil {
			t.Fatalf("%s was killed: %v", what, err)
		}
	}
	if _, err := os.Stat(liveRun); err != nil {
		t.Fatalf("the live run's directory: %v", err)
	}
}

// deadPID runs a command to its end and returns its PID, which is then no process's.
func deadPID(t *testing.T, name string) int {
	t.Helper()
	cmd := exec.Command(name)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if pid := cmd.Process.Pid; !alive(pid) {
		return pid
	}
	t.Fatalf("the exited %s is alive", name)
	return 0
}

func mustFreePort(t *testing.T) int {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// topoChildEnv marks a test process started by TestTopologiesEnvHandling.
const topoChildEnv = "REDISTEST_TOPO_CHILD"

// Without redis-cli, which makes the Cluster, the topologies are skipped, or fail the test
// with LATCHKEY_REDIS=required; run in a child test process whose PATH has redis-server
// only, as the outcome ends the test that asks for a topology.
func TestTopologiesEnvHandling(t *testing.T) {
	if os.Getenv(topoChildEnv) == "1" {
		topos, err := NewTopologies()
		if err != nil {
			t.Fatal(err)
		}
		defer topos.Close()
		topos.Sentinel(t)
		t.Log("Sentinel returned a backend")
		return
	}
	server := redisServerPath(t) // without it, the child would not get as far as redis-cli
	bin := t.TempDir()
	if err := os.Symlink(server, filepath.Join(bin, "redis-server")); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		value    string
		wantFail bool
		wantOut  string
	}{
		{"", false, "redis-cli not found on PATH"},
		{"required", true, "LATCHKEY_REDIS=required but redis-cli (which makes the Cluster) is not usable"},
	} {
		t.Run(fmt.Sprintf("%q", tc.value), func(t *testing.T) {
			cmd := exec.Command(exe, "-test.run=^TestTopologiesEnvHandling$", "-test.v")
			cmd.Env = append(os.Environ(), topoChildEnv+"=1", EnvRedis+"="+tc.value, "PATH="+bin, "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
			out, err := cmd.CombinedOutput()
			if failed := err != nil; failed != tc.wantFail {
				t.Errorf("child failed = %v (%v), want %v", failed, err, tc.wantFail)
			}
			if !tc.wantFail && !strings.Contains(string(out), "--- SKIP") {
				t.Errorf("child was not skipped")
			}
			if !strings.Contains(string(out), tc.wantOut) {
				t.Errorf("child output does not contain %q", tc.wantOut)
			}
			if t.Failed() {
				t.Logf("child output:\n%s", out)
			}
		})
	}
}
