/*
 * syscall_pinned.c -- pinned goroutines keep their thread across blocking calls.
 *
 * At GOMAXPROCS=2, two goroutines started with GMP_GO_PINNED each make 10,000 blocking
 * calls (gmp_blocking of a function that sometimes sleeps 50 us, so sysmon retakes the
 * processor and the return takes the slow path; every 100th call a gmp_sleep, every
 * 10th a gmp_yield), while 6 default goroutines yield in a loop, sleeping 50 us every
 * 200 yields, so that stealing goes on.
 * Each pinned goroutine goes on past its 10,000 calls until a steal has happened (up to
 * 10 s more: the workload steals in most runs' first 100 ms, not in all).
 * Checks: each pinned goroutine's gettid() never changes; stealing happened.
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <stdatomic.h>
#include <sys/syscall.h>

static long tid(void)
{
    return (long)syscall(SYS_gettid);
}

static atomic_int stop;

static int64_t maybe_sleep(void *arg)
{
    long i = (long)(intptr_t)arg;
    if (i % 7 == 0)
        usleep(50);
    return (int64_t)getppid();
}

static uint64_t steals(void)
{
    gmp_sched_stats s;
    CHECK_OK(gmp_stats(&s, NULL, 0));
    return s.steals;
}

static void pinned(void *arg)
{
    gmp_wg *wg = arg;
    long t0 = tid();
    int64_t deadline = gmp_now() + 10 * (int64_t)1000000000;
    for (long i = 0; i < 10000 || ((i % 100 != 0 || steals() == 0) && gmp_now() < deadline);
         i++) {
        CHECK(gmp_blocking(maybe_sleep, (void *)(intptr_t)i) > 0);
        CHECK_EQ(tid(), t0);
        if (i % 100 == 0)
            CHECK_OK(gmp_sleep(10000));
        if (i % 10 == 0)
            CHECK_OK(gmp_yield());
        CHECK_EQ(tid(), t0);
    }
    CHECK_OK(gmp_wg_done(wg));
}

static void yielder(void *arg)
{
    gmp_wg *wg = arg;
    for (long n = 1; !atomic_load(&stop); n++) {
        volatile int x = 0;
        for (int i = 0; i < 1000; i++)
            x += i;
        CHECK_OK(gmp_yield());
        /* A yield stays on this P's queue; a short sleep now and then lets the Ps go
         * idle and steal from each other. */
        if (n % 200 == 0)
            CHECK_OK(gmp_sleep(50 * 1000));
    }
    CHECK_OK(gmp_wg_done(wg));
}

int main(void)
{
    CHECK_OK(gmp_maxprocs(2));
    gmp_wg bg = GMP_WG_INIT, wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&bg, 6));
    for (int i = 0; i < 6; i++)
        CHECK_OK(gmp_go(yielder, &bg));
    gmp_attr a = {0};
    a.flags = GMP_GO_PINNED;
    CHECK_OK(gmp_wg_add(&wg, 2));
    double t0 = now_sec();
    for (int i = 0; i < 2; i++)
        CHECK_OK(gmp_go_attr(pinned, &wg, &a));
    CHECK_OK(gmp_wg_wait(&wg));
    atomic_store(&stop, 1);
    CHECK_OK(gmp_wg_wait(&bg));
    uint64_t n = steals();
    printf("2 pinned x 10000+ blocking calls in %.0f ms; steals %llu\n", (now_sec() - t0) * 1e3,
           (unsigned long long)n);
    CHECK(n > 0);
    return 0;
}
