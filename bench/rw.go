package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	gosync "sync"
	"sync/atomic"
	"time"

	dsync "github.com/latchkey/latchkey/sync"
)

// The read-write scenario: how long a writer waits while readers hold the lock in turns.
// Readers hold holdTime each and loop without idling, started holdTime/rwReaders apart, so
// their holds overlap and a reader is almost always inside: without writer preference the
// lock would never come free for the writer. The writer idles between its holds, so that
// each of its requests finds the readers inside again.
const (
	rwReaders    = 16
	rwWriterIdle = 5 * time.Millisecond
)

// rwRow is one row of the read-write scenario: who the readers and the writer are.
type rwRow struct {
	name string
	// contrast marks the row whose readers do not honour writer claims.
	contrast bool
	open     func(ctx context.Context, addr, key string) (rwSetup, error)
	res      rwResult
	err      error
}

// rwSetup is one row's goroutines' handles: each reader's and the writer's lock and unlock,
// and what closes the sessions they were opened on.
type rwSetup struct {
	readers []mutex
	writer  mutex
	close   func()
}

// rwRows are the rows of the read-write scenario. latchkey's over one client and over one
// client per goroutine, as every contended figure here is; then the contrast, Java-style
// readers, which do not know the writer's claim, with latchkey's writer.
func rwRows() []rwRow {
	return []rwRow{
		{name: "latchkey RWLock, 1 client", open: openRWLatchkey(1)},
		{name: fmt.Sprintf("latchkey RWLock, %d clients", rwReaders+1), open: openRWLatchkey(rwReaders + 1)},
		{name: "Redisson-style readers, latchkey RWLock writer", contrast: true, open: openRWRedisson},
	}
}

// runRW runs each read-write row -only names, each in one window of -dur. The window is not
// split into rounds as the lock scenarios' time is: what it measures is how long the writer
// can be kept waiting, and rounds would cap that at a round's length.
func runRW(ctx context.Context, srv *server, o options, stdout io.Writer) []rwRow {
	var rows []rwRow
	for _, r := range rwRows() {
		if !o.runs(r.name) {
			continue
		}
		fmt.Fprintf(stdout, "read-write: %s ...\n", r.name)
		r.res, r.err = r.run(ctx, srv, o.dur)
		if o.cmdstats && r.err == nil {
			n := r.res.reads + r.res.writes
			printStats(ctx, srv, stdout, fmt.Sprintf("%s, %d acquisitions; calls per acquisition", r.name, n), n, callsPer)
		}
		rows = append(rows, r)
	}
	return rows
}

// run opens the row's sessions on a key of its own, runs the window and closes them.
func (r rwRow) run(ctx context.Context, srv *server, dur time.Duration) (rwResult, error) {
	setup, err := r.open(ctx, srv.addr, "bench:rw:"+strings.ReplaceAll(r.name, " ", "-"))
	if err != nil {
		return rwResult{}, err
	}
	defer setup.close()
	return rwScenario(ctx, srv, setup, dur)
}

// openRWLatchkey gives the rwReaders+1 goroutines a latchkey RWLock handle each, goroutine i
// from session i mod clients: with one client, all handles are on one dsync.Client, as in one
// instance of a service. The sessions are warmed up as the contended scenario's are.
func openRWLatchkey(clients int) func(ctx context.Context, addr, key string) (rwSetup, error) {
	return func(ctx context.Context, addr, key string) (rwSetup, error) {
		ss, closeAll, err := openSessions(ctx, addr, openLatchkey(false), nil, clients, (rwReaders+clients)/clients, key+":warm")
		if err != nil {
			return rwSetup{}, err
		}
		handle := func(i int) *dsync.RWLock { return ss[i%len(ss)].(*latchkeySession).c.RWLock(key) }
		setup := rwSetup{writer: rwWrite{handle(rwReaders)}, close: closeAll}
		for i := range rwReaders {
			setup.readers = append(setup.readers, rwRead{handle(i)})
		}
		return setup, nil
	}
}

