/*
 * sync_unlock_in_syscall.c -- unlocking inside a blocking call never switches.
 *
 * A mutex in starvation mode hands itself to its first waiter on unlock, and an unlocking
 * goroutine then yields its processor to that waiter — which a goroutine inside a
 * blocking call (it holds no processor and must stay on its thread) must not do. The
 * program drives a gmp_mutex into starvation mode deterministically (GOMAXPROCS=1; it
 * reads the state word, whose layout gmp.h's inline fast path documents):
 *   1. the holder locks; a waiter blocks on the mutex (waiter count 1);
 *   2. the holder sleeps 3 ms, unlocks (which wakes the waiter onto its processor's queue)
 *      and relocks at once, before the waiter runs;
 *   3. the holder yields until the waiter has run, found the mutex taken after waiting
 *      more than 1 ms, and set the starvation bit;
 *   4. the holder unlocks inside a gmp_blocking function: the hand-off.
 * Then the same with the writer lock of a gmp_rwmutex, unlocked between
 * gmp_entersyscall and gmp_exitsyscall. Each waiter must then own the lock exclusively.
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <stdint.h>

#define MUTEX_STARVING 4
#define MUTEX_WAITER_SHIFT 3

static gmp_mutex mu = GMP_MUTEX_INIT;
static gmp_rwmutex rw = GMP_RWMUTEX_INIT;
static int held; /* set by the waiter while it owns the lock */

static int32_t state(gmp_mutex *m)
{
    return __atomic_load_n(&m->state, __ATOMIC_SEQ_CST);
}

static void mutex_waiter(void *arg)
{
    gmp_wg *wg = arg;
    CHECK_OK(gmp_mutex_lock(&mu));
    CHECK_EQ(__atomic_exchange_n(&held, 1, __ATOMIC_SEQ_CST), 0);
    __atomic_store_n(&held, 0, __ATOMIC_SEQ_CST);
    CHECK_OK(gmp_mutex_unlock(&mu));
    CHECK_OK(gmp_wg_done(wg));
}

static void rw_waiter(void *arg)
{
    gmp_wg *wg = arg;
    CHECK_OK(gmp_rwmutex_lock(&rw));
    CHECK_EQ(__atomic_exchange_n(&held, 1, __ATOMIC_SEQ_CST), 0);
    __atomic_store_n(&held, 0, __ATOMIC_SEQ_CST);
    CHECK_OK(gmp_rwmutex_unlock(&rw));
    CHECK_OK(gmp_wg_done(wg));
}

/* Steps 1-3 for mutex `m` (locked by the caller), whose waiter was just started. */
static void starve(gmp_mutex *m)
{
    while (state(m) >> MUTEX_WAITER_SHIFT == 0)
        CHECK_OK(gmp_yield());
    CHECK_OK(gmp_sleep(3000000));
    CHECK_OK(gmp_mutex_unlock(m));
    CHECK_OK(gmp_mutex_lock(m));
    for (int i = 0; (state(m) & MUTEX_STARVING) == 0; i++) {
        CHECK(i < 1000000);
        CHECK_OK(gmp_yield());
    }
}

static int64_t unlock_mu(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_mutex_unlock(&mu));
    return 0;
}

static void holder(void *arg)
{
    gmp_wg *done = arg;
    gmp_wg wg = GMP_WG_INIT;

    CHECK_OK(gmp_mutex_lock(&mu));
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK_OK(gmp_go(mutex_waiter, &wg));
    starve(&mu);
    CHECK_EQ(gmp_blocking(unlock_mu, NULL), 0);
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_EQ(state(&mu), 0);

    CHECK_OK(gmp_rwmutex_lock(&rw));
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK_OK(gmp_go(rw_waiter, &wg));
    /* The waiting writer blocks on the writer mutex rw.w (the rwmutex's unlock unlocks
     * it last); stand in for rw's own lock/unlock of rw.w while starving it. */
    starve(&rw.w);
    CHECK_OK(gmp_entersyscall());
    CHECK_OK(gmp_rwmutex_unlock(&rw));
    CHECK_OK(gmp_exitsyscall());
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_EQ(state(&rw.w), 0);
    CHECK_OK(gmp_wg_done(done));
}

int main(void)
{
    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK_OK(gmp_go(holder, &wg));
    CHECK_OK(gmp_wg_wait(&wg));
    printf("mutex and rwmutex unlocked in starvation mode inside blocking calls\n");
    return 0;
}
