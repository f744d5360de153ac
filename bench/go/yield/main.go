// yield: G goroutines each call runtime.Gosched() K times, K = total / G (-n is the
// total, rounded down to a multiple of G). Reports ns per yield (wall / (G*K)).
// The runner's rows yield2 and yield100 are this program with -g 2 and -g 100.
// Check: every goroutine counted exactly K yields. Mirror: bench/c/yield.c.
package main

import (
	"flag"
	"fmt"
	"runtime"
	"sync"
	"time"

	"gmpbench/internal/bench"
)

// slot is one goroutine's counter, on its own cache line (only its goroutine
// writes it; main reads it after the WaitGroup wait).
type slot struct {
	count int64
	k     int64
	_     [48]byte
}

var wg sync.WaitGroup

func worker(s *slot) {
	for i := int64(0); i < s.k; i++ {
		s.count++
		runtime.Gosched()
	}
	wg.Done()
}

func main() {
	n := flag.Int64("n", 10000000, "total yields, split evenly over the goroutines")
	g := flag.Int64("g", 2, "goroutines")
	procs := bench.ProcsFlag()
	flag.Parse()
	workload := fmt.Sprintf("yield%d", *g)
	if *g <= 0 || *g > 1000000 {
		bench.Fail(workload, "-g %d out of range", *g)
	}
	k := *n / *g
	if k <= 0 {
		bench.Fail(workload, "-n %d gives no yields per goroutine", *n)
	}
	p := bench.SetupProcs(workload, *procs)

	slots := make([]slot, *g)
	for i := range slots {
		slots[i] = slot{count: 0, k: k}
	}

	t0 := time.Now()
	wg.Add(int(*g))
	for i := int64(0); i < *g; i++ {
		go worker(&slots[i])
	}
	wg.Wait()
	wall := time.Since(t0)

	for i := range slots {
		if slots[i].count != k {
			bench.Fail(workload, "goroutine %d yielded %d times, want %d", i, slots[i].count, k)
		}
	}
	bench.Result(workload, p, *g*k, wall, fmt.Sprintf(" g=%d k=%d", *g, k))
}
