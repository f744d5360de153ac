/*
 * foreign_wait.c -- WaitGroups between foreign threads and goroutines, both ways.
 *
 * Scenario 1 (goroutine -> foreign): THREADS pthreads, none of them an M, each spawn
 * PER_THREAD goroutines and wait on their own WaitGroup. Each goroutine records
 * gmp_goid(); the thread records what gmp_go returned. Checks: ids match, are > 0 and
 * unique across all threads, gmp_goid() is 0 on the foreign threads.
 *
 * Scenario 2 (foreign -> goroutine): at GOMAXPROCS=1 a goroutine waits on a WaitGroup
 * that only a pthread completes. The pthread first requires a "ticker" goroutine to make
 * progress while the waiter is blocked: if the wait held the only P (blocked the M
 * instead of parking the goroutine), the ticker would stop and the check fails.
 *
 * Scenario 3 (Add while waited on): two goroutines and a pthread wait on a WaitGroup at
 * counter 1; main adds 2 (allowed: the counter is above zero), then Done three times. The
 * waiters must not be released before the last Done, and all three are released by it.
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define THREADS 4
#define PER_THREAD 1000

struct slot {
    int64_t returned; /* written by the spawning thread */
    int64_t seen;     /* written by the goroutine */
    gmp_wg *wg;
};

static struct slot slots[THREADS][PER_THREAD];

static void record_goid(void *arg)
{
    struct slot *s = arg;
    s->seen = gmp_goid();
    CHECK_OK(gmp_wg_done(s->wg));
}

static void *spawner_thread(void *arg)
{
    struct slot *mine = arg;
    gmp_wg wg = GMP_WG_INIT;
    CHECK_EQ(gmp_goid(), 0);
    CHECK_OK(gmp_wg_add(&wg, PER_THREAD));
    for (int i = 0; i < PER_THREAD; i++) {
        mine[i].wg = &wg;
        mine[i].seen = -1;
    }
    for (int i = 0; i < PER_THREAD; i++) {
        int64_t id = gmp_go(record_goid, &mine[i]);
        CHECK(id > 0);
        mine[i].returned = id;
    }
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_EQ(gmp_goid(), 0);
    return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void scenario_goroutine_to_foreign(void)
{
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++)
        CHECK_EQ(pthread_create(&th[t], NULL, spawner_thread, slots[t]), 0);
    for (int t = 0; t < THREADS; t++)
        CHECK_EQ(pthread_join(th[t], NULL), 0);

    static int64_t ids[THREADS * PER_THREAD];
    for (int t = 0; t < THREADS; t++) {
        for (int i = 0; i < PER_THREAD; i++) {
            CHECK(slots[t][i].seen > 0);
            CHECK_EQ(slots[t][i].seen, slots[t][i].returned);
            ids[t * PER_THREAD + i] = slots[t][i].seen;
        }
    }
    qsort(ids, THREADS * PER_THREAD, sizeof ids[0], cmp_i64);
    for (int i = 1; i < THREADS * PER_THREAD; i++)
        CHECK(ids[i] != ids[i - 1]);
}

static gmp_wg gate = GMP_WG_INIT;     /* completed by the pthread */
static gmp_wg finished = GMP_WG_INIT; /* waiter and ticker -> main */
static atomic_int waiter_blocking;           /* the waiter is about to wait on gate */
static atomic_int released;                  /* set by the pthread before gmp_wg_done */
static atomic_int stop_ticker;
static atomic_long ticks;

static void waiter(void *arg)
{
    (void)arg;
    CHECK(gmp_goid() > 0);
    atomic_store(&waiter_blocking, 1);
    CHECK_OK(gmp_wg_wait(&gate));
    CHECK_EQ(atomic_load(&released), 1);
    atomic_store(&stop_ticker, 1);
    CHECK_OK(gmp_wg_done(&finished));
}

