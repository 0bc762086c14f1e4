package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	gosync "sync"
	"sync/atomic"
	"time"

	dsync "github.com/latchkey/latchkey/sync"
	"github.com/redis/rueidis"
)

// durations are latency samples.
type durations []time.Duration

// pct returns the p-th percentile (0..100) by nearest rank; it sorts d.
func (d durations) pct(p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(p/100*float64(len(d))+0.5) - 1
	return d[min(max(i, 0), len(d)-1)]
}

func (d durations) mean() time.Duration {
	if len(d) == 0 {
		return 0
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}

func (d durations) max() time.Duration {
	if len(d) == 0 {
		return 0
	}
	return slices.Max(d)
}

// jain is Jain's fairness index of per-worker counts: 1 when all are equal, 1/n when one
// worker did everything.
func jain(counts []int64) float64 {
	var sum, sq float64
	for _, c := range counts {
		sum += float64(c)
		sq += float64(c) * float64(c)
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(counts)) * sq)
}

// floor measures the PING round trip, the lower bound of any one-round-trip operation.
func floor(ctx context.Context, addr string, dur time.Duration) (durations, error) {
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	var d durations
	for end := time.Now().Add(dur); time.Now().Before(end); {
		t := time.Now()
		if err := rdb.Do(ctx, rdb.B().Ping().Build()).Error(); err != nil {
			return nil, err
		}
		d = append(d, time.Since(t))
	}
	return d, nil
}

// solo times lock+unlock by one goroutine on a free lock.
func solo(ctx context.Context, s session, key string, dur time.Duration) (durations, error) {
	m := s.mutex(key)
	var d durations
	for end := time.Now().Add(dur); time.Now().Before(end); {
		t := time.Now()
		if err := m.lock(ctx); err != nil {
			return nil, err
		}
		if err := m.unlock(ctx); err != nil {
			return nil, err
		}
		d = append(d, time.Since(t))
	}
	return d, nil
}

