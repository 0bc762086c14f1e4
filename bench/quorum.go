package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	dsync "github.com/latchkey/latchkey/sync"
	goredislib "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// The quorum scenario: uncontended lock+unlock by one goroutine, for the locks that span
// several keys or servers — latchkey's MultiLock of 3 locks on one server, its RedLock over
// quorumMasters servers against redsync (itself a red lock) over the same servers, each
// also on one of those servers alone — and for latchkey's Lock confirmed by a replica
// (WithSyncReplicas) against the same Lock unconfirmed on that master. Every row runs in
// the same rounds, taking turns, so drift in the machine's speed hits all alike.
const (
	quorumName    = "latchkey MultiLock RedLock SyncReplicas vs redsync (quorum)"
	quorumMasters = 5
	quorumLease   = 8 * time.Second // redsync's default expiry, given to latchkey's too
	quorumWarm    = 50              // untimed cycles per row first: connections, scripts
)

// quorumRow is one row's cycles; err is set when it failed.
type quorumRow struct {
	name    string
	servers string
	d       durations
	cpu     cpuUse // this process, and every server of the scenario summed
	err     error
}

// quorumResult is the scenario's rows.
type quorumResult struct {
	rows []quorumRow
	err  error // the servers could not be started
}

// runQuorum runs the quorum scenario if -only names it (or nothing): it starts its own
// servers (quorumMasters masters, and a master with one replica), whatever -redis says.
func runQuorum(ctx context.Context, o options, stdout io.Writer) *quorumResult {
	if !o.runs(quorumName) {
		return nil
	}
	fmt.Fprintf(stdout, "quorum: MultiLock of 3, RedLock and redsync over %d servers, Lock with a replica ...\n", quorumMasters)
	var res quorumResult
	closers, cycles, servers, err := quorumSetup()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	if err != nil {
		res.err = err
		return &res
	}
	for _, c := range cycles {
		row := quorumRow{name: c.name, servers: c.servers}
		for range quorumWarm {
			if row.err = c.cycle(ctx); row.err != nil {
				break
			}
		}
		res.rows = append(res.rows, row)
	}
	slot := o.dur / time.Duration(o.rounds)
	for range o.rounds {
		for i, c := range cycles {
			r := &res.rows[i]
			client, haveClient := processCPU()
			server, serr := serversCPU(ctx, servers)
			n := len(r.d)
			for end := time.Now().Add(slot); r.err == nil && time.Now().Before(end); {
				t := time.Now()
				if r.err = c.cycle(ctx); r.err == nil {
					r.d = append(r.d, time.Since(t))
				}
			}
			cycles := int64(len(r.d) - n)
			if after, ok := processCPU(); ok && haveClient {
				r.cpu.client += after - client
				r.cpu.clientCycles += cycles
			}
			if after, err := serversCPU(ctx, servers); err == nil && serr == nil {
				r.cpu.server += after - server
				r.cpu.serverCycles += cycles
			}
		}
	}
	return &res
}

// serversCPU sums the servers' CPU time so far.
func serversCPU(ctx context.Context, servers []*server) (time.Duration, error) {
	var sum time.Duration
	for _, s := range servers {
		d, err := s.cpu(ctx)
		if err != nil {
			return 0, err
		}
		sum += d
	}
	return sum, nil
}

// A quorumCycle is one row's lock+unlock.
type quorumCycle struct {
	name, servers string
	cycle         func(context.Context) error
}

