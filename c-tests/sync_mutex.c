/*
 * sync_mutex.c -- gmp_mutex: mutual exclusion, trylock, static initializer, and the
 * starvation-mode hand-off.
 *
 * Scenario 1 (static initializer, trylock): a GMP_MUTEX_INIT mutex is free: trylock
 * takes it; a second trylock (from main and from a goroutine) is -EBUSY; after unlock,
 * trylock succeeds again.
 *
 * Scenario 2 (exclusion under load): 8 goroutines x 100,000 increments of a plain
 * counter under one mutex, at GOMAXPROCS 1 and then 2 -- the second run with 2 foreign
 * pthreads incrementing concurrently too. Every 1,000th critical section yields while
 * holding the mutex, so the others queue on it and park (or sleep, the pthreads). An
 * atomic "inside" count must be 1 in every critical section; the counter must be exact.
 *
 * Scenario 3 (starvation mode): a "hog" goroutine relocks the mutex immediately after
 * each unlock, holding it ~20 us each time; a waiter calls lock once and must get it
 * within 2 s.
 *  a) GOMAXPROCS 1, the hog yields while holding the mutex (the only time the waiter
 *     runs). In normal mode alone the waiter could never win: it runs only while the hog
 *     holds the mutex. After 1 ms of waiting it marks the mutex starving, and the hog's
 *     next unlock hands the mutex (and the P) to it.
 *  b) GOMAXPROCS 2, a goroutine waiter against a hog that never yields.
 *  c) GOMAXPROCS 2, the foreign main thread as the waiter.
 */
#include "check.h"

#include <errno.h>
#include <gmp-sched/gmp.h>
#include <pthread.h>
#include <stdatomic.h>

#define GOROUTINES 8
#define PER_WORKER 100000
#define THREADS 2

static gmp_mutex mu = GMP_MUTEX_INIT;
static long counter; /* protected by mu */
static atomic_int inside;

static void increment_many(void)
{
    for (int i = 0; i < PER_WORKER; i++) {
        CHECK_OK(gmp_mutex_lock(&mu));
        CHECK_EQ(atomic_fetch_add(&inside, 1), 0);
        counter++;
        if (i % 1000 == 999)
            CHECK_OK(gmp_yield()); /* hold it across a switch: others must wait */
        CHECK_EQ(atomic_fetch_sub(&inside, 1), 1);
        CHECK_OK(gmp_mutex_unlock(&mu));
    }
}

static void worker(void *arg)
{
    increment_many();
    CHECK_OK(gmp_wg_done(arg));
}

static void *worker_thread(void *arg)
{
    (void)arg;
    increment_many();
    return NULL;
}

static void trylock_busy(void *arg)
{
    CHECK_EQ(gmp_mutex_trylock(&mu), -EBUSY);
    CHECK_OK(gmp_wg_done(arg));
}

static void scenario_trylock(void)
{
    static gmp_mutex fresh = GMP_MUTEX_INIT;
    CHECK_EQ(gmp_mutex_trylock(&fresh), 0);
    CHECK_EQ(gmp_mutex_trylock(&fresh), -EBUSY);
    CHECK_OK(gmp_mutex_unlock(&fresh));
    CHECK_EQ(gmp_mutex_lock(&fresh), 0);
    CHECK_OK(gmp_mutex_unlock(&fresh));

    gmp_wg wg = GMP_WG_INIT;
    CHECK_EQ(gmp_mutex_trylock(&mu), 0);
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK(gmp_go(trylock_busy, &wg) > 0);
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_OK(gmp_mutex_unlock(&mu));
    CHECK_EQ(gmp_mutex_trylock(&mu), 0);
    CHECK_OK(gmp_mutex_unlock(&mu));
}