// openRWRedisson gives the readers to Java-style readers on one client of their own (see
// redissonReaders) and the writer to a latchkey RWLock on another, warmed up.
func openRWRedisson(ctx context.Context, addr, key string) (rwSetup, error) {
	ss, closeAll, err := openSessions(ctx, addr, openLatchkey(false), nil, 1, 1, key+":warm")
	if err != nil {
		return rwSetup{}, err
	}
	rs, err := openRedissonReaders(addr, key)
	if err != nil {
		closeAll()
		return rwSetup{}, err
	}
	setup := rwSetup{writer: rwWrite{ss[0].(*latchkeySession).c.RWLock(key)}, close: func() { rs.close(); closeAll() }}
	for i := range rwReaders {
		setup.readers = append(setup.readers, rs.reader(i+1))
	}
	return setup, nil
}

// rwRead and rwWrite are a latchkey RWLock's read and write sides as a mutex.
type (
	rwRead  struct{ l *dsync.RWLock }
	rwWrite struct{ l *dsync.RWLock }
)

func (m rwRead) lock(ctx context.Context) error    { return m.l.RLock(ctx) }
func (m rwRead) unlock(ctx context.Context) error  { return m.l.RUnlock(ctx) }
func (m rwWrite) lock(ctx context.Context) error   { return m.l.Lock(ctx) }
func (m rwWrite) unlock(ctx context.Context) error { return m.l.Unlock(ctx) }

// rwResult is what the writer and the readers of one row achieved in one window.
type rwResult struct {
	window              time.Duration
	writes, reads       int64
	writeWait, readWait durations // request → acquisition
	// pending is how long the writer's last request had waited when the window closed and
	// cut it off (0: it was not waiting): a wait at least that long.
	pending  time.Duration
	overlaps int64
	cpu      cpuUse
	cmds     int64 // Redis commands of the window (see countedCalls); cmdsOK false when unknown
	cmdsOK   bool
}

func (r rwResult) writesPerSec() float64 { return float64(r.writes) / r.window.Seconds() }
func (r rwResult) readsPerSec() float64  { return float64(r.reads) / r.window.Seconds() }

func (r rwResult) cmdsPerAcq() (float64, bool) {
	n := r.reads + r.writes
	return float64(r.cmds) / float64(max(n, 1)), r.cmdsOK && n > 0
}

// occupancy counts who is inside the lock. A reader that finds a writer inside, or a writer
// that finds a reader or another writer, is an overlap: the lock is broken. Each side adds
// itself before it looks at the other, and Go's atomics are sequentially consistent, so of
// two that are inside at once at least one sees the other. Each leaves before it sends its
// release, so one that enters after that release's reply cannot see it.
type occupancy struct{ readers, writers, overlaps atomic.Int64 }

func (o *occupancy) enterRead() {
	if o.readers.Add(1); o.writers.Load() > 0 {
		o.overlaps.Add(1)
	}
}

func (o *occupancy) enterWrite() {
	if o.writers.Add(1) > 1 || o.readers.Load() > 0 {
		o.overlaps.Add(1)
	}
}

func (o *occupancy) leaveRead()  { o.readers.Add(-1) }
func (o *occupancy) leaveWrite() { o.writers.Add(-1) }

// countdown closes done when it has been counted down n times.
type countdown struct {
	left atomic.Int64
	done chan struct{}
}

func newCountdown(n int) *countdown {
	c := &countdown{done: make(chan struct{})}
	c.left.Store(int64(n))
	if n <= 0 {
		close(c.done)
	}
	return c
}

func (c *countdown) countDown() {
	if c.left.Add(-1) == 0 {
		close(c.done)
	}
}