// quorumSetup starts the servers and opens every row's clients; closers undo it, also
// when it fails part way.
func quorumSetup() (closers []func(), cycles []quorumCycle, servers []*server, err error) {
	var masters []*server
	for range quorumMasters {
		s, err := startServer()
		if err != nil {
			return closers, nil, nil, err
		}
		closers = append(closers, s.close)
		masters = append(masters, s)
	}
	primary, err := startServer()
	if err != nil {
		return closers, nil, nil, err
	}
	closers = append(closers, primary.close)
	host, port, _ := net.SplitHostPort(primary.addr)
	replica, err := startServer("--replicaof", host, port)
	if err != nil {
		return closers, nil, nil, err
	}
	closers = append(closers, replica.close)

	open := func(addr string, opts ...dsync.Option) (*dsync.Client, error) {
		rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			return nil, err
		}
		c, err := dsync.New(rdb, opts...)
		if err != nil {
			rdb.Close()
			return nil, err
		}
		closers = append(closers, func() { c.Close(); rdb.Close() })
		return c, nil
	}
	var lockers []dsync.Locker
	var pools []redis.Pool
	for _, m := range masters {
		c, err := open(m.addr)
		if err != nil {
			return closers, nil, nil, err
		}
		lockers = append(lockers, c.Lock("bench:quorum:red"))
		rdb := goredislib.NewClient(&goredislib.Options{Addr: m.addr, PoolSize: goRedisPoolSize})
		closers = append(closers, func() { rdb.Close() })
		pools = append(pools, goredis.NewPool(rdb))
	}
	// Each row on Clients of its own, as each library has its own connections: a Client
	// whose connections' goroutines another row spread over the CPUs would be slower for it.
	red := dsync.RedLock(lockers...)
	redsyncOver := redsync.New(pools...).NewMutex("bench:quorum:redsync")
	redsyncOne := redsync.New(pools[0]).NewMutex("bench:quorum:redsync1")
	one, err := open(masters[0].addr)
	if err != nil {
		return closers, nil, nil, err
	}
	plain := one.Lock("bench:quorum:one")
	three, err := open(masters[0].addr)
	if err != nil {
		return closers, nil, nil, err
	}
	multi := dsync.MultiLock(three.Lock("bench:quorum:m1"), three.Lock("bench:quorum:m2"), three.Lock("bench:quorum:m3"))

	if err := waitReplica(primary, replica); err != nil {
		return closers, nil, nil, err
	}
	synced, err := open(primary.addr, dsync.WithSyncReplicas(1, time.Second))
	if err != nil {
		return closers, nil, nil, err
	}
	unsynced, err := open(primary.addr)
	if err != nil {
		return closers, nil, nil, err
	}
	lease := dsync.Lease(quorumLease)
	lockCycle := func(l *dsync.Lock) func(context.Context) error {
		return func(ctx context.Context) error {
			if err := l.Lock(ctx, lease); err != nil {
				return err
			}
			return l.Unlock(ctx)
		}
	}
	multiCycle := func(m *dsync.Multi) func(context.Context) error {
		return func(ctx context.Context) error {
			if err := m.Lock(ctx, lease); err != nil {
				return err
			}
			return m.Unlock(ctx)
		}
	}
	redsyncCycle := func(m *redsync.Mutex) func(context.Context) error {
		return func(ctx context.Context) error {
			if err := m.LockContext(ctx); err != nil {
				return err
			}
			if ok, err := m.UnlockContext(ctx); err != nil || !ok {
				return errors.Join(err, errors.New("redsync: unlock found the lock not held"))
			}
			return nil
		}
	}
	n := fmt.Sprint(quorumMasters)
	cycles = []quorumCycle{
		{"latchkey RedLock", n + " masters", multiCycle(red)},
		{"redsync", n + " masters", redsyncCycle(redsyncOver)},
		{"latchkey Lock", "1 of them", lockCycle(plain)},
		{"redsync", "1 of them", redsyncCycle(redsyncOne)},
		{"latchkey MultiLock of 3 locks", "1 of them", multiCycle(multi)},
		{"latchkey Lock, WithSyncReplicas(1, 1s)", "master + 1 replica", lockCycle(synced.Lock("bench:quorum:synced"))},
		{"latchkey Lock", "that master", lockCycle(unsynced.Lock("bench:quorum:unsynced"))},
	}
	return closers, cycles, append(masters, primary, replica), nil
}

// waitReplica waits until the replica has synced with primary and a write of primary's
// reaches it: after a full sync the master streams nothing to the replica until its first
// acknowledgement, up to a second later, and WithSyncReplicas's first WAITs would fail.
func waitReplica(primary, replica *server) error {
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := replica.admin.Do(ctx, replica.admin.B().Info().Section("replication").Build()).ToString()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			// PUBLISH is a write the replica gets, and leaves no key behind.
			m := primary.admin
			rs := m.DoMulti(ctx, m.B().Publish().Channel("bench:sync").Message("").Build(),
				m.B().Wait().Numreplicas(1).Timeout(100).Build())
			if n, werr := rs[1].AsInt64(); werr == nil && n >= 1 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %s not in sync after 10s: %v", replica.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// quorumMarkdown reports the quorum scenario: p50, p99 and each row's p50 against
// redsync's over the same servers.
func quorumMarkdown(b *strings.Builder, r quorumResult) {
	fmt.Fprintf(b, "**Locks over several keys or servers, uncontended** — one goroutine locks and unlocks, each row in turn within the same rounds: "+
		"latchkey's RedLock over %d independent redis-servers against redsync over the same %d (both red locks; latchkey's with a Lease of %v, redsync's expiry is its default, %v), "+
		"each also on one of those servers alone; latchkey's MultiLock of 3 locks on one server; and latchkey's Lock with WithSyncReplicas(1, 1s) "+
		"on a master with one replica (a WAIT after every script) against the same Lock on that master without it. "+
		"latchkey's RedLock asks its masters at once and releases them at once, as redsync does.\n\n",
		quorumMasters, quorumMasters, quorumLease, quorumLease)
	if r.err != nil {
		fmt.Fprintf(b, "Not run: %v\n", r.err)
		return
	}
	var base time.Duration // redsync over every master
	for _, x := range r.rows {
		if x.name == "redsync" && strings.HasSuffix(x.servers, "masters") && x.err == nil {
			base = x.d.pct(50)
		}
	}
	var cells [][]string
	for _, x := range r.rows {
		if x.err != nil {
			cells = append(cells, []string{x.name, x.servers, "failed: " + x.err.Error()})
			continue
		}
		ratio := "—"
		if base > 0 {
			ratio = fmt.Sprintf("%.2f×", float64(x.d.pct(50))/float64(base))
		}
		client, _ := x.cpu.clientPer()
		server, _ := x.cpu.serverPer()
		cells = append(cells, []string{x.name, x.servers, fmtDur(x.d.pct(50)), fmtDur(x.d.pct(99)), fmt.Sprint(len(x.d)), ratio,
			fmtDur(client), fmtDur(server)})
	}
	writeTable(b, []string{"lock+unlock", "servers", "p50", "p99", "cycles", "p50 ÷ redsync over all masters",
		"client CPU/cycle", "servers' CPU/cycle"}, cells)
	b.WriteString("\nCPU per cycle: this process's, and every server's of the scenario summed; all share the machine's CPUs.\n")
}
