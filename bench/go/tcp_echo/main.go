// tcp_echo: C TCP connections on 127.0.0.1 inside the process, written as a Go
// programmer would: net.Listen on a random port, an accept goroutine that starts one
// echo goroutine per connection (conn.Read, conn.Write what was read), and one client
// goroutine per connection, which net.Dials, waits for the start signal (a closed
// channel) and then M times writes a 64-byte message and reads the 64-byte echo
// (io.ReadFull). Reports ns per message (n = C*M), timed from the start signal (all
// connections established) until every client is done; extra key threads = the
// process's OS threads (/proc/self/status Threads:) at the end of the measured phase.
// Check: every echo equals the message sent.
// Mirror: bench/c/tcp_echo.c.
package main

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"gmpbench/internal/bench"
)

const workload = "tcp_echo"
const msgSize = 64

var (
	servers  sync.WaitGroup // accept loop and echo goroutines
	dialed   sync.WaitGroup // clients connected (or failed)
	clients  sync.WaitGroup // clients done
	start    = make(chan struct{})
	bad      atomic.Int64
	failed   atomic.Int64
	errMu    sync.Mutex
	firstErr error
)

func fail(err error) {
	failed.Add(1)
	errMu.Lock()
	if firstErr == nil {
		firstErr = err
	}
	errMu.Unlock()
}

func serve(c net.Conn) {
	defer servers.Done()
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
	defer servers.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		servers.Add(1)
		go serve(c)
	}
}

func client(id int, addr string, m int64) {
	defer clients.Done()
	c, err := net.Dial("tcp", addr)
	dialed.Done()
	if err != nil {
		fail(err)
		return
	}
	defer c.Close()
	<-start
	out := make([]byte, msgSize)
	in := make([]byte, msgSize)
	binary.LittleEndian.PutUint64(out[8:], uint64(id))
	for i := int64(0); i < m; i++ {
		binary.LittleEndian.PutUint64(out, uint64(i))
		if _, err := c.Write(out); err != nil {
			fail(err)
			return
		}
		if _, err := io.ReadFull(c, in); err != nil {
			fail(err)
			return
		}
		if !bytes.Equal(in, out) {
			bad.Add(1)
		}
	}
}

func main() {
	conns := flag.Int64("c", 1000, "connections")
	m := flag.Int64("m", 200, "messages per connection")
	procs := bench.ProcsFlag()
	flag.Parse()
	if *conns <= 0 || *conns > 8000 || *m <= 0 {
		bench.Fail(workload, "-c %d / -m %d out of range (c in 1..8000)", *conns, *m)
	}
	p := bench.SetupProcs(workload, *procs)
	bench.RaiseNofile()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		bench.Fail(workload, "listen: %v", err)
	}
	servers.Add(1)
	go acceptLoop(ln)
	addr := ln.Addr().String()
	dialed.Add(int(*conns))
	clients.Add(int(*conns))
	for i := 0; i < int(*conns); i++ {
		go client(i, addr, *m)
	}
	dialed.Wait()

	t0 := time.Now()
	close(start)
	clients.Wait()
	wall := time.Since(t0)
	threads := bench.OSThreads()

	ln.Close()
	servers.Wait()
	if failed.Load() != 0 {
		bench.Fail(workload, "%d clients failed, first: %v", failed.Load(), firstErr)
	}
	if bad.Load() != 0 {
		bench.Fail(workload, "%d echoes differ from the message sent", bad.Load())
	}
	bench.Result(workload, p, *conns**m, wall, fmt.Sprintf(" threads=%d", threads))
}
