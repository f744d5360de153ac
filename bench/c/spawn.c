/*
 * spawn: N goroutines spawned by one driver (Go: main); each bumps an atomic counter and
 * signals a WaitGroup; the driver waits. The driver is a root goroutine for which the C
 * main thread waits (-shape 0), or the C main thread itself (-shape 1, see bench_drive).
 * Reports ns per goroutine (spawn + run + join).
 * Check: counter == N. Mirror: bench/go/spawn/main.go.
 */
#include "bench.h"

#include <stdatomic.h>

static const char *const WORKLOAD = "spawn";

static gmp_wg wg = GMP_WG_INIT;
static atomic_int_least64_t counter;

static int64_t n = 1000000;
static int64_t spawn_failed_at = -1, spawn_error;

static void worker(void *arg)
{
    (void)arg;
    atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed);
    gmp_wg_done(&wg);
}

/* What Go's main does: spawns N workers and waits for them; run by a root goroutine or
 * by the C main thread (-shape). */
static void driver(void *arg)
{
    (void)arg;
    for (int64_t i = 0; i < n; i++) {
        int64_t id = gmp_go(worker, NULL);
        if (id <= 0) {
            spawn_failed_at = i;
            spawn_error = id;
            for (int64_t j = i; j < n; j++)
                gmp_wg_done(&wg);
            break;
        }
    }
    gmp_wg_wait(&wg);
}

int main(int argc, char **argv)
{
    int64_t procs = 0;
    const bench_flag flags[] = {
        {"n", &n, "goroutines to spawn"},
        {"procs", &procs, "GOMAXPROCS (0: leave the runtime's default)"},
        BENCH_SHAPE_FLAG,
    };
    bench_parse(argc, argv, flags, sizeof flags / sizeof flags[0]);
    if (n <= 0 || n > INT32_MAX)
        bench_fail(WORKLOAD, "-n %" PRId64 " out of range", n);
    int p = bench_setup_procs(WORKLOAD, procs);

    int64_t t0 = bench_now_ns();
    int rc = gmp_wg_add(&wg, n);
    if (rc < 0)
        bench_fail(WORKLOAD, "gmp_wg_add = %d", rc);
    bench_drive(WORKLOAD, driver, NULL);
    int64_t wall = bench_now_ns() - t0;
    if (spawn_failed_at >= 0)
        bench_fail(WORKLOAD, "gmp_go #%" PRId64 " = %" PRId64, spawn_failed_at, spawn_error);

    int64_t got = atomic_load(&counter);
    if (got != n)
        bench_fail(WORKLOAD, "counter = %" PRId64 ", want %" PRId64, got, n);
    bench_result(WORKLOAD, p, n, wall, "");
    return 0;
}
