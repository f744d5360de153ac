/*
 * pinned.c -- M-affinity: goroutines started with GMP_GO_PINNED resume on their thread,
 * and that thread keeps running other goroutines meanwhile.
 *
 * 1. Many pinned goroutines, few threads: 64 pinned goroutines at GOMAXPROCS=2 each do
 *    300 round trips over unbuffered channels with unpinned echo goroutines (parking
 *    every time), with a gmp_sleep every 50 and a gmp_yield every 10 trips. Each keeps
 *    its gettid(); the distinct threads they ran on and the process's thread count stay
 *    far below 64 (strict locking would need one thread each).
 * 2. Idle thread woken for its goroutine: at GOMAXPROCS=2 with nothing else to do, a
 *    pinned goroutine sleeps 5 ms (its thread goes idle) or waits for a value sent by the
 *    main thread (a readier without a processor), 50 times each: same gettid() after each.
 * 3. A yielding pinned goroutine does not starve the others: at GOMAXPROCS=1, a pinned
 *    goroutine yields in a loop while an unpinned one counts; both make progress.
 * 4. The slow return from a blocking call is served while the processor never goes idle:
 *    at GOMAXPROCS=1, four goroutines keep the processor busy (yielding), while one
 *    goroutine makes 50 blocking calls of 3 ms each (sysmon retakes the processor every
 *    time); each returns on its own thread within 500 ms.
 * 5. gmp_lock_os_thread / unlock inside a pinned goroutine: it stays on its thread.
 * 6. Stress at GOMAXPROCS 2 and 4: 16 pinned goroutines (started from goroutines on every
 *    processor, so they bind to several threads) receive 40,000 values from 4 unpinned
 *    producers and the main thread, sleeping now and then so that their threads go idle
 *    and are woken for them; every value arrives exactly once and no pinned goroutine
 *    ever changes thread.
 * 7. A pinned goroutine is never displaced by the global run queue: at GOMAXPROCS 1 and 2,
 *    8 pinned goroutines each make 20,000 round trips with an echo goroutine while the
 *    main thread keeps the global run queue full (a foreign thread's gmp_go queues there).
 *    Every 61st schedule looks at the global queue; when the pinned goroutine taken from
 *    the thread's own queue is replaced by the global one instead of going first, it is
 *    lost and its round trips stop. All trips must finish within 60 s.
 * 8. A goroutine locking a thread that a pinned goroutine is bound to: at GOMAXPROCS=1 a
 *    pinned goroutine holds a mutex and starts a goroutine that runs on its thread next,
 *    locks the thread (gmp_lock_os_thread) and waits for the mutex. The pinned goroutine
 *    can run on that thread only, and is made runnable before the locker waits (a channel
 *    send from the locker) or while it waits (a 2 ms timer). Locked to that thread, the
 *    locker would leave the pinned goroutine nowhere to run, and both waited forever; so
 *    the lock moves the locker to another thread: its gettid() after the lock differs from
 *    the pinned goroutine's and stays the same until it unlocks. 100 rounds of each, each
 *    within 20 s; and the threads the moves use are reused: after the first rounds the
 *    process's thread count grows by at most 4 (a new thread per move would add ~200).
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

static long tid(void)
{
    return (long)syscall(SYS_gettid);
}

static int thread_count(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    CHECK(f != NULL);
    char line[256];
    int n = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "Threads:", 8) == 0)
            n = atoi(line + 8);
    fclose(f);
    CHECK(n > 0);
    return n;
}

/* ---- 1. many pinned goroutines share few threads ---------------------------------- */

#define NPINNED 64
#define TRIPS 300

static atomic_int pingers_done;

struct pair {
    gmp_chan *ping, *pong;
    long tid;
    gmp_wg *wg;
};

static void echo(void *arg)
{
    struct pair *p = arg;
    long v;
    while (gmp_chan_recv(p->ping, &v) == 0)
        CHECK_OK(gmp_chan_send(p->pong, &v));
    CHECK_OK(gmp_wg_done(p->wg));
}

