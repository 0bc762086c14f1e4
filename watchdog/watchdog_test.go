package watchdog

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/latchkey/latchkey/internal/keyslot"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/lua"
	"github.com/redis/rueidis"
)

// waitFor bounds every wait for something that must happen.
const waitFor = 5 * time.Second

// call is one invocation of the fake RenewFunc.
type call struct {
	at      time.Time
	lease   time.Duration
	batches []Batch
}

// fake is a RenewFunc that records its calls and answers with reply (all held if nil).
type fake struct {
	reply func(ctx context.Context, n int, batches []Batch) []Result

	mu    sync.Mutex
	calls []call
	kick  chan struct{}
}

func newFake(reply func(ctx context.Context, n int, batches []Batch) []Result) *fake {
	return &fake{reply: reply, kick: make(chan struct{}, 1)}
}

func (f *fake) renew(ctx context.Context, lease time.Duration, batches []Batch) []Result {
	f.mu.Lock()
	f.calls = append(f.calls, call{at: time.Now(), lease: lease, batches: batches})
	n := len(f.calls)
	f.mu.Unlock()
	select {
	case f.kick <- struct{}{}:
	default:
	}
	if f.reply != nil {
		return f.reply(ctx, n, batches)
	}
	return allHeld(batches)
}

func allHeld(batches []Batch) []Result {
	res := make([]Result, len(batches))
	for i, b := range batches {
		res[i].Held = make([]bool, len(b.Keys))
		for j := range res[i].Held {
			res[i].Held[j] = true
		}
	}
	return res
}

func allErr(batches []Batch) []Result {
	res := make([]Result, len(batches))
	for i := range res {
		res[i].Err = errors.New("fake: connection refused")
	}
	return res
}

func (f *fake) snapshot() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// renewals returns the times of the calls that renewed key.
func (f *fake) renewals(key string) []time.Time {
	var at []time.Time
	for _, c := range f.snapshot() {
		for _, b := range c.batches {
			if slices.Contains(b.Keys, key) {
				at = append(at, c.at)
				break
			}
		}
	}
	return at
}

// waitCalls waits until cond holds for the recorded calls.
func (f *fake) waitCalls(t *testing.T, what string, cond func([]call) bool) []call {
	t.Helper()
	deadline := time.After(waitFor)
	for {
		if cs := f.snapshot(); cond(cs) {
			return cs
		}
		select {
		case <-f.kick:
		case <-deadline:
			t.Fatalf("%s: not seen within %v (%d renewal calls)", what, waitFor, len(f.snapshot()))
		}
	}
}

// waitRenewals waits until key has been renewed n times and returns when each was.
func (f *fake) waitRenewals(t *testing.T, key string, n int) []time.Time {
	t.Helper()
	f.waitCalls(t, fmt.Sprintf("%d renewals of %s", n, key), func([]call) bool { return len(f.renewals(key)) >= n })
	return f.renewals(key)
}

// kind returns a Kind renewed by f.
func (f *fake) kind(name string) *Kind { return &Kind{Name: name, Renew: f.renew} }

// keep starts a lease renewed by the watchdog, as an acquisition without an explicit lease.
func keep(w *Watchdog, k *Kind, key, owner string, sent time.Time) *Lease {
	return w.Start(k, key, owner, sent, w.timeout, true)
}

// watch starts a lease only timed, as an acquisition with an explicit lease.
func watch(w *Watchdog, k *Kind, key, owner string, sent time.Time, lease time.Duration) *Lease {
	return w.Start(k, key, owner, sent, lease, false)
}

// deadline returns l's deadline and fails the test if l is lost.
func deadline(t *testing.T, l *Lease) time.Time {
	t.Helper()
	d, ok := l.Deadline()
	if !ok {
		t.Fatal("Deadline() reports the lease lost")
	}
	return d
}

