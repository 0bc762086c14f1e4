package sync

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/rueidis"
)

// waitCalls counts the WAIT commands the server has run since its stats were last reset.
func waitCalls(t *testing.T, rdb rueidis.Client) int {
	t.Helper()
	info, err := rdb.Do(context.Background(), rdb.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_wait:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// An unconfirmed acquisition costs at most twice the replica timeout, as WithSyncReplicas
// says: the WAIT after its script and the one after the release that gives it back — no
// third after a waiter's leave, which the give-back made needless.
func TestSyncReplicasUnconfirmedAcquisitionWaitsTwice(t *testing.T) {
	t.Parallel()
	b := redistest.Redis(t) // no replica: every WAIT times out
	ctx := testCtx(t, 30*time.Second)
	c, rdb := newClient(t, b.Addr, WithSyncReplicas(1, 50*time.Millisecond))
	rw := c.RWLock("rw")
	for _, tc := range []struct {
		what string
		lock func() error
	}{
		{"Lock.Lock", func() error { return c.Lock("plain").Lock(ctx) }},
		{"Lock.TryLock with a wait", func() error { _, err := c.Lock("plain").TryLock(ctx, WaitTime(time.Second)); return err }},
		{"FairLock.Lock", func() error { return c.FairLock("fair").Lock(ctx) }},
		{"FencedLock.Lock", func() error { return c.FencedLock("fenced").Lock(ctx) }},
		{"RWLock.Lock", func() error { return rw.Lock(ctx) }},
		{"RWLock.RLock", func() error { return rw.RLock(ctx) }},
	} {
		_ = tc.lock() // its scripts loaded: a first run is sent whole, which changes no count
		must(t, rdb.Do(ctx, rdb.B().ConfigResetstat().Build()).Error())
		start := time.Now()
		err := tc.lock()
		took := time.Since(start)
		if !errors.Is(err, ErrNotReplicated) {
			t.Fatalf("%s: %v, want ErrNotReplicated", tc.what, err)
		}
		if n := waitCalls(t, rdb); n > 2 {
			t.Errorf("%s: %d WAITs (%v), want at most 2: the script's and its give-back's", tc.what, n, took)
		}
	}
}
