package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
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
	b.WriteString("| library |")
	for _, c := range cols {
		b.WriteString(" " + c.head + " |")
	}
	b.WriteString("\n|---|")
	for range cols {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, r := range rows {
		fmt.Fprintf(b, "| %s |", r.c.name)
		switch {
		case r.c.open == nil:
			fmt.Fprintf(b, " %s |%s\n", r.c.note, strings.Repeat(" |", len(cols)-1))
			continue
		case r.err != nil:
			fmt.Fprintf(b, " failed: %v |%s\n", r.err, strings.Repeat(" |", len(cols)-1))
			continue
		}
		for _, c := range cols {
			if v, ok := c.get(r); ok {
				b.WriteString(" " + c.show(v) + " |")
			} else {
				b.WriteString(" — |")
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("| **latchkey ÷ best peer** |")
	for _, c := range cols {
		b.WriteString(" " + ratioCell(rows, c) + " |")
	}
	b.WriteString("\n")
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

func markdown(res *results) string {
	var b strings.Builder
	o := res.opts
	fmt.Fprintf(&b, "Redis %s on loopback; %d timed seconds per scenario and library; run %s.\n\n",
		res.server, int(o.dur.Seconds()), res.started.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "**Floor** — PING round trip: p50 %s, p99 %s.\n\n", fmtDur(res.ping.pct(50)), fmtDur(res.ping.pct(99)))
	fmt.Fprintf(&b, "Floor and solo ran %s; parallel and contended on every CPU. "+
		"Pinned, a latency is the round trip plus the CPU work a library makes the client and Redis do; "+
		"unpinned, on a small VM, it swings 2–3× with whether the scheduler puts the two processes on one CPU.\n\n", res.pinned)

	b.WriteString("**Solo** (one goroutine, lock+unlock of a free lock) and **parallel** (")
	fmt.Fprintf(&b, "%d goroutines, each on its own key). Latency: lower is better; throughput: higher. ", o.parallel)
	b.WriteString("CPU per cycle: what one parallel lock+unlock cost this process (the library's client side) and the Redis server; " +
		"client and server share the machine's CPUs, and Redis runs every command on one thread, so these bound the throughput " +
		"and vary less from run to run than cycles/s do.\n\n")
	table(&b, res.rows, []column{
		durCol("solo p50", func(r row) (time.Duration, bool) { return r.solo.pct(50), len(r.solo) > 0 }),
		durCol("solo p99", func(r row) (time.Duration, bool) { return r.solo.pct(99), len(r.solo) > 0 }),
		{head: "parallel cycles/s", higher: true, ratio: true,
			get:  func(r row) (float64, bool) { return r.parallel, r.parallel > 0 },
			show: func(v float64) string { return fmt.Sprintf("%.0f", v) }},
		durCol("client CPU/cycle", func(r row) (time.Duration, bool) { return r.parCPU.clientPer() }),
		durCol("Redis CPU/cycle", func(r row) (time.Duration, bool) { return r.parCPU.serverPer() }),
	})
	fmt.Fprintf(&b, "\n**Contended** — W workers on one key, each looping request → hold %v → release → %v idle. "+
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
		"a time.Sleep lasts longer the more network events the library has during it, which would blur the comparison).\n",
		holdTime, idleTime)
	for i, sc := range o.contended {
		at := func(r row) (contendedResult, bool) {
			if i < len(r.contended) {
				return r.contended[i], true
			}
			return contendedResult{}, false
		}
		fmt.Fprintf(&b, "\n**Contended, %v** — %s.\n\n", sc, sc.describe())
		table(&b, res.rows, []column{
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
	fmt.Fprintf(&b, "\n**Waiters at scale** (latchkey) — %d goroutines waiting on %d locks through one Client: "+
		"all %d got their turn in %s after the holders released; %d subscriber connection(s) on the server; "+
		"peak RSS of the benchmark process %.0f MiB.\n",
		s.waiters, s.locks, s.waiters, fmtDur(s.total), s.subscribers, float64(s.peakRSS)/(1<<20))
	return b.String()
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
		if r.c.open != nil && r.err == nil && len(r.contended) == len(res.opts.contended) {
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
