/*
 * syscall_fast: the cost of a trivial blocking call with hand-off on the fast path. One
 * goroutine calls getppid(2) N times through gmp_syscall (entersyscall, the call,
 * exitsyscall: nobody retakes the processor of so short a call). Reports ns per call;
 * the extra key raw_ns is the same call made directly through libc, without hand-off,
 * and blocking_ns the same call through gmp_blocking(fn) (in alternating blocks of
 * 1,000 calls of each), so that ns_per_op - raw_ns is the hand-off's own cost; overhead_ns
 * is the median over the blocks of that difference (steadier than the difference of the
 * totals: the call itself costs ten times the hand-off, and its speed drifts).
 * Check: every call returned the parent's pid. Mirror: bench/go/syscall_fast/main.go
 * (syscall.Syscall(SYS_GETPPID), which goes through Go's entersyscall/exitsyscall).
 */
#include "bench.h"

#include <sys/syscall.h>
#include <unistd.h>

static const char *const WORKLOAD = "syscall_fast";

static int64_t n = 5000000;
static int64_t wall_syscall, wall_blocking, wall_raw, bad;
static double *block_overhead; /* per block: ns per call over the raw call */
static int64_t nblocks;

static int64_t call_getppid(void *arg)
{
    (void)arg;
    return (int64_t)getppid();
}

/* The three loops alternate in blocks, so that the machine's speed drifting during the run
 * (this VM's does, by up to 2x) weighs on both alike. */
#define BLOCK 1000

/* What Go's main does; always a root goroutine: on a thread that is not a goroutine
 * gmp_syscall only makes the call (there is no processor to hand off), so this
 * program has no -shape. */
static void driver(void *arg)
{
    (void)arg;
    int64_t want = (int64_t)getppid();
    for (int64_t done = 0; done < n; done += BLOCK) {
        int64_t k = n - done < BLOCK ? n - done : BLOCK;
        int64_t t0 = bench_now_ns();
        for (int64_t i = 0; i < k; i++)
            if (gmp_syscall(SYS_getppid, 0, 0, 0, 0, 0, 0) != want)
                bad++;
        int64_t t1 = bench_now_ns();
        for (int64_t i = 0; i < k; i++)
            if (call_getppid(NULL) != want)
                bad++;
        int64_t t2 = bench_now_ns();
        for (int64_t i = 0; i < k; i++)
            if (gmp_blocking(call_getppid, NULL) != want)
                bad++;
        int64_t t3 = bench_now_ns();
        block_overhead[nblocks++] = (double)((t1 - t0) - (t2 - t1)) / (double)k;
        wall_syscall += t1 - t0;
        wall_raw += t2 - t1;
        wall_blocking += t3 - t2;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int64_t procs = 0;
    const bench_flag flags[] = {
        {"n", &n, "calls"},
        {"procs", &procs, "GOMAXPROCS (0: leave the runtime's default)"},
    };
    bench_parse(argc, argv, flags, sizeof flags / sizeof flags[0]);
    if (n <= 0)
        bench_fail(WORKLOAD, "-n %" PRId64 " out of range", n);
    int p = bench_setup_procs(WORKLOAD, procs);
    block_overhead = malloc((size_t)((n + BLOCK - 1) / BLOCK) * sizeof *block_overhead);
    if (block_overhead == NULL)
        bench_fail(WORKLOAD, "out of memory");
    bench_drive(WORKLOAD, driver, NULL);
    if (bad != 0)
        bench_fail(WORKLOAD, "%" PRId64 " calls returned a wrong pid", bad);
    qsort(block_overhead, (size_t)nblocks, sizeof *block_overhead, cmp_double);
    char extra[128];
    snprintf(extra, sizeof extra, " raw_ns=%.2f blocking_ns=%.2f overhead_ns=%.2f",
             (double)wall_raw / (double)n, (double)wall_blocking / (double)n,
             block_overhead[nblocks / 2]);
    free(block_overhead);
    bench_result(WORKLOAD, p, n, wall_syscall, extra);
    return 0;
}
