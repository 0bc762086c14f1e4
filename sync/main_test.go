package sync

import (
	goflag "flag"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/latchkey/latchkey/internal/redistest"
)

// TestMain owns the package's shared Cluster and Sentinel set (topologies), started by the
// first test that runs on them and killed once every test has run, passed or not; and it
// runs up to 64 tests at once (32 under the race detector) unless -test.parallel
// says otherwise: they spend their time waiting on Redis, timers and pub/sub, not on the CPU,
// so the default (GOMAXPROCS, 2 on a small machine) leaves the package waiting most of its
// run — the more so since leases that must outlast a loaded machine's delays are seconds
// long. The CPU-bound tests take turns (cpuBound), and those waiting for one hold a slot each
// (some 20 at most). Under the race detector the CPU is what the package waits for: more tests at
// once would only make each one's replies and renewals later.
func TestMain(m *testing.M) {
	goflag.Parse()
	set := false
	goflag.Visit(func(f *goflag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		n := 64
		if raceDetector {
			n = 32
		}
		if err := goflag.Set("test.parallel", strconv.Itoa(n)); err != nil {
			panic(err)
		}
	}
	var err error
	if topologies, err = redistest.NewTopologies(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := topologies.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}