static void pinned_pinger(void *arg)
{
    struct pair *p = arg;
    long t0 = tid();
    for (long i = 0; i < TRIPS; i++) {
        long v = i, w = -1;
        CHECK_OK(gmp_chan_send(p->ping, &v));
        CHECK_EQ(tid(), t0);
        CHECK_OK(gmp_chan_recv(p->pong, &w));
        CHECK_EQ(w, i);
        CHECK_EQ(tid(), t0);
        if (i % 50 == 0)
            CHECK_OK(gmp_sleep(200 * 1000));
        if (i % 10 == 0)
            CHECK_OK(gmp_yield());
        CHECK_EQ(tid(), t0);
    }
    p->tid = t0;
    atomic_fetch_add(&pingers_done, 1);
    CHECK_OK(gmp_chan_close(p->ping));
    CHECK_OK(gmp_wg_done(p->wg));
}

static void many_pinned(void)
{
    static struct pair pairs[NPINNED];
    gmp_wg wg = GMP_WG_INIT;
    gmp_attr a = {0};
    a.flags = GMP_GO_PINNED;
    int threads_before = thread_count();
    CHECK_OK(gmp_wg_add(&wg, 2 * NPINNED));
    for (int i = 0; i < NPINNED; i++) {
        pairs[i].wg = &wg;
        CHECK_OK(gmp_chan_make(&pairs[i].ping, sizeof(long), 0));
        CHECK_OK(gmp_chan_make(&pairs[i].pong, sizeof(long), 0));
        CHECK_OK(gmp_go(echo, &pairs[i]));
        CHECK_OK(gmp_go_attr(pinned_pinger, &pairs[i], &a));
    }
    int threads_peak = 0;
    while (atomic_load(&pingers_done) < NPINNED) {
        int n = thread_count();
        if (n > threads_peak)
            threads_peak = n;
        sleep_ms(1);
    }
    CHECK_OK(gmp_wg_wait(&wg));
    long distinct[NPINNED];
    int ndistinct = 0;
    for (int i = 0; i < NPINNED; i++) {
        int seen = 0;
        for (int j = 0; j < ndistinct; j++)
            seen |= distinct[j] == pairs[i].tid;
        if (!seen)
            distinct[ndistinct++] = pairs[i].tid;
        CHECK_OK(gmp_chan_release(pairs[i].ping));
        CHECK_OK(gmp_chan_release(pairs[i].pong));
    }
    printf("1. %d pinned goroutines x %d round trips ran on %d threads; process threads "
           "%d before, %d at peak\n",
           NPINNED, TRIPS, ndistinct, threads_before, threads_peak);
    CHECK(ndistinct <= 16);
    CHECK(threads_peak <= threads_before + 16);
}

/* ---- 2. an idle thread is woken for its goroutine --------------------------------- */

static gmp_chan *feed;

static void pinned_sleeper(void *arg)
{
    gmp_wg *wg = arg;
    long t0 = tid();
    for (int i = 0; i < 50; i++) {
        CHECK_OK(gmp_sleep(5 * 1000 * 1000));
        CHECK_EQ(tid(), t0);
        long v = -1;
        CHECK_OK(gmp_chan_recv(feed, &v));
        CHECK_EQ(v, i);
        CHECK_EQ(tid(), t0);
    }
    CHECK_OK(gmp_wg_done(wg));
}

static void idle_wake(void)
{
    gmp_wg wg = GMP_WG_INIT;
    gmp_attr a = {0};
    a.flags = GMP_GO_PINNED;
    CHECK_OK(gmp_chan_make(&feed, sizeof(long), 0));
    CHECK_OK(gmp_wg_add(&wg, 1));
    double t0 = now_sec();
    CHECK_OK(gmp_go_attr(pinned_sleeper, &wg, &a));
    for (long i = 0; i < 50; i++) {
        sleep_ms(2); /* let the receiver park and its thread go idle first, mostly */
        CHECK_OK(gmp_chan_send(feed, &i));
    }
    CHECK_OK(gmp_wg_wait(&wg));
    double ms = (now_sec() - t0) * 1e3;
    printf("2. 50 x (5 ms sleep + receive from main) on one thread in %.0f ms\n", ms);
    CHECK(ms < 5000);
    CHECK_OK(gmp_chan_release(feed));
}

/* ---- 3. a yielding pinned goroutine does not starve the others -------------------- */

static atomic_long yields, counts;
static atomic_int stop;

