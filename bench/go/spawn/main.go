// spawn: N goroutines spawned from the main goroutine; each bumps an atomic counter
// and signals a WaitGroup; main waits. Reports ns per goroutine (spawn + run + join).
// Check: counter == N. Mirror: bench/c/spawn.c.
package main

import (
	"flag"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"gmpbench/internal/bench"
)

const workload = "spawn"

var (
	wg      sync.WaitGroup
	counter atomic.Int64
)

func worker() {
	counter.Add(1)
	wg.Done()
}

func main() {
	n := flag.Int64("n", 1000000, "goroutines to spawn")
	procs := bench.ProcsFlag()
	flag.Parse()
	if *n <= 0 || *n > math.MaxInt32 {
		bench.Fail(workload, "-n %d out of range", *n)
	}
	p := bench.SetupProcs(workload, *procs)

	t0 := time.Now()
	wg.Add(int(*n))
	for i := int64(0); i < *n; i++ {
		go worker()
	}
	wg.Wait()
	wall := time.Since(t0)

	if got := counter.Load(); got != *n {
		bench.Fail(workload, "counter = %d, want %d", got, *n)
	}
	bench.Result(workload, p, *n, wall, "")
}
