package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/latchkey/latchkey/internal/keyslot"
	goredislib "github.com/redis/go-redis/v9"
)

// The Cluster scenario: latchkey on a Redis Cluster of clusterMasters masters (no replicas),
// started for the run, against one server started alike.
const (
	clusterName    = "Cluster"
	clusterMasters = 3
	clusterKeys    = 64 // the parallel scenario's keys, and its goroutines
)

// clusterScenario is the contended scenario run on the Cluster.
var clusterScenario = scenario{workers: 64, clients: 8}

// clusterResult is the Cluster scenario's figures.
type clusterResult struct {
	par  []clusterPar // one server, then the Cluster
	rows []row        // contended on the Cluster, by library
	err  error        // the servers could not be started
}

// clusterPar is the parallel scenario on one setup.
type clusterPar struct {
	name    string
	cycles  int64
	elapsed time.Duration
	cpu     cpuUse // this process, and every server of the setup summed
	err     error
}

// clusterContenders are the libraries that run on a Cluster: latchkey (sharded pub/sub, its
// default there), rueidislock (its client finds the Cluster itself) and redsync through a
// go-redis Cluster client.
func clusterContenders() []contender {
	return []contender{
		{name: "latchkey", open: openLatchkey(false)},
		{name: "rueidislock", peer: true, open: openRueidislock},
		{name: "redsync (cluster client)", peer: true, open: openRedsyncCluster},
	}
}

func openRedsyncCluster(addr string) (session, error) {
	rdb := goredislib.NewClusterClient(&goredislib.ClusterOptions{Addrs: []string{addr}, PoolSize: goRedisPoolSize})
	return &redsyncSession{rdb: rdb, rs: redsync.New(goredis.NewPool(rdb))}, nil
}

// runCluster runs the Cluster scenario if -only names it (or nothing).
func runCluster(ctx context.Context, o options, stdout io.Writer) *clusterResult {
	if !o.runs(clusterName) {
		return nil
	}
	fmt.Fprintf(stdout, "cluster: parallel on one server and on %d masters, contended %v on the Cluster ...\n", clusterMasters, clusterScenario)
	var res clusterResult
	single, err := startServer()
	if err != nil {
		res.err = err
		return &res
	}
	defer single.close()
	masters, err := startCluster(clusterMasters)
	defer func() {
		for _, m := range masters {
			m.close()
		}
	}()
	if err != nil {
		res.err = err
		return &res
	}
	slice := o.dur / time.Duration(o.rounds)
	setups := []struct {
		name    string
		addr    string
		servers []*server
	}{{"one server", single.addr, []*server{single}}, {fmt.Sprintf("Cluster of %d masters", clusterMasters), masters[0].addr, masters}}
	res.par = make([]clusterPar, len(setups))
	sessions := make([]session, len(setups))
	for i, s := range setups {
		res.par[i].name = s.name
		if sessions[i], res.par[i].err = openLatchkey(false)(s.addr); res.par[i].err != nil {
			continue
		}
		defer sessions[i].close()
	}
	for range o.rounds {
		for i, s := range setups {
			p := &res.par[i]
			if p.err != nil {
				continue
			}
			client0, haveClient := processCPU()
			server0, serr := serversCPU(ctx, s.servers)
			n, el, err := parallel(ctx, sessions[i], "bench:cluster:par:", clusterKeys, slice)
			if p.err = err; err != nil {
				continue
			}
			p.cycles += n
			p.elapsed += el
			if c, ok := processCPU(); ok && haveClient {
				p.cpu.client += c - client0
				p.cpu.clientCycles += n
			}
			if sv, err := serversCPU(ctx, s.servers); err == nil && serr == nil {
				p.cpu.server += sv - server0
				p.cpu.serverCycles += n
			}
		}
	}

	// Contended: one key, so one master serves it all; its CPU is the Cluster's.
	key := "bench:cluster:contended"
	master := masters[slotOwner(key, len(masters))]
	for _, c := range clusterContenders() {
		r := row{c: c, key: "bench:cluster:" + strings.ReplaceAll(c.name, " ", "-")}
		if r.s, r.err = c.open(masters[0].addr); r.err == nil {
			defer r.s.close()
		}
		res.rows = append(res.rows, r)
	}
	for range o.rounds {
		for i := range res.rows {
			r := &res.rows[i]
			if r.err != nil {
				continue
			}
			r.err = func() error {
				ss, closeAll, err := r.sessions(ctx, masters[0].addr, clusterScenario)
				if err != nil {
					return err
				}
				defer closeAll()
				cr, err := contended(ctx, master, ss, key, clusterScenario, slice)
				if err != nil {
					return err
				}
				if len(r.contended) == 0 {
					r.contended = append(r.contended, contendedResult{})
				}
				r.contended[0].add(cr)
				return nil
			}()
		}
	}
	return &res
}

