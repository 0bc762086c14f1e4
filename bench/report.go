package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// fmtDur prints a latency with three significant figures in a unit that suits it.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "—"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// column is one figure of a table: how to read it from a row, and which way is better.
type column struct {
	head   string
	get    func(r row) (float64, bool)
	show   func(v float64) string
	higher bool // higher is better
	ratio  bool // give latchkey's ratio to the best peer
}

func durCol(head string, f func(r row) (time.Duration, bool)) column {
	return column{
		head:  head,
		get:   func(r row) (float64, bool) { d, ok := f(r); return float64(d), ok && d > 0 },
		show:  func(v float64) string { return fmtDur(time.Duration(v)) },
		ratio: true,
	}
}

// table renders rows in columns, then a row with latchkey's ratio to the best peer in each
// column that has one.
func table(b *strings.Builder, rows []row, cols []column) {
	heads := []string{"library"}
	ratios := []string{"**latchkey ÷ best peer**"}
	for _, c := range cols {
		heads = append(heads, c.head)
		ratios = append(ratios, ratioCell(rows, c))
	}
	var cells [][]string
	for _, r := range rows {
		cells = append(cells, append([]string{r.c.name}, rowCells(r, cols)...))
	}
	writeTable(b, heads, append(cells, ratios))
}

// rowCells are r's figures in cols; a row that was not run or failed says so in its first.
func rowCells(r row, cols []column) []string {
	switch {
	case r.c.open == nil:
		return []string{r.c.note}
	case r.err != nil:
		return []string{fmt.Sprintf("failed: %v", r.err)}
	}
	var cells []string
	for _, c := range cols {
		if v, ok := c.get(r); ok {
			cells = append(cells, c.show(v))
		} else {
			cells = append(cells, "—")
		}
	}
	return cells
}

// writeTable writes a markdown table: a column of names, then right-aligned figures. A row
// with fewer cells than heads is padded with empty ones.
func writeTable(b *strings.Builder, heads []string, rows [][]string) {
	b.WriteString("|")
	for _, h := range heads {
		b.WriteString(" " + h + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(heads)-1) + "\n")
	for _, r := range rows {
		b.WriteString("|")
		for i := range heads {
			var cell string
			if i < len(r) {
				cell = r[i]
			}
			b.WriteString(" " + cell + " |")
		}
		b.WriteString("\n")
	}
}

// ratioCell is latchkey's figure over the best peer's (best: highest or lowest, as the
// column says), with the peer named.
func ratioCell(rows []row, c column) string {
	if !c.ratio {
		return ""
	}
	var mine float64
	var haveMine bool
	var best float64
	var bestName string
	for _, r := range rows {
		if r.c.open == nil || r.err != nil {
			continue
		}
		v, ok := c.get(r)
		if !ok {
			continue
		}
		if !r.c.peer {
			if r.c.name == "latchkey" {
				mine, haveMine = v, true
			}
			continue
		}
		if bestName == "" || (c.higher && v > best) || (!c.higher && v < best) {
			best, bestName = v, r.c.name
		}
	}
	if !haveMine || bestName == "" || best == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f× (%s)", mine/best, bestName)
}

// markdown is the report of the scenarios that ran: the lock contenders', the read-write
// lock's, the semaphore's and the latch's, a blank line between two.
func markdown(res *results) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Redis %s on loopback; %d timed seconds per scenario and library; run %s; GOMAXPROCS %d "+
		"(and one more for each worker that can be holding at once while the semaphore and read-write scenarios run: see their hold).\n\n",
		res.server, int(res.opts.dur.Seconds()), res.started.UTC().Format("2006-01-02 15:04 UTC"), runtime.GOMAXPROCS(0))
	wrote := false
	section := func(ran bool, write func()) {
		if !ran {
			return
		}
		if wrote {
			b.WriteString("\n")
		}
		write()
		wrote = true
	}
	section(len(res.rows) > 0, func() { locksMarkdown(&b, res) })
	section(len(res.rw) > 0, func() { rwMarkdown(&b, res.rw, res.opts.dur) })
	section(len(res.sem) > 0, func() { semMarkdown(&b, res) })
	section(res.latch != nil, func() { latchMarkdown(&b, *res.latch) })
	section(res.quorum != nil, func() { quorumMarkdown(&b, *res.quorum) })
	section(res.cluster != nil, func() { clusterMarkdown(&b, *res.cluster) })
	return b.String()
}