func newWatchdog(t *testing.T, opts Options) *Watchdog {
	t.Helper()
	w, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(w.Close)
	return w
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// waitLost waits for l's Lost and returns when it was seen closed.
func waitLost(t *testing.T, l *Lease, what string) time.Time {
	t.Helper()
	select {
	case <-l.Lost():
		return time.Now()
	case <-time.After(waitFor):
		t.Fatalf("%s: Lost not closed within %v", what, waitFor)
		return time.Time{}
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, timeout := range []time.Duration{0, -time.Second} {
		if w, err := New(Options{Timeout: timeout}); err == nil {
			w.Close()
			t.Errorf("New(Timeout %v) succeeded, want an error", timeout)
		}
	}
	w := newWatchdog(t, Options{Timeout: 7 * time.Second})
	if got := w.timeout; got != 7*time.Second {
		t.Fatalf("timeout = %v, want 7s", got)
	}
}

func TestKeepRenewsEveryThirdOfTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const timeout = 150 * time.Millisecond
		f := newFake(nil)
		w := newWatchdog(t, Options{Timeout: timeout})
		sent := time.Now()
		l := keep(w, f.kind("plain"), "k", "owner-1", sent)

		at := f.waitRenewals(t, "k", 5)
		elapsed := at[4].Sub(sent)
		// Five renewals are nominally 5 × 50 ms; allow for a slow machine.
		if elapsed > time.Second {
			t.Errorf("5 renewals took %v, want about %v", elapsed, 5*timeout/3)
		}
		// A renewal is never sent before half an interval has passed since the previous one
		// was sent, so n renewals take at least n × interval/2.
		if minimum := 5 * timeout / 3 / 2; elapsed < minimum {
			t.Errorf("5 renewals within %v: renewing faster than every interval/2 (%v)", elapsed, minimum)
		}
		for _, c := range f.snapshot() {
			if c.lease != timeout {
				t.Fatalf("renewal lease = %v, want the timeout %v", c.lease, timeout)
			}
			for _, b := range c.batches {
				if !slices.Equal(b.Keys, []string{"k"}) || !slices.Equal(b.Owners, []string{"owner-1"}) {
					t.Fatalf("renewal batch = %+v, want keys [k] owners [owner-1]", b)
				}
			}
		}
		// The lease would have run out at sent+timeout without renewals.
		for time.Since(sent) < 4*timeout || len(at) < 11 {
			if isClosed(l.Lost()) {
				t.Fatalf("Lost closed %v after Start while every renewal succeeded", time.Since(sent))
			}
			f.waitCalls(t, "another renewal", func(cs []call) bool { return cs[len(cs)-1].at.After(at[len(at)-1]) })
			at = f.renewals("k")
		}
		if isClosed(l.Lost()) {
			t.Fatal("Lost closed while every renewal succeeded")
		}
		// One lease is renewed every interval: the typical gap is Timeout/3. The median
		// ignores the odd gap stretched by a busy machine.
		var gaps []time.Duration
		for i := 1; i < len(at); i++ {
			gaps = append(gaps, at[i].Sub(at[i-1]))
		}
		slices.Sort(gaps)
		interval := timeout / 3
		if med := gaps[len(gaps)/2]; med < interval*8/10 || med > interval*14/10 {
			t.Fatalf("median gap between renewals %v, want about Timeout/3 = %v (gaps %v)", med, interval, gaps)
		}
	})
}

func TestNotHeldLosesAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const timeout = 450 * time.Millisecond
		f := newFake(func(_ context.Context, _ int, batches []Batch) []Result {
			res := allHeld(batches)
			for i, b := range batches {
				for j, k := range b.Keys {
					res[i].Held[j] = k != "{s}gone"
				}
			}
			return res
		})
		w := newWatchdog(t, Options{Timeout: timeout})
		k := f.kind("plain")
		// The first renewal round (all three leases) goes out an interval after sent.
		sent := time.Now()
		kept := keep(w, k, "{s}kept1", "o", sent)
		gone := keep(w, k, "{s}gone", "o", sent)
		kept2 := keep(w, k, "{s}kept2", "o", sent)

		lostAt := waitLost(t, gone, "lease found not held")
		if deadline := sent.Add(timeout); lostAt.After(deadline.Add(-timeout / 3)) {
			t.Fatalf("Lost closed %v before the lease deadline, want at once on the renewal reply", deadline.Sub(lostAt))
		}
		// Its neighbours in the same batch were held and stay kept.
		cs := f.snapshot()
		if len(cs) != 1 || len(cs[0].batches) != 1 || len(cs[0].batches[0].Keys) != 3 {
			t.Fatalf("renewal calls = %+v, want one call with one batch of the three leases", cs)
		}
		if isClosed(kept.Lost()) || isClosed(kept2.Lost()) {
			t.Fatal("a held lease batched with a lost one was reported lost")
		}
	})
}

func TestRenewalErrorsRetriedUntilDeadline(t *testing.T) {
	t.Parallel()
	const timeout = 150 * time.Millisecond
	for _, tc := range []struct {
		name string
		fail func(batches []Batch) []Result
	}{
		{"error", allErr},
		{"no results", func([]Batch) []Result { return nil }},
		{"short Held", func(batches []Batch) []Result {
			res := make([]Result, len(batches))
			for i := range res {
				res[i].Held = []bool{}
			}
			return res
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				const successes = 1
				var mu sync.Mutex
				var lastSuccess time.Time
				failures := 0
				f := newFake(func(_ context.Context, n int, batches []Batch) []Result {
					mu.Lock()
					defer mu.Unlock()
					if n <= successes {
						lastSuccess = time.Now()
						return allHeld(batches)
					}
					failures++
					return tc.fail(batches)
				})
				w := newWatchdog(t, Options{Timeout: timeout})
				l := keep(w, f.kind("plain"), "k", "o", time.Now())

				lostAt := waitLost(t, l, "renewals failing")
				mu.Lock()
				defer mu.Unlock()
				if lastSuccess.IsZero() {
					t.Fatal("Lost closed before any renewal succeeded")
				}
				// The last success was sent at most a moment before the fake saw it, and
				// the lease lives until sent + timeout: Lost must not close much earlier.
				if early := lostAt.Sub(lastSuccess); early < timeout*8/10 {
					t.Fatalf("Lost closed %v after the last successful renewal, want about the timeout %v", early, timeout)
				}
				if late := lostAt.Sub(lastSuccess); late > timeout+time.Second {
					t.Fatalf("Lost closed %v after the last successful renewal, want about the timeout %v", late, timeout)
				}
				if failures < 2 {
					t.Fatalf("a failed renewal was tried %d times before the deadline, want retries", failures)
				}
			})
		})
	}
}

// TestRenewalErrorsNeverSucceeding checks the exact bound: a lease whose renewals all fail
// is reported lost at sent + timeout, not a moment earlier.
func TestRenewalErrorsNeverSucceeding(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const timeout = 200 * time.Millisecond
		f := newFake(func(_ context.Context, _ int, batches []Batch) []Result { return allErr(batches) })
		w := newWatchdog(t, Options{Timeout: timeout})
		sent := time.Now()
		l := keep(w, f.kind("plain"), "k", "o", sent)
		lostAt := waitLost(t, l, "renewals failing")
		if lostAt.Before(sent.Add(timeout)) {
			t.Fatalf("Lost closed %v after sent, before the lease of %v ran out", lostAt.Sub(sent), timeout)
		}
		if n := len(f.renewals("k")); n < 2 {
			t.Fatalf("%d renewal attempts before the deadline, want retries", n)
		}
	})
}

// TestShortOutage checks that renewals failing for less than the lease cost nothing.
func TestShortOutage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const timeout = 150 * time.Millisecond
		start := time.Now()
		f := newFake(func(_ context.Context, _ int, batches []Batch) []Result {
			if time.Since(start) < timeout/2 {
				return allErr(batches)
			}
			return allHeld(batches)
		})
		w := newWatchdog(t, Options{Timeout: timeout})
		l := keep(w, f.kind("plain"), "k", "o", start)
		f.waitCalls(t, "renewals well past the lease", func(cs []call) bool {
			return len(cs) > 0 && cs[len(cs)-1].at.After(start.Add(2*timeout))
		})
		if isClosed(l.Lost()) {
			t.Fatal("Lost closed after an outage shorter than the lease")
		}
	})
}

