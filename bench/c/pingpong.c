/*
 * pingpong: a driver (Go: main) and one echo goroutine bounce an int64 over two
 * unbuffered channels N times: the driver sends i on ping, echo receives it and sends
 * i+1 on pong, the driver receives it. The driver is a root goroutine for which the C
 * main thread only waits (-shape 0: two goroutine switches per round trip), or the C
 * main thread itself (-shape 1: each hand-off crosses between a foreign thread and a
 * goroutine). Reports ns per round trip.
 * Check: every reply is the value sent plus one. Mirror: bench/go/pingpong/main.go.
 */
#include "bench.h"

static const char *const WORKLOAD = "pingpong";

static int64_t n = 1000000;
static gmp_chan *ping, *pong;
static gmp_wg wg = GMP_WG_INIT;
static int64_t bad;          /* replies that were not the value sent plus one (driver) */
static int64_t errors;       /* channel calls that failed (driver) */
static int64_t echo_errors;  /* channel calls that failed (echo) */
static int64_t spawn_error;

static void echo(void *arg)
{
    (void)arg;
    for (int64_t i = 0; i < n; i++) {
        int64_t v;
        if (gmp_chan_recv(ping, &v) != 0) {
            echo_errors++;
            break;
        }
        v++;
        if (gmp_chan_send(pong, &v) != 0) {
            echo_errors++;
            break;
        }
    }
    gmp_wg_done(&wg);
}

/* What Go's main does; run by a root goroutine or by the C main thread (-shape). */
static void driver(void *arg)
{
    (void)arg;
    gmp_wg_add(&wg, 1);
    int64_t id = gmp_go(echo, NULL);
    if (id <= 0) {
        spawn_error = id;
        gmp_wg_done(&wg);
    } else {
        for (int64_t i = 0; i < n; i++) {
            int64_t v = i;
            if (gmp_chan_send(ping, &v) != 0 || gmp_chan_recv(pong, &v) != 0) {
                errors++;
                /* Unblock echo if it waits on a channel we no longer serve. */
                gmp_chan_close(ping);
                gmp_chan_close(pong);
                break;
            }
            if (v != i + 1)
                bad++;
        }
    }
    gmp_wg_wait(&wg);
}

int main(int argc, char **argv)
{
    int64_t procs = 0;
    const bench_flag flags[] = {
        {"n", &n, "round trips"},
        {"procs", &procs, "GOMAXPROCS (0: leave the runtime's default)"},
        BENCH_SHAPE_FLAG,
    };
    bench_parse(argc, argv, flags, sizeof flags / sizeof flags[0]);
    if (n <= 0)
        bench_fail(WORKLOAD, "-n %" PRId64 " out of range", n);
    int p = bench_setup_procs(WORKLOAD, procs);

    int rc = gmp_chan_make(&ping, sizeof(int64_t), 0);
    if (rc == 0)
        rc = gmp_chan_make(&pong, sizeof(int64_t), 0);
    if (rc != 0)
        bench_fail(WORKLOAD, "gmp_chan_make = %d", rc);

    int64_t t0 = bench_now_ns();
    bench_drive(WORKLOAD, driver, NULL);
    int64_t wall = bench_now_ns() - t0;

    if (spawn_error != 0)
        bench_fail(WORKLOAD, "gmp_go(echo) = %" PRId64, spawn_error);
    if (errors != 0 || echo_errors != 0)
        bench_fail(WORKLOAD, "channel send/recv failed (driver %" PRId64 ", echo %" PRId64 ")",
                   errors, echo_errors);
    if (bad != 0)
        bench_fail(WORKLOAD, "%" PRId64 " replies were not the value sent plus one", bad);
    gmp_chan_release(ping);
    gmp_chan_release(pong);
    bench_result(WORKLOAD, p, n, wall, "");
    return 0;
}
