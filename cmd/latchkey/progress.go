package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/term"
)

// progressEvery is how often the progress line is redrawn and the state re-read: often
// enough to look live, seldom enough to cost Redis nothing.
const progressEvery = 500 * time.Millisecond

// terminal returns w's file descriptor when w is a terminal.
func terminal(w io.Writer) (int, bool) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0, false
	}
	return int(f.Fd()), true
}

// startProgress shows a live line on stderr while run waits, if stderr is a terminal and
// --quiet was not given. The returned func stops it and erases the line.
func startProgress(ctx context.Context, s *session, o runOptions, stderr io.Writer) (stop func()) {
	fd, ok := terminal(stderr)
	if o.quiet || !ok {
		return func() {}
	}
	line := &statusLine{w: stderr, fd: fd}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			// Drawn from the first tick on: an acquisition that waits for nothing shows
			// nothing, and a warning printed as the wait begins is not drawn over.
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rctx, rcancel := context.WithTimeout(ctx, progressEvery*4)
			st, err := readState(rctx, s.rdb, o.name())
			rcancel()
			if ctx.Err() != nil {
				return
			}
			line.show(progressText(time.Since(start), o, s.c.ID(), st, err))
		}
	}()
	return func() {
		cancel()
		wg.Wait()
		line.clear()
	}
}

// progressText is one progress line: what is waited for, how long, and what holds it.
func progressText(waited time.Duration, o runOptions, clientID string, st state, err error) string {
	parts := []string{fmt.Sprintf("latchkey: waiting %s for %s", elapsedText(waited), o.what())}
	if err != nil {
		return strings.Join(append(parts, "state unknown: "+err.Error()), " · ")
	}
	for _, h := range st.Holders {
		desc := "held by " + h.Owner
		switch {
		case h.Write:
			desc = "write-held by " + h.Owner
		case st.Kind == kindRWLock:
			desc = "read-held by " + h.Owner
		}
		parts = append(parts, desc)
	}
	if st.TTLMs != nil && *st.TTLMs > 0 && len(st.Holders) > 0 {
		parts = append(parts, "lease "+msText(*st.TTLMs)+" left")
	}
	if o.fair {
		for i, w := range st.Queue {
			if strings.HasPrefix(w.Owner, clientID+":") {
				parts = append(parts, fmt.Sprintf("queue position %d of %d", i+1, len(st.Queue)))
			}
		}
	}
	if o.semaphore != "" && st.Available != nil {
		total := *st.Available + int64(len(st.Acquired))
		parts = append(parts, fmt.Sprintf("%d of %d permits free", *st.Available, total))
	}
	return strings.Join(parts, " · ")
}

// elapsedText shows a time waited: tenths of a second for the first minute, so the line
// keeps its width while it counts, whole seconds after.
func elapsedText(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return d.Round(time.Second).String()
}

// msText shows a count of milliseconds as a duration rounded for reading.
func msText(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	if d >= 10*time.Second {
		return d.Round(time.Second).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// statusLine is one line of a terminal redrawn in place: a carriage return, the text cut to
// the terminal's width (a wrapped line could not be redrawn), and blanks over what is left
// of the longer text before.
type statusLine struct {
	w    io.Writer
	fd   int
	last int // runes shown last time
}

func (l *statusLine) show(text string) {
	if width, _, err := term.GetSize(l.fd); err == nil && width > 1 && utf8.RuneCountInString(text) >= width {
		text = string([]rune(text)[:width-1])
	}
	n := utf8.RuneCountInString(text)
	pad := max(l.last-n, 0)
	fmt.Fprintf(l.w, "\r%s%s", text, strings.Repeat(" ", pad))
	l.last = n
}

func (l *statusLine) clear() {
	if l.last > 0 {
		fmt.Fprintf(l.w, "\r%s\r", strings.Repeat(" ", l.last))
		l.last = 0
	}
}
