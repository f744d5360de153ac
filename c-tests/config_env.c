/*
 * config_env.c -- prints the configuration the runtime took from the environment, for
 * tests/c_api.rs to compare: "maxprocs N" (gmp_maxprocs(0)) and "max_threads N" (the
 * fuse gmp_set_max_threads replaces, which it returns). The harness runs it without
 * GMP_* variables and with out-of-range ones (GMP_MAXPROCS=100000, GMP_MAX_THREADS=0,
 * GMP_STACK_SIZE=2G): each must be reported on stderr as "gmp: ignoring ..." and the
 * defaults used. A goroutine runs too, so that the default stack size is exercised.
 */
#include "check.h"

#include <gmp-sched/gmp.h>

static void touch(void *arg)
{
    gmp_wg *wg = arg;
    volatile char buf[8192];
    buf[0] = 1;
    buf[sizeof buf - 1] = buf[0];
    CHECK_OK(gmp_wg_done(wg));
}

int main(void)
{
    gmp_wg wg = GMP_WG_INIT;
    int procs = gmp_maxprocs(0);
    CHECK(procs >= 1 && procs <= GMP_MAX_PROCS);
    int max_threads = gmp_set_max_threads(10000);
    CHECK(max_threads >= 1);
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK_OK(gmp_go(touch, &wg));
    CHECK_OK(gmp_wg_wait(&wg));
    printf("maxprocs %d\nmax_threads %d\n", procs, max_threads);
    return 0;
}
