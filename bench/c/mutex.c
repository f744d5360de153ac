/*
 * mutex: G goroutines (8) each lock one gmp_mutex, increment a shared counter and
 * unlock, K times, K = n / G. The driver (Go: main; a root goroutine with -shape 0, the
 * C main thread with -shape 1) spawns them and waits. Reports ns per lock/unlock pair
 * (wall / (G*K)).
 * Check: counter == G*K. Mirror: bench/go/mutex/main.go.
 *
 * Also reports rmw2_ns: two uncontended locked read-modify-writes (a CAS that takes a
 * word and an exchange that gives it back, what an uncontended lock/unlock pair needs at
 * least) measured in this process before the run — the yardstick of the GOMAXPROCS=1
 * target (within 1.2x of it; bench/run.py's workload table).
 */
#include "bench.h"

#include <stdatomic.h>

static const char *const WORKLOAD = "mutex";

static gmp_mutex mu = GMP_MUTEX_INIT;
static int64_t counter; /* guarded by mu */
static int64_t g = 8, k;
static gmp_wg wg = GMP_WG_INIT;
static atomic_int errors;
static int64_t spawn_error;

static void worker(void *arg)
{
    (void)arg;
    /* A local copy, as Go's worker gets k as an argument: the global shares a cache line
       with mu, and the atomics keep the compiler from hoisting its load out of the loop. */
    const int64_t iters = k;
    for (int64_t i = 0; i < iters; i++) {
        if (gmp_mutex_lock(&mu) != 0) {
            atomic_fetch_add(&errors, 1);
            break;
        }
        counter++;
        gmp_mutex_unlock(&mu);
    }
    gmp_wg_done(&wg);
}

/* Nanoseconds per pair of uncontended locked read-modify-writes on one word: the best of
   5 batches of 10^6 (a CAS 0 -> 1 and an exchange back to 0, as a lock and an unlock). */
static double two_rmw_ns(void)
{
    static _Atomic int word;
    double best = 1e9;
    for (int b = 0; b < 5; b++) {
        int64_t t0 = bench_now_ns();
        for (int i = 0; i < 1000000; i++) {
            int zero = 0;
            atomic_compare_exchange_strong(&word, &zero, 1);
            atomic_exchange(&word, 0);
        }
        double ns = (double)(bench_now_ns() - t0) / 1e6;
        if (ns < best)
            best = ns;
    }
    return best;
}

/* What Go's main does; run by a root goroutine or by the C main thread (-shape). */
static void driver(void *arg)
{
    (void)arg;
    gmp_wg_add(&wg, g);
    for (int64_t i = 0; i < g; i++) {
        int64_t id = gmp_go(worker, NULL);
        if (id <= 0) {
            spawn_error = id;
            gmp_wg_done(&wg);
        }
    }
    gmp_wg_wait(&wg);
}

int main(int argc, char **argv)
{
    int64_t n = 20000000, procs = 0;
    const bench_flag flags[] = {
        {"n", &n, "lock/unlock pairs in total, split evenly over the goroutines"},
        {"g", &g, "goroutines"},
        {"procs", &procs, "GOMAXPROCS (0: leave the runtime's default)"},
        BENCH_SHAPE_FLAG,
    };
    bench_parse(argc, argv, flags, sizeof flags / sizeof flags[0]);
    if (g <= 0 || g > 1000000)
        bench_fail(WORKLOAD, "-g %" PRId64 " out of range", g);
    k = n / g;
    if (k <= 0)
        bench_fail(WORKLOAD, "-n %" PRId64 " gives no iterations per goroutine", n);
    int p = bench_setup_procs(WORKLOAD, procs);
    double rmw2 = two_rmw_ns();

    int64_t t0 = bench_now_ns();
    bench_drive(WORKLOAD, driver, NULL);
    int64_t wall = bench_now_ns() - t0;

    if (spawn_error != 0)
        bench_fail(WORKLOAD, "gmp_go = %" PRId64, spawn_error);
    if (atomic_load(&errors) != 0)
        bench_fail(WORKLOAD, "gmp_mutex_lock failed %d times", atomic_load(&errors));
    if (counter != g * k)
        bench_fail(WORKLOAD, "counter = %" PRId64 ", want %" PRId64, counter, g * k);
    char extra[96];
    snprintf(extra, sizeof extra, " g=%" PRId64 " k=%" PRId64 " rmw2_ns=%.3f", g, k, rmw2);
    bench_result(WORKLOAD, p, g * k, wall, extra);
    return 0;
}
