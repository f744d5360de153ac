/*
 * sync_cond.c -- gmp_cond with gmp_mutex: signal, broadcast, goroutine and foreign-thread
 * waiters.
 *
 * Scenario 1 (producer/consumer), at GOMAXPROCS 2: a 4-slot ring guarded by a mutex and
 * two conds (not_empty, not_full). 2 producer goroutines and 1 producer pthread put
 * 20,000 numbered items each; 2 consumer goroutines and 1 consumer pthread take them
 * until a count is reached. Waits and signals (one per put/take) happen on both sides, so
 * goroutines wake threads and threads wake goroutines. Every item must arrive exactly once
 * (checked with a per-item flag array and the sum).
 *
 * Scenario 2 (broadcast wakes all): 12 goroutines and 4 pthreads wait on one cond for a
 * flag. Main waits until all 16 are counted (each counts itself under the mutex just
 * before gmp_cond_wait, so once main holds the mutex and sees 16, every one of them has
 * its wait ticket), sets the flag and broadcasts once. All 16 must return.
 *
 * Scenario 3 (no lost or extra wakeups for signal): 8 goroutine waiters, all queued on
 * the cond before the first signal; main signals 8 times, one "token" per signal under the
 * mutex, and waits for each token to be taken before the next. The k-th signal wakes the
 * k-th waiter to queue (FIFO); gmp_cond_wait returns exactly 8 times in all (a signal
 * that woke every waiter would make the others return and wait again).
 *
 * Scenario 4 (the cond's list lock under contention): at GOMAXPROCS 2, 16 waiter
 * goroutines loop on gmp_cond_wait while 6 pthreads and 2 goroutines call
 * gmp_cond_signal and gmp_cond_broadcast in bursts of 8 (yielding in between) for 500 ms: more threads than
 * CPUs, so the list lock's holder is sometimes descheduled and the others go past the
 * spin into the futex (the contended unlock). Every waiter must come round many times,
 * every call must return 0, and the lock must never be taken twice (a second holder's
 * unlock would find it unlocked: "gmp: sync: unlock of unlocked cond list lock").
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

/* ---- scenario 1 ---- */

#define RING 4
#define PRODUCERS 3 /* 2 goroutines + 1 pthread */
#define CONSUMERS 3
#define ITEMS 20000
#define TOTAL (PRODUCERS * ITEMS)

static gmp_mutex mu = GMP_MUTEX_INIT;
static gmp_cond not_empty = GMP_COND_INIT;
static gmp_cond not_full = GMP_COND_INIT;
static int ring[RING];
static int head, len; /* protected by mu */
static int taken;     /* items taken so far, protected by mu */
static unsigned char seen[TOTAL];
static atomic_long sum;

static void produce(int base)
{
    for (int i = 0; i < ITEMS; i++) {
        CHECK_OK(gmp_mutex_lock(&mu));
        while (len == RING)
            CHECK_OK(gmp_cond_wait(&not_full, &mu));
        ring[(head + len) % RING] = base + i;
        len++;
        CHECK_OK(gmp_cond_signal(&not_empty));
        CHECK_OK(gmp_mutex_unlock(&mu));
    }
}

static void consume(void)
{
    for (;;) {
        CHECK_OK(gmp_mutex_lock(&mu));
        while (len == 0 && taken < TOTAL)
            CHECK_OK(gmp_cond_wait(&not_empty, &mu));
        if (taken == TOTAL) {
            /* Done: pass the news on to the other consumers. */
            CHECK_OK(gmp_cond_broadcast(&not_empty));
            CHECK_OK(gmp_mutex_unlock(&mu));
            return;
        }
        int item = ring[head];
        head = (head + 1) % RING;
        len--;
        taken++;
        CHECK(item >= 0 && item < TOTAL);
        CHECK_EQ(seen[item], 0);
        seen[item] = 1;
        CHECK_OK(gmp_cond_signal(&not_full));
        if (taken == TOTAL)
            CHECK_OK(gmp_cond_broadcast(&not_empty));
        CHECK_OK(gmp_mutex_unlock(&mu));
        atomic_fetch_add(&sum, item);
    }
}

static void producer(void *arg)
{
    produce((int)(intptr_t)((void **)arg)[0]);
    CHECK_OK(gmp_wg_done(((void **)arg)[1]));
}

static void consumer(void *arg)
{
    consume();
    CHECK_OK(gmp_wg_done(arg));
}

static void *producer_thread(void *arg)
{
    produce((int)(intptr_t)arg);
    return NULL;
}

static void *consumer_thread(void *arg)
{
    (void)arg;
    consume();
    return NULL;
}