// locksMarkdown reports the floor, then latchkey's lock against its peers.
func locksMarkdown(b *strings.Builder, res *results) {
	o := res.opts
	fmt.Fprintf(b, "**Floor** — PING round trip: p50 %s, p99 %s.\n\n", fmtDur(res.ping.pct(50)), fmtDur(res.ping.pct(99)))
	fmt.Fprintf(b, "Floor and solo ran %s; parallel and contended on every CPU. "+
		"Pinned, a latency is the round trip plus the CPU work a library makes the client and Redis do; "+
		"unpinned, on a small VM, it swings 2–3× with whether the scheduler puts the two processes on one CPU.\n\n", res.pinned)

	b.WriteString("**Solo** (one goroutine, lock+unlock of a free lock) and **parallel** (")
	fmt.Fprintf(b, "%d goroutines, each on its own key). Latency: lower is better; throughput: higher. ", o.parallel)
	b.WriteString("CPU per cycle: what one parallel lock+unlock cost this process (the library's client side) and the Redis server; " +
		"client and server share the machine's CPUs, and Redis runs every command on one thread, so these bound the throughput " +
		"and vary less from run to run than cycles/s do.\n\n")
	table(b, res.rows, []column{
		durCol("solo p50", func(r row) (time.Duration, bool) { return r.solo.pct(50), len(r.solo) > 0 }),
		durCol("solo p99", func(r row) (time.Duration, bool) { return r.solo.pct(99), len(r.solo) > 0 }),
		{head: "parallel cycles/s", higher: true, ratio: true,
			get:  func(r row) (float64, bool) { return r.parallel, r.parallel > 0 },
			show: func(v float64) string { return fmt.Sprintf("%.0f", v) }},
		durCol("client CPU/cycle", func(r row) (time.Duration, bool) { return r.parCPU.clientPer() }),
		durCol("Redis CPU/cycle", func(r row) (time.Duration, bool) { return r.parCPU.serverPer() }),
	})
	fmt.Fprintf(b, "\n**Contended** — W workers on one key, each looping request → hold %v → release → %v idle. "+
		"On one client, all workers of a library take their locks through one session of it (latchkey: one rueidis client and one dsync.Client; "+
		"a peer: its own client), as in one instance of a service; over C clients, each group of W/C workers has a session of its own, "+
		"as instances of a service have, opened and warmed up before the timed window and closed after it. "+
		"Hand-off: one worker's release to another's acquisition (every library's acquisition, latchkey's heir of a local hand-off included, "+
		"is recorded in Redis when it returns). "+
		"Wait: request to acquisition. "+
		"Fairness: Jain's index over per-worker acquisitions (1 = equal). CPU/acq: Redis server CPU per acquisition. "+
		"Cmds/acq: commands Redis ran per acquisition, from INFO commandstats reset as the run starts — every call counts, "+
		"a script (EVALSHA, EVAL) and each command it runs alike, so retries of a thundering herd show; "+
		"HELLO, CLIENT, PING, the SUBSCRIBE and UNSUBSCRIBE kinds, INFO and CONFIG are left out (connection upkeep and this benchmark's readings). "+
		"Hold mean: how long holds lasted (the holder blocks its thread in nanosleep(2) on Linux: "+
		"a time.Sleep lasts longer the more network events the library has during it, which would blur the comparison; "+
		"here one holder at a time leaves a P free).\n",
		holdTime, idleTime)
	for i, sc := range o.contended {
		at := func(r row) (contendedResult, bool) {
			if i < len(r.contended) {
				return r.contended[i], true
			}
			return contendedResult{}, false
		}
		fmt.Fprintf(b, "\n**Contended, %v** — %s.\n\n", sc, sc.describe())
		table(b, res.rows, []column{
			{head: "acq/s", higher: true, ratio: true,
				get:  func(r row) (float64, bool) { c, ok := at(r); return c.perSec, ok },
				show: func(v float64) string { return fmt.Sprintf("%.0f", v) }},
			durCol("hand-off p50", func(r row) (time.Duration, bool) { c, ok := at(r); return c.handoff.pct(50), ok }),
			durCol("hand-off p99", func(r row) (time.Duration, bool) { c, ok := at(r); return c.handoff.pct(99), ok }),
			durCol("wait p50", func(r row) (time.Duration, bool) { c, ok := at(r); return c.wait.pct(50), ok }),
			durCol("wait p99", func(r row) (time.Duration, bool) { c, ok := at(r); return c.wait.pct(99), ok }),
			durCol("wait max", func(r row) (time.Duration, bool) { c, ok := at(r); return c.wait.max(), ok }),
			{head: "fairness", higher: true, ratio: true,
				get:  func(r row) (float64, bool) { c, ok := at(r); return c.fairness, ok },
				show: func(v float64) string { return fmt.Sprintf("%.3f", v) }},
			durCol("CPU/acq", func(r row) (time.Duration, bool) { c, ok := at(r); return c.cpuPerAcq, ok }),
			{head: "cmds/acq", ratio: true,
				get:  func(r row) (float64, bool) { c, ok := at(r); return c.cmdsPerAcq, ok && c.cmdsPerAcq > 0 },
				show: func(v float64) string { return fmt.Sprintf("%.2f", v) }},
			{head: "hold mean",
				get:  func(r row) (float64, bool) { c, ok := at(r); return float64(c.hold.mean()), ok && len(c.hold) > 0 },
				show: func(v float64) string { return fmtDur(time.Duration(v)) }},
			{head: "overlaps",
				get:  func(r row) (float64, bool) { c, ok := at(r); return float64(c.overlaps), ok },
				show: func(v float64) string { return fmt.Sprintf("%.0f", v) }},
		})
	}
	s := res.scale
	fmt.Fprintf(b, "\n**Waiters at scale** (latchkey) — %d goroutines waiting on %d locks through one Client: "+
		"all %d got their turn in %s after the holders released; %d subscriber connection(s) on the server; "+
		"peak RSS of the benchmark process %.0f MiB.\n",
		s.waiters, s.locks, s.waiters, fmtDur(s.total), s.subscribers, float64(s.peakRSS)/(1<<20))
}

