package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	gosync "sync"
	"sync/atomic"
	"time"

	dsync "github.com/latchkey/latchkey/sync"
	"github.com/redis/rueidis"
)

// The semaphore scenario: semWorkers workers, spread over clients, share semPermits permits
// of one semaphore. Each loops acquire one → hold holdTime → release, without idling: with
// eight times as many workers as permits there is always a queue, and how soon a permit
// given back reaches a waiter decides the rate. A permit goes round at best once per hold
// and round trip, so semPermits / (holdTime + floor p50) is the ceiling the rate is
// reported against.
const (
	semPermits = 8
	semWorkers = 64
)

// semScenarios are the setups the scenario runs: over semPermits clients, as over that many
// instances of a service, and over one, as every contended figure here is reported.
func semScenarios() []scenario {
	return []scenario{{workers: semWorkers, clients: semPermits}, {workers: semWorkers, clients: 1}}
}

// A semContender is one semaphore under test; open connects a session to the server at addr.
type semContender struct {
	name     string
	peer     bool   // what latchkey is compared against
	baseline bool   // no Redis at all: what the harness itself reaches, with no ratio
	note     string // how its workers hold their handles, for the report
	open     func(addr string) (semSession, error)
}

type semSession interface {
	// reset gives the semaphore key semPermits permits, none of them taken.
	reset(ctx context.Context, key string) error
	// semaphore returns a worker's handle on key. It is called from one goroutine.
	semaphore(key string) semaphore
	close()
}

type semaphore interface {
	acquire(ctx context.Context) error // takes one permit
	release(ctx context.Context) error // gives one back
}

func semContenders() []semContender {
	return []semContender{
		{name: "latchkey Semaphore", open: openLatchkeySem(true),
			note: "one handle per client, shared by its workers: the realistic use, as a handle is safe for concurrent use and a service makes one per semaphore"},
		{name: "latchkey Semaphore, handle per worker", open: openLatchkeySem(false),
			note: "one handle per worker, for contrast: it should make no difference, as concurrent calls on a shared handle each use an idle request key of its own"},
		{name: "naive Semaphore (INCR/DECR)", peer: true, open: openNaiveSem,
			note: "INCR; above the limit DECR back and retry in " + fmt.Sprint(naiveRetry) + "; release DECR"},
		{name: "in-process channel Semaphore (no Redis)", baseline: true, open: openLocalSem(),
			note: "a buffered Go channel of " + fmt.Sprint(semPermits) + " shared by every session, no network at all: what these workers, holds and this machine reach when nothing but the scheduler is in the way — the practical ceiling, where the formula's is the theoretical one"},
	}
}

// local: a channel semaphore that every session of the contender shares — the baseline.

// localSems are the channels of the baseline's keys, shared by its sessions.
type localSems struct {
	mu gosync.Mutex
	m  map[string]chan struct{}
}

type localSemSession struct{ sems *localSems }

// openLocalSem returns an open whose sessions share one channel per key.
func openLocalSem() func(string) (semSession, error) {
	sems := &localSems{m: map[string]chan struct{}{}}
	return func(string) (semSession, error) { return localSemSession{sems}, nil }
}

func (s localSemSession) reset(_ context.Context, key string) error {
	s.sems.mu.Lock()
	defer s.sems.mu.Unlock()
	s.sems.m[key] = make(chan struct{}, semPermits)
	return nil
}

func (s localSemSession) semaphore(key string) semaphore {
	s.sems.mu.Lock()
	defer s.sems.mu.Unlock()
	return localSem(s.sems.m[key])
}

func (localSemSession) close() {}

type localSem chan struct{}