// rwWorker is one goroutine of the scenario, a reader or the writer: after delay, and once
// after is closed (nil: at once), it loops request → enter → hold → leave → release → idle
// until the window closes.
type rwWorker struct {
	m            mutex
	delay, idle  time.Duration
	after        <-chan struct{}
	enter, leave func()

	waits   durations
	pending time.Duration // the wait of a request the window's end cut off
	err     error
}

// run is the worker's loop. runCtx ends at stop and cuts off a request still waiting then;
// releases use ctx, so that a hold taken in the window is always given back.
func (w *rwWorker) run(ctx, runCtx context.Context, stop time.Time) {
	time.Sleep(w.delay)
	if w.after != nil {
		select {
		case <-w.after:
		case <-runCtx.Done():
			return
		}
	}
	for time.Now().Before(stop) {
		req := time.Now()
		if err := w.m.lock(runCtx); err != nil {
			if cutOff(runCtx, err) {
				w.pending = time.Since(req)
			} else {
				w.err = fmt.Errorf("lock: %w", err)
			}
			return
		}
		w.waits = append(w.waits, time.Since(req))
		w.enter()
		// Up to 17 threads block in holdFor's nanosleep at once here, each with a P of its own
		// (see holdProcs). time.Sleep would not keep the readers staggered: the runtime fires
		// timers in batches, at epoll_wait's millisecond granularity, so holds ending close
		// together end together, and the readers fall into step, leaving the lock free between
		// steps.
		holdFor(holdTime)
		w.leave()
		if err := w.m.unlock(ctx); err != nil {
			w.err = fmt.Errorf("unlock: %w", err)
			return
		}
		time.Sleep(w.idle)
	}
}

// rwScenario runs setup's readers, staggered holdTime/rwReaders apart, and its writer for
// dur. The writer starts once every reader has been inside, so that its first request, like
// every later one, finds readers holding the lock in turns (the very first reads are slower:
// they load the scripts). Like contended, it resets Redis's command statistics as it starts
// and counts the window's commands and server CPU.
func rwScenario(ctx context.Context, srv *server, setup rwSetup, dur time.Duration) (rwResult, error) {
	defer holdProcs(len(setup.readers) + 1)()
	var occ occupancy
	allIn := newCountdown(len(setup.readers))
	var workers []*rwWorker
	for i, m := range setup.readers {
		first := true // read and written by this reader's goroutine only
		enter := func() {
			occ.enterRead()
			if first {
				first = false
				allIn.countDown()
			}
		}
		workers = append(workers, &rwWorker{m: m, delay: holdTime * time.Duration(i) / time.Duration(len(setup.readers)),
			enter: enter, leave: occ.leaveRead})
	}
	writer := &rwWorker{m: setup.writer, idle: rwWriterIdle, after: allIn.done, enter: occ.enterWrite, leave: occ.leaveWrite}
	workers = append(workers, writer)

	stats := resetStats(ctx, srv) == nil
	cpu := startCPU(ctx, srv)
	start := time.Now()
	stop := start.Add(dur)
	runCtx, cancel := context.WithDeadline(ctx, stop)
	defer cancel()
	var wg gosync.WaitGroup
	for _, w := range workers {
		wg.Go(func() { w.run(ctx, runCtx, stop) })
	}
	wg.Wait()

	r := rwResult{window: time.Since(start), writeWait: writer.waits, pending: writer.pending, overlaps: occ.overlaps.Load()}
	var errs []error
	for i, w := range workers {
		if w.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", workerName(i, len(setup.readers)), w.err))
		}
		if w != writer {
			r.readWait = append(r.readWait, w.waits...)
		}
	}
	r.reads, r.writes = int64(len(r.readWait)), int64(len(r.writeWait))
	cpu.stop(ctx, srv, &r.cpu, r.reads+r.writes)
	if stats {
		r.cmds, r.cmdsOK = countedSinceReset(ctx, srv)
	}
	return r, errors.Join(errs...)
}

func workerName(i, readers int) string {
	if i == readers {
		return "writer"
	}
	return fmt.Sprintf("reader %d", i+1)
}