// rwMarkdown reports the read-write scenario: one row per setup, then what the contrast row
// showed.
func rwMarkdown(b *strings.Builder, rows []rwRow, dur time.Duration) {
	fmt.Fprintf(b, "**Read-write lock** — writer wait under continuous readers. %d readers each loop read lock → hold %v → release, "+
		"started %v apart so that their holds overlap and a reader is almost always inside; one writer loops write lock → hold %v → release → %v idle. "+
		"The holds are holdFor's nanosleep, as in the contended scenarios (with time.Sleep, whose timers fire in batches, the readers fall into step and leave gaps), "+
		"each blocking a thread that has a P of its own, as a hold in a service gives its P back. "+
		"The writer starts once every reader has been inside. "+
		"Each row runs one window of %v, not split into rounds as the lock scenarios' time is: what it measures is how long the writer can be kept out, "+
		"which rounds would cap. latchkey's RWLock prefers writers: a waiting writer puts a claim in the zset `{N}:rwlock_writers`, "+
		"and new readers (not re-entries) wait while a live claim exists, so the readers inside drain and the writer gets in. "+
		"On 1 client, all %d goroutines take their handles (one each) from one dsync.Client; over %d clients, each has a client of its own, "+
		"warmed up as in the contended scenarios. "+
		"In the Redisson-style row the readers do what a Java Redisson client's do — its read acquire and release scripts (docs/redisson-interop.md, "+
		"as EVALSHA through one rueidis client, woken by its subscription to `redisson_rwlock:{N}`) — and know nothing of the claim, "+
		"while the writer is latchkey's: a mixed fleet, without writer preference. "+
		"Wait: request to acquisition; a request the window's end cut off counts as a wait of at least as long (≥). "+
		"Overlaps: a writer inside together with a reader or another writer (must be 0). "+
		"CPU/acq and cmds/acq: Redis server CPU and commands per acquisition, reads and writes together, counted as in the contended tables. "+
		"No Go peer library has a distributed read-write lock, so there are no peer rows.\n\n",
		rwReaders, holdTime, holdTime/rwReaders, holdTime, rwWriterIdle, dur, rwReaders+1, rwReaders+1)
	heads := []string{"setup", "writer acq/s", "writer wait p50", "writer wait p99", "writer wait max",
		"reader acq/s", "reader wait p99", "overlaps", "CPU/acq", "cmds/acq"}
	var cells [][]string
	for _, r := range rows {
		cells = append(cells, append([]string{r.name}, r.cells()...))
	}
	writeTable(b, heads, cells)
	b.WriteString(rwNote(rows))
}

