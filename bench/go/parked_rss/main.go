// parked_rss: main spawns N goroutines (10^6) with the default stack size; each bumps
// an atomic counter and blocks receiving on one unbuffered channel. When the counter
// reaches N, main sleeps a little more (-settle_ms) so the last ones block, then reads
// VmRSS: kib_per_g = (VmRSS now - VmRSS before spawning) / N, the memory a parked
// goroutine costs (the runner compares kib_per_g). Then main closes the channel, every
// receive returns "closed", and main waits for all. ns_per_op / wall_ms time the spawn
// until the counter reaches N. Check: every receive reported the close.
// Mirror: bench/c/parked_rss.c.
package main

import (
	"flag"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"gmpbench/internal/bench"
)

const workload = "parked_rss"

var (
	wg     sync.WaitGroup
	parked atomic.Int64 // goroutines about to block
	bad    atomic.Int64 // receives that did not report the close
)

func waiter(ch <-chan int64) {
	parked.Add(1)
	if _, ok := <-ch; ok {
		bad.Add(1)
	}
	wg.Done()
}

func main() {
	n := flag.Int64("n", 1000000, "goroutines")
	settle := flag.Int64("settle_ms", 20, "extra wait after all counted, milliseconds")
	procs := bench.ProcsFlag()
	flag.Parse()
	if *n <= 0 || *n > math.MaxInt32 {
		bench.Fail(workload, "-n %d out of range", *n)
	}
	if *settle < 0 || *settle > 60000 {
		bench.Fail(workload, "-settle_ms %d out of range", *settle)
	}
	p := bench.SetupProcs(workload, *procs)

	ch := make(chan int64)
	before := bench.RSSKiB()
	if before <= 0 {
		bench.Fail(workload, "cannot read VmRSS")
	}

	t0 := time.Now()
	wg.Add(int(*n))
	for i := int64(0); i < *n; i++ {
		go waiter(ch)
	}
	for parked.Load() < *n {
		time.Sleep(time.Millisecond)
	}
	wall := time.Since(t0)
	time.Sleep(time.Duration(*settle) * time.Millisecond)
	if live := runtime.NumGoroutine(); int64(live) < *n+1 {
		bench.Fail(workload, "%d goroutines live, want at least %d", live, *n+1)
	}
	after := bench.RSSKiB()

	close(ch)
	wg.Wait()
	if b := bad.Load(); b != 0 {
		bench.Fail(workload, "%d receives did not report the close", b)
	}
	kib := float64(after-before) / float64(*n)
	bench.Result(workload, p, *n, wall, fmt.Sprintf(" kib_per_g=%.3f rss_before_kib=%d rss_parked_kib=%d",
		kib, before, after))
}