// startCluster starts n redis-servers as a Cluster's masters, master i serving the i-th
// n-th of the slots, and returns once every one of them says the Cluster is ok.
func startCluster(n int) ([]*server, error) {
	var masters []*server
	for range n {
		s, err := startServer("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
		if err != nil {
			return masters, err
		}
		masters = append(masters, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host, port, _ := strings.Cut(masters[0].addr, ":")
	for i, m := range masters {
		first, last := i*keyslot.Count/n, (i+1)*keyslot.Count/n-1
		if err := m.admin.Do(ctx, m.admin.B().Arbitrary("CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(first), strconv.Itoa(last)).Build()).Error(); err != nil {
			return masters, fmt.Errorf("cluster: ADDSLOTSRANGE on %s: %w", m.addr, err)
		}
		if i > 0 {
			if err := m.admin.Do(ctx, m.admin.B().Arbitrary("CLUSTER", "MEET", host, port).Build()).Error(); err != nil {
				return masters, fmt.Errorf("cluster: MEET from %s: %w", m.addr, err)
			}
		}
	}
	for {
		up := true
		for _, m := range masters {
			info, err := m.admin.Do(ctx, m.admin.B().Arbitrary("CLUSTER", "INFO").Build()).ToString()
			up = up && err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n))
		}
		if up {
			return masters, nil
		}
		if ctx.Err() != nil {
			return masters, errors.New("cluster: not ok within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// slotOwner is the index of the master serving key, as startCluster shares the slots out.
func slotOwner(key string, n int) int {
	return int(keyslot.Of(key)) * n / keyslot.Count
}

// clusterMarkdown reports the Cluster scenario.
func clusterMarkdown(b *strings.Builder, r clusterResult) {
	fmt.Fprintf(b, "**Redis Cluster** — %d masters (no replicas) started for the run on loopback, with one server started alike, "+
		"all sharing this machine's CPUs with the client. Parallel: %d goroutines through one latchkey Client, each locking and "+
		"unlocking a key of its own (%d keys, spread over the masters' slots), the two setups taking turns. "+
		"Redis CPU per cycle is summed over the setup's servers.\n\n", clusterMasters, clusterKeys, clusterKeys)
	if r.err != nil {
		fmt.Fprintf(b, "Not run: %v\n", r.err)
		return
	}
	var base float64
	var cells [][]string
	for i, p := range r.par {
		if p.err != nil {
			cells = append(cells, []string{p.name, "failed: " + p.err.Error()})
			continue
		}
		rate := float64(p.cycles) / p.elapsed.Seconds()
		if i == 0 {
			base = rate
		}
		server, _ := p.cpu.serverPer()
		client, _ := p.cpu.clientPer()
		ratio := "—"
		if base > 0 {
			ratio = fmt.Sprintf("%.2f×", rate/base)
		}
		cells = append(cells, []string{p.name, fmt.Sprintf("%.0f", rate), ratio, fmtDur(server), fmtDur(client)})
	}
	writeTable(b, []string{"setup", "cycles/s", "÷ one server", "Redis CPU/cycle", "client CPU/cycle"}, cells)

	fmt.Fprintf(b, "\n**Contended on the Cluster** — %s on one key, each library in turn within the same rounds, as in the "+
		"contended tables above. latchkey uses sharded pub/sub there (its default on a Cluster of Redis 7), each channel on "+
		"the master of its slot. Redis CPU/acq: the key's master's, which serves it all.\n\n", clusterScenario.describe())
	cells = nil
	var best float64
	var bestName string
	var latchkey float64
	for _, x := range r.rows {
		if x.err != nil || len(x.contended) == 0 {
			msg := "not run"
			if x.err != nil {
				msg = "failed: " + x.err.Error()
			}
			cells = append(cells, []string{x.c.name, msg})
			continue
		}
		c := x.contended[0]
		if x.c.peer && c.perSec > best {
			best, bestName = c.perSec, x.c.name
		}
		if !x.c.peer {
			latchkey = c.perSec
		}
		cells = append(cells, []string{x.c.name, fmt.Sprintf("%.0f", c.perSec), fmtDur(c.wait.pct(50)), fmtDur(c.wait.pct(99)),
			fmt.Sprintf("%.3f", c.fairness), fmtDur(c.cpuPerAcq), fmt.Sprint(c.overlaps)})
	}
	if best > 0 && latchkey > 0 {
		cells = append(cells, []string{"**latchkey ÷ best peer**", fmt.Sprintf("%.2f× (%s)", latchkey/best, bestName)})
	}
	writeTable(b, []string{"library", "acq/s", "wait p50", "wait p99", "fairness", "Redis CPU/acq", "overlaps"}, cells)
}