static void scenario_producer_consumer(void)
{
    gmp_wg wg = GMP_WG_INIT;
    static void *args[2][2];
    pthread_t pt, ct;
    CHECK_OK(gmp_maxprocs(2));
    CHECK_OK(gmp_wg_add(&wg, 4));
    for (int p = 0; p < 2; p++) {
        args[p][0] = (void *)(intptr_t)(p * ITEMS);
        args[p][1] = &wg;
        CHECK(gmp_go(producer, args[p]) > 0);
    }
    CHECK(gmp_go(consumer, &wg) > 0);
    CHECK(gmp_go(consumer, &wg) > 0);
    CHECK_EQ(pthread_create(&pt, NULL, producer_thread, (void *)(intptr_t)(2 * ITEMS)), 0);
    CHECK_EQ(pthread_create(&ct, NULL, consumer_thread, NULL), 0);
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_EQ(pthread_join(pt, NULL), 0);
    CHECK_EQ(pthread_join(ct, NULL), 0);
    for (int i = 0; i < TOTAL; i++)
        CHECK_EQ(seen[i], 1);
    CHECK_EQ(atomic_load(&sum), (long)TOTAL * (TOTAL - 1) / 2);
}

/* ---- scenario 2 ---- */

#define BCAST_G 12
#define BCAST_T 4

static gmp_cond start = GMP_COND_INIT;
static int go_flag, waiting; /* protected by mu */
static atomic_int released;

static void wait_for_start(void)
{
    CHECK_OK(gmp_mutex_lock(&mu));
    waiting++;
    while (!go_flag)
        CHECK_OK(gmp_cond_wait(&start, &mu));
    CHECK_OK(gmp_mutex_unlock(&mu));
    atomic_fetch_add(&released, 1);
}

static void bcast_waiter(void *arg)
{
    wait_for_start();
    CHECK_OK(gmp_wg_done(arg));
}

static void *bcast_thread(void *arg)
{
    (void)arg;
    wait_for_start();
    return NULL;
}

static void scenario_broadcast(void)
{
    gmp_wg wg = GMP_WG_INIT;
    pthread_t th[BCAST_T];
    CHECK_OK(gmp_wg_add(&wg, BCAST_G));
    for (int i = 0; i < BCAST_G; i++)
        CHECK(gmp_go(bcast_waiter, &wg) > 0);
    for (int t = 0; t < BCAST_T; t++)
        CHECK_EQ(pthread_create(&th[t], NULL, bcast_thread, NULL), 0);
    double t0 = now_sec();
    for (;;) {
        CHECK_OK(gmp_mutex_lock(&mu));
        if (waiting == BCAST_G + BCAST_T)
            break; /* keep the mutex */
        CHECK_OK(gmp_mutex_unlock(&mu));
        CHECK(now_sec() - t0 < 10.0);
        sleep_ms(1);
    }
    CHECK_EQ(atomic_load(&released), 0);
    go_flag = 1;
    CHECK_OK(gmp_cond_broadcast(&start));
    CHECK_OK(gmp_mutex_unlock(&mu));
    CHECK_OK(gmp_wg_wait(&wg));
    for (int t = 0; t < BCAST_T; t++)
        CHECK_EQ(pthread_join(th[t], NULL), 0);
    CHECK_EQ(atomic_load(&released), BCAST_G + BCAST_T);
}

/* ---- scenario 3 ---- */

#define SIG_WAITERS 8

static gmp_cond token_cond = GMP_COND_INIT;
static int tokens, queued, ntaken; /* protected by mu */
static int wakeups;                /* returns from gmp_cond_wait, protected by mu */
static int taken_by[SIG_WAITERS];  /* queue position of the waiter that took token i */

static void token_waiter(void *arg)
{
    CHECK_OK(gmp_mutex_lock(&mu));
    int position = queued++;
    while (tokens == 0) {
        CHECK_OK(gmp_cond_wait(&token_cond, &mu));
        wakeups++;
    }
    tokens--;
    taken_by[ntaken++] = position;
    CHECK_OK(gmp_mutex_unlock(&mu));
    CHECK_OK(gmp_wg_done(arg));
}

/* Reads an int protected by mu. */
static int locked_read(const int *v)
{
    CHECK_OK(gmp_mutex_lock(&mu));
    int r = *v;
    CHECK_OK(gmp_mutex_unlock(&mu));
    return r;
}

