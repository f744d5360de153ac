/*
 * gfree_sizes.c -- dead goroutine records are reused whatever their stack size.
 *
 * Scenario: a driver goroutine starts goroutines one at a time with gmp_go_attr and waits
 * for each (so one is alive at a time): 1,000,000 with 64 KiB stacks (not the default),
 * then 200,000 cycling through four sizes (default, 64 KiB, 24 KiB + a bit, 1 MiB); then
 * the C main thread does the same 20,000 times. Checks: every goroutine ran;
 * gmp_stats().allg (goroutine records ever allocated) grows by less than 10,000 over all
 * of it, and the resident set by less than 32 MiB (a record per spawn would be over
 * 100 MB); the records are really reused (another 10,000 spawns allocate almost none).
 * Then the count from below: 2,000 goroutines parked at once need 2,000 records (allg is
 * at least 2,000), and the records are packed, many to an allocation: malloc's
 * bytes in use (mallinfo2) grow by less than 16 MiB for them.
 */
#include "check.h"

#include <errno.h>
#include <gmp-sched/gmp.h>
#include <malloc.h>
#include <stdatomic.h>

#define N_64K 1000000L
#define N_MIXED 200000L
#define N_FROM_MAIN 20000L

static const size_t sizes[4] = {0, 64 * 1024, 24 * 1024 + 100, 1024 * 1024};

static atomic_long ran;

static void child(void *arg)
{
    /* A local array below the first page: the stacks are really used. */
    volatile char scratch[8192];
    scratch[0] = 1;
    (void)scratch[0];
    atomic_fetch_add_explicit(&ran, 1, memory_order_relaxed);
    CHECK_EQ(gmp_wg_done(arg), 0);
}

struct drive {
    long n;
    int mixed; /* cycle through `sizes` instead of 64 KiB */
    gmp_wg done;
};

static void spawn_one(long i, int mixed)
{
    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&wg, 1));
    gmp_attr a = {0};
    a.stack_size = mixed ? sizes[i % 4] : 64 * 1024;
    CHECK_OK(gmp_go_attr(child, &wg, &a));
    CHECK_OK(gmp_wg_wait(&wg));
}

static void driver(void *arg)
{
    struct drive *d = arg;
    for (long i = 0; i < d->n; i++)
        spawn_one(i, d->mixed);
    CHECK_EQ(gmp_wg_done(&d->done), 0);
}

static void run_driver(long n, int mixed)
{
    struct drive d = {n, mixed, GMP_WG_INIT};
    long before = atomic_load(&ran);
    CHECK_OK(gmp_wg_add(&d.done, 1));
    CHECK_OK(gmp_go(driver, &d));
    CHECK_OK(gmp_wg_wait(&d.done));
    CHECK_EQ(atomic_load(&ran) - before, n);
}

#define N_PARKED 2000
static gmp_chan *release;

static void parked(void *arg)
{
    long v;
    CHECK_EQ(gmp_chan_recv(release, &v), -EPIPE); /* closed */
    CHECK_OK(gmp_wg_done(arg));
}

static long malloc_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return (long)(mi.uordblks + mi.hblkhd);
}

static long allg(void)
{
    return (long)sched_stats().allg;
}

int main(void)
{
    /* Warm up: the runtime, its threads and the first Gs and stacks of each size. */
    run_driver(1000, 1);
    long g0 = allg(), r0 = rss_kib();

    run_driver(N_64K, 0);
    long g1 = allg(), r1 = rss_kib();
    printf("gfree_sizes: %ld spawns with 64 KiB stacks: allg %ld -> %ld, rss %ld -> %ld KiB\n",
           N_64K, g0, g1, r0, r1);
    CHECK(g1 - g0 < 10000);

    run_driver(N_MIXED, 1);
    long g2 = allg();
    printf("gfree_sizes: %ld spawns of mixed sizes: allg %ld\n", N_MIXED, g2);
    CHECK(g2 - g0 < 10000);

    long before = atomic_load(&ran);
    for (long i = 0; i < N_FROM_MAIN; i++)
        spawn_one(i, 1);
    CHECK_EQ(atomic_load(&ran) - before, N_FROM_MAIN);
    long g3 = allg(), r3 = rss_kib();
    printf("gfree_sizes: %ld spawns from main: allg %ld, rss %ld KiB\n", N_FROM_MAIN, g3, r3);
    CHECK(g3 - g0 < 10000);
    CHECK(r3 - r0 < 32 * 1024);

    /* The records are reused, not merely few: more spawns need (almost) none. */
    long g4 = allg();
    run_driver(10000, 1);
    CHECK(allg() - g4 < 1000);

    /* Records for goroutines alive at once: counted, and packed. */
    CHECK_OK(gmp_chan_make(&release, sizeof(long), 0));
    long g5 = allg(), m5 = malloc_in_use();
    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&wg, N_PARKED));
    for (long i = 0; i < N_PARKED; i++)
        CHECK_OK(gmp_go(parked, &wg));
    WAIT_UNTIL(all_goroutines_blocked(), 10);
    long g6 = allg(), m6 = malloc_in_use();
    printf("gfree_sizes: %d parked at once: allg %ld -> %ld, malloc in use +%ld KiB\n", N_PARKED,
           g5, g6, (m6 - m5) / 1024);
    CHECK(g6 >= N_PARKED); /* records ever allocated >= records alive at once */
    CHECK(m6 - m5 < 16L << 20);
    CHECK_OK(gmp_chan_close(release));
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_OK(gmp_chan_release(release));
    return 0;
}
