// skynet: Go's skynet benchmark. A node of size S > 1 makes a channel with capacity div,
// spawns div children of size S/div numbered num + i*S/div, receives their div sums
// and sends the total on its parent's channel; a leaf (size 1) sends its number. Main
// spawns the root node (size n, number 0) and receives the total. n must be a power of
// div; n = 10^6, div = 10 spawns 1,111,111 goroutines. Reports ns per leaf.
// Check: the total is n(n-1)/2 (499999500000 for n = 10^6). Mirror: bench/c/skynet.c.
package main

import (
	"flag"
	"fmt"
	"time"

	"gmpbench/internal/bench"
)

const workload = "skynet"

func skynet(c chan<- int64, num, size, div int64) {
	if size == 1 {
		c <- num
		return
	}
	rc := make(chan int64, div)
	for i := int64(0); i < div; i++ {
		go skynet(rc, num+i*(size/div), size/div, div)
	}
	sum := int64(0)
	for i := int64(0); i < div; i++ {
		sum += <-rc
	}
	c <- sum
}

func main() {
	n := flag.Int64("n", 1000000, "leaves (a power of -div)")
	div := flag.Int64("div", 10, "children per node")
	procs := bench.ProcsFlag()
	flag.Parse()
	if *div < 2 || *div > 64 {
		bench.Fail(workload, "-div %d out of range", *div)
	}
	if *n <= 0 || *n > 1<<31 {
		bench.Fail(workload, "-n %d out of range", *n)
	}
	levels := 0
	for s := *n; s > 1; s /= *div {
		if s%*div != 0 {
			bench.Fail(workload, "-n %d is not a power of -div %d", *n, *div)
		}
		levels++
	}
	p := bench.SetupProcs(workload, *procs)

	t0 := time.Now()
	c := make(chan int64, 1)
	go skynet(c, 0, *n, *div)
	got := <-c
	wall := time.Since(t0)

	if want := *n * (*n - 1) / 2; got != want {
		bench.Fail(workload, "total %d, want %d", got, want)
	}
	bench.Result(workload, p, *n, wall, fmt.Sprintf(" div=%d levels=%d", *div, levels))
}
