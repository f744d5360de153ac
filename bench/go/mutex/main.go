// mutex: G goroutines (8) each lock one sync.Mutex, increment a shared counter and
// unlock, K times, K = n / G. Main spawns them and waits. Reports ns per lock/unlock
// pair (wall / (G*K)). Check: counter == G*K. Mirror: bench/c/mutex.c.
package main

import (
	"flag"
	"fmt"
	"sync"
	"time"

	"gmpbench/internal/bench"
)

const workload = "mutex"

var (
	wg      sync.WaitGroup
	mu      sync.Mutex
	counter int64 // guarded by mu
)

func worker(k int64) {
	for i := int64(0); i < k; i++ {
		mu.Lock()
		counter++
		mu.Unlock()
	}
	wg.Done()
}

func main() {
	n := flag.Int64("n", 20000000, "lock/unlock pairs in total, split evenly over the goroutines")
	g := flag.Int64("g", 8, "goroutines")
	procs := bench.ProcsFlag()
	flag.Parse()
	if *g <= 0 || *g > 1000000 {
		bench.Fail(workload, "-g %d out of range", *g)
	}
	k := *n / *g
	if k <= 0 {
		bench.Fail(workload, "-n %d gives no iterations per goroutine", *n)
	}
	p := bench.SetupProcs(workload, *procs)

	t0 := time.Now()
	wg.Add(int(*g))
	for i := int64(0); i < *g; i++ {
		go worker(k)
	}
	wg.Wait()
	wall := time.Since(t0)

	if counter != *g*k {
		bench.Fail(workload, "counter = %d, want %d", counter, *g*k)
	}
	bench.Result(workload, p, *g*k, wall, fmt.Sprintf(" g=%d k=%d", *g, k))
}