func (m localSem) acquire(ctx context.Context) error {
	select {
	case m <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m localSem) release(context.Context) error {
	<-m
	return nil
}

// latchkey: one dsync.Client per session; with shared, one Semaphore handle per key that the
// session's workers share, else one per worker.

type latchkeySemSession struct {
	*latchkeySession
	shared  bool
	handles map[string]*dsync.Semaphore // with shared: each key's handle
}

func openLatchkeySem(shared bool) func(string) (semSession, error) {
	return func(addr string) (semSession, error) {
		s, err := openLatchkey(false)(addr)
		if err != nil {
			return nil, err
		}
		return &latchkeySemSession{latchkeySession: s.(*latchkeySession), shared: shared, handles: map[string]*dsync.Semaphore{}}, nil
	}
}

func (s *latchkeySemSession) reset(ctx context.Context, key string) error {
	return s.c.Semaphore(key).SetPermits(ctx, semPermits)
}

func (s *latchkeySemSession) semaphore(key string) semaphore {
	if !s.shared {
		return latchkeySem{s.c.Semaphore(key)}
	}
	h := s.handles[key]
	if h == nil {
		h = s.c.Semaphore(key)
		s.handles[key] = h
	}
	return latchkeySem{h}
}

type latchkeySem struct{ s *dsync.Semaphore }

func (m latchkeySem) acquire(ctx context.Context) error { return m.s.Acquire(ctx, 1) }
func (m latchkeySem) release(ctx context.Context) error { return m.s.Release(ctx, 1) }

// naive: the gate Go services write by hand on a counter — INCR it; if that took it above the
// limit, DECR it back, sleep naiveRetry and try again; release is DECR. It never lets more
// than the limit in: the counter is never below the number inside (a failed try counts until
// it takes itself back), and a try enters only when the counter, its own INCR included, is
// within the limit. Its commands are sent without cancellation, so that a try the run's end
// cuts off is never left counted: only the sleep between tries is cut short.

type naiveSemSession struct{ rdb rueidis.Client }

func openNaiveSem(addr string) (semSession, error) {
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return nil, err
	}
	return &naiveSemSession{rdb: rdb}, nil
}

func (s *naiveSemSession) reset(ctx context.Context, key string) error {
	return s.rdb.Do(ctx, s.rdb.B().Del().Key(key).Build()).Error()
}

func (s *naiveSemSession) semaphore(key string) semaphore { return naiveSem{rdb: s.rdb, key: key} }
func (s *naiveSemSession) close()                         { s.rdb.Close() }

type naiveSem struct {
	rdb rueidis.Client
	key string
}

// acquire takes a permit by counting itself in, and out again while the count is above
// semPermits, until it stays in; the INCR and DECR are sent whatever ctx says, so that a
// cancelled wait never leaves the count off.
func (m naiveSem) acquire(ctx context.Context) error {
	send := context.WithoutCancel(ctx)
	return retryNaively(ctx, func() (bool, error) {
		n, err := m.rdb.Do(send, m.rdb.B().Incr().Key(m.key).Build()).AsInt64()
		if err != nil {
			return false, err
		}
		if n <= semPermits {
			return true, nil
		}
		return false, m.rdb.Do(send, m.rdb.B().Decr().Key(m.key).Build()).Error()
	})
}

func (m naiveSem) release(ctx context.Context) error {
	return m.rdb.Do(context.WithoutCancel(ctx), m.rdb.B().Decr().Key(m.key).Build()).Error()
}

// semRow is one contender's figures, one result per setup of semScenarios that it completed;
// err is set when it failed, and it runs no further setups.
type semRow struct {
	c   semContender
	res []semResult
	err error
}

// semResult is what the workers of one setup achieved with one contender, over its turns.
type semResult struct {
	acquisitions int64
	elapsed      time.Duration
	wait, hold   durations // request → acquisition; how long each hold lasted
	counts       []int64   // acquisitions per worker
	cpu          cpuUse
	// cmds (see countedCalls) and scripts are what Redis ran over the turns whose INFO
	// commandstats could be read, statsAcq those turns' acquisitions.
	cmds, scripts, statsAcq int64
	peak                    int64 // the most permits the workers held at once
}

// add merges another turn of the same setup into r.
func (r *semResult) add(o semResult) {
	r.acquisitions += o.acquisitions
	r.elapsed += o.elapsed
	r.wait = append(r.wait, o.wait...)
	r.hold = append(r.hold, o.hold...)
	r.cpu.client += o.cpu.client
	r.cpu.server += o.cpu.server
	r.cpu.clientCycles += o.cpu.clientCycles
	r.cpu.serverCycles += o.cpu.serverCycles
	r.cmds += o.cmds
	r.scripts += o.scripts
	r.statsAcq += o.statsAcq
	r.peak = max(r.peak, o.peak)
	if r.counts == nil {
		r.counts = make([]int64, len(o.counts))
	}
	for i, c := range o.counts {
		r.counts[i] += c
	}
}