static void pinned_yielder(void *arg)
{
    gmp_wg *wg = arg;
    long t0 = tid();
    while (!atomic_load(&stop)) {
        CHECK_OK(gmp_yield());
        atomic_fetch_add(&yields, 1);
        CHECK_EQ(tid(), t0);
    }
    CHECK_OK(gmp_wg_done(wg));
}

static void counter(void *arg)
{
    gmp_wg *wg = arg;
    while (!atomic_load(&stop)) {
        atomic_fetch_add(&counts, 1);
        CHECK_OK(gmp_yield());
    }
    CHECK_OK(gmp_wg_done(wg));
}

static void yield_fairness(void)
{
    CHECK_OK(gmp_maxprocs(1));
    gmp_wg wg = GMP_WG_INIT;
    gmp_attr a = {0};
    a.flags = GMP_GO_PINNED;
    atomic_store(&stop, 0);
    CHECK_OK(gmp_wg_add(&wg, 2));
    CHECK_OK(gmp_go_attr(pinned_yielder, &wg, &a));
    CHECK_OK(gmp_go(counter, &wg));
    sleep_ms(200);
    atomic_store(&stop, 1);
    CHECK_OK(gmp_wg_wait(&wg));
    long y = atomic_load(&yields), c = atomic_load(&counts);
    printf("3. GOMAXPROCS=1: pinned yielder %ld yields, unpinned counter %ld\n", y, c);
    /* Both alternate: neither may get less than a quarter of the other's turns. */
    CHECK(y > 1000 && c > 1000);
    CHECK(y < 4 * c && c < 4 * y);
}

/* ---- 4. the syscall slow path while the processor never goes idle ----------------- */

static int64_t sleep_3ms(void *arg)
{
    (void)arg;
    usleep(3000);
    return 7;
}

static void busy(void *arg)
{
    gmp_wg *wg = arg;
    while (!atomic_load(&stop)) {
        volatile int x = 0;
        for (int i = 0; i < 2000; i++)
            x += i;
        CHECK_OK(gmp_yield());
    }
    CHECK_OK(gmp_wg_done(wg));
}

static double worst_return_ms;

static void blocker(void *arg)
{
    gmp_wg *wg = arg;
    for (int i = 0; i < 50; i++) {
        long t0 = tid();
        double s = now_sec();
        CHECK_EQ(gmp_blocking(sleep_3ms, NULL), 7);
        double ms = (now_sec() - s) * 1e3;
        if (ms > worst_return_ms)
            worst_return_ms = ms;
        CHECK_EQ(tid(), t0);
    }
    atomic_store(&stop, 1);
    CHECK_OK(gmp_wg_done(wg));
}

static void slow_exitsyscall(void)
{
    CHECK_OK(gmp_maxprocs(1));
    gmp_wg wg = GMP_WG_INIT;
    atomic_store(&stop, 0);
    CHECK_OK(gmp_wg_add(&wg, 5));
    for (int i = 0; i < 4; i++)
        CHECK_OK(gmp_go(busy, &wg));
    CHECK_OK(gmp_go(blocker, &wg));
    double t0 = now_sec();
    CHECK_OK(gmp_wg_wait(&wg));
    double ms = (now_sec() - t0) * 1e3;
    printf("4. GOMAXPROCS=1, busy processor: 50 x 3 ms blocking calls in %.0f ms, worst "
           "call %.1f ms\n",
           ms, worst_return_ms);
    CHECK(ms < 10000);
    /* Each 3 ms call returns within 500 ms (typically under 40 ms on a loaded 2-core
     * machine): the busy processor's 61-tick check hands its P to the waiting M. */
    CHECK(worst_return_ms < 500.0);
}

/* ---- 5. LockOSThread inside a pinned goroutine --------------------------------------- */

static void pinned_locker(void *arg)
{
    gmp_wg *wg = arg;
    long t0 = tid();
    CHECK_EQ(gmp_lock_os_thread(), 1);
    CHECK_OK(gmp_sleep(1000 * 1000));
    CHECK_EQ(tid(), t0);
    CHECK_EQ(gmp_unlock_os_thread(), 0);
    for (int i = 0; i < 20; i++) {
        CHECK_OK(gmp_sleep(100 * 1000));
        CHECK_OK(gmp_yield());
        CHECK_EQ(tid(), t0);
    }
    CHECK_OK(gmp_wg_done(wg));
}

