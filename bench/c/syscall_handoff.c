/*
 * syscall_handoff: at GOMAXPROCS=1, four worker goroutines do CPU work in small slices
 * (a fixed loop, then gmp_yield) for `ms` milliseconds and count the slices. Phase A: the
 * workers alone. Phase B: the same, plus a fifth goroutine blocked for `block_ms` in
 * gmp_read on a pipe that a sixth goroutine writes after sleeping. The runtime must hand
 * the processor off while the read blocks (sysmon's retake), so the workers keep their
 * throughput. Reports retained = slices(B) / slices(A), the median over `rounds` A/B
 * pairs. The driver (Go: main; a root goroutine with -shape 0, the C main thread with
 * -shape 1) runs the phases: it starts the goroutines of each and waits for them.
 * Check: every phase counts slices; the read returns the byte written.
 * Mirror: bench/go/syscall_handoff/main.go.
 */
#include "bench.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

static const char *const WORKLOAD = "syscall_handoff";

static int64_t phase_ms = 400, block_ms = 200, slice_iters = 20000;
static atomic_llong slices;
static int64_t deadline;
static int pipefd[2];
static gmp_wg wg = GMP_WG_INIT;
static atomic_int read_error;
static int64_t rounds = 3;
static double *retained;       /* per round: slices(B) / slices(A) */
static long long last_b;
static long long bad_a = -1, bad_b = -1; /* a phase that counted no slices */

static void worker(void *arg)
{
    (void)arg;
    long long n = 0;
    volatile uint64_t sink = 0;
    while (gmp_now() < deadline) {
        for (int64_t i = 0; i < slice_iters; i++)
            sink += (uint64_t)i * 2654435761u;
        n++;
        gmp_yield();
    }
    atomic_fetch_add(&slices, n);
    gmp_wg_done(&wg);
}

static void reader(void *arg)
{
    (void)arg;
    char c = 0;
    int64_t r = gmp_read(pipefd[0], &c, 1);
    if (r != 1 || c != 'x')
        atomic_store(&read_error, 1);
    gmp_wg_done(&wg);
}

static void writer(void *arg)
{
    (void)arg;
    gmp_sleep(block_ms * 1000000);
    char c = 'x';
    if (gmp_write(pipefd[1], &c, 1) != 1)
        atomic_store(&read_error, 1);
    gmp_wg_done(&wg);
}

/* One phase: returns the slices the workers completed. */
static long long phase(int with_blocked_reader)
{
    atomic_store(&slices, 0);
    deadline = gmp_now() + phase_ms * 1000000;
    gmp_wg_add(&wg, 4 + (with_blocked_reader ? 2 : 0));
    if (with_blocked_reader) {
        gmp_go(reader, NULL);
        gmp_go(writer, NULL);
    }
    for (int i = 0; i < 4; i++)
        gmp_go(worker, NULL);
    gmp_wg_wait(&wg);
    return atomic_load(&slices);
}

/* What Go's main does; run by a root goroutine or by the C main thread (-shape). */
static void driver(void *arg)
{
    (void)arg;
    for (int64_t r = 0; r < rounds; r++) {
        long long a = phase(0);
        long long b = phase(1);
        if (a <= 0 || b <= 0) {
            bad_a = a;
            bad_b = b;
            return;
        }
        if (atomic_load(&read_error))
            return;
        retained[r] = (double)b / (double)a;
        if (getenv("BENCH_VERBOSE"))
            fprintf(stderr, "round %" PRId64 ": a=%lld b=%lld\n", r, a, b);
        last_b = b;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int64_t procs = 1;
    const bench_flag flags[] = {
        {"ms", &phase_ms, "length of each phase"},
        {"block_ms", &block_ms, "how long the fifth goroutine blocks in read"},
        {"iters", &slice_iters, "loop iterations per work slice"},
        {"rounds", &rounds, "A/B pairs (the median is reported)"},
        {"procs", &procs, "GOMAXPROCS"},
        BENCH_SHAPE_FLAG,
    };
    bench_parse(argc, argv, flags, sizeof flags / sizeof flags[0]);
    if (rounds <= 0 || rounds > 100 || phase_ms <= 0 || block_ms < 0 || slice_iters <= 0)
        bench_fail(WORKLOAD, "bad flags");
    if (pipe(pipefd) != 0)
        bench_fail(WORKLOAD, "pipe failed");
    int p = bench_setup_procs(WORKLOAD, procs);

    retained = calloc((size_t)rounds, sizeof *retained);
    if (retained == NULL)
        bench_fail(WORKLOAD, "out of memory");
    int64_t t0 = bench_now_ns();
    bench_drive(WORKLOAD, driver, NULL);
    int64_t wall = bench_now_ns() - t0;
    if (bad_a >= 0)
        bench_fail(WORKLOAD, "no work slices counted (a=%lld b=%lld)", bad_a, bad_b);
    if (atomic_load(&read_error))
        bench_fail(WORKLOAD, "the blocked read did not return the byte written");
    qsort(retained, (size_t)rounds, sizeof *retained, cmp_double);
    char extra[64];
    snprintf(extra, sizeof extra, " retained=%.4f", retained[rounds / 2]);
    bench_result(WORKLOAD, p, last_b, wall, extra);
    free(retained);
    return 0;
}
