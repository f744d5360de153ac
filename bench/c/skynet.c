/*
 * skynet: Go's skynet benchmark. A node of size S > 1 makes a channel with capacity div
 * (gmp_chan_make), spawns div children of size S/div numbered num + i*S/div, receives
 * their div sums, releases the channel and sends the total on its parent's channel; a
 * leaf (size 1) sends its number. The driver (Go: main; a root goroutine with -shape 0,
 * the C main thread with -shape 1) spawns the top node (size n, number 0) and receives
 * the total. n
 * must be a power of div; n = 10^6, div = 10 spawns 1,111,111 goroutines. Reports ns
 * per leaf. Check: the total is n(n-1)/2 (499999500000 for n = 10^6).
 * Mirror: bench/go/skynet/main.go.
 *
 * Channel ownership (api3's reference rule): a parent's receive can return before the
 * child's send has, so each child holds its own reference to the channel it sends on
 * (the parent retains it before the spawn, the child releases it after its send) and the
 * parent releases its own after its last receive. Whoever releases last frees it, after
 * every operation on it has finished. Go's GC does this bookkeeping for free.
 */
#include "bench.h"

#include <stdatomic.h>

static const char *const WORKLOAD = "skynet";

#define MAX_DIV 64

typedef struct node {
    gmp_chan *c; /* where to send the sum; the node owns one reference */
    int64_t num, size;
} node;

static int64_t div_ = 10;
static int64_t total;
static atomic_int errors;       /* failed library calls */
static atomic_int first_error;  /* the first one's result */

static void record_error(int rc)
{
    int zero = 0;
    atomic_compare_exchange_strong(&first_error, &zero, rc);
    atomic_fetch_add(&errors, 1);
}

static void skynet(void *arg)
{
    node me = *(const node *)arg; /* the parent's copy lives until it has our sum */
    int64_t sum = 0;
    if (me.size == 1) {
        sum = me.num;
    } else {
        gmp_chan *rc;
        int r = gmp_chan_make(&rc, sizeof(int64_t), (size_t)div_);
        if (r != 0) {
            record_error(r);
        } else {
            node kids[MAX_DIV];
            int64_t sub = me.size / div_, spawned = 0;
            for (int64_t i = 0; i < div_; i++) {
                kids[i] = (node){.c = rc, .num = me.num + i * sub, .size = sub};
                gmp_chan_retain(rc); /* the child's reference */
                int64_t id = gmp_go(skynet, &kids[i]);
                if (id <= 0) {
                    gmp_chan_release(rc);
                    record_error((int)id);
                    continue;
                }
                spawned++;
            }
            for (int64_t i = 0; i < spawned; i++) {
                int64_t v;
                r = gmp_chan_recv(rc, &v);
                if (r != 0) {
                    record_error(r);
                    break;
                }
                sum += v;
            }
            gmp_chan_release(rc);
        }
    }
    int r = gmp_chan_send(me.c, &sum);
    if (r != 0)
        record_error(r);
    gmp_chan_release(me.c);
}

/* What Go's main does; run by a root goroutine or by the C main thread (-shape). */
static void driver(void *arg)
{
    int64_t n = *(const int64_t *)arg;
    gmp_chan *c;
    int r = gmp_chan_make(&c, sizeof(int64_t), 1);
    if (r != 0) {
        record_error(r);
    } else {
        node top = {.c = c, .num = 0, .size = n};
        gmp_chan_retain(c); /* the top node's reference */
        int64_t id = gmp_go(skynet, &top);
        if (id <= 0) {
            gmp_chan_release(c);
            record_error((int)id);
        } else if ((r = gmp_chan_recv(c, &total)) != 0) {
            record_error(r);
        }
        gmp_chan_release(c);
    }
}

int main(int argc, char **argv)
{
    int64_t n = 1000000, procs = 0;
    const bench_flag flags[] = {
        {"n", &n, "leaves (a power of -div)"},
        {"div", &div_, "children per node"},
        {"procs", &procs, "GOMAXPROCS (0: leave the runtime's default)"},
        BENCH_SHAPE_FLAG,
    };
    bench_parse(argc, argv, flags, sizeof flags / sizeof flags[0]);
    if (div_ < 2 || div_ > MAX_DIV)
        bench_fail(WORKLOAD, "-div %" PRId64 " out of range", div_);
    if (n <= 0 || n > (INT64_C(1) << 31))
        bench_fail(WORKLOAD, "-n %" PRId64 " out of range", n);
    int levels = 0;
    for (int64_t s = n; s > 1; s /= div_) {
        if (s % div_ != 0)
            bench_fail(WORKLOAD, "-n %" PRId64 " is not a power of -div %" PRId64, n, div_);
        levels++;
    }
    int p = bench_setup_procs(WORKLOAD, procs);

    int64_t t0 = bench_now_ns();
    bench_drive(WORKLOAD, driver, &n);
    int64_t wall = bench_now_ns() - t0;

    if (atomic_load(&errors) != 0)
        bench_fail(WORKLOAD, "%d library calls failed, the first with %d", atomic_load(&errors),
                   atomic_load(&first_error));
    int64_t want = n * (n - 1) / 2;
    if (total != want)
        bench_fail(WORKLOAD, "total %" PRId64 ", want %" PRId64, total, want);
    char extra[64];
    snprintf(extra, sizeof extra, " div=%" PRId64 " levels=%d", div_, levels);
    bench_result(WORKLOAD, p, n, wall, extra);
    return 0;
}
