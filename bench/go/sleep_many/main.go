// sleep_many: main spawns N goroutines (100,000) that each sleep D (10 ms) with
// time.Sleep and signal a WaitGroup; main waits. Reports the wall time (the runner
// compares wall_ms) and ns_per_op = wall / N; the RESULT line's maxrss_kib is the peak
// RSS. Check: every goroutine slept at least D by the monotonic clock.
// Mirror: bench/c/sleep_many.c.
package main

import (
	"flag"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"gmpbench/internal/bench"
)

const workload = "sleep_many"

var (
	wg    sync.WaitGroup
	short atomic.Int64 // sleeps that returned early
)

func sleeper(d time.Duration) {
	t := time.Now()
	time.Sleep(d)
	if time.Since(t) < d {
		short.Add(1)
	}
	wg.Done()
}

func main() {
	n := flag.Int64("n", 100000, "goroutines")
	ms := flag.Int64("ms", 10, "sleep per goroutine, milliseconds")
	procs := bench.ProcsFlag()
	flag.Parse()
	if *n <= 0 || *n > math.MaxInt32 {
		bench.Fail(workload, "-n %d out of range", *n)
	}
	if *ms <= 0 || *ms > 60000 {
		bench.Fail(workload, "-ms %d out of range", *ms)
	}
	d := time.Duration(*ms) * time.Millisecond
	p := bench.SetupProcs(workload, *procs)

	t0 := time.Now()
	wg.Add(int(*n))
	for i := int64(0); i < *n; i++ {
		go sleeper(d)
	}
	wg.Wait()
	wall := time.Since(t0)

	if s := short.Load(); s != 0 {
		bench.Fail(workload, "%d of %d sleeps returned before %v", s, *n, d)
	}
	if wall < d {
		bench.Fail(workload, "wall %v shorter than one sleep (%v)", wall, d)
	}
	bench.Result(workload, p, *n, wall, fmt.Sprintf(" sleep_ms=%d", *ms))
}
