//go:build !linux

package redistest

import "syscall"

// dieWithParent is nil where the kernel has no parent-death signal: a test process that
// dies before its cleanups leaves its servers to the next run's reaping (see NewTopologies).
func dieWithParent() *syscall.SysProcAttr { return nil }
