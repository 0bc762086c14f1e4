package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

const inspectSummary = "show what Redis holds for primitives, in Redisson's layout"

// inspectSpec is the help of "latchkey inspect".
func inspectSpec() spec {
	return spec{
		synopsis: "inspect [flags] NAME...",
		about: `Shows, for each NAME, what Redis holds in Redisson's layout: the kind of primitive, told
from the keys found (lock, fair_lock, fenced_lock, rwlock, permit_semaphore, semaphore,
latch), its holders and hold counts, TTLs, a fair lock's queue with each waiter's deadline,
a read-write lock's readers and their read holds' TTLs, a semaphore's available permits and
acquired permit IDs with their expiries, a latch's count.

A free lock leaves no key behind: its kind shows as none; a fair lock shows as fair_lock
only while it has waiters, as a plain lock otherwise. A semaphore and a countdown latch
are both a number under the name: the kind says which only when someone waits on it, and
is semaphore_or_latch otherwise. Times in --json are epoch milliseconds, durations
milliseconds; a TTL of -1 means the key has none.

With --watch, each print also says what the reads so far have seen of each name: the holders
that came and went (acquisitions and releases seen), how long the holds seen to end lasted,
and the most waiters at once ("seen" in --json). Read every --interval, these are lower
bounds: a hold that began and ended between two reads is not seen.`,
		examples: []string{
			"latchkey inspect nightly-report",
			"latchkey inspect --json batch deploy | jq '.[0].holders'",
			"latchkey inspect --watch --interval 2s db-migrate",
		},
	}
}

// inspectCommand is "latchkey inspect".
func inspectCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("inspect", inspectSpec(), stderr)
	asJSON := fs.Bool("json", false, "print JSON: an array with one object per NAME")
	watch := fs.Bool("watch", false, "print again every --interval until interrupted")
	interval := time.Second
	fs.Var(positiveDuration{&interval}, "interval", "with --watch, the time `D` between prints")
	url := redisFlag(fs)
	names, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return usageError(fs, "give at least one NAME")
	}
	for _, n := range names {
		if n == "" {
			return usageError(fs, "a NAME must not be empty")
		}
	}
	opt, err := redisOptions(*url)
	if err != nil {
		return usageMessage(stderr, "inspect", err)
	}
	rdb, err := dialRedis(opt)
	if err != nil {
		return err
	}
	defer rdb.Close()
	seens := make([]seen, len(names))
	show := func(ctx context.Context) error {
		states := make([]state, 0, len(names))
		for i, n := range names {
			st, err := readState(ctx, rdb, n)
			if err != nil {
				return err
			}
			if *watch {
				seens[i].observe(st, time.Now())
				st.Seen = &seens[i]
			}
			states = append(states, st)
		}
		if *asJSON {
			return writeJSON(stdout, states, *watch)
		}
		if *watch {
			fmt.Fprintf(stdout, "%s\n", time.Now().Format(time.TimeOnly))
		}
		if err := writeTable(stdout, states); err != nil {
			return err
		}
		for _, st := range states {
			if st.Seen != nil {
				fmt.Fprintf(stdout, "seen %s: %v\n", st.Name, st.Seen)
			}
		}
		return nil
	}
	if !*watch {
		return show(ctx)
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if err := show(ctx); err != nil {
			if ctx.Err() != nil {
				return nil // interrupted: the way --watch ends
			}
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if !*asJSON {
				fmt.Fprintln(stdout)
			}
		}
	}
}

// writeJSON prints states as one JSON array: indented for one print, one line per print
// with --watch so that each line is a document.
func writeJSON(w io.Writer, states []state, compact bool) error {
	enc := json.NewEncoder(w)
	if !compact {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(states)
}

// writeTable prints states as a table: a row per name, and a row per holder, waiter or
// permit below it.
func writeTable(w io.Writer, states []state) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tTTL\tWHAT\tDETAIL")
	for _, s := range states {
		rows := tableRows(s)
		ttl := "-"
		if s.TTLMs != nil {
			ttl = ttlText(*s.TTLMs)
		}
		if len(rows) == 0 {
			rows = [][2]string{{"", ""}}
		}
		for i, r := range rows {
			if i == 0 {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Name, s.Kind, ttl, r[0], r[1])
				continue
			}
			fmt.Fprintf(tw, "\t\t\t%s\t%s\n", r[0], r[1])
		}
	}
	return tw.Flush()
}

// tableRows are the WHAT and DETAIL cells of a state.
func tableRows(s state) [][2]string {
	var rows [][2]string
	add := func(what, format string, a ...any) { rows = append(rows, [2]string{what, fmt.Sprintf(format, a...)}) }
	if s.Mode != "" {
		add("mode", "%s", s.Mode)
	}
	for _, h := range s.Holders {
		switch {
		case h.Write:
			add("writer", "%s (%s)", h.Owner, plural(h.Holds, "hold"))
		case s.Kind == kindRWLock:
			ttls := make([]string, len(h.ReadTTLsMs))
			for i, t := range h.ReadTTLsMs {
				ttls[i] = ttlText(t)
			}
			add("reader", "%s (%s; TTLs %s)", h.Owner, plural(h.Holds, "hold"), strings.Join(ttls, ", "))
		default:
			add("holder", "%s (%s)", h.Owner, plural(h.Holds, "hold"))
		}
	}
	if s.Token != nil {
		add("token", "%d", *s.Token)
	}
	for i, q := range s.Queue {
		add(fmt.Sprintf("waiter %d", i+1), "%s (%s)", q.Owner, deadlineText(q))
	}
	for _, q := range s.Writers {
		add("writer claim", "%s (%s)", q.Owner, deadlineText(q))
	}
	if s.Clients > 0 {
		add("waiting", "%s", plural(s.Clients, "latchkey client"))
	}
	if s.Available != nil {
		add("available", "%d", *s.Available)
	}
	for _, p := range s.Acquired {
		if p.InMs == nil {
			add("permit", "%s (no lease)", p.ID)
			continue
		}
		add("permit", "%s (expires in %s)", p.ID, ttlText(*p.InMs))
	}
	if s.Count != nil {
		what := "count"
		if s.Kind == kindSemaphoreOrLatch {
			what = "permits or count"
		}
		add(what, "%d", *s.Count)
	}
	if s.Value != "" {
		add("type", "%s (no primitive's)", s.Value)
	}
	return rows
}

func deadlineText(w waiter) string {
	if w.DeadlineMs == 0 {
		return "no deadline"
	}
	at := time.UnixMilli(w.DeadlineMs).Format(time.TimeOnly)
	if w.InMs < 0 {
		return fmt.Sprintf("deadline %s, passed %s ago", at, ttlText(-w.InMs))
	}
	return fmt.Sprintf("deadline %s, in %s", at, ttlText(w.InMs))
}

func ttlText(ms int64) string {
	if ms < 0 {
		return "none"
	}
	return msText(ms)
}

func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
