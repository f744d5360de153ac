// Package bench holds the helpers shared by the Go side of the libgmp benchmarks;
// it mirrors bench/c/bench.h. Both print the same RESULT line:
//
//	RESULT workload=<w> impl=go procs=<P> n=<ops> ns_per_op=<f> wall_ms=<f> maxrss_kib=<k> [key=value ...]
package bench

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/trace"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ProcsFlag registers -procs, applied by SetupProcs.
func ProcsFlag() *int64 {
	return flag.Int64("procs", 0, "GOMAXPROCS (0: leave the runtime's default)")
}

// Fail prints "FAIL <workload> impl=go: <message>" to stderr and exits 1.
func Fail(workload string, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAIL %s impl=go: %s\n", workload, fmt.Sprintf(format, args...))
	os.Exit(1)
}

// SetupProcs applies -procs (when > 0) and returns the GOMAXPROCS now in effect. With
// GMP_TRACE=flight in the environment (as the C side reads it) it also starts Go's
// flight recorder with the same defaults, 10 s in 16 MiB, for scripts/trace-overhead.sh.
func SetupProcs(workload string, procs int64) int {
	if os.Getenv("GMP_TRACE") == "flight" {
		fr := trace.NewFlightRecorder(trace.FlightRecorderConfig{MinAge: 10 * time.Second, MaxBytes: 16 << 20})
		if err := fr.Start(); err != nil {
			Fail(workload, "flight recorder: %v", err)
		}
	}
	if procs > 0 {
		runtime.GOMAXPROCS(int(procs))
	}
	now := runtime.GOMAXPROCS(0)
	if procs > 0 && int64(now) != procs {
		Fail(workload, "asked for %d procs, runtime has %d", procs, now)
	}
	return now
}

// statusKiB is the "<field>: <n> kB" line of /proc/self/status in KiB, -1 if absent.
func statusKiB(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				if v, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return v
				}
			}
		}
	}
	return -1
}

// MaxRSSKiB is the peak RSS in KiB: VmHWM from /proc/self/status. Not getrusage's
// ru_maxrss, which Linux carries across execve: a child started by a big parent (the
// Python runner starts it with vfork) would report the parent's peak. Getrusage only
// as fallback.
func MaxRSSKiB() int64 {
	if v := statusKiB("VmHWM"); v >= 0 {
		return v
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return int64(ru.Maxrss)
}

// RSSKiB is the current RSS in KiB: VmRSS from /proc/self/status (-1 if unavailable).
func RSSKiB() int64 {
	return statusKiB("VmRSS")
}

// Result prints the RESULT line; extra is "" or " key=value ..." (leading space).
func Result(workload string, procs int, n int64, wall time.Duration, extra string) {
	ns := wall.Nanoseconds()
	fmt.Printf("RESULT workload=%s impl=go procs=%d n=%d ns_per_op=%.3f wall_ms=%.3f maxrss_kib=%d%s\n",
		workload, procs, n, float64(ns)/float64(n), float64(ns)/1e6, MaxRSSKiB(), extra)
}

// RaiseNofile sets the soft RLIMIT_NOFILE to the hard one (Go 1.19+ does this itself at
// start-up; done explicitly as in the C mirror). For the TCP workloads.
func RaiseNofile() {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur < rl.Max {
		rl.Cur = rl.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
}

// OSThreads is the "Threads:" line of /proc/self/status (-1 if absent).
func OSThreads() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Threads:"); ok {
			if t, err := strconv.Atoi(strings.TrimSpace(rest)); err == nil {
				return t
			}
		}
	}
	return -1
}