// cells are the row's figures in rwMarkdown's columns; a row that failed says so.
func (r rwRow) cells() []string {
	if r.err != nil {
		return []string{fmt.Sprintf("failed: %v", r.err)}
	}
	x := r.res
	p50, p99, worst := x.writerWaits()
	cpu, cmds := "—", "—"
	if d, ok := x.cpu.serverPer(); ok {
		cpu = fmtDur(d)
	}
	if v, ok := x.cmdsPerAcq(); ok {
		cmds = fmt.Sprintf("%.2f", v)
	}
	return []string{fmt.Sprintf("%.1f", x.writesPerSec()), p50, p99, worst,
		fmt.Sprintf("%.0f", x.readsPerSec()), fmtDur(x.readWait.pct(99)), fmt.Sprint(x.overlaps), cpu, cmds}
}

// writerWaits are the writer's wait p50, p99 and max. A request the window's end cut off had
// waited at least pending: when the writer never got the lock, that is all three, flagged;
// when it is longer than every wait that ended, it is the max, marked ≥.
func (r rwResult) writerWaits() (p50, p99, worst string) {
	if r.writes == 0 {
		never := "≥ " + fmtDur(r.pending) + " (never acquired)"
		return never, never, never
	}
	worst = fmtDur(r.writeWait.max())
	if r.pending > r.writeWait.max() {
		worst = "≥ " + fmtDur(r.pending)
	}
	return fmtDur(r.writeWait.pct(50)), fmtDur(r.writeWait.pct(99)), worst
}

// rwNote says, from its figures, what the contrast row showed.
func rwNote(rows []rwRow) string {
	for _, r := range rows {
		if !r.contrast || r.err != nil {
			continue
		}
		x := r.res
		if x.writes == 0 {
			return fmt.Sprintf("\nIn the Redisson-style row the writer never acquired the lock: it waited from its first request to the window's end (%s), "+
				"while readers that do not see its claim kept the lock in read mode throughout (%.0f reads/s). "+
				"In a mixed fleet, Java readers can keep a Go writer out for as long as they overlap. "+
				"No reader of that row ever waited for the writer, so its reader wait (p99 %s) is what a read acquisition costs "+
				"here with 17 goroutines busy: a baseline for the other rows' reader waits.\n",
				fmtDur(x.pending), x.readsPerSec(), fmtDur(x.readWait.pct(99)))
		}
		_, _, worst := x.writerWaits()
		return fmt.Sprintf("\nIn the Redisson-style row the writer acquired the lock %d times in %s (longest wait %s): "+
			"the readers do not see its claim, so it got in only when they happened to leave the lock free all at once.\n",
			x.writes, fmtDur(x.window), worst)
	}
	return ""
}

