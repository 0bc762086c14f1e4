package sync_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sellOne(ctx, b.Addr); err != nil {
		t.Fatal(err)
	}
}
