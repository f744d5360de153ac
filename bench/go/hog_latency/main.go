// hog_latency: scheduling latency behind a CPU hog. One goroutine spins in a loop that
// calls nothing (only asynchronous preemption can stop it); another sleeps 1 ms, N times
// (1,000), and records how late each wake-up ran. Reports the median and the 99th
// percentile lateness in microseconds (late_p50_us is the compared metric, late_p99_us an
// extra key). ns_per_op is the wall time per wake.
// Check: every sleep lasted at least 1 ms.
// Mirror: bench/c/hog_latency.c.
package main

import (
	"flag"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"gmpbench/internal/bench"
)

const workload = "hog_latency"

func main() {
	n := flag.Int64("n", 1000, "1 ms sleeps")
	procs := bench.ProcsFlag()
	flag.Parse()
	if *n <= 0 || *n > 10000000 {
		bench.Fail(workload, "-n %d out of range", *n)
	}
	p := bench.SetupProcs(workload, *procs)
	late := make([]int64, *n)
	var stop atomic.Bool
	var short int64
	var wg sync.WaitGroup
	t0 := time.Now()
	wg.Add(2)
	go func() {
		var x uint64
		for !stop.Load() {
			x++
		}
		_ = x
		wg.Done()
	}()
	go func() {
		for i := range late {
			t := time.Now()
			time.Sleep(time.Millisecond)
			d := time.Since(t)
			if d < time.Millisecond {
				short++
			}
			late[i] = int64(d - time.Millisecond)
		}
		stop.Store(true)
		wg.Done()
	}()
	wg.Wait()
	wall := time.Since(t0)
	if short != 0 {
		bench.Fail(workload, "%d sleeps returned early", short)
	}
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	p50 := float64(late[*n/2]) / 1e3
	p99 := float64(late[(*n*99)/100]) / 1e3
	if p50 <= 0 {
		p50 = 0.001
	}
	if p99 <= 0 {
		p99 = 0.001
	}
	bench.Result(workload, p, *n, wall, fmt.Sprintf(" late_p50_us=%.3f late_p99_us=%.3f", p50, p99))
}
