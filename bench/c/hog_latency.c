/*
 * hog_latency: scheduling latency behind a CPU hog. One goroutine spins in a loop that
 * calls nothing (only asynchronous preemption can stop it); another sleeps 1 ms, N times
 * (1,000), and records how late each wake-up ran. Reports the median and the 99th
 * percentile lateness in microseconds (late_p50_us is the compared metric, late_p99_us an
 * extra key). ns_per_op is the wall time per wake. The driver (Go: main; a root goroutine
 * with -shape 0, the C main thread with -shape 1) starts both and waits; the sleeper is a
 * goroutine in both shapes (on the C main thread a sleep involves no scheduler).
 * Check: every sleep lasted at least 1 ms.
 * Mirror: bench/go/hog_latency/main.go.
 */
#include "bench.h"

#include <stdatomic.h>

static const char *const WORKLOAD = "hog_latency";
static int64_t n = 1000;
static atomic_int stop;
static int64_t *late;
static int64_t short_sleeps;
static gmp_wg wg = GMP_WG_INIT;

static void hog(void *arg)
{
    (void)arg;
    volatile uint64_t x = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed))
        x++;
    gmp_wg_done(&wg);
}

static void sleeper(void *arg)
{
    (void)arg;
    for (int64_t i = 0; i < n; i++) {
        int64_t t = gmp_now();
        gmp_sleep(1000000);
        int64_t d = gmp_now() - t;
        if (d < 1000000)
            short_sleeps++;
        late[i] = d - 1000000;
    }
    atomic_store(&stop, 1);
    gmp_wg_done(&wg);
}

/* What Go's main does; run by a root goroutine or by the C main thread (-shape). */
static void driver(void *arg)
{
    (void)arg;
    gmp_wg_add(&wg, 2);
    gmp_go(hog, NULL);
    gmp_go(sleeper, NULL);
    gmp_wg_wait(&wg);
}

static int cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int64_t procs = 0;
    const bench_flag flags[] = {
        {"n", &n, "1 ms sleeps"},
        {"procs", &procs, "GOMAXPROCS (0: leave the runtime's default)"},
        BENCH_SHAPE_FLAG,
    };
    bench_parse(argc, argv, flags, sizeof flags / sizeof flags[0]);
    if (n <= 0 || n > 10000000)
        bench_fail(WORKLOAD, "-n %" PRId64 " out of range", n);
    late = calloc((size_t)n, sizeof *late);
    if (late == NULL)
        bench_fail(WORKLOAD, "out of memory");
    int p = bench_setup_procs(WORKLOAD, procs);
    int64_t t0 = bench_now_ns();
    bench_drive(WORKLOAD, driver, NULL);
    int64_t wall = bench_now_ns() - t0;
    if (short_sleeps != 0)
        bench_fail(WORKLOAD, "%" PRId64 " sleeps returned early", short_sleeps);
    qsort(late, (size_t)n, sizeof *late, cmp);
    double p50 = (double)late[n / 2] / 1e3, p99 = (double)late[(n * 99) / 100] / 1e3;
    char extra[96];
    snprintf(extra, sizeof extra, " late_p50_us=%.3f late_p99_us=%.3f", p50 > 0 ? p50 : 0.001,
             p99 > 0 ? p99 : 0.001);
    bench_result(WORKLOAD, p, n, wall, extra);
    return 0;
}
