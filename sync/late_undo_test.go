package sync

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/latchkey/latchkey/lua"
)

// deliverHeld delivers the held requests that contain marker (and only those) to Redis and
// waits until Redis has run them; it reports how many it delivered.
func deliverHeld(t *testing.T, p *holdProxy, marker string) int {
	return deliverHeldIf(t, p, func(d []byte) bool { return bytes.Contains(d, []byte(marker)) })
}

// deliverHeldIf is deliverHeld for the held requests that match.
func deliverHeldIf(t *testing.T, p *holdProxy, match func([]byte) bool) int {
	t.Helper()
	p.mu.Lock()
	var pick, keep []heldReq
	for _, h := range p.held {
		if match(h.data) {
			pick = append(pick, h)
		} else {
			keep = append(keep, h)
		}
	}
	p.held = keep
	p.mu.Unlock()
	for _, h := range pick {
		if _, err := h.server.Write(h.data); err != nil {
			t.Fatalf("deliver held request: %v", err)
		}
		_ = h.server.(*net.TCPConn).CloseWrite()
		select {
		case <-h.done:
		case <-time.After(5 * time.Second):
			t.Fatalf("held request not run")
		}
	}
	return len(pick)
}

// An acquire whose reply is lost is undone; when the undo's replies are lost too, the undo
// may still reach Redis later — after the handle has taken the lock again. Its count check
// (one above what the handle knew then: 0+1) would match the new hold, and delete the lock
// while the handle believes it holds it. The undo is fenced by the handle's latch, and the
// handle's next acquire raises the mark past it, so the late undo changes nothing.
func TestLateUndoKeepsHoldTakenSince(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t, 30*time.Second)
		const name = "late-undo"
		p, l, other := heldBackHandle(t, ctx, b, name)
		// Load the undo script, so that a held EVALSHA of it runs when delivered.
		must(t, lua.LockUndo.Exec(ctx, l.c.rdb, []string{"warm-undo", lockChannel("warm-undo"), "warm-undo-latch"},
			[]string{"x", "0", "1000", l.c.publishCmd, "0", "1", "1000"}).Error())

		p.arm(l.Owner(), true) // the acquire, and the undo after it
		ok, err := l.TryLock(ctx)
		p.disarm()
		if err == nil {
			t.Fatalf("TryLock = %v, nil with its requests held back", ok)
		}
		if n := p.holding(); n < 2 {
			t.Fatalf("held back %d requests, want the acquire and the undo's tries", n)
		}
		// The acquire reaches Redis (the handle does not know of its hold); the undo is still
		// in transit.
		if deliverHeldIf(t, p, func(d []byte) bool { return !bytes.Contains(d, []byte("PUBLISH")) }) != 1 {
			t.Fatal("nothing delivered")
		}
		t.Logf("still held: %d", p.holding())
		lockAfterOutage(t, ctx, l) // adopts the hold; the handle holds the lock once

		if n := deliverHeld(t, p, "PUBLISH"); n == 0 { // the undo's tries, late
			t.Fatal("no undo run delivered")
		}

		if held, err := l.IsHeld(ctx); err != nil || !held {
			t.Errorf("a late undo freed the hold the handle took since (IsHeld %v, %v; l.holds %d)", held, err, l.holds)
		}
		if ok, err := other.Lock(name).TryLock(ctx); err != nil || ok {
			t.Errorf("another Client took the lock while the handle believes it holds it (TryLock %v, %v)", ok, err)
		}
	})
}
