/*
 * yield: G goroutines each call gmp_yield() K times, K = total / G (-n is the
 * total, rounded down to a multiple of G). Reports ns per yield (wall / (G*K)).
 * The runner's rows yield2 and yield100 are this program with -g 2 and -g 100.
 * Check: every goroutine counted exactly K yields. Mirror: bench/go/yield/main.go.
 */
#include "bench.h"

/* One goroutine's counter, on its own cache line (only its goroutine writes it;
 * main reads it after the WaitGroup wait). */
typedef struct slot {
    _Alignas(64) int64_t count;
    int64_t k;
} slot;

static gmp_wg wg = GMP_WG_INIT;

static void worker(void *arg)
{
    slot *s = arg;
    for (int64_t i = 0; i < s->k; i++) {
        s->count++;
        gmp_yield();
    }
    gmp_wg_done(&wg);
}

int main(int argc, char **argv)
{
    int64_t n = 10000000, g = 2, procs = 0;
    const bench_flag flags[] = {
        {"n", &n, "total yields, split evenly over the goroutines"},
        {"g", &g, "goroutines"},
        {"procs", &procs, "GOMAXPROCS (0: leave the runtime's default)"},
    };
    bench_parse(argc, argv, flags, sizeof flags / sizeof flags[0]);
    char workload[32];
    snprintf(workload, sizeof workload, "yield%" PRId64, g);
    if (g <= 0 || g > 1000000)
        bench_fail(workload, "-g %" PRId64 " out of range", g);
    int64_t k = n / g;
    if (k <= 0)
        bench_fail(workload, "-n %" PRId64 " gives no yields per goroutine", n);
    int p = bench_setup_procs(workload, procs);

    slot *slots = aligned_alloc(64, (size_t)g * sizeof(slot));
    if (slots == NULL)
        bench_fail(workload, "out of memory");
    for (int64_t i = 0; i < g; i++)
        slots[i] = (slot){.count = 0, .k = k};

    int64_t t0 = bench_now_ns();
    int rc = gmp_wg_add(&wg, g);
    if (rc < 0)
        bench_fail(workload, "gmp_wg_add = %d", rc);
    for (int64_t i = 0; i < g; i++) {
        int64_t id = gmp_go(worker, &slots[i]);
        if (id <= 0)
            bench_fail(workload, "gmp_go #%" PRId64 " = %" PRId64, i, id);
    }
    rc = gmp_wg_wait(&wg);
    if (rc < 0)
        bench_fail(workload, "gmp_wg_wait = %d", rc);
    int64_t wall = bench_now_ns() - t0;

    for (int64_t i = 0; i < g; i++)
        if (slots[i].count != k)
            bench_fail(workload, "goroutine %" PRId64 " yielded %" PRId64 " times, want %" PRId64,
                       i, slots[i].count, k);
    char extra[64];
    snprintf(extra, sizeof extra, " g=%" PRId64 " k=%" PRId64, g, k);
    bench_result(workload, p, g * k, wall, extra);
    free(slots);
    return 0;
}