func TestStopBeforeRenewal(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const timeout = 150 * time.Millisecond
		f := newFake(nil)
		w := newWatchdog(t, Options{Timeout: timeout})
		k := f.kind("plain")
		sent := time.Now()
		stopped := keep(w, k, "stopped", "o", sent)
		control := keep(w, k, "control", "o", sent)
		stopped.Stop()
		stopped.Stop() // idempotent

		// Two renewal rounds that start after the stopped lease's deadline prove the loop
		// has looked at the clock past it.
		f.waitCalls(t, "two rounds past the stopped lease's deadline", func(cs []call) bool {
			n := 0
			for _, c := range cs {
				if c.at.After(sent.Add(timeout)) {
					n++
				}
			}
			return n >= 2
		})
		if n := len(f.renewals("stopped")); n != 0 {
			t.Fatalf("a stopped lease was renewed %d times", n)
		}
		if isClosed(stopped.Lost()) {
			t.Fatal("Lost closed for a stopped lease")
		}
		if isClosed(control.Lost()) {
			t.Fatal("Lost closed for the control lease")
		}
	})
}

// TestStopDuringRound checks the generation check: a renewal reply that arrives after Stop,
// or after the lease was stopped and started afresh by Hold, is not applied, even when it
// says the lock is gone. A Hold of the lease while it stays active does not start it afresh:
// the reply is news about the same hold, and is applied.
func TestStopDuringRound(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const timeout = 600 * time.Millisecond
		entered := make(chan struct{})
		release := make(chan struct{})
		f := newFake(func(ctx context.Context, n int, batches []Batch) []Result {
			res := allHeld(batches)
			if n == 1 {
				close(entered)
				<-release
				for i := range res {
					for j := range res[i].Held {
						res[i].Held[j] = false
					}
				}
			}
			return res
		})
		w := newWatchdog(t, Options{Timeout: timeout})
		k := f.kind("plain")
		sent := time.Now() // one round for all four, an interval from now
		stopped := keep(w, k, "{a}stopped", "o", sent)
		restarted := keep(w, k, "{a}restarted", "o", sent)
		// Held for long: only the reply can lose these two, not their deadline passing while
		// the round is held back.
		held := w.Start(k, "{a}held", "o", sent, time.Minute, true)
		marker := w.Start(k, "{a}marker", "o", sent, time.Minute, true)
		select {
		case <-entered:
		case <-time.After(waitFor):
			t.Fatal("no renewal round started")
		}
		stopped.Stop()
		restarted.Stop() // released, and acquired again while the round is in flight
		if !restarted.Hold(time.Now(), 0, true) {
			t.Fatal("Hold of a stopped lease reported it lost")
		}
		if !held.Hold(time.Now(), 0, true) { // re-entered: the same hold goes on
			t.Fatal("Hold of a live lease reported it lost")
		}
		close(release)
		// The marker was in the same round and was not touched: once its Lost is closed, the
		// reply is being applied, and a call that takes the watchdog's lock (Deadline) returns
		// once it has been applied in full.
		waitLost(t, marker, "lease reported not held")
		if _, ok := marker.Deadline(); ok {
			t.Fatal("the marker's Lost is closed but Deadline reports it held")
		}
		if isClosed(stopped.Lost()) {
			t.Fatal("a reply for a lease stopped while the round was in flight closed its Lost")
		}
		if isClosed(restarted.Lost()) {
			t.Fatal("a reply for a lease started afresh while the round was in flight closed its Lost")
		}
		if !isClosed(held.Lost()) {
			t.Fatal("a reply saying a lease held on (re-entered) was not held was ignored")
		}
		// The restarted lease is still kept: it is renewed again.
		f.waitRenewals(t, "{a}restarted", 2)
		if isClosed(restarted.Lost()) {
			t.Fatal("restarted lease lost")
		}
	})
}

func TestWatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const timeout, lease = 60 * time.Millisecond, 200 * time.Millisecond
		f := newFake(nil)
		w := newWatchdog(t, Options{Timeout: timeout})
		k := f.kind("plain")
		// Kept, and held for long so that a busy machine cannot make it run out.
		control := w.Start(k, "control", "o", time.Now(), time.Minute, true)

		sent := time.Now()
		watched := watch(w, k, "watched", "o", sent, lease)
		stopped := watch(w, k, "stopped", "o", sent, lease)
		stopped.Stop()
		lostAt := waitLost(t, watched, "watched lease running out")
		if lostAt.Before(sent.Add(lease)) {
			t.Fatalf("watched lease reported lost %v after sent, before its %v ran out", lostAt.Sub(sent), lease)
		}
		if n := len(f.renewals("watched")) + len(f.renewals("stopped")); n != 0 {
			t.Fatalf("watched leases were renewed %d times", n)
		}
		if len(f.renewals("control")) < 2 {
			t.Fatal("the kept control lease was not renewed meanwhile")
		}
		// A round starting after the stopped lease's end shows the loop went past it.
		f.waitCalls(t, "a round after the stopped lease ran out", func(cs []call) bool {
			return len(cs) > 0 && cs[len(cs)-1].at.After(sent.Add(lease))
		})
		if isClosed(stopped.Lost()) {
			t.Fatal("a stopped watched lease was reported lost")
		}
		if isClosed(control.Lost()) {
			t.Fatal("the control lease was reported lost")
		}
	})
}

// On a Cluster a renewal script's keys share a hash slot: batches are per slot, as full as
// the cap allows.
func TestBatching(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		batchSize, want int
	}{
		{0, 100},
		{7, 7},
	} {
		t.Run(fmt.Sprintf("batchSize=%d", tc.batchSize), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFake(nil)
				const timeout = 600 * time.Millisecond
				w := newWatchdog(t, Options{Timeout: timeout, batchSize: tc.batchSize, Cluster: true})
				owners := make(map[string]string)
				add := func(key string) {
					owners[key] = "owner-of-" + key
				}
				for i := 1; i <= 250; i++ {
					add("{tag}:" + strconv.Itoa(i))
				}
				for i := 1; i <= 30; i++ {
					add("{other}:" + strconv.Itoa(i))
				}
				for i := 1; i <= 40; i++ {
					add("plain:" + strconv.Itoa(i)) // many slots, a few lease each
				}
				k := f.kind("plain")
				sent := time.Now() // all due together, an interval (200 ms) from now
				for key, o := range owners {
					keep(w, k, key, o, sent)
				}
				cs := f.waitCalls(t, "a renewal round", func(cs []call) bool { return len(cs) > 0 })
				round := cs[0]
				seen := make(map[string]int)
				perSlot := make(map[uint16]int)
				for _, b := range round.batches {
					if len(b.Keys) == 0 || len(b.Keys) > tc.want {
						t.Errorf("batch of %d locks, want 1..%d", len(b.Keys), tc.want)
					}
					if len(b.Owners) != len(b.Keys) {
						t.Fatalf("batch with %d keys and %d owners", len(b.Keys), len(b.Owners))
					}
					slot := keyslot.Of(b.Keys[0])
					perSlot[slot]++
					for i, key := range b.Keys {
						if s := keyslot.Of(key); s != slot {
							t.Errorf("batch mixes slots %d (%s) and %d (%s)", slot, b.Keys[0], s, key)
						}
						if b.Owners[i] != owners[key] {
							t.Errorf("batch pairs %s with owner %q, want %q", key, b.Owners[i], owners[key])
						}
						seen[key]++
					}
				}
				for key := range owners {
					if seen[key] != 1 {
						t.Errorf("%s renewed %d times in the first round, want once", key, seen[key])
					}
				}
				if len(seen) != len(owners) {
					t.Errorf("first round renewed %d locks, want all %d", len(seen), len(owners))
				}
				// Batches are as full as the cap allows: ceil(n/cap) per slot.
				if got, want := perSlot[keyslot.Of("{tag}:1")], (250+tc.want-1)/tc.want; got != want {
					t.Errorf("{tag} leases went out in %d batches, want %d", got, want)
				}
				if got, want := perSlot[keyslot.Of("{other}:1")], (30+tc.want-1)/tc.want; got != want {
					t.Errorf("{other} leases went out in %d batches, want %d", got, want)
				}
			})
		})
	}
}

