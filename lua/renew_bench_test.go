package lua

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/rueidis"
)

// BenchmarkRenewRound measures a watchdog round of renewal scripts on a real Redis, by how
// the script is sent:
//
//   - eval-lib: EVAL, whole, with all of lib.lua in front, as rueidis's Lua.ExecMulti sends a
//     script made without SHA (ReadRenew before scripts carried only their helpers; LockRenew
//     had none);
//   - eval: the same without lib.lua, the script as it is now;
//   - evalsha: EVALSHA (ExecMulti);
//   - rueidis-sha: rueidis's Lua.ExecMulti, SCRIPT LOAD then EVALSHA.
//
// A round is batches x holds: 1x1 a Client with one hold, 1x100 one full batch, 32x1 holds
// in 32 slots as a Cluster round batches them. For each way it reports the median time of a
// round (µs/round; the ways take turns, round by round, so that the machine's other work
// weighs on each alike), the time Redis spent in the round's commands (redis-µs/round, from
// INFO commandstats, the ways one after the other) and the bytes of the round's commands
// (sent-B/round).
func BenchmarkRenewRound(b *testing.B) {
	srv := redistest.Redis(b)
	c := srv.Client(b)
	ctx := context.Background()
	for _, sc := range []struct {
		name string
		s    *Script
		lib  bool                 // sent with all of lib.lua in front before
		keys func(i int) []string // hold i's keys
		arg  func(i int) string   // hold i's argument
	}{
		{"lock", lockRenew, false, func(i int) []string { return []string{fmt.Sprintf("lock%d", i)} },
			func(i int) string { return fmt.Sprintf("owner%d", i) }},
		{"read", readRenew, true, func(i int) []string {
			return []string{fmt.Sprintf("rw%d", i), fmt.Sprintf("{rw%d}:owner%d:rwlock_timeout", i, i)}
		}, func(i int) string { return fmt.Sprintf("owner%d", i) }},
	} {
		for i := range 100 {
			k := sc.keys(i)
			if err := c.Do(ctx, c.B().Hset().Key(k[0]).FieldValue().FieldValue(sc.arg(i), "1").Build()).Error(); err != nil {
				b.Fatal(err)
			}
		}
		whole := &Script{Lua: rueidis.NewLuaScriptNoSha(sc.s.src), src: sc.s.src}
		withLib := &Script{Lua: rueidis.NewLuaScriptNoSha(lib + body(sc.s.file)), src: lib + body(sc.s.file)}
		sum := sha1.Sum([]byte(sc.s.src))
		bySHA := &Script{Lua: rueidis.NewLuaScript(sc.s.src), src: sc.s.src, sha: hex.EncodeToString(sum[:])}
		type way struct {
			name  string
			exec  func([]rueidis.LuaExec) []rueidis.RedisResult
			round func([]rueidis.LuaExec) []rueidis.Completed // the round's commands, for their size
		}
		each := func(s *Script, whole bool) func([]rueidis.LuaExec) []rueidis.Completed {
			return func(multi []rueidis.LuaExec) []rueidis.Completed {
				var cmds []rueidis.Completed
				for _, e := range multi {
					cmds = append(cmds, s.Cmd(c.B(), e.Keys, e.Args, whole))
				}
				return cmds
			}
		}
		ways := []way{
			{"eval", func(m []rueidis.LuaExec) []rueidis.RedisResult { return whole.Lua.ExecMulti(ctx, c, m...) }, each(whole, true)},
			{"evalsha", func(m []rueidis.LuaExec) []rueidis.RedisResult {
				calls := make([]Call, len(m))
				for i, e := range m {
					calls[i] = Call{bySHA, e.Keys, e.Args}
				}
				return ExecMulti(ctx, c, calls...)
			}, each(bySHA, false)},
			{"rueidis-sha", func(m []rueidis.LuaExec) []rueidis.RedisResult { return bySHA.Lua.ExecMulti(ctx, c, m...) },
				func(m []rueidis.LuaExec) []rueidis.Completed {
					return append(each(bySHA, false)(m), c.B().ScriptLoad().Script(bySHA.src).Build())
				}},
		}
		if sc.lib {
			ways = append([]way{{"eval-lib", func(m []rueidis.LuaExec) []rueidis.RedisResult {
				return withLib.Lua.ExecMulti(ctx, c, m...)
			}, each(withLib, true)}}, ways...)
		}
		for _, shape := range []struct{ batches, holds int }{{1, 1}, {1, 100}, {32, 1}} {
			multi := make([]rueidis.LuaExec, shape.batches)
			for j := range multi {
				args := []string{"30000"}
				var keys []string
				for h := range shape.holds {
					i := (j*shape.holds + h) % 100
					keys = append(keys, sc.keys(i)...)
					args = append(args, sc.arg(i))
				}
				multi[j] = rueidis.LuaExec{Keys: keys, Args: args}
			}
			b.Run(fmt.Sprintf("%s/%dx%d", sc.name, shape.batches, shape.holds), func(b *testing.B) {
				times := make([][]time.Duration, len(ways))
				for i, w := range ways {
					for _, r := range w.exec(multi) { // loads what is sent by SHA
						held, err := r.AsIntSlice()
						if err != nil || len(held) != shape.holds || held[0] != 1 {
							b.Fatalf("%s: renewal: %v, %v", w.name, held, err)
						}
					}
					times[i] = make([]time.Duration, 0, b.N)
				}
				b.ResetTimer()
				for range b.N {
					for i, w := range ways {
						start := time.Now()
						w.exec(multi)
						times[i] = append(times[i], time.Since(start))
					}
				}
				b.StopTimer()
				for i, w := range ways {
					slices.Sort(times[i])
					b.ReportMetric(float64(times[i][len(times[i])/2].Nanoseconds())/1000, w.name+"-µs/round")
					before := scriptUsec(b, c)
					for range b.N {
						w.exec(multi)
					}
					b.ReportMetric((scriptUsec(b, c)-before)/float64(b.N), w.name+"-redis-µs/round")
					n := 0
					for _, cmd := range w.round(multi) {
						for _, a := range cmd.Commands() {
							n += len(a)
						}
					}
					b.ReportMetric(float64(n), w.name+"-sent-B/round")
				}
			})
		}
	}
}

// scriptUsec is the time Redis has spent in EVAL, EVALSHA and SCRIPT, in µs.
func scriptUsec(b *testing.B, c rueidis.Client) float64 {
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_eval" && name != "cmdstat_evalsha" && !strings.HasPrefix(name, "cmdstat_script")) {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				n, _ := strconv.ParseFloat(v, 64)
				total += n
			}
		}
	}
	return total
}
