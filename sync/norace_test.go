//go:build !race

package sync

// raceDetector reports whether the tests run under the race detector, which makes the
// CPU-bound ones several times as costly (see cpuBound).
const raceDetector = false