// parallel runs lock+unlock from n goroutines, each on its own key, and returns the cycles
// completed and the time they took.
func parallel(ctx context.Context, s session, prefix string, n int, dur time.Duration) (int64, time.Duration, error) {
	var total atomic.Int64
	errs := make(chan error, n)
	start := time.Now()
	stop := start.Add(dur)
	var wg gosync.WaitGroup
	for i := range n {
		wg.Go(func() {
			m := s.mutex(prefix + strconv.Itoa(i))
			for time.Now().Before(stop) {
				if err := m.lock(ctx); err != nil {
					errs <- err
					return
				}
				if err := m.unlock(ctx); err != nil {
					errs <- err
					return
				}
				total.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, err
	}
	return total.Load(), elapsed, nil
}

// warmWait is how long each worker of a warm-up waits for a lock it cannot have: long
// enough for a library to dial what waiting needs, a few round trips on loopback.
const warmWait = 50 * time.Millisecond

// warmUp has perSession goroutines of each of ss wait at once on key, held by holder, until
// warmWait runs out; then holder releases it. As in a service that has been running, what a
// session's waiters need — a pool's connections, latchkey's subscriber connection, which it
// dials at the first wait — is then up before a timed window. Taking the held lock is an
// overlap.
func warmUp(ctx context.Context, holder session, ss []session, key string, perSession int) error {
	h := holder.mutex(key)
	if err := h.lock(ctx); err != nil {
		return err
	}
	err := warmWaits(ctx, ss, perSession, "a lock another client held",
		func(s session) func(context.Context) error { return s.mutex(key).lock })
	unlockErr := h.unlock(ctx)
	if err != nil {
		return err
	}
	return unlockErr
}

// warmWaits has perSession goroutines of each session in ss wait at once, each on a wait
// that waiter makes for its session, until warmWait runs out. It returns the first error: a
// wait that succeeded (it took what took names, which should have been held), or one that
// failed other than by being cut off. waiter is called from this goroutine only, as
// semSession.semaphore requires.
func warmWaits[S any](ctx context.Context, ss []S, perSession int, took string, waiter func(S) func(context.Context) error) error {
	wctx, cancel := context.WithTimeout(ctx, warmWait)
	defer cancel()
	errs := make(chan error, len(ss)*perSession)
	var wg gosync.WaitGroup
	for i, s := range ss {
		for range perSession {
			wait := waiter(s)
			wg.Go(func() {
				switch err := wait(wctx); {
				case err == nil:
					errs <- fmt.Errorf("warm-up: client %d took %s", i+1, took)
				case !cutOff(wctx, err):
					errs <- fmt.Errorf("warm-up: client %d: %w", i+1, err)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// cutOff tells whether err ended a wait because ctx's deadline came: a client library may
// time its last request out by the deadline a moment before ctx itself reports it.
func cutOff(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded)
}

// contendedResult is what W workers looping on one lock achieved.
type contendedResult struct {
	scenario
	acquisitions int64
	perSec       float64
	handoff      durations // release by one worker → acquisition by a different one
	wait         durations // request → acquisition
	hold         durations // how long each hold lasted (holdTime asked)
	fairness     float64
	cpuPerAcq    time.Duration
	cmdsPerAcq   float64 // Redis commands per acquisition (see countedCalls); 0 when unknown
	overlaps     int64

	counts  []int64 // acquisitions per worker
	cpu     time.Duration
	elapsed time.Duration
	// cmds are the commands counted over the runs whose INFO commandstats could be read,
	// cmdsAcq the acquisitions of those runs.
	cmds, cmdsAcq int64
}

// add merges another run of the same scenario into r.
func (r *contendedResult) add(o contendedResult) {
	r.scenario = o.scenario
	r.acquisitions += o.acquisitions
	r.handoff = append(r.handoff, o.handoff...)
	r.wait = append(r.wait, o.wait...)
	r.hold = append(r.hold, o.hold...)
	r.overlaps += o.overlaps
	r.cpu += o.cpu
	r.elapsed += o.elapsed
	r.cmds += o.cmds
	r.cmdsAcq += o.cmdsAcq
	if r.counts == nil {
		r.counts = make([]int64, len(o.counts))
	}
	for i, c := range o.counts {
		r.counts[i] += c
	}
	r.derive()
}

// derive computes the rates and ratios from the totals.
func (r *contendedResult) derive() {
	r.perSec = float64(r.acquisitions) / r.elapsed.Seconds()
	r.fairness = jain(r.counts)
	if r.acquisitions > 0 {
		r.cpuPerAcq = r.cpu / time.Duration(r.acquisitions)
	}
	if r.cmdsAcq > 0 {
		r.cmdsPerAcq = float64(r.cmds) / float64(r.cmdsAcq)
	}
}

// Holding and idling times of a contended worker: each loops request → hold → release →
// idle, so there is always a queue, and the lock's own hand-off cost decides the rate.
const (
	holdTime = time.Millisecond
	idleTime = time.Millisecond
)

// contended runs sc.workers workers on one key for dur, worker i on session i mod len(ss).
// Two workers inside at once is an overlap: a broken lock, which the caller reports loudly.
// It resets Redis's command statistics as it starts, and counts the commands of the run
// from them (where the server allows CONFIG RESETSTAT).
func contended(ctx context.Context, srv *server, ss []session, key string, sc scenario, dur time.Duration) (contendedResult, error) {
	w := sc.workers
	r := contendedResult{scenario: sc}
	var (
		inside      atomic.Int32
		overlaps    atomic.Int64
		lastHolder  atomic.Int32 // worker id + 1 of the last holder
		lastRelease atomic.Int64 // ns since start when the last holder began its release
	)
	stats := resetStats(ctx, srv) == nil
	start := time.Now()
	stopAt := start.Add(dur)
	// Waiters still blocked at the end are cut off, so the run ends on time.
	runCtx, cancel := context.WithDeadline(ctx, stopAt)
	defer cancel()
	cpu0, err := srv.cpu(ctx)
	if err != nil {
		return r, err
	}
	counts := make([]int64, w)
	waits := make([]durations, w)
	handoffs := make([]durations, w)
	holds := make([]durations, w)
	errs := make(chan error, w)
	var wg gosync.WaitGroup
	for id := range w {
		wg.Go(func() {
			m := ss[id%len(ss)].mutex(key)
			for time.Now().Before(stopAt) {
				req := time.Now()
				if err := m.lock(runCtx); err != nil {
					if !cutOff(runCtx, err) {
						errs <- fmt.Errorf("worker %d: lock: %w", id, err)
					}
					return
				}
				got := time.Now()
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				waits[id] = append(waits[id], got.Sub(req))
				if prev := lastHolder.Load(); prev != 0 && int(prev) != id+1 {
					handoffs[id] = append(handoffs[id], got.Sub(start)-time.Duration(lastRelease.Load()))
				}
				counts[id]++
				holdFor(holdTime)
				held := time.Since(got)
				lastHolder.Store(int32(id + 1))
				lastRelease.Store(int64(time.Since(start)))
				inside.Add(-1)
				holds[id] = append(holds[id], held)
				if err := m.unlock(ctx); err != nil {
					errs <- fmt.Errorf("worker %d: unlock: %w", id, err)
					return
				}
				time.Sleep(idleTime)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, err := srv.cpu(ctx)
	if err != nil {
		return r, err
	}
	close(errs)
	if err := <-errs; err != nil {
		return r, err
	}
	for id := range w {
		r.acquisitions += counts[id]
		r.wait = append(r.wait, waits[id]...)
		r.handoff = append(r.handoff, handoffs[id]...)
		r.hold = append(r.hold, holds[id]...)
	}
	r.counts, r.cpu, r.elapsed = counts, cpu1-cpu0, elapsed
	r.overlaps = overlaps.Load()
	if stats {
		if n, ok := countedSinceReset(ctx, srv); ok {
			r.cmds, r.cmdsAcq = n, r.acquisitions
		}
	}
	r.derive()
	return r, nil
}

// scaleResult is the waiters-at-scale run of latchkey.
type scaleResult struct {
	waiters, locks int
	subscribers    int
	peakRSS        int64
	total          time.Duration
}

// scale parks waiters goroutines on locks locks (held by another client) through one
// latchkey Client, then releases them all and times until every waiter has had its turn.
func scale(ctx context.Context, srv *server, waiters, locks int) (scaleResult, error) {
	r := scaleResult{waiters: waiters, locks: locks}
	open := func() (*dsync.Client, func(), error) {
		rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.addr}, DisableCache: true})
		if err != nil {
			return nil, nil, err
		}
		c, err := dsync.New(rdb)
		if err != nil {
			rdb.Close()
			return nil, nil, err
		}
		return c, func() { c.Close(); rdb.Close() }, nil
	}
	holderC, closeHolder, err := open()
	if err != nil {
		return r, err
	}
	defer closeHolder()
	c, closeC, err := open()
	if err != nil {
		return r, err
	}
	defer closeC()

	holders := make([]*dsync.Lock, locks)
	for i := range holders {
		holders[i] = holderC.Lock("bench:scale:" + strconv.Itoa(i))
		if err := holders[i].Lock(ctx); err != nil {
			return r, err
		}
	}
	var wg gosync.WaitGroup
	errs := make(chan error, waiters)
	var done atomic.Int64
	for i := range waiters {
		wg.Go(func() {
			mu := c.Lock("bench:scale:" + strconv.Itoa(i%locks))
			if err := mu.Lock(ctx); err != nil {
				errs <- err
				return
			}
			done.Add(1)
			if err := mu.Unlock(ctx); err != nil {
				errs <- err
			}
		})
	}
	// Every lock's channel for the waiting Client subscribed means every waiter is parked on it.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		chans, err := srv.admin.Do(ctx, srv.admin.B().PubsubChannels().Pattern("{bench:scale:*}:lock_clients:*").Build()).AsStrSlice()
		if err != nil {
			return r, err
		}
		if len(chans) == locks {
			break
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("only %d of %d lock channels subscribed after a minute", len(chans), locks)
		}
	}
	if r.subscribers, err = srv.pubsubClients(ctx); err != nil {
		return r, err
	}
	start := time.Now()
	for _, h := range holders {
		if err := h.Unlock(ctx); err != nil {
			return r, err
		}
	}
	wg.Wait()
	r.total = time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return r, err
	}
	if int(done.Load()) != waiters {
		return r, fmt.Errorf("%d of %d waiters got their lock", done.Load(), waiters)
	}
	r.peakRSS, err = peakRSS()
	return r, err
}
