/*
 * sync_mutex_local.c -- a goroutine queued on a P whose goroutine waits for a mutex runs
 * soon: the waiter spins a bounded time, then parks and gives up the P.
 *
 * gmp_mutex_lock spins before it parks even when other goroutines are queued on its P
 * (Go's canSpin would not spin then; HACKING.md "Deviations"). What replaces Go's rule is
 * the bound on the spin: four short iterations per lock call. GOMAXPROCS 2, asynchronous
 * preemption off; each round:
 *   1. H locks the mutex and holds it for 600 ms, running on one P without calling the
 *      runtime (so nothing can take that P from it);
 *   2. S runs on the other P, makes R runnable there, and calls gmp_mutex_lock;
 *   3. R must run within 200 ms, while H still holds the mutex: S gave the P up.
 * R is made runnable three ways: spawned (it goes to S's runnext), woken by a timer on
 * S's P (R slept 2 ms before S locks), and woken by a channel send from S.
 * Asserted: R's delay, and mutual exclusion and the counts at the end. A spin that is not
 * bounded (S keeps its P while H holds the mutex) fails at the first round: R waits the
 * 600 ms.
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <stdatomic.h>

#define HOLD_SEC 0.6
#define BOUND_SEC 0.2

enum { SPAWNED, TIMER, CHANNEL, KINDS };
static const char *const KIND_NAME[KINDS] = {"spawned", "timer", "channel"};

static gmp_mutex mu = GMP_MUTEX_INIT;
static atomic_int held;       /* H holds the mutex */
static atomic_int h_released; /* H has unlocked */
static atomic_int r_asleep;   /* R has started its 2 ms sleep */
static _Atomic double r_ran;  /* when R ran (seconds) */
static _Atomic double r_made; /* when S made R runnable */
static struct gmp_chan *wake;
static gmp_wg wg = GMP_WG_INIT;
static int counter; /* guarded by mu */

static void holder(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_mutex_lock(&mu));
    atomic_store(&held, 1);
    double until = now_sec() + HOLD_SEC;
    while (now_sec() < until)
        ; /* calls nothing: keeps its P */
    counter++;
    atomic_store(&h_released, 1);
    gmp_mutex_unlock(&mu);
    gmp_wg_done(&wg);
}

static void runner(void *arg)
{
    int kind = (int)(intptr_t)arg;
    if (kind == TIMER) {
        atomic_store(&r_asleep, 1);
        CHECK_OK(gmp_sleep(2000000));
    } else if (kind == CHANNEL) {
        int64_t v = 0;
        CHECK_OK(gmp_chan_recv(wake, &v));
        CHECK_EQ(v, 7);
    }
    atomic_store(&r_ran, now_sec());
    /* Still inside H's hold: S's lock call gave the P up while the mutex was held. */
    CHECK(!atomic_load(&h_released));
    gmp_wg_done(&wg);
}

static void spinner(void *arg)
{
    int kind = (int)(intptr_t)arg;
    if (kind == SPAWNED) {
        atomic_store(&r_made, now_sec());
        CHECK(gmp_go(runner, (void *)(intptr_t)kind) > 0);
    } else if (kind == TIMER) {
        CHECK(gmp_go(runner, (void *)(intptr_t)kind) > 0);
        /* R runs here (our P's runnext) and starts its sleep: the timer is on our P. */
        while (!atomic_load(&r_asleep))
            CHECK_OK(gmp_yield());
        atomic_store(&r_made, now_sec() + 0.002);
    } else {
        CHECK(gmp_go(runner, (void *)(intptr_t)kind) > 0);
        CHECK_OK(gmp_yield()); /* R blocks in its receive */
        atomic_store(&r_made, now_sec());
        CHECK_OK(gmp_chan_send(wake, &(int64_t){7}));
    }
    CHECK_OK(gmp_mutex_lock(&mu));
    counter++;
    gmp_mutex_unlock(&mu);
    gmp_wg_done(&wg);
}

static void round_of(int kind)
{
    atomic_store(&held, 0);
    atomic_store(&h_released, 0);
    atomic_store(&r_asleep, 0);
    atomic_store(&r_ran, 0.0);
    atomic_store(&r_made, 0.0);
    counter = 0;
    gmp_wg_add(&wg, 3);
    CHECK(gmp_go(holder, NULL) > 0);
    WAIT_UNTIL(atomic_load(&held), 10.0);
    /* H keeps its P: S can only run on the other one. */
    CHECK(gmp_go(spinner, (void *)(intptr_t)kind) > 0);
    CHECK_OK(gmp_wg_wait(&wg));
    double delay = atomic_load(&r_ran) - atomic_load(&r_made);
    fprintf(stderr, "sync_mutex_local: %s: R ran %.3f ms after it became runnable\n",
            KIND_NAME[kind], delay * 1e3);
    CHECK(atomic_load(&r_ran) > 0);
    CHECK(delay < BOUND_SEC);
    CHECK_EQ(counter, 2);
}

int main(void)
{
    CHECK_OK(gmp_maxprocs(2));
    CHECK_EQ(gmp_maxprocs(0), 2);
    CHECK_OK(gmp_chan_make(&wake, sizeof(int64_t), 0));
    for (int i = 0; i < 2; i++)
        for (int kind = 0; kind < KINDS; kind++)
            round_of(kind);
    CHECK_OK(gmp_chan_release(wake));
    printf("sync_mutex_local: ok\n");
    return 0;
}