// semColumn is one figure of a semaphore table: how to read it from a setup's result, and
// whether to give latchkey's ratio to the naive semaphore.
type semColumn struct {
	head  string
	get   func(x semResult) (float64, bool)
	show  func(v float64) string
	ratio bool
}

func semDurCol(head string, f func(x semResult) time.Duration) semColumn {
	return semColumn{head: head, ratio: true,
		get:  func(x semResult) (float64, bool) { d := f(x); return float64(d), d > 0 },
		show: func(v float64) string { return fmtDur(time.Duration(v)) }}
}

// semMarkdown reports the semaphore scenario: what it measures, then a table per setup.
func semMarkdown(b *strings.Builder, res *results) {
	rtt := res.ping.pct(50)
	ceiling := semCeiling(rtt)
	fmt.Fprintf(b, "**Semaphore** — %d permits shared by %d workers, each looping acquire 1 permit → hold %v → release, with no idle time, "+
		"so that there is always a queue and how soon a permit given back reaches a waiter decides the rate. "+
		"A permit goes round at best once per hold and round trip: the ceiling is %d / (%v + %s, the floor's PING p50) = %.0f acquisitions/s, "+
		"and %% of ceiling is acq/s as a share of it. "+
		"The sessions of each turn are opened and warmed up (their workers waiting on a semaphore with no permit free) before its timed window, and closed after it; "+
		"the time is split into rounds, the implementations taking turns, as in the lock scenarios. "+
		"Wait: request to acquisition. Fairness: Jain's index over per-worker acquisitions. Hold mean: how long holds lasted (holdFor's nanosleep, each blocking a thread that has a P of its own, as a hold in a service gives its P back). "+
		"Client CPU/acq: this process's CPU per acquisition, all the implementation's sessions together; Redis CPU/acq: the server's. Scripts/acq: EVALSHA and EVAL calls per acquisition — an acquisition served at its first attempt, "+
		"with its release, is 2.00, and each failed attempt adds one (the naive gate runs no script); cmds/acq: every command counted, as in the contended tables "+
		"(the naive gate's INCR and DECR: 2.00 when every try enters, and two more for each try that does not). "+
		"Max in use: the most permits the workers held at once by their own count (up after an acquisition returns, down before its release is sent): "+
		"above %d the semaphore is broken, and the run fails. The rows: ",
		semPermits, semWorkers, holdTime, semPermits, holdTime, fmtDur(rtt), ceiling, semPermits)
	for i, r := range res.sem {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(b, "%s — %s", r.c.name, r.c.note)
	}
	b.WriteString(".\n")
	cols := []semColumn{
		{head: "acq/s", ratio: true,
			get:  func(x semResult) (float64, bool) { return x.perSec(), true },
			show: func(v float64) string { return fmt.Sprintf("%.0f", v) }},
		{head: "% of ceiling",
			get:  func(x semResult) (float64, bool) { return 100 * x.perSec() / ceiling, ceiling > 0 },
			show: func(v float64) string { return fmt.Sprintf("%.0f %%", v) }},
		semDurCol("wait p50", func(x semResult) time.Duration { return x.wait.pct(50) }),
		semDurCol("wait p99", func(x semResult) time.Duration { return x.wait.pct(99) }),
		semDurCol("wait max", func(x semResult) time.Duration { return x.wait.max() }),
		{head: "fairness",
			get:  func(x semResult) (float64, bool) { return jain(x.counts), len(x.counts) > 0 },
			show: func(v float64) string { return fmt.Sprintf("%.3f", v) }},
		{head: "hold mean",
			get:  func(x semResult) (float64, bool) { return float64(x.hold.mean()), len(x.hold) > 0 },
			show: func(v float64) string { return fmtDur(time.Duration(v)) }},
		semDurCol("client CPU/acq", func(x semResult) time.Duration { d, _ := x.cpu.clientPer(); return d }),
		semDurCol("Redis CPU/acq", func(x semResult) time.Duration { d, _ := x.cpu.serverPer(); return d }),
		{head: "scripts/acq", get: semResult.scriptsPerAcq, show: func(v float64) string { return fmt.Sprintf("%.2f", v) }},
		{head: "cmds/acq", ratio: true, get: semResult.cmdsPerAcq, show: func(v float64) string { return fmt.Sprintf("%.2f", v) }},
		{head: "max in use",
			get:  func(x semResult) (float64, bool) { return float64(x.peak), true },
			show: func(v float64) string { return fmt.Sprintf("%.0f of %d", v, semPermits) }},
	}
	for i, sc := range semScenarios() {
		fmt.Fprintf(b, "\n**Semaphore, %v** — %s.\n\n", sc, sc.describe())
		semTable(b, res.sem, i, cols)
	}
}

