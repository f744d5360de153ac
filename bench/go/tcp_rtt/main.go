// tcp_rtt: one TCP connection on 127.0.0.1 inside the process, written as a Go programmer
// would: net.Listen on a random port, an accept goroutine that starts one echo goroutine
// per connection (conn.Read, conn.Write what was read), and main, which net.Dials and
// then N times writes a 64-byte message and reads the 64-byte echo (io.ReadFull).
// Reports ns per round trip, timed from the first write to the last echo; extra key
// threads = the process's OS threads (/proc/self/status Threads:) at the end of the
// measured phase. Check: every echo equals the message sent.
// Mirror: bench/c/tcp_rtt.c.
package main

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"gmpbench/internal/bench"
)

const workload = "tcp_rtt"
const msgSize = 64

var wg sync.WaitGroup

func serve(c net.Conn) {
	defer wg.Done()
	defer c.Close()
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		if _, err := c.Write(buf[:n]); err != nil {
			return
		}
	}
}

func acceptLoop(ln net.Listener) {
	defer wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		wg.Add(1)
		go serve(c)
	}
}

func main() {
	n := flag.Int64("n", 100000, "round trips")
	procs := bench.ProcsFlag()
	flag.Parse()
	if *n <= 0 {
		bench.Fail(workload, "-n %d out of range", *n)
	}
	p := bench.SetupProcs(workload, *procs)
	bench.RaiseNofile()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		bench.Fail(workload, "listen: %v", err)
	}
	wg.Add(1)
	go acceptLoop(ln)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		bench.Fail(workload, "dial: %v", err)
	}

	out := make([]byte, msgSize)
	in := make([]byte, msgSize)
	for i := range out {
		out[i] = byte(i)
	}
	bad := int64(0)
	t0 := time.Now()
	for i := int64(0); i < *n; i++ {
		binary.LittleEndian.PutUint64(out, uint64(i))
		if _, err := c.Write(out); err != nil {
			bench.Fail(workload, "write: %v", err)
		}
		if _, err := io.ReadFull(c, in); err != nil {
			bench.Fail(workload, "read: %v", err)
		}
		if !bytes.Equal(in, out) {
			bad++
		}
	}
	wall := time.Since(t0)
	threads := bench.OSThreads()

	c.Close()
	ln.Close()
	wg.Wait()
	if bad != 0 {
		bench.Fail(workload, "%d echoes differ from the message sent", bad)
	}
	bench.Result(workload, p, *n, wall, fmt.Sprintf(" threads=%d", threads))
}
