// syscall_handoff: at GOMAXPROCS=1, four worker goroutines do CPU work in small slices
// (a fixed loop, then runtime.Gosched) for -ms milliseconds and count the slices. Phase A:
// the workers alone. Phase B: the same, plus a fifth goroutine blocked for -block_ms in a
// raw read(2) on a pipe (syscall.Read: a blocking system call, not the netpoller) that a
// sixth goroutine writes after sleeping. Reports retained = slices(B) / slices(A), the
// median over -rounds A/B pairs. Mirror: bench/c/syscall_handoff.c.
package main

import (
	"flag"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gmpbench/internal/bench"
)

const workload = "syscall_handoff"

var (
	phaseMs    = flag.Int64("ms", 400, "length of each phase")
	blockMs    = flag.Int64("block_ms", 200, "how long the fifth goroutine blocks in read")
	sliceIters = flag.Int64("iters", 20000, "loop iterations per work slice")
	rounds     = flag.Int64("rounds", 3, "A/B pairs (the median is reported)")
	sink       uint64
)

func phase(withReader bool, fds [2]int) (int64, bool) {
	var slices atomic.Int64
	var wg sync.WaitGroup
	ok := true
	deadline := time.Now().Add(time.Duration(*phaseMs) * time.Millisecond)
	if withReader {
		wg.Add(2)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1)
			n, err := syscall.Read(fds[0], buf)
			if n != 1 || err != nil || buf[0] != 'x' {
				ok = false
			}
		}()
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(*blockMs) * time.Millisecond)
			if n, err := syscall.Write(fds[1], []byte{'x'}); n != 1 || err != nil {
				ok = false
			}
		}()
	}
	wg.Add(4)
	for i := 0; i < 4; i++ {
		go func() {
			defer wg.Done()
			var n int64
			var s uint64
			for time.Now().Before(deadline) {
				for j := int64(0); j < *sliceIters; j++ {
					s += uint64(j) * 2654435761
				}
				n++
				runtime.Gosched()
			}
			atomic.AddUint64(&sink, s)
			slices.Add(n)
		}()
	}
	wg.Wait()
	return slices.Load(), ok
}

func main() {
	procs := bench.ProcsFlag()
	flag.Parse()
	if *rounds <= 0 || *rounds > 100 || *phaseMs <= 0 || *blockMs < 0 || *sliceIters <= 0 {
		bench.Fail(workload, "bad flags")
	}
	p := bench.SetupProcs(workload, *procs)
	var fds [2]int
	if err := syscall.Pipe(fds[:]); err != nil {
		bench.Fail(workload, "pipe: %v", err)
	}
	retained := make([]float64, 0, *rounds)
	var lastB int64
	t0 := time.Now()
	for r := int64(0); r < *rounds; r++ {
		a, _ := phase(false, fds)
		b, ok := phase(true, fds)
		if a <= 0 || b <= 0 {
			bench.Fail(workload, "no work slices counted (a=%d b=%d)", a, b)
		}
		if !ok {
			bench.Fail(workload, "the blocked read did not return the byte written")
		}
		retained = append(retained, float64(b)/float64(a))
		lastB = b
	}
	wall := time.Since(t0)
	sort.Float64s(retained)
	bench.Result(workload, p, lastB, wall, fmt.Sprintf(" retained=%.4f", retained[len(retained)/2]))
}
