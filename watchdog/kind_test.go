package watchdog

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/latchkey/latchkey/internal/keyslot"
)

// TestKinds checks that each kind's leases go to its own Renew only, never mixed in a batch
// with another kind's even in the same hash slot, and that a round calls each kind's Renew
// once with all of that kind's due batches.
func TestKinds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const timeout = 150 * time.Millisecond
		fa, fb := newFake(nil), newFake(nil)
		ka, kb := fa.kind("plain"), fb.kind("read")
		w := newWatchdog(t, Options{Timeout: timeout, Cluster: true})
		sent := time.Now() // all due together, every round
		owners := map[string]string{}
		kinds := map[string]*Kind{}
		start := func(k *Kind, key string) *Lease {
			owners[key] = "owner-of-" + key
			kinds[key] = k
			return keep(w, k, key, owners[key], sent)
		}
		// The same hash slot in both kinds, and a second slot in one.
		leases := []*Lease{
			start(ka, "{s}a1"), start(ka, "{s}a2"), start(ka, "other-a"),
			start(kb, "{s}b1"), start(kb, "{s}b2"),
		}
		wantA, wantB := []string{"other-a", "{s}a1", "{s}a2"}, []string{"{s}b1", "{s}b2"} // sorted
		fa.waitCalls(t, "three rounds of kind A", func(cs []call) bool { return len(cs) >= 3 })
		fb.waitCalls(t, "three rounds of kind B", func(cs []call) bool { return len(cs) >= 3 })

		for _, tc := range []struct {
			f    *fake
			kind *Kind
			want []string
		}{{fa, ka, wantA}, {fb, kb, wantB}} {
			for i, c := range tc.f.snapshot() {
				if c.lease != timeout {
					t.Errorf("%s call %d: lease %v, want %v", tc.kind.Name, i+1, c.lease, timeout)
				}
				var keys []string
				for _, b := range c.batches {
					if len(b.Keys) == 0 || len(b.Owners) != len(b.Keys) {
						t.Fatalf("%s call %d: batch %+v", tc.kind.Name, i+1, b)
					}
					for j, key := range b.Keys {
						if kinds[key] != tc.kind {
							t.Errorf("%s call %d: lease %s of another kind", tc.kind.Name, i+1, key)
						}
						if keyslot.Of(key) != keyslot.Of(b.Keys[0]) {
							t.Errorf("%s call %d: batch mixes slots: %v", tc.kind.Name, i+1, b.Keys)
						}
						if b.Owners[j] != owners[key] {
							t.Errorf("%s call %d: %s with owner %q, want %q", tc.kind.Name, i+1, key, b.Owners[j], owners[key])
						}
					}
					keys = append(keys, b.Keys...)
				}
				// One call per round carries all of the kind's leases, one batch per slot.
				slices.Sort(keys)
				if !slices.Equal(keys, tc.want) {
					t.Errorf("%s call %d renewed %v, want %v", tc.kind.Name, i+1, keys, tc.want)
				}
				if tc.kind == ka && len(c.batches) != 2 {
					t.Errorf("%s call %d: %d batches, want 2 (one per slot)", tc.kind.Name, i+1, len(c.batches))
				}
			}
		}
		for _, l := range leases {
			if isClosed(l.Lost()) {
				t.Fatalf("lease %s lost", l.key)
			}
		}
	})
}

// TestKindFailing checks that one kind's failing renewals touch only its own leases.
func TestKindFailing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const timeout = 150 * time.Millisecond
		up := newFake(nil)
		down := newFake(func(_ context.Context, _ int, batches []Batch) []Result { return allErr(batches) })
		w := newWatchdog(t, Options{Timeout: timeout})
		sent := time.Now()
		ok := keep(w, up.kind("up"), "{s}up", "o", sent)
		failing := keep(w, down.kind("down"), "{s}down", "o", sent)
		lostAt := waitLost(t, failing, "renewals of the failing kind")
		if lostAt.Before(sent.Add(timeout)) {
			t.Fatalf("Lost closed %v before the deadline", sent.Add(timeout).Sub(lostAt))
		}
		if n := len(down.snapshot()); n < 2 {
			t.Fatalf("%d renewal attempts of the failing kind, want retries", n)
		}
		if len(up.renewals("{s}down")) != 0 || len(down.renewals("{s}up")) != 0 {
			t.Fatal("a lease went to another kind's Renew")
		}
		up.waitRenewals(t, "{s}up", 3) // past the failing lease's deadline
		if isClosed(ok.Lost()) {
			t.Fatal("a lease of the healthy kind was lost with the failing kind's")
		}
	})
}
