//go:build !linux

package main

import "time"

// holdFor sleeps for d. Elsewhere than on Linux it is time.Sleep, whose length can vary with
// the network activity of the library under test (see hold_linux.go).
func holdFor(d time.Duration) { time.Sleep(d) }

// holdProcs adds no P: time.Sleep gives its P back (see hold_linux.go).
func holdProcs(int) (restore func()) { return func() {} }
