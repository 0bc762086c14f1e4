package sync

import (
	goflag "flag"
	"os"
	"testing"
)

// TestMain runs up to 32 tests at once unless -test.parallel says otherwise: they spend their
// time waiting on Redis, timers and pub/sub, not on the CPU, so the default (GOMAXPROCS, 2 on
// a small machine) leaves the package waiting most of its run — the more so since leases that
// must outlast a loaded machine's delays are seconds long. The CPU-bound tests run one at a
// time (cpuBound), and those waiting their turn hold a slot each (18 at most): 32 leaves the
// others some 16 at once.
func TestMain(m *testing.M) {
	goflag.Parse()
	set := false
	goflag.Visit(func(f *goflag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := goflag.Set("test.parallel", "32"); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
