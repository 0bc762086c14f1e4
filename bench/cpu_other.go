//go:build !unix

package main

import "time"

// processCPU is measured on Unix only; elsewhere the client CPU column stays empty.
func processCPU() (time.Duration, bool) { return 0, false }