// semTable renders each row's result of setup i in cols, then each latchkey row's ratio to
// the naive semaphore in the columns that give one.
func semTable(b *strings.Builder, rows []semRow, i int, cols []semColumn) {
	heads := []string{"semaphore"}
	for _, c := range cols {
		heads = append(heads, c.head)
	}
	var cells [][]string
	var naive *semResult
	for _, r := range rows {
		if r.c.peer && i < len(r.res) {
			naive = &r.res[i]
		}
	}
	for _, r := range rows {
		if i >= len(r.res) {
			cells = append(cells, []string{r.c.name, fmt.Sprintf("failed: %v", r.err)})
			continue
		}
		line := []string{r.c.name}
		for _, c := range cols {
			if v, ok := c.get(r.res[i]); ok {
				line = append(line, c.show(v))
			} else {
				line = append(line, "—")
			}
		}
		cells = append(cells, line)
	}
	for _, r := range rows {
		if r.c.peer || r.c.baseline || naive == nil || i >= len(r.res) {
			continue
		}
		line := []string{"**" + r.c.name + " ÷ naive**"}
		for _, c := range cols {
			mine, ok1 := c.get(r.res[i])
			theirs, ok2 := c.get(*naive)
			if !c.ratio || !ok1 || !ok2 || theirs == 0 {
				line = append(line, "")
				continue
			}
			line = append(line, fmt.Sprintf("%.2f×", mine/theirs))
		}
		cells = append(cells, line)
	}
	writeTable(b, heads, cells)
}

// latchMarkdown reports the latch fan-out: what it measures, then the median and max over
// its rounds.
func latchMarkdown(b *strings.Builder, r latchResult) {
	fmt.Fprintf(b, "**CountDownLatch fan-out** (latchkey) — %d goroutines spread over %d Clients (%d on each, sharing one handle per Client) "+
		"await one latch set to a count of 1; once every one of them waits — none has returned, PUBSUB NUMSUB reports one subscriber per Client on the latch's channel, "+
		"and Redis has served at least one count read (GET) per awaiter and no more since the last look — a Client of its own counts the latch down once. "+
		"Measured: from sending the CountDown until the last Await returns, and until half of them have (p50 of the awaiters' return times). "+
		"A zero message wakes every awaiter of a Client with no request of its own, so this is one publish reaching %d subscriber connections "+
		"and each Client waking its goroutines. %d rounds, each on a latch of its own, the Clients opened once.\n\n",
		latchAwaiters, latchClients, latchAwaiters/latchClients, latchClients, latchRounds)
	if r.err != nil {
		fmt.Fprintf(b, "Failed after %d rounds: %v\n", len(r.rounds), r.err)
		return
	}
	lastMed, lastMax := r.stat(func(x latchRound) time.Duration { return x.last })
	p50Med, p50Max := r.stat(func(x latchRound) time.Duration { return x.p50 })
	writeTable(b, []string{"from CountDown sent", "median of rounds", "max of rounds"}, [][]string{
		{"to the last Await returned", fmtDur(lastMed), fmtDur(lastMax)},
		{"to half of them returned (p50)", fmtDur(p50Med), fmtDur(p50Max)},
	})
	var cmds []string
	for _, x := range r.rounds {
		if !x.cmdsOK {
			return
		}
		cmds = append(cmds, fmt.Sprint(x.cmds))
	}
	fmt.Fprintf(b, "\nCommands Redis ran from the count-down to the last return, counted as in the contended tables, by round: %s.\n", strings.Join(cmds, ", "))
}

