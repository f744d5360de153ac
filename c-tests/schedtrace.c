/*
 * schedtrace.c -- a workload for GMP_DEBUG=schedtrace=MS[,scheddetail=1].
 *
 * Scenario: WORKERS goroutines alternate arithmetic and gmp_yield() for RUN_SEC seconds
 * while the runtime prints its scheduler trace to stderr. This program checks only the
 * workload and prints "gomaxprocs=N" on stdout; the harness (tests/c_debug.rs) parses
 * every "SCHED " line of stderr against Go's format and checks it against N.
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <stdatomic.h>
#include <stdint.h>

#define WORKERS 4
#define RUN_SEC 0.4

static atomic_llong rounds;
static volatile uint64_t sink;

static void worker(void *arg)
{
    gmp_wg *wg = arg;
    uint64_t x = 7;
    double t0 = now_sec();
    while (now_sec() - t0 < RUN_SEC) {
        for (int i = 0; i < 1000; i++)
            x = x * 6364136223846793005ULL + 1;
        atomic_fetch_add(&rounds, 1);
        CHECK_EQ(gmp_yield(), 0);
    }
    sink = x;
    CHECK_OK(gmp_wg_done(wg));
}

int main(void)
{
    int procs = gmp_maxprocs(0);
    CHECK(procs >= 1);
    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&wg, WORKERS));
    for (int i = 0; i < WORKERS; i++)
        CHECK(gmp_go(worker, &wg) > 0);
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK(atomic_load(&rounds) > 0);
    printf("gomaxprocs=%d\n", procs);
    fflush(stdout);
    return 0;
}
