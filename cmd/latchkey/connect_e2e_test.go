package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/latchkey/latchkey/internal/redistest"
)

// The URL forms rueidis parses reach the server as they say: an ACL user's password, a
// Cluster, a Sentinel set, TLS.
func TestConnectionForms(t *testing.T) {
	t.Parallel()
	t.Run("Sentinel", func(t *testing.T) {
		t.Parallel()
		b := topologies.Sentinel(t)
		s := b.Sentinels()
		url := "redis://" + s[0] + "?master_set=" + redistest.SentinelMaster + "&addr=" + s[1] + "&addr=" + s[2]
		if r := latchkey(t, url, "run", "--lock", "sentinel-url", "--", "true"); r.code != 0 {
			t.Errorf("run through the Sentinels: exit status %d; stderr:\n%s", r.code, r.stderr)
		}
		l := dsyncClient(t, b.Client(t)).Lock("sentinel-url")
		if err := l.Lock(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = l.Unlock(context.Background()) }()
		if st := inspectJSON(t, url, "sentinel-url")[0]; len(st.Holders) != 1 || st.Holders[0].Owner != l.Owner() {
			t.Errorf("inspect through the Sentinels: %+v, want the lock held by %s", st, l.Owner())
		}
	})
	t.Run("TLS", func(t *testing.T) {
		t.Parallel()
		b := redistest.RedisTLS(t)
		url := "rediss://" + b.Addr
		// The server's certificate is the test's own: trusted as Go trusts one, through
		// SSL_CERT_FILE.
		trusted := func(args ...string) result {
			cmd := latchkeyCmd(t, url, args...)
			cmd.Env = append(cmd.Env, "SSL_CERT_FILE="+b.CACert)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			return result{code: exitCodeOf(t, cmd.Run()), stdout: stdout.String(), stderr: stderr.String()}
		}
		if r := trusted("run", "--lock", "tls", "--", "true"); r.code != 0 {
			t.Errorf("run over TLS: exit status %d; stderr:\n%s", r.code, r.stderr)
		}
		if r := trusted("inspect", "--json", "tls"); r.code != 0 {
			t.Errorf("inspect over TLS: exit status %d; stderr:\n%s", r.code, r.stderr)
		}
		// Without it, the certificate is refused.
		if r := latchkey(t, url, "run", "--lock", "tls", "--", "true"); r.code != exitFail || !strings.Contains(r.stderr, "certificate") {
			t.Errorf("an untrusted certificate: exit status %d, stderr %q; want 1 and why", r.code, r.stderr)
		}
	})
	t.Run("ACL user", func(t *testing.T) {
		t.Parallel()
		b := redistest.Redis(t)
		rdb := b.Client(t)
		err := rdb.Do(context.Background(), rdb.B().AclSetuser().Username("cron").Rule("on", ">s3cret", "~*", "&*", "+@all").Build()).Error()
		if err != nil {
			t.Fatal(err)
		}
		if r := latchkey(t, "redis://cron:s3cret@"+b.Addr, "run", "--lock", "acl", "--", "true"); r.code != 0 {
			t.Errorf("with the password: exit status %d; stderr:\n%s", r.code, r.stderr)
		}
		r := latchkey(t, "redis://cron:wrong@"+b.Addr, "run", "--lock", "acl", "--", "true")
		if r.code != exitFail || !strings.Contains(r.stderr, "WRONGPASS") {
			t.Errorf("with a wrong password: exit status %d, stderr %q; want 1 and Redis's refusal", r.code, r.stderr)
		}
	})
	t.Run("Cluster", func(t *testing.T) {
		t.Parallel()
		b := redistest.Cluster(t)
		url := "redis://" + b.Addr
		c := dsyncClient(t, redistest.ClusterClient(t, b.Addr))
		l := c.Lock("{job}:lock")
		if err := l.Lock(context.Background()); err != nil {
			t.Fatal(err)
		}
		s := inspectJSON(t, url, "{job}:lock")[0]
		if s.Kind != kindLock || len(s.Holders) != 1 || s.Holders[0].Owner != l.Owner() {
			t.Errorf("inspect on the Cluster: %+v, want the lock held by %s", s, l.Owner())
		}
		if err := l.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
		if r := latchkey(t, url, "run", "--lock", "{job}:lock", "--", "true"); r.code != 0 {
			t.Errorf("run on the Cluster: exit status %d; stderr:\n%s", r.code, r.stderr)
		}
		// A name whose keys a Cluster cannot keep in one slot is a bad argument.
		if r := latchkey(t, url, "run", "--lock", "a{b", "--", "true"); r.code != exitUsage || !strings.Contains(r.stderr, "invalid argument") {
			t.Errorf("run --lock a{b on the Cluster: exit status %d, stderr %q; want %d and why", r.code, r.stderr, exitUsage)
		}
	})
}

// The demo runs on a server of the user's too, again and again: it deletes what an earlier
// run left.
func TestDemoOnRedis(t *testing.T) {
	t.Parallel()
	url, _ := server(t)
	for range 2 {
		r := latchkey(t, "", "demo", "gate", "--redis", url, "--instances", "2", "--callers-per-instance", "3")
		if r.code != 0 || !strings.Contains(r.stdout, "All invariants held") {
			t.Fatalf("exit status %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		}
	}
}
