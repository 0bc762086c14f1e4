//go:build !linux

package redistest

import "syscall"

// dieWithParent is nil where the kernel has no parent-death signal: there a test process
// that dies before its cleanups leaves its servers running (reap, which tells a server by
// its working directory in /proc, only removes their directories).
func dieWithParent() *syscall.SysProcAttr { return nil }
