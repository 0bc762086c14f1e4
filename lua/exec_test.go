package lua

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/keyslot"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/rueidis"
)

// renewed runs a round of LockRenew on c, one batch per key of keys (each held by owner),
// and fails unless every one renews.
func renewed(t *testing.T, ctx context.Context, c rueidis.Client, keys ...string) {
	t.Helper()
	calls := make([]Call, len(keys))
	for i, k := range keys {
		calls[i] = LockRenew{Locks: []string{k}, LeaseMs: "30000", Owners: []string{"owner"}}.Call()
	}
	for i, r := range ExecMulti(ctx, c, calls...) {
		if held, err := r.AsIntSlice(); err != nil || len(held) != 1 || held[0] != 1 {
			t.Fatalf("renewal of %s: %v, %v; want [1]", keys[i], held, err)
		}
	}
}

// ExecMulti runs a script by SHA, and whole where Redis lacks it: before its first run, and
// after SCRIPT FLUSH (a restart, a failover).
func TestExecMultiLoadsWhereMissing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c := b.Client(t)
		keys := []string{"a", "b", "c"}
		for _, k := range keys {
			if err := c.Do(ctx, c.B().Hset().Key(k).FieldValue().FieldValue("owner", "1").Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 {
			renewed(t, ctx, c, keys...)
			renewed(t, ctx, c, keys...)
			if err := c.Do(ctx, c.B().ScriptFlush().Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		if b.Mini != nil {
			return // no INFO commandstats
		}
		info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		// Per flush: one round whole (3 EVAL after 3 NOSCRIPT), one by SHA (3 EVALSHA).
		for _, want := range []string{"cmdstat_evalsha:calls=12,", "cmdstat_eval:calls=6,"} {
			if !strings.Contains(info, want) {
				t.Errorf("commandstats: no %q in\n%s", want, info)
			}
		}
		if strings.Contains(info, "cmdstat_script|load") {
			t.Errorf("commandstats: a SCRIPT LOAD in\n%s", info)
		}
	})
}

// On a Cluster, ExecMulti goes to the nodes of its runs' keys only: a node that does not
// answer (here paused) stops no run on another. (rueidis's Lua.ExecMulti loads the script on
// every node first, at every call.)
func TestExecMultiClusterNodeDown(t *testing.T) {
	a, b := redistest.ClusterNode(t), redistest.ClusterNode(t)
	ac, bc := redistest.ClientFor(t, a.Addr), redistest.ClientFor(t, b.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	do := func(c rueidis.Client, args ...string) rueidis.RedisResult {
		return c.Do(ctx, c.B().Arbitrary(args...).Build())
	}
	host, port, _ := net.SplitHostPort(a.Addr)
	for _, r := range []rueidis.RedisResult{
		do(ac, "CLUSTER", "ADDSLOTSRANGE", "0", "8191"),
		do(bc, "CLUSTER", "ADDSLOTSRANGE", "8192", "16383"),
		do(bc, "CLUSTER", "MEET", host, port),
	} {
		if err := r.Error(); err != nil {
			t.Fatal(err)
		}
	}
	for {
		up := true
		for _, c := range []rueidis.Client{ac, bc} {
			s, _ := do(c, "CLUSTER", "INFO").ToString()
			up = up && strings.Contains(s, "cluster_state:ok") && strings.Contains(s, "cluster_known_nodes:2")
		}
		if up {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the cluster is not up")
		}
		time.Sleep(20 * time.Millisecond)
	}
	c := redistest.ClusterClient(t, a.Addr)
	var onA []string // keys of a's slots
	for i := 0; len(onA) < 2; i++ {
		if k := fmt.Sprintf("k%d", i); keyslot.Of(k) <= 8191 {
			onA = append(onA, k)
		}
	}
	for _, k := range onA {
		if err := c.Do(ctx, c.B().Hset().Key(k).FieldValue().FieldValue("owner", "1").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	renewed(t, ctx, c, onA...) // a has the script now

	if err := do(bc, "CLIENT", "PAUSE", "5000", "ALL").Error(); err != nil {
		t.Fatal(err)
	}
	round, cancelRound := context.WithTimeout(ctx, 2*time.Second)
	defer cancelRound()
	start := time.Now()
	renewed(t, round, c, onA...)
	t.Logf("a round on a while b is paused: %v", time.Since(start))
	multi := []rueidis.LuaExec{{Keys: onA[:1], Args: []string{"30000", "owner"}}}
	t.Logf("rueidis's Lua.ExecMulti meanwhile: %v", rueidis.NewLuaScript(lockRenew.src).ExecMulti(round, c, multi...)[0].Error())
}