static void lock_in_pinned(void)
{
    CHECK_OK(gmp_maxprocs(2));
    gmp_wg wg = GMP_WG_INIT;
    gmp_attr a = {0};
    a.flags = GMP_GO_PINNED;
    CHECK_OK(gmp_wg_add(&wg, 4));
    for (int i = 0; i < 4; i++)
        CHECK_OK(gmp_go_attr(pinned_locker, &wg, &a));
    CHECK_OK(gmp_wg_wait(&wg));
    printf("5. lock/unlock inside pinned goroutines kept their threads\n");
}

/* ---- 6. stress -------------------------------------------------------------------- */

#define NCONS 16
#define NPROD 5 /* 4 goroutines and the main thread */
#define PER_PROD 8000

static gmp_chan *work;
static atomic_long sum_received, n_received;

static void pinned_consumer(void *arg)
{
    gmp_wg *wg = arg;
    long t0 = tid();
    unsigned r = (unsigned)t0;
    long v;
    while (gmp_chan_recv(work, &v) == 0) {
        CHECK_EQ(tid(), t0);
        atomic_fetch_add(&sum_received, v);
        atomic_fetch_add(&n_received, 1);
        r = r * 1103515245u + 12345u;
        if ((r >> 16) % 64 == 0)
            CHECK_OK(gmp_sleep((int64_t)((r >> 8) % 100) * 1000));
        else if ((r >> 16) % 16 == 0)
            CHECK_OK(gmp_yield());
        CHECK_EQ(tid(), t0);
    }
    CHECK_OK(gmp_wg_done(wg));
}

static void producer(void *arg)
{
    gmp_wg *wg = arg;
    for (long i = 1; i <= PER_PROD; i++) {
        CHECK_OK(gmp_chan_send(work, &i));
        if (i % 1000 == 0)
            CHECK_OK(gmp_sleep(200 * 1000));
    }
    CHECK_OK(gmp_wg_done(wg));
}

struct spawner {
    gmp_wg *wg;
    int n;
};

static void spawn_consumers(void *arg)
{
    struct spawner *s = arg;
    gmp_attr a = {0};
    a.flags = GMP_GO_PINNED;
    for (int i = 0; i < s->n; i++) {
        CHECK_OK(gmp_go_attr(pinned_consumer, s->wg, &a));
        CHECK_OK(gmp_sleep(1000 * 1000));
    }
    CHECK_OK(gmp_wg_done(s->wg));
}

static void stress(int procs)
{
    CHECK_OK(gmp_maxprocs(procs));
    atomic_store(&sum_received, 0);
    atomic_store(&n_received, 0);
    CHECK_OK(gmp_chan_make(&work, sizeof(long), 8));
    gmp_wg cons = GMP_WG_INIT, prod = GMP_WG_INIT;
    struct spawner sp[4];
    CHECK_OK(gmp_wg_add(&cons, NCONS + 4));
    for (int i = 0; i < 4; i++) {
        sp[i].wg = &cons;
        sp[i].n = NCONS / 4;
        CHECK_OK(gmp_go(spawn_consumers, &sp[i]));
    }
    CHECK_OK(gmp_wg_add(&prod, NPROD - 1));
    for (int i = 0; i < NPROD - 1; i++)
        CHECK_OK(gmp_go(producer, &prod));
    for (long i = 1; i <= PER_PROD; i++)
        CHECK_OK(gmp_chan_send(work, &i));
    CHECK_OK(gmp_wg_wait(&prod));
    CHECK_OK(gmp_chan_close(work));
    CHECK_OK(gmp_wg_wait(&cons));
    long per = (long)PER_PROD * (PER_PROD + 1) / 2;
    CHECK_EQ(atomic_load(&n_received), (long)NPROD * PER_PROD);
    CHECK_EQ(atomic_load(&sum_received), NPROD * per);
    CHECK_OK(gmp_chan_release(work));
    printf("6. GOMAXPROCS=%d: %d values to %d pinned consumers, each exactly once\n", procs,
           NPROD * PER_PROD, NCONS);
}

/* ---- 7. the global run queue never displaces a pinned goroutine ------------------- */

#define NGLOBAL_PINNED 8
#define GLOBAL_TRIPS 20000

static atomic_long global_trips, filler_runs;

