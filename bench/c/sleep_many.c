/*
 * sleep_many: the driver (Go: main; a root goroutine with -shape 0, the C main thread
 * with -shape 1) spawns N goroutines (100,000) that each sleep D (10 ms) with gmp_sleep
 * and signal a WaitGroup, and waits. Reports the wall time (the runner compares wall_ms) and
 * ns_per_op = wall / N; the RESULT line's maxrss_kib is the peak RSS.
 * Check: every goroutine slept at least D by gmp_now (the timers' clock).
 * Mirror: bench/go/sleep_many/main.go.
 */
#include "bench.h"

#include <stdatomic.h>

static const char *const WORKLOAD = "sleep_many";

static int64_t n = 100000, ms = 10, d_ns;
static gmp_wg wg = GMP_WG_INIT;
static atomic_int_least64_t short_sleeps; /* sleeps that returned early */
static atomic_int_least64_t errors;       /* gmp_sleep != 0 */
static int64_t spawn_failed_at = -1, spawn_error;

static void sleeper(void *arg)
{
    (void)arg;
    int64_t t = gmp_now();
    if (gmp_sleep(d_ns) != 0)
        atomic_fetch_add_explicit(&errors, 1, memory_order_relaxed);
    if (gmp_now() - t < d_ns)
        atomic_fetch_add_explicit(&short_sleeps, 1, memory_order_relaxed);
    gmp_wg_done(&wg);
}

/* What Go's main does; run by a root goroutine or by the C main thread (-shape). */
static void driver(void *arg)
{
    (void)arg;
    gmp_wg_add(&wg, n);
    for (int64_t i = 0; i < n; i++) {
        int64_t id = gmp_go(sleeper, NULL);
        if (id <= 0) {
            spawn_failed_at = i;
            spawn_error = id;
            gmp_wg_add(&wg, -(n - i));
            break;
        }
    }
    gmp_wg_wait(&wg);
}

int main(int argc, char **argv)
{
    int64_t procs = 0;
    const bench_flag flags[] = {
        {"n", &n, "goroutines"},
        {"ms", &ms, "sleep per goroutine, milliseconds"},
        {"procs", &procs, "GOMAXPROCS (0: leave the runtime's default)"},
        BENCH_SHAPE_FLAG,
    };
    bench_parse(argc, argv, flags, sizeof flags / sizeof flags[0]);
    if (n <= 0 || n > INT32_MAX)
        bench_fail(WORKLOAD, "-n %" PRId64 " out of range", n);
    if (ms <= 0 || ms > 60000)
        bench_fail(WORKLOAD, "-ms %" PRId64 " out of range", ms);
    d_ns = ms * 1000000;
    int p = bench_setup_procs(WORKLOAD, procs);

    int64_t t0 = bench_now_ns();
    bench_drive(WORKLOAD, driver, NULL);
    int64_t wall = bench_now_ns() - t0;

    if (spawn_failed_at >= 0)
        bench_fail(WORKLOAD, "gmp_go #%" PRId64 " = %" PRId64, spawn_failed_at, spawn_error);
    if (atomic_load(&errors) != 0)
        bench_fail(WORKLOAD, "gmp_sleep failed %" PRId64 " times", (int64_t)atomic_load(&errors));
    int64_t s = atomic_load(&short_sleeps);
    if (s != 0)
        bench_fail(WORKLOAD, "%" PRId64 " of %" PRId64 " sleeps returned before %" PRId64 " ms",
                   s, n, ms);
    if (wall < d_ns)
        bench_fail(WORKLOAD, "wall %" PRId64 " ns shorter than one sleep", wall);
    char extra[32];
    snprintf(extra, sizeof extra, " sleep_ms=%" PRId64, ms);
    bench_result(WORKLOAD, p, n, wall, extra);
    return 0;
}
