package sync

import (
	"context"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/rueidis"
)

// An uncontended Lock reaches Redis through few frames and files, each entered once: the
// lock's method set, the owner, the transport. (Reading the path of a Lock should not mean
// reading every primitive.)
func TestUncontendedLockCallChain(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		var chain []runtime.Frame
		rdb := &hookedRDB{Client: redistest.ClientFor(t, b.Addr)}
		rdb.hook = func(_ context.Context, cmd rueidis.Completed) (rueidis.RedisResult, bool) {
			if chain == nil && len(cmd.Commands()) > 0 && strings.HasPrefix(cmd.Commands()[0], "EVAL") {
				pcs := make([]uintptr, 64)
				frames := runtime.CallersFrames(pcs[:runtime.Callers(0, pcs)])
				for f, more := frames.Next(); more; f, more = frames.Next() {
					if strings.HasPrefix(f.Function, "github.com/latchkey/latchkey/sync.") && !strings.HasSuffix(f.File, "_test.go") {
						chain = append(chain, f)
					}
				}
			}
			return rueidis.RedisResult{}, false
		}
		c, err := New(rdb)
		must(t, err)
		t.Cleanup(func() { c.Close() })
		l := c.Lock("chain")
		must(t, l.Lock(context.Background()))
		must(t, l.Unlock(context.Background()))

		files := map[string]bool{}
		var names []string
		last := ""
		for i := len(chain) - 1; i >= 0; i-- {
			f := filepath.Base(chain[i].File)
			if f != last && files[f] {
				t.Errorf("the chain returns into %s, a file it had left", f)
			}
			files[f], last = true, f
			names = append(names, strings.TrimPrefix(chain[i].Function, "github.com/latchkey/latchkey/sync.")+" ("+f+")")
		}
		t.Logf("%s", strings.Join(names, " → "))
		if len(chain) > 6 || len(files) > 3 {
			t.Errorf("%d frames in %d files before the acquire script is sent, want at most 6 in 3: %s", len(chain), len(files), strings.Join(names, " → "))
		}
	})
}
