//go:build linux

package main

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// pinOneCPU puts every thread of this process and of the process pid (the Redis server) on
// one CPU, the first this process may use, and returns what undoes it.
//
// Why: on a small virtual machine a loopback round trip takes 2–3 times longer when the
// client and Redis run on different CPUs than on the same one, and which it is changes from
// one turn to the next with the scheduler's whim — more than the libraries differ. On one
// CPU, a latency figure is the round trip plus the work each library makes both processes
// do, which is repeatable. Threads the Go runtime starts later inherit the pinning from the
// thread that starts them.
func pinOneCPU(pid int) (restore func(), cpu int, err error) {
	var mine, theirs unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err != nil {
		return nil, 0, err
	}
	if err := unix.SchedGetaffinity(pid, &theirs); err != nil {
		return nil, 0, err
	}
	cpu = -1
	for i := range 1024 {
		if mine.IsSet(i) && theirs.IsSet(i) {
			cpu = i
			break
		}
	}
	if cpu < 0 {
		return nil, 0, fmt.Errorf("no CPU that both this process and pid %d may use", pid)
	}
	var one unix.CPUSet
	one.Set(cpu)
	restore = func() {
		setAll(os.Getpid(), &mine)
		setAll(pid, &theirs)
	}
	if err := setAll(pid, &one); err != nil {
		restore()
		return nil, 0, err
	}
	// Twice: a thread started while the first pass ran may have copied an unpinned parent.
	for range 2 {
		if err := setAll(os.Getpid(), &one); err != nil {
			restore()
			return nil, 0, err
		}
	}
	return restore, cpu, nil
}

// setAll sets the affinity of every thread of process pid.
func setAll(pid int, set *unix.CPUSet) error {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH {
			return fmt.Errorf("pin thread %d of %d: %w", tid, pid, err)
		}
	}
	return nil
}