static void scenario_counter(int procs, int threads)
{
    gmp_wg wg = GMP_WG_INIT;
    pthread_t th[THREADS];
    counter = 0;
    CHECK_OK(gmp_maxprocs(procs));
    CHECK_OK(gmp_wg_add(&wg, GOROUTINES));
    for (int i = 0; i < GOROUTINES; i++)
        CHECK(gmp_go(worker, &wg) > 0);
    for (int t = 0; t < threads; t++)
        CHECK_EQ(pthread_create(&th[t], NULL, worker_thread, NULL), 0);
    CHECK_OK(gmp_wg_wait(&wg));
    for (int t = 0; t < threads; t++)
        CHECK_EQ(pthread_join(th[t], NULL), 0);
    CHECK_OK(gmp_mutex_lock(&mu));
    CHECK_EQ(counter, (long)(GOROUTINES + threads) * PER_WORKER);
    CHECK_OK(gmp_mutex_unlock(&mu));
    printf("counter at GOMAXPROCS %d with %d threads: %ld\n", procs, threads, counter);
}

/* ---- starvation ---- */

static gmp_mutex contended = GMP_MUTEX_INIT;
static atomic_int waiter_done;
static atomic_long hog_rounds;

struct hog_args {
    gmp_wg *wg;
    int yield_inside; /* yield while holding the mutex */
};

static void hold_for_us(double us)
{
    double t0 = now_sec();
    while ((now_sec() - t0) * 1e6 < us) {
    }
}

static void hog(void *arg)
{
    struct hog_args *a = arg;
    double t0 = now_sec();
    while (!atomic_load(&waiter_done)) {
        CHECK_OK(gmp_mutex_lock(&contended));
        hold_for_us(20);
        if (a->yield_inside)
            CHECK_OK(gmp_yield());
        CHECK_OK(gmp_mutex_unlock(&contended));
        atomic_fetch_add(&hog_rounds, 1);
        /* The waiter failed to get the mutex for far too long. */
        CHECK(now_sec() - t0 < 5.0);
    }
    CHECK_OK(gmp_wg_done(a->wg));
}

/* Locks `contended` once while the hog runs; returns the seconds it took. */
static double wait_against_hog(void)
{
    while (atomic_load(&hog_rounds) < 100)
        CHECK_OK(gmp_yield());
    double t0 = now_sec();
    CHECK_OK(gmp_mutex_lock(&contended));
    double waited = now_sec() - t0;
    CHECK_OK(gmp_mutex_unlock(&contended));
    CHECK(waited < 2.0);
    atomic_store(&waiter_done, 1);
    return waited;
}

static double waited_ms;

static void waiter(void *arg)
{
    waited_ms = wait_against_hog() * 1e3;
    CHECK_OK(gmp_wg_done(arg));
}

static void scenario_starvation(int procs, int yield_inside, int foreign_waiter)
{
    gmp_wg wg = GMP_WG_INIT;
    struct hog_args a = {&wg, yield_inside};
    CHECK_OK(gmp_maxprocs(procs));
    atomic_store(&waiter_done, 0);
    atomic_store(&hog_rounds, 0);
    CHECK_OK(gmp_wg_add(&wg, foreign_waiter ? 1 : 2));
    CHECK(gmp_go(hog, &a) > 0);
    if (foreign_waiter)
        waited_ms = wait_against_hog() * 1e3;
    else
        CHECK(gmp_go(waiter, &wg) > 0);
    CHECK_OK(gmp_wg_wait(&wg));
    printf("starvation at GOMAXPROCS %d (%s waiter, hog %s): got it after %.3f ms, "
           "hog rounds %ld\n",
           procs, foreign_waiter ? "foreign" : "goroutine",
           yield_inside ? "yields inside" : "never yields", waited_ms,
           atomic_load(&hog_rounds));
}

int main(void)
{
    scenario_trylock();
    scenario_counter(1, 0);
    scenario_counter(2, THREADS);
    scenario_starvation(1, 1, 0);
    scenario_starvation(2, 0, 0);
    scenario_starvation(2, 0, 1);
    printf("sync_mutex: ok\n");
    return 0;
}