static void pinned_tripper(void *arg)
{
    struct pair *p = arg;
    for (long i = 0; i < GLOBAL_TRIPS; i++) {
        long v = i, w = -1;
        CHECK_OK(gmp_chan_send(p->ping, &v));
        CHECK_OK(gmp_chan_recv(p->pong, &w));
        CHECK_EQ(w, i);
        atomic_fetch_add(&global_trips, 1);
    }
    CHECK_OK(gmp_chan_close(p->ping));
    CHECK_OK(gmp_wg_done(p->wg));
}

static void filler(void *arg)
{
    (void)arg;
    atomic_fetch_add(&filler_runs, 1);
}

static void global_queue_pressure(int procs)
{
    static struct pair pairs[NGLOBAL_PINNED];
    CHECK_OK(gmp_maxprocs(procs));
    atomic_store(&global_trips, 0);
    atomic_store(&filler_runs, 0);
    gmp_wg wg = GMP_WG_INIT;
    gmp_attr a = {0};
    a.flags = GMP_GO_PINNED;
    CHECK_OK(gmp_wg_add(&wg, 2 * NGLOBAL_PINNED));
    for (int i = 0; i < NGLOBAL_PINNED; i++) {
        pairs[i].wg = &wg;
        CHECK_OK(gmp_chan_make(&pairs[i].ping, sizeof(long), 0));
        CHECK_OK(gmp_chan_make(&pairs[i].pong, sizeof(long), 0));
        CHECK_OK(gmp_go(echo, &pairs[i]));
        CHECK_OK(gmp_go_attr(pinned_tripper, &pairs[i], &a));
    }
    const long want = (long)NGLOBAL_PINNED * GLOBAL_TRIPS;
    long spawned = 0;
    double deadline = now_sec() + 60.0;
    while (atomic_load(&global_trips) < want && now_sec() < deadline) {
        /* Keep a few hundred fillers queued: enough that the global queue is rarely
         * empty, few enough that the pinned goroutines still get most of the time. */
        if (spawned - atomic_load(&filler_runs) < 256) {
            CHECK_OK(gmp_go(filler, NULL));
            spawned++;
        } else {
            CHECK_OK(gmp_yield());
        }
    }
    long trips = atomic_load(&global_trips);
    printf("7. GOMAXPROCS=%d: %ld of %ld pinned round trips done while %ld goroutines were "
           "spawned from the main thread\n",
           procs, trips, want, spawned);
    CHECK_EQ(trips, want);
    CHECK(spawned > 0);
    CHECK_OK(gmp_wg_wait(&wg));
    WAIT_UNTIL(atomic_load(&filler_runs) == spawned, 30.0);
    for (int i = 0; i < NGLOBAL_PINNED; i++) {
        CHECK_OK(gmp_chan_release(pairs[i].ping));
        CHECK_OK(gmp_chan_release(pairs[i].pong));
    }
}

/* ---- 8. a locked goroutine waits for a goroutine pinned to the thread it locked --- */

static gmp_mutex held_mu = GMP_MUTEX_INIT;
static gmp_chan *go_on;
static atomic_long locked_tid;
static atomic_int rounds_done;

struct lock_round {
    int by_timer; /* the pinned goroutine wakes from a timer, not from the locker's send */
    gmp_wg wg;
};

static void locker(void *arg)
{
    struct lock_round *r = arg;
    CHECK_EQ(gmp_lock_os_thread(), 1);
    long t = tid();
    atomic_store(&locked_tid, t);
    if (!r->by_timer) {
        long v = 1;
        CHECK_OK(gmp_chan_send(go_on, &v)); /* the pinned one is queued for its thread */
    }
    CHECK_OK(gmp_mutex_lock(&held_mu)); /* held by the pinned one until it runs */
    CHECK_EQ(tid(), t);
    CHECK_EQ(gmp_lock_os_thread(), 2); /* nested: no move */
    CHECK_EQ(tid(), t);
    CHECK_EQ(gmp_unlock_os_thread(), 1);
    CHECK_OK(gmp_mutex_unlock(&held_mu));
    CHECK_EQ(gmp_unlock_os_thread(), 0);
    CHECK_OK(gmp_wg_done(&r->wg));
}