// TestClose is not parallel: it counts goroutines.
func TestClose(t *testing.T) {
	before := runtime.NumGoroutine()
	f := newFake(nil)
	w, err := New(Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	k := f.kind("plain")
	now := time.Now()
	kept := []*Lease{keep(w, k, "a", "o", now), keep(w, k, "b", "o", now)}
	watched := watch(w, k, "c", "o", now, time.Minute)
	stopped := keep(w, k, "d", "o", now)
	stopped.Stop()

	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(w.Close)
		}
		wg.Wait()
		w.Close()
	}()
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatal("Close did not return")
	}
	for i, l := range append(kept, watched) {
		if !isClosed(l.Lost()) {
			t.Errorf("lease %d still held at Close: Lost not closed when Close returned", i)
		}
	}
	if isClosed(stopped.Lost()) {
		t.Error("a stopped lease was reported lost by Close")
	}
	for i, l := range []*Lease{keep(w, k, "e", "o", time.Now()), watch(w, k, "f", "o", time.Now(), time.Minute)} {
		if !isClosed(l.Lost()) {
			t.Errorf("lease %d taken after Close: Lost not closed", i)
		}
		if l.Hold(time.Now(), 0, true) {
			t.Errorf("lease %d taken after Close: Hold succeeded", i)
		}
		l.Stop()
	}
	if stopped.Hold(time.Now(), 0, true) {
		t.Error("Hold of a stopped lease after Close succeeded")
	}
	if !isClosed(stopped.Lost()) {
		t.Error("Hold after Close did not report the lease lost")
	}
	lapsed := keep(w, k, "g", "o", now)
	lapsed.Stop()
	lapsed.Lapse()
	if !isClosed(lapsed.Lost()) {
		t.Error("Lapse after Close did not report the lease lost")
	}
	if n := len(f.snapshot()); n != 0 {
		t.Errorf("%d renewal calls, want none (nothing was due)", n)
	}
	deadline := time.Now().Add(waitFor)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Close, %d before New", runtime.NumGoroutine(), before)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCloseDuringRound checks that Close returns promptly while a renewal round is stuck
// on an unresponsive server, and that no renewal is sent after it returns.
func TestCloseDuringRound(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const timeout = 3 * time.Second // a round may take up to timeout/3
		entered := make(chan struct{}, 1)
		f := newFake(func(ctx context.Context, _ int, batches []Batch) []Result {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return allErr(batches)
		})
		w, err := New(Options{Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		l := keep(w, f.kind("plain"), "k", "o", time.Now().Add(-timeout/3))
		select {
		case <-entered:
		case <-time.After(waitFor):
			t.Fatal("no renewal round started")
		}
		start := time.Now()
		w.Close()
		if took := time.Since(start); took > 250*time.Millisecond {
			t.Errorf("Close took %v with a renewal in flight, want it to return promptly", took)
		}
		if !isClosed(l.Lost()) {
			t.Error("Lost not closed by Close")
		}
		n := len(f.snapshot())
		time.Sleep(20 * time.Millisecond) // nothing may be sent after Close returned
		if m := len(f.snapshot()); m != n {
			t.Errorf("%d renewal calls after Close returned", m-n)
		}
	})
}

