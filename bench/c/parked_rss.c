/*
 * parked_rss: the driver (Go: main; a root goroutine with -shape 0, the C main thread
 * with -shape 1) spawns N goroutines (10^6) with the default stack size; each bumps an
 * atomic counter and blocks in gmp_chan_recv on one unbuffered channel. When the counter
 * reaches N (polled with gmp_sleep(1 ms)), the driver sleeps a little more (-settle_ms)
 * so the last ones block, checks gmp_num_goroutine (N, plus the root goroutine with
 * -shape 0), then reads VmRSS: kib_per_g = (VmRSS now - VmRSS before spawning) / N, the
 * memory a parked goroutine costs (the runner compares kib_per_g). Then it closes the
 * channel, every receive returns -EPIPE, and it waits for all. ns_per_op / wall_ms time
 * the spawn until the counter reaches N. Check: every receive returned -EPIPE.
 * Mirror: bench/go/parked_rss/main.go.
 */
#include "bench.h"

#include <errno.h>
#include <stdatomic.h>

static const char *const WORKLOAD = "parked_rss";

static int64_t n = 1000000, settle_ms = 20;
static gmp_chan *ch;
static gmp_wg wg = GMP_WG_INIT;
static atomic_int_least64_t parked; /* goroutines about to block */
static atomic_int_least64_t bad;    /* receives that did not return -EPIPE */
static int64_t spawn_failed_at = -1, spawn_error;
static int64_t wall, live, rss_before, rss_parked;

static void waiter(void *arg)
{
    (void)arg;
    atomic_fetch_add_explicit(&parked, 1, memory_order_relaxed);
    int64_t v;
    if (gmp_chan_recv(ch, &v) != -EPIPE)
        atomic_fetch_add_explicit(&bad, 1, memory_order_relaxed);
    gmp_wg_done(&wg);
}

/* What Go's main does; run by a root goroutine or by the C main thread (-shape). */
static void driver(void *arg)
{
    (void)arg;
    rss_before = bench_rss_kib();

    int64_t t0 = bench_now_ns();
    gmp_wg_add(&wg, n);
    int64_t want = n;
    for (int64_t i = 0; i < n; i++) {
        int64_t id = gmp_go(waiter, NULL);
        if (id <= 0) {
            spawn_failed_at = i;
            spawn_error = id;
            gmp_wg_add(&wg, -(n - i));
            want = i;
            break;
        }
    }
    while (atomic_load_explicit(&parked, memory_order_relaxed) < want)
        gmp_sleep(1000000);
    wall = bench_now_ns() - t0;
    gmp_sleep(settle_ms * 1000000);
    live = gmp_num_goroutine();
    rss_parked = bench_rss_kib();

    gmp_chan_close(ch);
    gmp_wg_wait(&wg);
}

int main(int argc, char **argv)
{
    int64_t procs = 0;
    const bench_flag flags[] = {
        {"n", &n, "goroutines"},
        {"settle_ms", &settle_ms, "extra wait after all counted, milliseconds"},
        {"procs", &procs, "GOMAXPROCS (0: leave the runtime's default)"},
        BENCH_SHAPE_FLAG,
    };
    bench_parse(argc, argv, flags, sizeof flags / sizeof flags[0]);
    if (n <= 0 || n > INT32_MAX)
        bench_fail(WORKLOAD, "-n %" PRId64 " out of range", n);
    if (settle_ms < 0 || settle_ms > 60000)
        bench_fail(WORKLOAD, "-settle_ms %" PRId64 " out of range", settle_ms);
    int p = bench_setup_procs(WORKLOAD, procs);

    int rc = gmp_chan_make(&ch, sizeof(int64_t), 0);
    if (rc != 0)
        bench_fail(WORKLOAD, "gmp_chan_make = %d", rc);
    bench_drive(WORKLOAD, driver, NULL);

    if (spawn_failed_at >= 0)
        bench_fail(WORKLOAD, "gmp_go #%" PRId64 " = %" PRId64, spawn_failed_at, spawn_error);
    if (rss_before <= 0 || rss_parked <= 0)
        bench_fail(WORKLOAD, "cannot read VmRSS");
    int64_t want_live = n + (bench_shape == BENCH_SHAPE_ROOT ? 1 : 0);
    if (live < want_live)
        bench_fail(WORKLOAD, "%" PRId64 " goroutines live, want at least %" PRId64, live,
                   want_live);
    int64_t b = atomic_load(&bad);
    if (b != 0)
        bench_fail(WORKLOAD, "%" PRId64 " receives did not return -EPIPE", b);
    gmp_chan_release(ch);
    double kib = (double)(rss_parked - rss_before) / (double)n;
    char extra[128];
    snprintf(extra, sizeof extra, " kib_per_g=%.3f rss_before_kib=%" PRId64
             " rss_parked_kib=%" PRId64, kib, rss_before, rss_parked);
    bench_result(WORKLOAD, p, n, wall, extra);
    return 0;
}
