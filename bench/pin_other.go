//go:build !linux

package main

import "errors"

// pinOneCPU is Linux-only; elsewhere the latency scenarios run unpinned.
func pinOneCPU(int) (func(), int, error) {
	return nil, 0, errors.New("CPU pinning is implemented for Linux only")
}
