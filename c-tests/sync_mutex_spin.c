/*
 * sync_mutex_spin.c -- gmp_mutex's WOKEN bit has one owner: a spinner must not take the
 * one that unlock set for the waiter it woke.
 *
 * WOKEN in the state word means "a locker is awake and will take the mutex: unlock, do
 * not wake another". unlock sets it when it wakes a waiter; a spinner sets it to announce
 * itself, only if it is clear. Its owner clears it when it takes the mutex or queues
 * again, and finds it still set ("gmp: sync: inconsistent mutex state" otherwise). A
 * spinner that counted a WOKEN set by unlock as its own (mutex.rs lock_slow, the announce
 * condition's `&&` before the CAS made `||`) takes the mutex clearing it; the woken waiter
 * then finds it clear.
 *
 * The spinner must see the mutex unlocked during its (four, ~1 us) spin iterations; the
 * debug build's hook GMP_DEBUG=mutexspindelay=40000 stretches each to 40 ms. GOMAXPROCS
 * 2, asynchronous preemption off; each of 5 rounds (state waits, one timed step):
 *   1. L locks the mutex; W calls lock and queues (one waiter, W blocked);
 *   2. C starts and waits on the other P (both L and C begin a new slice first: sysmon
 *      asks a goroutine that ran 10 ms to yield at its next gmp call, which would let W
 *      run early);
 *   3. L unlocks -- waking W: WOKEN set, W queued on L's P, which L keeps -- and locks
 *      again before W runs; C calls lock: the mutex is held, C's P has nothing queued, so
 *      C spins (seeing WOKEN set, it must not announce itself);
 *   4. 60 ms later (inside C's stretched spin) L unlocks; C takes the mutex at its next
 *      iteration, leaving WOKEN set for W, and unlocks; only then does L end, and W run.
 * Asserted: every lock and unlock succeeds, the state word at steps 1 and 3, mutual
 * exclusion, all goroutines finish, the mutex is free at the end. If the timed step misses
 * the window (a slow machine), the round takes another correct path: it cannot fail on
 * correct code, it checks less.
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <stdatomic.h>

#define ROUNDS 5
#define LOCKED 1
#define WOKEN 2
#define WAITER_SHIFT 3

static gmp_mutex mu = GMP_MUTEX_INIT;
static atomic_int phase;   /* the step L and C wait for */
static atomic_int c_ready; /* C runs, on the P that L does not hold */
static atomic_int refresh, l_fresh, c_fresh;
static atomic_int c_done;
static atomic_int inside;
static gmp_wg wg = GMP_WG_INIT;

static int state(void)
{
    return __atomic_load_n(&mu.state, __ATOMIC_SEQ_CST);
}

/* A goroutine waiting for a state without giving up its P: a bounded busy wait. */
#define HOLD_UNTIL(cond)                                                           \
    do {                                                                           \
        double hold_deadline_ = now_sec() + 10.0;                                  \
        while (!(cond))                                                            \
            if (now_sec() > hold_deadline_)                                        \
                check_fail(__FILE__, __LINE__, "HOLD_UNTIL(" #cond ")");           \
    } while (0)

/* Waits for main's "refresh" blocked, then yields once: a new slice. */
static void fresh_slice(atomic_int *done)
{
    double deadline = now_sec() + 10.0;
    while (!atomic_load(&refresh)) {
        CHECK(now_sec() < deadline);
        CHECK_OK(gmp_sleep(100000));
    }
    CHECK_OK(gmp_yield());
    atomic_store(done, 1);
}

static void critical_section(void)
{
    CHECK_EQ(atomic_fetch_add(&inside, 1), 0);
    CHECK_EQ(atomic_fetch_sub(&inside, 1), 1);
}

static void goroutine_l(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_mutex_lock(&mu));
    atomic_store(&phase, 1);
    fresh_slice(&l_fresh);
    HOLD_UNTIL(atomic_load(&phase) == 2);
    CHECK_OK(gmp_mutex_unlock(&mu)); /* wakes W */
    CHECK_OK(gmp_mutex_lock(&mu));   /* before W runs: W is queued on this P */
    CHECK_EQ(state() & (LOCKED | WOKEN), LOCKED | WOKEN);
    atomic_store(&phase, 3);
    double t = now_sec();
    HOLD_UNTIL(now_sec() - t > 0.06); /* into C's spin */
    critical_section();
    CHECK_OK(gmp_mutex_unlock(&mu));
    HOLD_UNTIL(atomic_load(&c_done)); /* W stays queued behind us until C is done */
    CHECK_OK(gmp_wg_done(&wg));
}

static void goroutine_w(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_mutex_lock(&mu));
    critical_section();
    CHECK_OK(gmp_mutex_unlock(&mu));
    CHECK_OK(gmp_wg_done(&wg));
}

static void goroutine_c(void *arg)
{
    (void)arg;
    atomic_store(&c_ready, 1);
    fresh_slice(&c_fresh);
    HOLD_UNTIL(atomic_load(&phase) == 3);
    CHECK_OK(gmp_mutex_lock(&mu));
    critical_section();
    CHECK_OK(gmp_mutex_unlock(&mu));
    atomic_store(&c_done, 1);
    CHECK_OK(gmp_wg_done(&wg));
}

int main(void)
{
    CHECK_OK(gmp_maxprocs(2));
    CHECK_EQ(gmp_maxprocs(0), 2);
    for (int round = 0; round < ROUNDS; round++) {
        atomic_store(&phase, 0);
        atomic_store(&c_ready, 0);
        atomic_store(&c_done, 0);
        atomic_store(&refresh, 0);
        atomic_store(&l_fresh, 0);
        atomic_store(&c_fresh, 0);
        CHECK_OK(gmp_wg_add(&wg, 3));
        CHECK_OK(gmp_go(goroutine_l, NULL));
        WAIT_UNTIL(atomic_load(&phase) == 1, 10.0);
        CHECK_OK(gmp_go(goroutine_w, NULL));
        WAIT_UNTIL(state() >> WAITER_SHIFT == 1, 10.0);
        WAIT_BLOCKED(2); /* W parked in lock, L asleep in fresh_slice */
        CHECK_EQ(state(), LOCKED | (1 << WAITER_SHIFT));
        CHECK_OK(gmp_go(goroutine_c, NULL));
        WAIT_UNTIL(atomic_load(&c_ready) == 1, 10.0);
        atomic_store(&refresh, 1);
        WAIT_UNTIL(atomic_load(&l_fresh) && atomic_load(&c_fresh), 10.0);
        atomic_store(&phase, 2);
        CHECK_OK(gmp_wg_wait(&wg));
        CHECK_EQ(state(), 0);
    }
    CHECK_EQ(atomic_load(&inside), 0);
    CHECK_EQ(gmp_mutex_trylock(&mu), 0);
    CHECK_OK(gmp_mutex_unlock(&mu));
    printf("sync_mutex_spin: ok (%d rounds)\n", ROUNDS);
    return 0;
}