static void scenario_signal(void)
{
    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&wg, SIG_WAITERS));
    for (int i = 0; i < SIG_WAITERS; i++)
        CHECK(gmp_go(token_waiter, &wg) > 0);
    /* Every waiter counts itself under mu and releases mu only inside gmp_cond_wait: once
     * main reads 8 under mu, all 8 hold wait tickets (no late waiter can hide a lost
     * signal). */
    WAIT_UNTIL(locked_read(&queued) == SIG_WAITERS, 10.0);
    for (int k = 0; k < SIG_WAITERS; k++) {
        CHECK_OK(gmp_mutex_lock(&mu));
        tokens++;
        CHECK_OK(gmp_cond_signal(&token_cond));
        CHECK_OK(gmp_mutex_unlock(&mu));
        /* A lost signal leaves the token untaken. */
        WAIT_UNTIL(locked_read(&ntaken) == k + 1, 10.0);
        /* FIFO: the k-th signal wakes the k-th waiter to queue. */
        CHECK_EQ(taken_by[k], k);
    }
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_EQ(tokens, 0);
    /* One return from gmp_cond_wait per signal: a signal that woke more than one waiter
     * would show here (the extra ones return, find no token and wait again). */
    CHECK_EQ(wakeups, SIG_WAITERS);
}

/* ---- scenario 4 ---- */

#define LL_WAITERS 16
#define LL_THREADS 6
#define LL_GSIG 2

static gmp_mutex ll_mu = GMP_MUTEX_INIT;
static gmp_cond ll_cond = GMP_COND_INIT;
static atomic_int ll_stop;
static atomic_long ll_wakeups, ll_signals;
static atomic_int ll_left;
static gmp_wg ll_wg = GMP_WG_INIT;

static void ll_waiter(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_mutex_lock(&ll_mu));
    while (!atomic_load(&ll_stop)) {
        CHECK_OK(gmp_cond_wait(&ll_cond, &ll_mu));
        atomic_fetch_add(&ll_wakeups, 1);
    }
    CHECK_OK(gmp_mutex_unlock(&ll_mu));
    atomic_fetch_add(&ll_left, 1);
    CHECK_OK(gmp_wg_done(&ll_wg));
}

/* Signals in bursts, letting the waiters run (and queue again) in between. */
static void ll_signal_loop(int goroutine)
{
    long n = 0;
    while (!atomic_load(&ll_stop)) {
        for (int k = 0; k < 8; k++, n++) {
            if (n % 8 == 7)
                CHECK_OK(gmp_cond_broadcast(&ll_cond));
            else
                CHECK_OK(gmp_cond_signal(&ll_cond));
        }
        if (goroutine)
            CHECK_OK(gmp_yield());
        else
            sched_yield();
    }
    atomic_fetch_add(&ll_signals, n);
}

static void *ll_thread(void *arg)
{
    (void)arg;
    ll_signal_loop(0);
    return NULL;
}

static void ll_goroutine(void *arg)
{
    (void)arg;
    ll_signal_loop(1);
    CHECK_OK(gmp_wg_done(&ll_wg));
}

static void scenario_list_lock(void)
{
    CHECK_OK(gmp_maxprocs(2));
    CHECK_OK(gmp_wg_add(&ll_wg, LL_WAITERS + LL_GSIG));
    for (int i = 0; i < LL_WAITERS; i++)
        CHECK(gmp_go(ll_waiter, NULL) > 0);
    for (int i = 0; i < LL_GSIG; i++)
        CHECK(gmp_go(ll_goroutine, NULL) > 0);
    pthread_t t[LL_THREADS];
    for (int i = 0; i < LL_THREADS; i++)
        CHECK_EQ(pthread_create(&t[i], NULL, ll_thread, NULL), 0);
    sleep_ms(500);
    atomic_store(&ll_stop, 1);
    for (int i = 0; i < LL_THREADS; i++)
        CHECK_EQ(pthread_join(t[i], NULL), 0);
    /* The waiters may be asleep on the cond: wake them until they have all left. */
    double deadline = now_sec() + 10.0;
    while (atomic_load(&ll_left) < LL_WAITERS) {
        CHECK(now_sec() < deadline);
        CHECK_OK(gmp_cond_broadcast(&ll_cond));
        sleep_ms(1);
    }
    CHECK_OK(gmp_wg_wait(&ll_wg));
    long w = atomic_load(&ll_wakeups), sg = atomic_load(&ll_signals);
    printf("sync_cond: list lock: %ld signal/broadcast calls, %ld wake-ups\n", sg, w);
    CHECK(sg > 10000);
    CHECK(w > 1000);
}

int main(void)
{
    scenario_producer_consumer();
    scenario_broadcast();
    scenario_signal();
    scenario_list_lock();
    printf("sync_cond: ok\n");
    return 0;
}
