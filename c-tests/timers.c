/*
 * timers: gmp_now and gmp_sleep, and the scheduler's timer heaps.
 *
 * 1. gmp_now is monotonic; gmp_sleep sleeps at least as long as asked, and not much more,
 *    in a goroutine and on the (foreign) main thread, where it is one kernel sleep.
 * 2. A sleeping goroutine does not hold its processor: at GOMAXPROCS=1, another goroutine
 *    finishes a burst of work while the first sleeps.
 * 3. 100,000 goroutines sleeping 10 ms all wake within a short time of their deadline
 *    (generous bound: no sleeper oversleeps by 500 ms; reported as the worst oversleep).
 * 4. With only sleepers, idle threads sleep until the next deadline instead of spinning:
 *    process CPU time over a 300 ms sleep stays far below 300 ms.
 */
#include "check.h"

#include <stdatomic.h>
#include <stdio.h>
#include <sys/resource.h>

#include <gmp-sched/gmp.h>

#define MS 1000000LL

static gmp_wg wg = GMP_WG_INIT;
static atomic_llong worst_over, lo_over = 1LL << 62;

static void sleeper(void *arg)
{
    int64_t ns = (int64_t)(intptr_t)arg;
    int64_t t0 = gmp_now();
    CHECK_OK(gmp_sleep(ns));
    int64_t over = gmp_now() - t0 - ns;
    long long cur = atomic_load(&worst_over);
    while (over > cur && !atomic_compare_exchange_weak(&worst_over, &cur, over))
        ;
    cur = atomic_load(&lo_over);
    while (over < cur && !atomic_compare_exchange_weak(&lo_over, &cur, over))
        ;
    CHECK_OK(gmp_wg_done(&wg));
}

static atomic_int worker_done_before_wake;
static atomic_int sleeper_woke;

static void short_sleeper(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_sleep(100 * MS));
    atomic_store(&sleeper_woke, 1);
    CHECK_OK(gmp_wg_done(&wg));
}

static void worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 1000; i++)
        CHECK_OK(gmp_yield());
    if (!atomic_load(&sleeper_woke))
        atomic_store(&worker_done_before_wake, 1);
    CHECK_OK(gmp_wg_done(&wg));
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

int main(void)
{
    /* 1. */
    int64_t a = gmp_now(), b = gmp_now();
    CHECK(a > 0 && b >= a);
    int64_t t0 = gmp_now();
    CHECK_OK(gmp_sleep(20 * MS)); /* foreign thread */
    int64_t el = gmp_now() - t0;
    CHECK(el >= 20 * MS && el < 520 * MS);
    /* ... in one kernel sleep, not a loop of short or empty ones (a thread's voluntary
     * context switches count its sleeps; a loop shows as CPU time). */
    struct rusage r0, r1;
    getrusage(RUSAGE_THREAD, &r0);
    CHECK_OK(gmp_sleep(100 * MS));
    getrusage(RUSAGE_THREAD, &r1);
    CHECK(r1.ru_nvcsw - r0.ru_nvcsw <= 3);
    double thread_cpu = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) +
                        (double)(r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
                        (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) / 1e6 +
                        (double)(r1.ru_stime.tv_usec - r0.ru_stime.tv_usec) / 1e6;
    CHECK(thread_cpu < 0.005);
    CHECK_OK(gmp_sleep(0));
    CHECK_OK(gmp_sleep(-5));

    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK(gmp_go(sleeper, (void *)(intptr_t)(20 * MS)) > 0);
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK(atomic_load(&lo_over) >= 0);
    CHECK(atomic_load(&worst_over) < 500 * MS);

    /* 2. */
    CHECK(gmp_maxprocs(1) > 0);
    CHECK_OK(gmp_wg_add(&wg, 2));
    CHECK(gmp_go(short_sleeper, NULL) > 0);
    CHECK(gmp_go(worker, NULL) > 0);
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK(atomic_load(&worker_done_before_wake) == 1);
    CHECK(gmp_maxprocs(2) > 0);

    /* 3. */
    enum { N = 100000 };
    atomic_store(&worst_over, 0);
    atomic_store(&lo_over, 1LL << 62);
    int64_t s0 = gmp_now();
    CHECK_OK(gmp_wg_add(&wg, N));
    for (int i = 0; i < N; i++)
        CHECK(gmp_go(sleeper, (void *)(intptr_t)(10 * MS)) > 0);
    CHECK_OK(gmp_wg_wait(&wg));
    double wall = (gmp_now() - s0) / 1e6;
    printf("100000 x 10 ms sleepers: wall %.1f ms, oversleep %.2f..%.2f ms\n", wall,
           atomic_load(&lo_over) / 1e6, atomic_load(&worst_over) / 1e6);
    CHECK(atomic_load(&lo_over) >= 0);
    CHECK(atomic_load(&worst_over) < 500 * MS);

    /* 4. */
    double c0 = cpu_seconds();
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK(gmp_go(sleeper, (void *)(intptr_t)(300 * MS)) > 0);
    CHECK_OK(gmp_wg_wait(&wg));
    double used = cpu_seconds() - c0;
    printf("CPU over a 300 ms sleep: %.1f ms\n", used * 1e3);
    CHECK(used < 0.1);
    return 0;
}
