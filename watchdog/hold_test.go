package watchdog

import (
	"testing"
	"testing/synctest"
	"time"
)

// Leases only grow: a Hold with a shorter ttl on an active lease never lowers its deadline,
// and a longer one raises it.
func TestHoldGrowsTimedLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const lease = 100 * time.Millisecond
		f := newFake(nil)
		w := newWatchdog(t, Options{Timeout: time.Minute})
		sent := time.Now()
		l := watch(w, f.kind("plain"), "k", "o", sent, lease)

		// Re-entered with a shorter lease: the lock keeps the TTL it had.
		if !l.Hold(sent.Add(lease/4), lease/2, false) {
			t.Fatal("Hold of a live timed lease reported it lost")
		}
		if d := deadline(t, l); !d.Equal(sent.Add(lease)) {
			t.Fatalf("a Hold with a shorter lease moved the deadline by %v", d.Sub(sent.Add(lease)))
		}
		// Re-entered with a longer lease before the first one ran out.
		resent := sent.Add(lease / 2)
		if !l.Hold(resent, 2*lease, false) {
			t.Fatal("Hold of a live timed lease reported it lost")
		}
		if d := deadline(t, l); !d.Equal(resent.Add(2 * lease)) {
			t.Fatalf("deadline after a Hold with a longer lease = resent%+v, want resent+%v", d.Sub(resent), 2*lease)
		}
		// And a shorter one again, sent later: still nothing lower.
		if !l.Hold(time.Now(), time.Millisecond, false) {
			t.Fatal("Hold of a live timed lease reported it lost")
		}
		if d := deadline(t, l); !d.Equal(resent.Add(2 * lease)) {
			t.Fatalf("a Hold with a shorter lease moved the deadline by %v", d.Sub(resent.Add(2*lease)))
		}
		lostAt := waitLost(t, l, "held watched lease running out")
		if lostAt.Before(resent.Add(2 * lease)) {
			t.Fatalf("lease reported lost %v after the Hold, before its %v ran out", lostAt.Sub(resent), 2*lease)
		}
		if l.Hold(time.Now(), lease, false) {
			t.Fatal("Hold of a lost lease reported success")
		}
		if n := len(f.snapshot()); n != 0 {
			t.Fatalf("%d renewal calls for a timed lease", n)
		}
	})
}

// A kept lease held with a shorter explicit lease stays kept, with its deadline as it was.
func TestHoldKeepsKeptLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const timeout = 150 * time.Millisecond
		f := newFake(nil)
		w := newWatchdog(t, Options{Timeout: timeout})
		sent := time.Now()
		kept := keep(w, f.kind("plain"), "kept", "o", sent)
		if !kept.Hold(time.Now(), 10*time.Millisecond, false) {
			t.Fatal("Hold reported a live lease lost")
		}
		if d := deadline(t, kept); !d.Equal(sent.Add(timeout)) {
			t.Fatalf("a Hold with a 10ms lease moved a kept lease's deadline by %v", d.Sub(sent.Add(timeout)))
		}
		at := f.waitRenewals(t, "kept", 3)
		if isClosed(kept.Lost()) {
			t.Fatalf("kept lease held with a 10ms lease was reported lost; renewals at %v", at)
		}
	})
}

// keep=true on an active timed lease makes it kept: renewed from now on, its deadline at
// least the timeout from sent.
func TestHoldKeepOnTimedLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const timeout = 150 * time.Millisecond
		f := newFake(nil)
		w := newWatchdog(t, Options{Timeout: timeout})
		sent := time.Now()
		l := watch(w, f.kind("plain"), "k", "o", sent, 30*time.Millisecond)
		resent := time.Now()
		if !l.Hold(resent, 0, true) {
			t.Fatal("Hold of a live timed lease reported it lost")
		}
		if d := deadline(t, l); !d.Equal(resent.Add(timeout)) {
			t.Fatalf("deadline after Hold(keep) = resent%+v, want resent+timeout", d.Sub(resent))
		}
		at := f.waitRenewals(t, "k", 3)
		// Well past both the 30 ms lease and the timeout from resent.
		if isClosed(l.Lost()) {
			t.Fatalf("a timed lease kept by Hold was reported lost; renewals at %v", at)
		}
	})
}