func (r semResult) perSec() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.acquisitions) / r.elapsed.Seconds()
}

// cmdsPerAcq and scriptsPerAcq are Redis's calls per acquisition, when they could be counted.
func (r semResult) cmdsPerAcq() (float64, bool) {
	return float64(r.cmds) / float64(max(r.statsAcq, 1)), r.statsAcq > 0
}

func (r semResult) scriptsPerAcq() (float64, bool) {
	return float64(r.scripts) / float64(max(r.statsAcq, 1)), r.statsAcq > 0
}

// semCeiling is the most acquisitions per second semPermits permits allow when each is held
// holdTime and handed on in one round trip of rtt.
func semCeiling(rtt time.Duration) float64 {
	return semPermits / (holdTime + rtt).Seconds()
}

// runSemaphores runs the semaphore scenario for the contenders -only names (all by default),
// and records it in res. Each setup's time is split into rounds in which the contenders take
// turns, as in the lock scenarios. It measures the floor, which the ceiling needs, unless
// the lock scenarios did.
func runSemaphores(ctx context.Context, srv *server, res *results, stdout io.Writer) error {
	o := res.opts
	var rows []semRow
	for _, c := range semContenders() {
		if o.runs(c.name) {
			rows = append(rows, semRow{c: c})
		}
	}
	if len(rows) == 0 {
		return nil
	}
	if len(res.ping) == 0 {
		if _, err := measureFloor(ctx, srv, res, stdout); err != nil {
			return err
		}
	}
	slice := o.dur / time.Duration(o.rounds)
	for i, sc := range semScenarios() {
		fmt.Fprintf(stdout, "semaphore %v ...\n", sc)
		for round := range o.rounds {
			for j := range rows {
				r := &rows[j]
				if r.err != nil {
					continue
				}
				if len(r.res) <= i {
					r.res = append(r.res, semResult{})
				}
				key := fmt.Sprintf("bench:sem:%s:%d/%d:%d", strings.ReplaceAll(r.c.name, " ", "-"), sc.workers, sc.clients, round)
				tr, err := r.turn(ctx, srv, sc, key, slice)
				if err != nil {
					r.err, r.res = fmt.Errorf("%v: %w", sc, err), r.res[:i]
					continue
				}
				r.res[i].add(tr)
				if tr.peak > semPermits {
					fmt.Fprintf(stdout, "  SEMAPHORE VIOLATED: %s, %v: %d permits in use at once, of %d\n", r.c.name, sc, tr.peak, semPermits)
				}
				if o.cmdstats {
					printStats(ctx, srv, stdout, fmt.Sprintf("%s %v, %d acquisitions; calls per acquisition", r.c.name, sc, tr.acquisitions),
						tr.acquisitions, callsPer)
				}
			}
		}
	}
	res.sem = rows
	return nil
}

// turn opens sc.clients sessions of the row's contender, warms them up (see semWarmUp), runs
// the workers on key for dur and closes the sessions.
func (r *semRow) turn(ctx context.Context, srv *server, sc scenario, key string, dur time.Duration) (semResult, error) {
	var ss []semSession
	defer func() {
		for _, s := range ss {
			s.close()
		}
	}()
	for i := range sc.clients {
		s, err := r.c.open(srv.addr)
		if err != nil {
			return semResult{}, fmt.Errorf("client %d of %d: %w", i+1, sc.clients, err)
		}
		ss = append(ss, s)
	}
	if err := semWarmUp(ctx, ss, key+":warm", sc.workers/sc.clients); err != nil {
		return semResult{}, err
	}
	return semRun(ctx, srv, ss, key, sc.workers, dur)
}