// TestRealRedis keeps a Redisson-style lock hash alive with the real renewal script, which
// never shortens a TTL.
func TestRealRedis(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		t.Parallel()
		c := b.Client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var mu sync.Mutex
		rounds := 0
		real := scriptRenew(c)
		kind := &Kind{Name: "plain", Renew: func(ctx context.Context, lease time.Duration, batches []Batch) []Result {
			res := real(ctx, lease, batches)
			mu.Lock()
			rounds++
			mu.Unlock()
			return res
		}}
		roundsDone := func() int {
			mu.Lock()
			defer mu.Unlock()
			return rounds
		}

		// Renewals every 500 ms keep a 1.5 s TTL alive with a second to spare, however loaded
		// the machine.
		const timeout = 1500 * time.Millisecond
		const long = 20 * time.Second // an explicit lease longer than the test, kept too
		const key, owner = "{lock}:orders", "f8c1b4e2-0000-4000-8000-000000000001:1"
		const longKey = "{lock}:long"
		w := newWatchdog(t, Options{Timeout: timeout})
		set := func(key string, ttl time.Duration) time.Time {
			t.Helper()
			sent := time.Now()
			if err := c.Do(ctx, c.B().Hset().Key(key).FieldValue().FieldValue(owner, "1").Build()).Error(); err != nil {
				t.Fatal(err)
			}
			if err := c.Do(ctx, c.B().Pexpire().Key(key).Milliseconds(ttl.Milliseconds()).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			return sent
		}
		pttl := func(key string) int64 {
			t.Helper()
			ms, err := c.Do(ctx, c.B().Pttl().Key(key).Build()).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			return ms
		}
		sent := set(key, timeout)
		l := keep(w, kind, key, owner, sent)
		longSent := set(longKey, long)
		ll := w.Start(kind, longKey, owner, longSent, long, true)

		// Two leases' worth of time: without renewals the key would be long gone.
		select {
		case <-l.Lost():
			t.Fatal("Lost closed while the lock was held and renewed")
		case <-ll.Lost():
			t.Fatal("Lost closed for the long lease while the lock was held and renewed")
		case <-time.After(2 * timeout):
		}
		if n := roundsDone(); n < 3 {
			t.Fatalf("%d renewal rounds in %v, want one every %v", n, 2*timeout, timeout/3)
		}
		if ms := pttl(key); ms <= 0 || ms > timeout.Milliseconds() {
			t.Fatalf("PTTL after %v = %d ms, want in (0, %d]", time.Since(sent), ms, timeout.Milliseconds())
		}
		// The renewals left the longer TTL alone, and the lease's deadline with it.
		if ms, left := pttl(longKey), time.Until(longSent.Add(long)); ms < (left - 100*time.Millisecond).Milliseconds() {
			t.Fatalf("PTTL of the long lease = %d ms, want about the %v left of it: a renewal shortened it", ms, left)
		}
		if d := deadline(t, ll); !d.Equal(longSent.Add(long)) {
			t.Fatalf("long lease's deadline moved by %v, want sent + %v", d.Sub(longSent.Add(long)), long)
		}

		// The lock is taken away: the next renewal finds it gone.
		if err := c.Do(ctx, c.B().Del().Key(key).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		lostAt := waitLost(t, l, "lock deleted")
		if d := lostAt.Sub(deleted); d > timeout+time.Second {
			t.Fatalf("Lost closed %v after the delete, want within about a renewal interval", d)
		}
		if n, err := c.Do(ctx, c.B().Exists().Key(key).Build()).AsInt64(); err != nil || n != 0 {
			t.Fatalf("EXISTS after the lease was lost = %d, %v; the renewal must not recreate the key", n, err)
		}
		if isClosed(ll.Lost()) {
			t.Fatal("the long lease was lost with its neighbour")
		}
	})
}

