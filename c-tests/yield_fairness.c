/*
 * yield_fairness.c -- gmp_yield() at GOMAXPROCS=1 is round-robin enough.
 *
 * Scenario: at gmp_maxprocs(1), N goroutines start together (each yields until all have
 * arrived) and then loop gmp_yield(), each counting its own turns, until TOTAL turns
 * have been taken between them. Checks: no goroutine starved (every count > 0) and the
 * largest count is at most twice the smallest.
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <stdatomic.h>

#define N 4
#define TOTAL 400000L

static atomic_int arrived;
static atomic_long total;
static long counts[N]; /* each written by its own goroutine, read after the wait */
static gmp_wg wg = GMP_WG_INIT;

static void looper(void *arg)
{
    long *mine = arg;
    atomic_fetch_add(&arrived, 1);
    while (atomic_load(&arrived) < N)
        CHECK_EQ(gmp_yield(), 0);
    while (atomic_fetch_add(&total, 1) < TOTAL) {
        (*mine)++;
        CHECK_EQ(gmp_yield(), 0);
    }
    CHECK_OK(gmp_wg_done(&wg));
}

int main(void)
{
    CHECK_OK(gmp_maxprocs(1));
    CHECK_EQ(gmp_maxprocs(0), 1);
    CHECK_OK(gmp_wg_add(&wg, N));
    for (int i = 0; i < N; i++)
        CHECK(gmp_go(looper, &counts[i]) > 0);
    CHECK_OK(gmp_wg_wait(&wg));

    long min = counts[0], max = counts[0], sum = 0;
    for (int i = 0; i < N; i++) {
        printf("yield_fairness: goroutine %d: %ld turns\n", i, counts[i]);
        if (counts[i] < min)
            min = counts[i];
        if (counts[i] > max)
            max = counts[i];
        sum += counts[i];
    }
    CHECK_EQ(sum, TOTAL);
    CHECK(min > 0);
    CHECK(max <= 2 * min);
    return 0;
}