static void ticker(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop_ticker)) {
        atomic_fetch_add(&ticks, 1);
        CHECK_EQ(gmp_yield(), 0);
    }
    CHECK_OK(gmp_wg_done(&finished));
}

static void *releaser_thread(void *arg)
{
    (void)arg;
    double deadline = now_sec() + 20.0;
    while (!atomic_load(&waiter_blocking) && now_sec() < deadline)
        sleep_ms(1);
    CHECK_EQ(atomic_load(&waiter_blocking), 1);
    long t0 = atomic_load(&ticks);
    while (atomic_load(&ticks) < t0 + 1000 && now_sec() < deadline)
        sleep_ms(1);
    if (atomic_load(&ticks) < t0 + 1000)
        fprintf(stderr, "ticker stalled at %ld while the waiter was blocked\n",
                atomic_load(&ticks));
    CHECK(atomic_load(&ticks) >= t0 + 1000);
    atomic_store(&released, 1);
    CHECK_OK(gmp_wg_done(&gate));
    return NULL;
}

static void scenario_foreign_to_goroutine(void)
{
    CHECK_OK(gmp_maxprocs(1));
    CHECK_EQ(gmp_maxprocs(0), 1);
    CHECK_OK(gmp_wg_add(&gate, 1));
    CHECK_OK(gmp_wg_add(&finished, 2));
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, releaser_thread, NULL), 0);
    CHECK(gmp_go(ticker, NULL) > 0);
    CHECK(gmp_go(waiter, NULL) > 0);
    CHECK_OK(gmp_wg_wait(&finished));
    CHECK_EQ(pthread_join(th, NULL), 0);
}

/* ---- scenario 3 ---- */

static gmp_wg grow_wg = GMP_WG_INIT;
static atomic_int grow_released;

static void grow_waiter(void *arg)
{
    CHECK_OK(gmp_wg_wait(&grow_wg));
    atomic_fetch_add(&grow_released, 1);
    CHECK_OK(gmp_wg_done(arg));
}

static void *grow_waiter_thread(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_wg_wait(&grow_wg));
    atomic_fetch_add(&grow_released, 1);
    return NULL;
}

/* Add with a positive delta while the counter is above zero and waiters wait (Go allows
 * it): no abort, and the waiters are released only when the counter reaches zero. */
static void scenario_add_while_waited(void)
{
    gmp_wg done = GMP_WG_INIT;
    pthread_t t;
    CHECK_OK(gmp_wg_add(&grow_wg, 1));
    CHECK_OK(gmp_wg_add(&done, 2));
    CHECK(gmp_go(grow_waiter, &done) > 0);
    CHECK(gmp_go(grow_waiter, &done) > 0);
    CHECK_EQ(pthread_create(&t, NULL, grow_waiter_thread, NULL), 0);
    /* Three waiters counted in the state word's low half (two goroutines parked). */
    WAIT_UNTIL((atomic_load((_Atomic uint64_t *)&grow_wg.state) & 0xffffffffu) == 3, 10.0);
    WAIT_BLOCKED(2);
    CHECK_OK(gmp_wg_add(&grow_wg, 2)); /* counter 1 -> 3 with waiters */
    CHECK_OK(gmp_wg_done(&grow_wg));
    CHECK_OK(gmp_wg_done(&grow_wg));
    WAIT_BLOCKED(2);
    CHECK_EQ(atomic_load(&grow_released), 0); /* counter still 1 */
    CHECK_OK(gmp_wg_done(&grow_wg));
    CHECK_OK(gmp_wg_wait(&done));
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(atomic_load(&grow_released), 3);
    CHECK_EQ(atomic_load((_Atomic uint64_t *)&grow_wg.state), 0);
}

int main(void)
{
    CHECK_EQ(gmp_goid(), 0);
    scenario_goroutine_to_foreign();
    scenario_foreign_to_goroutine();
    scenario_add_while_waited();
    CHECK_EQ(gmp_goid(), 0);
    printf("foreign_wait: ok\n");
    return 0;
}
