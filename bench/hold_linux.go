//go:build linux

package main

import (
	"syscall"
	"time"
)

// holdFor blocks the calling goroutine's thread for d with nanosleep(2). An idle 1 ms
// nanosleep lasts about as long as an idle time.Sleep here (1.11–1.12 ms), but it does not
// stretch with the process's network activity. time.Sleep does: the Go runtime waits for its
// timers in epoll_wait, whose timeout has millisecond granularity, and a network event during
// the sleep (a library's reply or message landing) makes it wait for a whole millisecond
// again — measured here, a 1 ms time.Sleep lasted 1.18 to 1.36 ms on average depending on the
// library under test, more than the libraries' own hand-off costs differ, and longest for the
// library whose reply lands during every hold (latchkey's, whose heir goes on before the
// release's reply). In the contended scenarios only the one holder sleeps this way at a time,
// so it costs one blocked thread; in the read-write scenario up to 17 do at once (rw.go),
// and on a machine with few CPUs the threads coming back from it and the goroutines woken by
// replies wait for one another's Ps, which adds the scheduler's latency to every request.
func holdFor(d time.Duration) {
	end := time.Now().Add(d)
	for {
		left := time.Until(end)
		if left <= 0 {
			return
		}
		ts := syscall.NsecToTimespec(int64(left))
		if syscall.Nanosleep(&ts, nil) == nil {
			return
		}
		// EINTR (a signal, e.g. the runtime's preemption): sleep what is left.
	}
}