// semWarmUp is warmUp for semaphores: the first session takes every permit of key, then
// perSession goroutines of each session wait for one until warmWait runs out, and the permits
// are given back. What waiting needs (latchkey's subscriber connection) is then up before
// the timed window. Getting a permit is a violation.
func semWarmUp(ctx context.Context, ss []semSession, key string, perSession int) error {
	if err := ss[0].reset(ctx, key); err != nil {
		return err
	}
	h := ss[0].semaphore(key)
	for range semPermits {
		if err := h.acquire(ctx); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	err := warmWaits(ctx, ss, perSession, "a permit of a semaphore with none free",
		func(s semSession) func(context.Context) error { return s.semaphore(key).acquire })
	for range semPermits {
		if err := h.release(ctx); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	return err
}

// semRun gives key semPermits permits and runs workers workers on it for dur, worker i on
// session i mod len(ss). It counts the permits in use as the workers see them: one after
// each acquisition returns, one less before each release is sent, so the count is never
// above what Redis has given out; its peak above semPermits is a broken semaphore, which the
// caller reports loudly. Like contended, it resets Redis's command statistics as it starts
// and counts the window's commands and server CPU.
func semRun(ctx context.Context, srv *server, ss []semSession, key string, workers int, dur time.Duration) (semResult, error) {
	defer holdProcs(semPermits)()
	if err := ss[0].reset(ctx, key); err != nil {
		return semResult{}, err
	}
	handles := make([]semaphore, workers)
	for id := range handles {
		handles[id] = ss[id%len(ss)].semaphore(key)
	}
	var inUse, peak atomic.Int64
	counts := make([]int64, workers)
	waits := make([]durations, workers)
	holds := make([]durations, workers)
	errs := make(chan error, workers)

	stats := resetStats(ctx, srv) == nil
	cpu := startCPU(ctx, srv)
	start := time.Now()
	stopAt := start.Add(dur)
	// Waiters still blocked at the end are cut off, so the run ends on time.
	runCtx, cancel := context.WithDeadline(ctx, stopAt)
	defer cancel()
	var wg gosync.WaitGroup
	for id, m := range handles {
		wg.Go(func() {
			for time.Now().Before(stopAt) {
				req := time.Now()
				if err := m.acquire(runCtx); err != nil {
					if !cutOff(runCtx, err) {
						errs <- fmt.Errorf("worker %d: acquire: %w", id, err)
					}
					return
				}
				got := time.Now()
				raise(&peak, inUse.Add(1))
				waits[id] = append(waits[id], got.Sub(req))
				counts[id]++
				holdFor(holdTime)
				holds[id] = append(holds[id], time.Since(got))
				inUse.Add(-1)
				if err := m.release(ctx); err != nil {
					errs <- fmt.Errorf("worker %d: release: %w", id, err)
					return
				}
			}
		})
	}
	wg.Wait()
	r := semResult{elapsed: time.Since(start), counts: counts, peak: peak.Load()}
	close(errs)
	if err := <-errs; err != nil {
		return r, err
	}
	for id := range workers {
		r.acquisitions += counts[id]
		r.wait = append(r.wait, waits[id]...)
		r.hold = append(r.hold, holds[id]...)
	}
	cpu.stop(ctx, srv, &r.cpu, r.acquisitions)
	if stats {
		if info, err := readStats(ctx, srv); err == nil {
			r.cmds, r.scripts, r.statsAcq = countedCalls(info), countedScripts(info), r.acquisitions
		}
	}
	return r, nil
}

// raise makes m at least v.
func raise(m *atomic.Int64, v int64) {
	for {
		cur := m.Load()
		if v <= cur || m.CompareAndSwap(cur, v) {
			return
		}
	}
}

// countedScripts sums the calls of the script commands in INFO commandstats: each is one
// request a library made (the commands a script runs are counted apart, by countedCalls).
func countedScripts(stats string) int64 {
	var n float64
	for _, c := range commandStats(stats, "calls") {
		switch c.name {
		case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
			n += c.value
		}
	}
	return int64(n)
}

// oversubscribed lists every setup in which more than semPermits permits were in use at once.
func (res *results) oversubscribed() []string {
	var out []string
	for _, r := range res.sem {
		for i, x := range r.res {
			if x.peak > semPermits {
				out = append(out, fmt.Sprintf("%s: %d permits in use at once at %v", r.c.name, x.peak, semScenarios()[i]))
			}
		}
	}
	return out
}