// scriptRenew is a RenewFunc on the real renewal script, as the lock package builds it.
func scriptRenew(c rueidis.Client) RenewFunc {
	return func(ctx context.Context, lease time.Duration, batches []Batch) []Result {
		ms := strconv.FormatInt(lease.Milliseconds(), 10)
		calls := make([]lua.Call, len(batches))
		for i, b := range batches {
			calls[i] = lua.LockRenew{Locks: b.Keys, LeaseMs: ms, Owners: b.Owners}.Call()
		}
		resps := lua.ExecMulti(ctx, c, calls...)
		out := make([]Result, len(batches))
		for i := range out {
			vals, err := resps[i].AsIntSlice()
			if err != nil {
				out[i].Err = err
				continue
			}
			for _, v := range vals {
				out[i].Held = append(out[i].Held, v == 1)
			}
		}
		return out
	}
}

// Deadline follows what renewals confirm; a stopped lease has none to offer, until Lapse
// times it again with the one it had. Lose reports a lease lost at once, and a lost lease
// has no deadline to offer.
func TestDeadlineAndLose(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const timeout = 90 * time.Millisecond
		f := newFake(nil)
		w := newWatchdog(t, Options{Timeout: timeout})
		k := f.kind("plain")
		sent := time.Now()
		// A kept lease lives at least the timeout, whatever ttl says.
		l := w.Start(k, "k", "o", sent, 0, true)
		if d, ok := l.Deadline(); !ok || !d.Equal(sent.Add(timeout)) {
			t.Fatalf("Deadline() = sent%+v, %v; want sent+timeout, true", d.Sub(sent), ok)
		}
		if d := deadline(t, w.Start(k, "k2", "o", sent, timeout/2, true)); !d.Equal(sent.Add(timeout)) {
			t.Fatalf("kept lease started with ttl %v: Deadline() = sent%+v, want sent+timeout", timeout/2, d.Sub(sent))
		}
		f.waitRenewals(t, "k", 1)
		var renewed time.Time
		eventually := time.After(waitFor)
		for {
			if d, ok := l.Deadline(); ok && d.After(sent.Add(timeout)) {
				renewed = d
				break
			}
			select {
			case <-eventually:
				t.Fatal("a renewal did not move the deadline")
			case <-time.After(time.Millisecond):
			}
		}
		l.Stop()
		if _, ok := l.Deadline(); ok {
			t.Fatal("after Stop, Deadline() reports a deadline for a released hold")
		}
		// A release that failed: the lease is timed again with the deadline it had.
		l.Lapse()
		if d, ok := l.Deadline(); !ok || !d.Equal(renewed) {
			t.Fatalf("after Stop and Lapse, Deadline() = %v, %v; want the last confirmed one", d, ok)
		}
		l.Lose("test")
		if !isClosed(l.Lost()) {
			t.Fatal("Lose did not close Lost")
		}
		if _, ok := l.Deadline(); ok {
			t.Fatal("a lost lease still reports a deadline")
		}
		l.Lose("again") // idempotent
		if l.Hold(time.Now(), timeout, true) {
			t.Fatal("Hold revived a lost lease")
		}
		if !isClosed(l.Lost()) {
			t.Fatal("Lost reopened")
		}
	})
}

// Off a Cluster, leases of distinct names share batches: 300 locks on one server are three
// renewal scripts a round, not one per slot.
func TestBatchingWithoutCluster(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFake(nil)
		w := newWatchdog(t, Options{Timeout: 600 * time.Millisecond})
		k := f.kind("plain")
		sent := time.Now()
		for i := range 300 {
			key := "distinct:" + strconv.Itoa(i)
			keep(w, k, key, "owner-of-"+key, sent)
		}
		cs := f.waitCalls(t, "a renewal round", func(cs []call) bool { return len(cs) > 0 })
		renewed := 0
		for _, b := range cs[0].batches {
			renewed += len(b.Keys)
		}
		if len(cs[0].batches) != 3 || renewed != 300 {
			t.Fatalf("the first round renewed %d leases in %d scripts, want 300 in 3", renewed, len(cs[0].batches))
		}
	})
}
