package sync_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/rueidis"
)

func TestReadmeQuickStart(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, code, _ := strings.Cut(string(src), "// README:begin\n")
	code, _, _ = strings.Cut(code, "\n// README:end")
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+strings.TrimSpace(code)+"\n```") {
		t.Fatal("README.md's quick start differs from sync/readme_test.go between the README markers")
	}
	b := redistest.Redis(t) // the snippet dials with default options, which miniredis refuses
	// A bound for what must happen, not how soon: ten sales took longer than 10 s on a machine
	// loaded far beyond two CPU hogs.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{b.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	shop, err := NewShop(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer shop.locks.Close()
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			if err := shop.SellOne(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := shop.WriteReport(ctx); err != nil {
		t.Fatal(err)
	}
}
