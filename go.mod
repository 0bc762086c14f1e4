module github.com/latchkey/latchkey

go 1.25.0

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/creack/pty v1.1.24
	github.com/google/uuid v1.6.0
	github.com/redis/rueidis v1.0.79
	github.com/yuin/gopher-lua v1.1.1
	go.uber.org/zap v1.28.0
	golang.org/x/sys v0.47.0
	golang.org/x/term v0.45.0
)

require go.uber.org/multierr v1.10.0 // indirect
