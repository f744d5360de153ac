// pingpong: main and one echo goroutine bounce an int64 over two unbuffered channels
// N times: main sends i on ping, echo receives it and sends i+1 on pong, main receives
// it. Reports ns per round trip (two channel handoffs, two goroutine switches).
// Check: every reply is the value sent plus one. Mirror: bench/c/pingpong.c.
package main

import (
	"flag"
	"sync"
	"time"

	"gmpbench/internal/bench"
)

const workload = "pingpong"

var wg sync.WaitGroup

func echo(ping <-chan int64, pong chan<- int64, n int64) {
	for i := int64(0); i < n; i++ {
		v := <-ping
		pong <- v + 1
	}
	wg.Done()
}

func main() {
	n := flag.Int64("n", 1000000, "round trips")
	procs := bench.ProcsFlag()
	flag.Parse()
	if *n <= 0 {
		bench.Fail(workload, "-n %d out of range", *n)
	}
	p := bench.SetupProcs(workload, *procs)

	ping := make(chan int64)
	pong := make(chan int64)
	bad := int64(0)

	t0 := time.Now()
	wg.Add(1)
	go echo(ping, pong, *n)
	for i := int64(0); i < *n; i++ {
		ping <- i
		if v := <-pong; v != i+1 {
			bad++
		}
	}
	wg.Wait()
	wall := time.Since(t0)

	if bad != 0 {
		bench.Fail(workload, "%d replies were not the value sent plus one", bad)
	}
	bench.Result(workload, p, *n, wall, "")
}
