/*
 * yield: G goroutines each call gmp_yield() K times, K = total / G (-n is the
 * total, rounded down to a multiple of G). The driver (Go: main; a root goroutine with
 * -shape 0, the C main thread with -shape 1) spawns them and waits. Reports ns per yield
 * (wall / (G*K)).
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
static int64_t g = 2;
static slot *slots;
static int64_t spawn_failed_at = -1, spawn_error;

static void worker(void *arg)
{
    slot *s = arg;
    for (int64_t i = 0; i < s->k; i++) {
        s->count++;
        gmp_yield();
    }
    gmp_wg_done(&wg);
}

/* What Go's main does; run by a root goroutine or by the C main thread (-shape). */
static void driver(void *arg)
{
    (void)arg;
    gmp_wg_add(&wg, g);
    for (int64_t i = 0; i < g; i++) {
        int64_t id = gmp_go(worker, &slots[i]);
        if (id <= 0) {
            spawn_failed_at = i;
            spawn_error = id;
            gmp_wg_add(&wg, -(g - i));
            break;
        }
    }
    gmp_wg_wait(&wg);
}

int main(int argc, char **argv)
{
    int64_t n = 10000000, procs = 0;
    const bench_flag flags[] = {
        {"n", &n, "total yields, split evenly over the goroutines"},
        {"g", &g, "goroutines"},
        {"procs", &procs, "GOMAXPROCS (0: leave the runtime's default)"},
        BENCH_SHAPE_FLAG,
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

    slots = aligned_alloc(64, (size_t)g * sizeof(slot));
    if (slots == NULL)
        bench_fail(workload, "out of memory");
    for (int64_t i = 0; i < g; i++)
        slots[i] = (slot){.count = 0, .k = k};

    int64_t t0 = bench_now_ns();
    bench_drive(workload, driver, NULL);
    int64_t wall = bench_now_ns() - t0;
    if (spawn_failed_at >= 0)
        bench_fail(workload, "gmp_go #%" PRId64 " = %" PRId64, spawn_failed_at, spawn_error);

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
