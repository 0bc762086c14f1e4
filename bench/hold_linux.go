//go:build linux

package main

import (
	"os"
	"runtime"
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
// release's reply). A blocked thread keeps its P: see holdProcs, which adds one for each.
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

// holdProcs raises GOMAXPROCS by holders, the most threads holdFor blocks at once in the
// scenario about to run, and returns what restores it. A thread in nanosleep keeps its P: the
// runtime takes it back only when sysmon sees the syscall last a whole tick, and sysmon,
// finding nothing to take for a while, sleeps 10 ms between ticks — longer than a hold. With
// every P held so, goroutines a holder made runnable wait, and the network is polled only by
// sysmon, every 10 ms: traced on 2 CPUs, the semaphore scenario ran whole turns at a third of
// its rate, every round trip taking ~10 ms. A hold in a service (a request to another
// server, a query) parks its goroutine and gives its P back; a P of its own for each blocked
// thread does that here, in the scenarios whose holders can hold every P (the semaphore's 8,
// the read-write scenario's 17). Not in the contended lock scenarios: their one holder at a
// time leaves a P free with two CPUs, and a third P takes CPU from Redis on a small machine
// (measured: every library's contended rate 7–10 % lower). Nor while no hold runs, for the
// same reason.
//
// Setting GOMAXPROCS stops the runtime from following the CPUs this process may use, which
// the latency scenarios narrow to one (see pinOneCPU): so restore hands it back to the
// runtime's default, unless the GOMAXPROCS environment variable set it.
func holdProcs(holders int) (restore func()) {
	fixed := os.Getenv("GOMAXPROCS") != ""
	if !fixed {
		runtime.SetDefaultGOMAXPROCS() // now, not at the runtime's next look at the CPUs
	}
	base := runtime.GOMAXPROCS(0)
	runtime.GOMAXPROCS(base + holders)
	return func() {
		if fixed {
			runtime.GOMAXPROCS(base)
		} else {
			runtime.SetDefaultGOMAXPROCS()
		}
	}
}
