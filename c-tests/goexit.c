/*
 * goexit.c -- gmp_goexit() ends the calling goroutine from any call depth.
 *
 * Scenario: N goroutines each call down three functions; the innermost signals the
 * WaitGroup and calls gmp_goexit(). Checks: no code after gmp_goexit() runs (neither in
 * the innermost function nor in its callers), every goroutine reached it, the
 * WaitGroup completes, gmp_num_goroutine() drops back to 0, and the stacks are reusable
 * (a second round behaves the same). On the foreign main thread gmp_goexit() is -EPERM.
 */
#include "check.h"

#include <errno.h>
#include <gmp-sched/gmp.h>
#include <stdatomic.h>

#define N 1000

static atomic_long reached;
static atomic_long after;
static gmp_wg wg = GMP_WG_INIT;

static void level3(void)
{
    atomic_fetch_add(&reached, 1);
    CHECK_OK(gmp_wg_done(&wg));
    int r = gmp_goexit();
    atomic_fetch_add(&after, 1);
    fprintf(stderr, "gmp_goexit returned %d in a goroutine\n", r);
}

static void level2(void)
{
    level3();
    atomic_fetch_add(&after, 1);
}

static void level1(void *arg)
{
    (void)arg;
    level2();
    atomic_fetch_add(&after, 1);
}

static void round_of(long n)
{
    long before = atomic_load(&reached);
    CHECK_OK(gmp_wg_add(&wg, n));
    for (long i = 0; i < n; i++)
        CHECK(gmp_go(level1, NULL) > 0);
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_EQ(atomic_load(&reached) - before, n);

    double deadline = now_sec() + 10.0;
    while (gmp_num_goroutine() != 0 && now_sec() < deadline)
        sleep_ms(1);
    CHECK_EQ(gmp_num_goroutine(), 0);
    CHECK_EQ(atomic_load(&after), 0);
}

int main(void)
{
    CHECK_EQ(gmp_goexit(), -EPERM);
    round_of(N);
    round_of(N);
    CHECK_EQ(gmp_goexit(), -EPERM);
    printf("goexit: ok\n");
    return 0;
}