static void holder(void *arg)
{
    struct lock_round *r = arg;
    long t = tid();
    atomic_store(&locked_tid, 0);
    CHECK_OK(gmp_mutex_lock(&held_mu));
    CHECK(gmp_go(locker, r) > 0); /* runs next, on this thread, when we wait */
    if (r->by_timer) {
        CHECK_OK(gmp_sleep(2 * 1000 * 1000));
    } else {
        long v;
        CHECK_OK(gmp_chan_recv(go_on, &v));
    }
    CHECK_EQ(tid(), t);
    /* The locker has locked (it sent, or waits for the mutex, or the timer fired first
     * and it has yet to run: then it has not stored its thread yet). */
    long lt = atomic_load(&locked_tid);
    CHECK(lt != t);
    CHECK_OK(gmp_mutex_unlock(&held_mu));
    CHECK_OK(gmp_wg_done(&r->wg));
}

static void lock_round_main(void *arg)
{
    struct lock_round *r = arg;
    gmp_attr a = {0};
    a.flags = GMP_GO_PINNED;
    CHECK_OK(gmp_wg_add(&r->wg, 2));
    CHECK_OK(gmp_go_attr(holder, r, &a));
    CHECK_OK(gmp_wg_wait(&r->wg));
    atomic_fetch_add(&rounds_done, 1);
}

#define LOCK_ROUNDS 200

static void locked_waits_for_pinned(void)
{
    CHECK_OK(gmp_maxprocs(1));
    CHECK_OK(gmp_chan_make(&go_on, sizeof(long), 0));
    static struct lock_round rounds[LOCK_ROUNDS];
    int threads_early = 0;
    for (int i = 0; i < LOCK_ROUNDS; i++) {
        rounds[i] = (struct lock_round){i % 2, GMP_WG_INIT};
        int before = atomic_load(&rounds_done);
        CHECK(gmp_go(lock_round_main, &rounds[i]) > 0);
        WAIT_UNTIL(atomic_load(&rounds_done) == before + 1, 20);
        if (i == 3)
            threads_early = thread_count();
    }
    int threads_late = thread_count();
    CHECK(threads_late <= threads_early + 4);
    CHECK_OK(gmp_chan_release(go_on));
    CHECK_OK(gmp_maxprocs(2));
    printf("8. a locked goroutine waiting for one pinned to the thread it locked: "
           "%d rounds, threads %d -> %d\n",
           LOCK_ROUNDS, threads_early, threads_late);
}

/* 9. A pinned goroutine that spins on gmp_yield at GOMAXPROCS=1 while the goroutine it
 * waits for is pinned to another thread, coming back from a blocking call: that thread
 * waits for a P on affwait, and the spinner's M must hand its P over now and then
 * although its own affinity queue (the spinner) is never empty. */
static atomic_int ya_flag;
static gmp_wg ya_wg = GMP_WG_INIT;

static void ya_spinner(void *arg)
{
    (void)arg;
    while (!atomic_load(&ya_flag))
        CHECK_OK(gmp_yield());
    CHECK_OK(gmp_wg_done(&ya_wg));
}

static int64_t ya_nap(void *arg)
{
    (void)arg;
    struct timespec ts = {0, 30 * 1000000L};
    nanosleep(&ts, NULL);
    return 0;
}

static void ya_blocker(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_blocking(ya_nap, NULL));
    atomic_store(&ya_flag, 1);
    CHECK_OK(gmp_wg_done(&ya_wg));
}

static void yield_serves_affwait(void)
{
    int old = gmp_maxprocs(1);
    CHECK(old >= 1);
    gmp_attr attr = {0};
    attr.flags = GMP_GO_PINNED;
    CHECK_OK(gmp_wg_add(&ya_wg, 2));
    CHECK_OK(gmp_go_attr(ya_blocker, NULL, &attr));
    /* The blocker enters its blocking call on its thread; the spinner starts after. */
    sleep_ms(5);
    CHECK_OK(gmp_go_attr(ya_spinner, NULL, &attr));
    CHECK_OK(gmp_wg_wait(&ya_wg));
    CHECK_OK(gmp_maxprocs(old));
    printf("yield_serves_affwait: ok\n");
}

int main(void)
{
    CHECK_OK(gmp_maxprocs(2));
    many_pinned();
    idle_wake();
    yield_fairness();
    slow_exitsyscall();
    lock_in_pinned();
    stress(2);
    stress(4);
    global_queue_pressure(1);
    global_queue_pressure(2);
    locked_waits_for_pinned();
    yield_serves_affwait();
    return 0;
}
