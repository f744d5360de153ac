// chan_mpmc: P producers and C consumers (4 and 4) share one buffered channel of int64
// (capacity 1024). Producer j sends the K distinct values j*K+1 .. (j+1)*K, K = n / P;
// consumers receive until the channel is closed and drained, summing. Main spawns the
// consumers, then the producers, waits for the producers, closes the channel and waits
// for the consumers. Reports ns per item (wall / (P*K)).
// Check: the consumers got P*K items summing to T(T+1)/2, T = P*K.
// Mirror: bench/c/chan_mpmc.c.
package main

import (
	"flag"
	"fmt"
	"sync"
	"time"

	"gmpbench/internal/bench"
)

const workload = "chan_mpmc"

// slot is one consumer's result, on its own cache line.
type slot struct {
	sum   int64
	count int64
	_     [48]byte
}

var producersWG, consumersWG sync.WaitGroup

func producer(ch chan<- int64, first, k int64) {
	for v := first; v < first+k; v++ {
		ch <- v
	}
	producersWG.Done()
}

func consumer(ch <-chan int64, s *slot) {
	sum, count := int64(0), int64(0)
	for v := range ch {
		sum += v
		count++
	}
	s.sum, s.count = sum, count
	consumersWG.Done()
}

func main() {
	n := flag.Int64("n", 10000000, "items in total, split evenly over the producers")
	np := flag.Int64("producers", 4, "producer goroutines")
	nc := flag.Int64("consumers", 4, "consumer goroutines")
	capacity := flag.Int64("cap", 1024, "channel capacity")
	procs := bench.ProcsFlag()
	flag.Parse()
	if *np <= 0 || *np > 10000 || *nc <= 0 || *nc > 10000 || *capacity < 0 || *capacity > 1<<31 {
		bench.Fail(workload, "-producers %d -consumers %d -cap %d out of range", *np, *nc, *capacity)
	}
	k := *n / *np
	total := *np * k // total(total+1)/2 must fit in int64
	if k <= 0 || total > 1<<31 {
		bench.Fail(workload, "-n %d out of range", *n)
	}
	p := bench.SetupProcs(workload, *procs)

	ch := make(chan int64, *capacity)
	slots := make([]slot, *nc)

	t0 := time.Now()
	consumersWG.Add(int(*nc))
	for i := range slots {
		go consumer(ch, &slots[i])
	}
	producersWG.Add(int(*np))
	for j := int64(0); j < *np; j++ {
		go producer(ch, j*k+1, k)
	}
	producersWG.Wait()
	close(ch)
	consumersWG.Wait()
	wall := time.Since(t0)

	sum, count := int64(0), int64(0)
	for i := range slots {
		sum += slots[i].sum
		count += slots[i].count
	}
	if want := total * (total + 1) / 2; count != total || sum != want {
		bench.Fail(workload, "consumers got %d items summing to %d, want %d summing to %d",
			count, sum, total, want)
	}
	bench.Result(workload, p, total, wall,
		fmt.Sprintf(" producers=%d consumers=%d cap=%d", *np, *nc, *capacity))
}
