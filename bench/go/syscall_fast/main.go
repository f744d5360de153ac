// syscall_fast: the cost of a trivial system call through Go's syscall hand-off. The
// main goroutine calls getppid(2) N times with syscall.Syscall (entersyscall, the call,
// exitsyscall). Reports ns per call; the extra key raw_ns is syscall.Getppid, which Go
// makes without entersyscall (a "sysnb" call), timed in alternating blocks, so that ns_per_op - raw_ns is the
// hand-off's own cost. Check: every call returned the parent's pid.
// Mirror: bench/c/syscall_fast.c.
package main

import (
	"flag"
	"fmt"
	"syscall"
	"time"

	"gmpbench/internal/bench"
)

const workload = "syscall_fast"

func main() {
	n := flag.Int64("n", 5000000, "calls")
	procs := bench.ProcsFlag()
	flag.Parse()
	if *n <= 0 {
		bench.Fail(workload, "-n %d out of range", *n)
	}
	p := bench.SetupProcs(workload, *procs)
	want := uintptr(syscall.Getppid())
	bad := 0
	// The two loops alternate in blocks, so that the machine's speed drifting during the
	// run weighs on both alike.
	const block = 10000
	var wallSyscall, wallRaw time.Duration
	for done := int64(0); done < *n; done += block {
		k := min(*n-done, block)
		t0 := time.Now()
		for i := int64(0); i < k; i++ {
			r, _, _ := syscall.Syscall(syscall.SYS_GETPPID, 0, 0, 0)
			if r != want {
				bad++
			}
		}
		t1 := time.Now()
		for i := int64(0); i < k; i++ {
			if uintptr(syscall.Getppid()) != want {
				bad++
			}
		}
		t2 := time.Now()
		wallSyscall += t1.Sub(t0)
		wallRaw += t2.Sub(t1)
	}
	if bad != 0 {
		bench.Fail(workload, "%d calls returned a wrong pid", bad)
	}
	raw := float64(wallRaw.Nanoseconds()) / float64(*n)
	bench.Result(workload, p, *n, wallSyscall, fmt.Sprintf(" raw_ns=%.2f", raw))
}