// writeOut writes docs/benchmarks.md and the charts under repo.
func writeOut(repo string, res *results, report string) error {
	docs := filepath.Join(repo, "docs")
	if err := os.MkdirAll(docs, 0o755); err != nil {
		return err
	}
	if err := barChart(res, filepath.Join(docs, "bench-acquisitions.png"), "Acquisitions/s under contention (higher is better)",
		func(c contendedResult) float64 { return c.perSec }); err != nil {
		return err
	}
	if err := barChart(res, filepath.Join(docs, "bench-wait-p99.png"), "Wait p99 under contention, ms (lower is better)",
		func(c contendedResult) float64 { return float64(c.wait.pct(99)) / float64(time.Millisecond) }); err != nil {
		return err
	}
	page := "# Benchmarks\n\nProduced by `cd bench && go run . -out ..` — latchkey against its peers on one Redis, in one run. " +
		"Every figure is from the same run; ratios compare latchkey with the best peer in that column.\n\n" +
		"![acquisitions/s](bench-acquisitions.png)\n\n![wait p99](bench-wait-p99.png)\n\n" + report +
		"\nPeers: redsync v4.17.0 (go-redis v9, pool of " + fmt.Sprint(goRedisPoolSize) + ", unlimited tries, default 50–250 ms retry delay); " +
		"bsm/redislock v0.10.0 (linear backoff 10 ms and 100 ms); rueidislock (KeyMajority 1, NoLoopTracking); naive " +
		"(SET NX PX + compare-and-delete script, retry every 50 ms). Each worker has its own lock object; each library " +
		"one client per run, and in the contended scenarios over C clients one per group of workers.\n"
	return os.WriteFile(filepath.Join(docs, "benchmarks.md"), []byte(page), 0o644)
}

// barChart draws one bar group per library that ran, one bar per contended scenario.
func barChart(res *results, path, title string, value func(contendedResult) float64) error {
	p := plot.New()
	p.Title.Text = title
	var names []string
	var ran []row
	for _, r := range res.rows {
		if r.c.open != nil && r.err == nil && !r.c.pattern && len(r.contended) == len(res.opts.contended) {
			names = append(names, r.c.name)
			ran = append(ran, r)
		}
	}
	if len(ran) == 0 {
		return nil
	}
	width := vg.Points(float64(60) / float64(len(res.opts.contended)))
	var top float64
	palette := []color.Color{
		color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
		color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	}
	for i, sc := range res.opts.contended {
		vals := make(plotter.Values, len(ran))
		for j, r := range ran {
			vals[j] = value(r.contended[i])
			top = max(top, vals[j])
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return err
		}
		bars.Color = palette[i%len(palette)]
		bars.LineStyle.Width = 0
		bars.Offset = width * vg.Length(float64(i)-float64(len(res.opts.contended)-1)/2)
		p.Add(bars)
		p.Legend.Add(sc.String(), bars)
	}
	p.Legend.Top = true
	p.Y.Min, p.Y.Max = 0, top*1.15 // headroom, so the legend never covers a bar
	p.NominalX(names...)
	return p.Save(9*vg.Inch, 4*vg.Inch, path)
}