// Hold on a stopped lease starts it afresh: its deadline is sent+ttl even when that is
// earlier than the old one, and it is kept or timed as this Hold says.
func TestHoldStartsStoppedLeaseAfresh(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const timeout = 150 * time.Millisecond
		f := newFake(nil)
		w := newWatchdog(t, Options{Timeout: timeout})
		k := f.kind("plain")

		// A kept lease released and taken again with an explicit lease: timed, not renewed.
		kept := keep(w, k, "was-kept", "o", time.Now())
		kept.Stop()
		sent := time.Now()
		if !kept.Hold(sent, 40*time.Millisecond, false) {
			t.Fatal("Hold of a stopped lease reported it lost")
		}
		if d := deadline(t, kept); !d.Equal(sent.Add(40 * time.Millisecond)) {
			t.Fatalf("Hold of a stopped lease: deadline sent%+v, want sent+40ms", d.Sub(sent))
		}

		// A timed lease with a long lease released and taken again without one: kept.
		timed := watch(w, k, "was-timed", "o", time.Now(), time.Minute)
		timed.Stop()
		resumedAt := time.Now()
		if !timed.Hold(resumedAt, 0, true) {
			t.Fatal("Hold of a stopped lease reported it lost")
		}
		if d := deadline(t, timed); !d.Equal(resumedAt.Add(timeout)) {
			t.Fatalf("Hold of a stopped lease: deadline sent%+v, want sent+timeout", d.Sub(resumedAt))
		}

		lostAt := waitLost(t, kept, "restarted timed lease running out")
		if lostAt.Before(sent.Add(40 * time.Millisecond)) {
			t.Fatalf("restarted lease lost %v after sent, before its 40ms ran out", lostAt.Sub(sent))
		}
		f.waitRenewals(t, "was-timed", 3)
		if n := len(f.renewals("was-kept")); n != 0 {
			t.Fatalf("a lease restarted as timed was renewed %d times", n)
		}
		if isClosed(timed.Lost()) {
			t.Fatal("a lease restarted as kept was reported lost")
		}
	})
}

// Renewals never shorten a lease: a kept lease whose deadline lies beyond a round's send
// time plus the timeout keeps it after the renewal succeeds.
func TestRenewalKeepsLaterDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const timeout = 90 * time.Millisecond
		const long = 10 * time.Second
		f := newFake(nil)
		w := newWatchdog(t, Options{Timeout: timeout})
		k := f.kind("plain")
		sent := time.Now()
		l := w.Start(k, "long", "o", sent, long, true)
		control := keep(w, k, "control", "o", sent)
		if d := deadline(t, l); !d.Equal(sent.Add(long)) {
			t.Fatalf("deadline = sent%+v, want sent+%v", d.Sub(sent), long)
		}
		// A round starts only after the one before was applied: two renewals mean the first
		// renewal's reply is in.
		f.waitRenewals(t, "long", 2)
		if d := deadline(t, l); !d.Equal(sent.Add(long)) {
			t.Fatalf("a renewal moved a later deadline by %v", d.Sub(sent.Add(long)))
		}
		// The control lease shows the renewals did apply.
		if d := deadline(t, control); !d.After(sent.Add(timeout)) {
			t.Fatal("the control lease's deadline was not moved by the renewal")
		}
		// The same from a Hold with keep=true on an active kept lease.
		if !l.Hold(time.Now(), 0, true) {
			t.Fatal("Hold reported a live lease lost")
		}
		if d := deadline(t, l); !d.Equal(sent.Add(long)) {
			t.Fatalf("a Hold with keep moved a later deadline by %v", d.Sub(sent.Add(long)))
		}
	})
}

// Lapse times a stopped lease again with the deadline it had, without renewing it; a Hold
// with keep=true keeps it again.
func TestLapse(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const timeout = 90 * time.Millisecond
		f := newFake(nil)
		w := newWatchdog(t, Options{Timeout: timeout})
		k := f.kind("plain")

		sent := time.Now()
		l := keep(w, k, "lapsed", "o", sent)
		l.Stop()
		l.Lapse() // the release failed
		l.Lapse() // no-op on an active lease
		lostAt := waitLost(t, l, "lapsed lease running out")
		if lostAt.Before(sent.Add(timeout)) {
			t.Fatalf("lapsed lease lost %v after sent, before its deadline", lostAt.Sub(sent))
		}
		if n := len(f.renewals("lapsed")); n != 0 {
			t.Fatalf("a lapsed lease was renewed %d times", n)
		}

		m := keep(w, k, "again", "o", time.Now())
		m.Stop()
		m.Lapse()
		if !m.Hold(time.Now(), 0, true) { // re-entered after all
			t.Fatal("Hold of a lapsed lease reported it lost")
		}
		f.waitRenewals(t, "again", 3) // three intervals: past the deadline it lapsed with
		if isClosed(m.Lost()) {
			t.Fatal("a lapsed lease kept again by Hold was reported lost")
		}
	})
}
