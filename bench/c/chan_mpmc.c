/*
 * chan_mpmc: P producers and C consumers (4 and 4) share one buffered channel of int64
 * (capacity 1024). Producer j sends the K distinct values j*K+1 .. (j+1)*K, K = n / P;
 * consumers receive until the channel is closed and drained (-EPIPE), summing. The
 * driver (Go: main) spawns the consumers, then the producers, waits for the producers,
 * closes the channel and waits for the consumers; it is a root goroutine for which the
 * C main thread only waits (-shape 0), or the C main thread itself (-shape 1). Reports
 * ns per item (wall / (P*K)).
 * Check: the consumers got P*K items summing to T(T+1)/2, T = P*K.
 * Mirror: bench/go/chan_mpmc/main.go.
 */
#include "bench.h"

#include <errno.h>
#include <stdatomic.h>

static const char *const WORKLOAD = "chan_mpmc";

/* One goroutine's parameters and results, on its own cache line. */
typedef struct slot {
    _Alignas(64) int64_t first, k; /* producer: values first .. first+k-1 */
    int64_t sum, count;            /* consumer: what it received */
    int err;                       /* a channel call's unexpected result, or 0 */
} slot;

static gmp_chan *ch;
static int64_t np = 4, nc = 4, cap = 1024;
static slot *producers, *consumers;
static gmp_wg producers_wg = GMP_WG_INIT, consumers_wg = GMP_WG_INIT;
static atomic_int_least64_t spawn_error;

static void producer(void *arg)
{
    slot *s = arg;
    for (int64_t v = s->first; v < s->first + s->k; v++) {
        int rc = gmp_chan_send(ch, &v);
        if (rc != 0) {
            s->err = rc;
            break;
        }
    }
    gmp_wg_done(&producers_wg);
}

static void consumer(void *arg)
{
    slot *s = arg;
    int64_t sum = 0, count = 0, v;
    int rc;
    while ((rc = gmp_chan_recv(ch, &v)) == 0) {
        sum += v;
        count++;
    }
    if (rc != -EPIPE)
        s->err = rc;
    s->sum = sum;
    s->count = count;
    gmp_wg_done(&consumers_wg);
}

static void spawn(gmp_func fn, slot *s, gmp_wg *wg)
{
    int64_t id = gmp_go(fn, s);
    if (id <= 0) {
        atomic_store(&spawn_error, id);
        gmp_wg_done(wg);
    }
}

/* What Go's main does; run by a root goroutine or by the C main thread (-shape). */
static void driver(void *arg)
{
    (void)arg;
    gmp_wg_add(&consumers_wg, nc);
    for (int64_t i = 0; i < nc; i++)
        spawn(consumer, &consumers[i], &consumers_wg);
    gmp_wg_add(&producers_wg, np);
    for (int64_t j = 0; j < np; j++)
        spawn(producer, &producers[j], &producers_wg);
    gmp_wg_wait(&producers_wg);
    gmp_chan_close(ch);
    gmp_wg_wait(&consumers_wg);
}

int main(int argc, char **argv)
{
    int64_t n = 10000000, procs = 0;
    const bench_flag flags[] = {
        {"n", &n, "items in total, split evenly over the producers"},
        {"producers", &np, "producer goroutines"},
        {"consumers", &nc, "consumer goroutines"},
        {"cap", &cap, "channel capacity"},
        {"procs", &procs, "GOMAXPROCS (0: leave the runtime's default)"},
        BENCH_SHAPE_FLAG,
    };
    bench_parse(argc, argv, flags, sizeof flags / sizeof flags[0]);
    if (np <= 0 || np > 10000 || nc <= 0 || nc > 10000 || cap < 0 || cap > (INT64_C(1) << 31))
        bench_fail(WORKLOAD, "-producers %" PRId64 " -consumers %" PRId64 " -cap %" PRId64
                   " out of range", np, nc, cap);
    int64_t k = n / np, total = np * k; /* total(total+1)/2 must fit in int64 */
    if (k <= 0 || total > (INT64_C(1) << 31))
        bench_fail(WORKLOAD, "-n %" PRId64 " out of range", n);
    int p = bench_setup_procs(WORKLOAD, procs);

    int rc = gmp_chan_make(&ch, sizeof(int64_t), (size_t)cap);
    if (rc != 0)
        bench_fail(WORKLOAD, "gmp_chan_make = %d", rc);
    producers = aligned_alloc(64, (size_t)np * sizeof(slot));
    consumers = aligned_alloc(64, (size_t)nc * sizeof(slot));
    if (producers == NULL || consumers == NULL)
        bench_fail(WORKLOAD, "out of memory");
    for (int64_t j = 0; j < np; j++)
        producers[j] = (slot){.first = j * k + 1, .k = k};
    for (int64_t i = 0; i < nc; i++)
        consumers[i] = (slot){0};

    int64_t t0 = bench_now_ns();
    bench_drive(WORKLOAD, driver, NULL);
    int64_t wall = bench_now_ns() - t0;

    if (atomic_load(&spawn_error) != 0)
        bench_fail(WORKLOAD, "gmp_go = %" PRId64, (int64_t)atomic_load(&spawn_error));
    int64_t sum = 0, count = 0;
    for (int64_t j = 0; j < np; j++)
        if (producers[j].err != 0)
            bench_fail(WORKLOAD, "producer %" PRId64 ": gmp_chan_send = %d", j, producers[j].err);
    for (int64_t i = 0; i < nc; i++) {
        if (consumers[i].err != 0)
            bench_fail(WORKLOAD, "consumer %" PRId64 ": gmp_chan_recv = %d", i, consumers[i].err);
        sum += consumers[i].sum;
        count += consumers[i].count;
    }
    int64_t want = total * (total + 1) / 2;
    if (count != total || sum != want)
        bench_fail(WORKLOAD, "consumers got %" PRId64 " items summing to %" PRId64 ", want %"
                   PRId64 " summing to %" PRId64, count, sum, total, want);
    gmp_chan_release(ch);
    free(producers);
    free(consumers);
    char extra[96];
    snprintf(extra, sizeof extra, " producers=%" PRId64 " consumers=%" PRId64 " cap=%" PRId64,
             np, nc, cap);
    bench_result(WORKLOAD, p, total, wall, extra);
    return 0;
}
