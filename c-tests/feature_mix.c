/*
 * feature_mix: features that each pass their own tests, combined the way users combine
 * them (issue "Correctness where features meet"). One case per run: argv[1].
 *
 *   timeout_race   many senders and receivers on unbuffered channels, every receive with a
 *                  short timeout, at GOMAXPROCS=4: a timeout firing while its waiter is
 *                  completed by a peer must not touch the waiter's frame after the waiter
 *                  returned (that would crash); every value is received exactly once.
 *   locked_timer   a goroutine locked to its thread sleeps, waits on a channel with a
 *                  timeout and selects with a timeout, at GOMAXPROCS=1, 2 and 4 (it hangs
 *                  at 2 and 4 if a timer can sit on a handed-off idle P nobody watches).
 *   shrink_timers  four goroutines on four Ps sleep 100 ms; GOMAXPROCS drops to 1 while
 *                  they sleep: all of them wake (their timers must not be stranded on
 *                  retired Ps).
 *   pingpong_fair  at GOMAXPROCS=1 two goroutines ping-pong on channels forever; a third
 *                  goroutine started later still runs within 200 ms (Go bounds it at about
 *                  10 ms: sysmon marks the slice, the next switch point honours the mark).
 *   pingpong_fair_local  the same, but the third goroutine is started by the pair itself,
 *                  so it waits on the pair's own P's local queue (the pair then passes its
 *                  slice on through runnext): it would never run if the preempted goroutine
 *                  were taken straight back off the global queue.
 *   spin_fair      at GOMAXPROCS=1 a goroutine loops on gmp_chan_try_recv / gmp_go calls
 *                  that never block; a sleeper's 1 ms timer still wakes it within 200 ms.
 *   timer_cross_p  at GOMAXPROCS=2, a 10 ms sleep armed on one processor while the other
 *                  holds a 1 s sleep wakes within 300 ms, 8 times (whichever processor
 *                  the idle thread scans first for the earliest deadline).
 *   locked_exit_handoff  at GOMAXPROCS=2, a goroutine locked to its thread starts 8
 *                  goroutines and returns (its thread exits), 50 times: its processor is
 *                  handed off with their queue (a hand-off that ignores the local queue
 *                  aborts with "pidleput: P has non-empty run queue"); all of them run.
 *   grow_runs_queued  (asynchronous preemption off) at GOMAXPROCS=1 a goroutine that
 *                  never calls the runtime holds the processor; one queued behind it runs
 *                  once GOMAXPROCS goes to 2 (procresize must start a thread for the new
 *                  processor: nothing else would).
 *
 * A watchdog thread fails the case (exit 1, with a message) if it has not finished in
 * WATCHDOG_S seconds, instead of hanging until the harness's timeout.
 */
#include "check.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

#include <gmp-sched/gmp.h>

#define MS 1000000LL
#define WATCHDOG_S 30

static const char *current_case = "?";
static atomic_int finished;

static void *watchdog(void *arg)
{
    (void)arg;
    for (int i = 0; i < WATCHDOG_S * 10; i++) {
        if (atomic_load(&finished))
            return NULL;
        sleep_ms(100);
    }
    fprintf(stderr, "feature_mix %s: no result after %d s (hang)\n", current_case,
            WATCHDOG_S);
    fflush(stderr);
    _exit(1);
}

/* ---------------------------------------------------------------------------------- */
/* timeout_race */

#define TR_SENDERS 8
#define TR_RECEIVERS 16
#define TR_PER_SENDER 60000

static gmp_chan *tr_ch;
static gmp_wg tr_senders = GMP_WG_INIT, tr_receivers = GMP_WG_INIT;
static atomic_llong tr_sum, tr_count, tr_timeouts;

static void tr_sender(void *arg)
{
    long long base = (long long)(intptr_t)arg * TR_PER_SENDER;
    for (long long i = 0; i < TR_PER_SENDER; i++) {
        long long v = base + i + 1;
        CHECK_OK(gmp_chan_send(tr_ch, &v));
        /* Pauses, so that receivers time out while others are being completed. */
        if (i % 16 == 0)
            gmp_yield();
    }
    gmp_wg_done(&tr_senders);
}

static void tr_receiver(void *arg)
{
    (void)arg;
    long long sum = 0, count = 0, timeouts = 0;
    for (;;) {
        long long v = 0;
        /* 1-4 µs: short enough that timeouts race with senders all the time. */
        int r = gmp_chan_recv_timeout(tr_ch, &v, 1000 + ((count + timeouts) % 4) * 1000);
        if (r == -ETIMEDOUT) {
            timeouts++;
            continue;
        }
        if (r == -EPIPE)
            break;
        CHECK_OK(r);
        CHECK(v > 0);
        sum += v;
        count++;
    }
    atomic_fetch_add(&tr_sum, sum);
    atomic_fetch_add(&tr_count, count);
    atomic_fetch_add(&tr_timeouts, timeouts);
    gmp_wg_done(&tr_receivers);
}

static void timeout_race_round(void)
{
    atomic_store(&tr_sum, 0);
    atomic_store(&tr_count, 0);
    CHECK_OK(gmp_chan_make(&tr_ch, sizeof(long long), 0));
    CHECK_OK(gmp_wg_add(&tr_senders, TR_SENDERS));
    CHECK_OK(gmp_wg_add(&tr_receivers, TR_RECEIVERS));
    for (int i = 0; i < TR_RECEIVERS; i++)
        CHECK_OK(gmp_go(tr_receiver, NULL));
    for (int i = 0; i < TR_SENDERS; i++)
        CHECK_OK(gmp_go(tr_sender, (void *)(intptr_t)i));
    CHECK_OK(gmp_wg_wait(&tr_senders));
    CHECK_OK(gmp_chan_close(tr_ch));
    CHECK_OK(gmp_wg_wait(&tr_receivers));
    long long n = (long long)TR_SENDERS * TR_PER_SENDER;
    CHECK_EQ(atomic_load(&tr_count), n);
    CHECK_EQ(atomic_load(&tr_sum), n * (n + 1) / 2);
    CHECK_OK(gmp_chan_release(tr_ch));
}

static void case_timeout_race(void)
{
    CHECK_OK(gmp_maxprocs(4));
    /* A round takes ~0.2 s; a `stop` that returns while the callback still runs crashes
     * about one round in four. */
    for (int round = 0; round < 20; round++)
        timeout_race_round();
    /* The race needs timeouts to happen; at these timeouts they always do. */
    CHECK(atomic_load(&tr_timeouts) > 0);
    printf("timeout_race: 20 rounds of %d values, %lld timeouts\n",
           TR_SENDERS * TR_PER_SENDER, atomic_load(&tr_timeouts));
}

/* ---------------------------------------------------------------------------------- */
/* locked_timer */

static gmp_wg lt_wg = GMP_WG_INIT;
static atomic_int lt_rounds;

static void lt_locked(void *arg)
{
    (void)arg;
    gmp_chan *ch;
    CHECK_OK(gmp_chan_make(&ch, sizeof(int), 0));
    CHECK_OK(gmp_lock_os_thread());
    long tid = syscall(SYS_gettid);
    for (int round = 0; round < 20; round++) {
        volatile unsigned x = 0;
        for (int i = 0; i < 200000; i++)
            x += (unsigned)i;
        int64_t t0 = gmp_now();
        CHECK_OK(gmp_sleep(1 * MS));
        CHECK(gmp_now() - t0 >= 1 * MS);
        int v;
        CHECK_EQ(gmp_chan_recv_timeout(ch, &v, 1 * MS), -ETIMEDOUT);
        gmp_select_case c = {.chan = ch, .op = GMP_RECV, .buf = &v};
        CHECK_EQ(gmp_select(&c, 1, 1 * MS), -ETIMEDOUT);
        CHECK_EQ(syscall(SYS_gettid), tid);
        atomic_fetch_add(&lt_rounds, 1);
    }
    CHECK_OK(gmp_unlock_os_thread());
    gmp_chan_release(ch);
    gmp_wg_done(&lt_wg);
}

static void lt_busy(void *arg)
{
    (void)arg;
    /* Work that comes and goes, so that Ps go idle and get handed around. */
    for (int i = 0; i < 200; i++) {
        CHECK_OK(gmp_sleep((i % 3) * 100000));
        gmp_yield();
    }
    gmp_wg_done(&lt_wg);
}

static void case_locked_timer(void)
{
    int procs[] = {1, 2, 4};
    for (unsigned k = 0; k < sizeof procs / sizeof procs[0]; k++) {
        CHECK_OK(gmp_maxprocs(procs[k]));
        /* Alone (the first report: nothing else runs, both Ps end up idle), then with
         * a second locked goroutine and work that comes and goes. */
        atomic_store(&lt_rounds, 0);
        CHECK_OK(gmp_wg_add(&lt_wg, 1));
        CHECK_OK(gmp_go(lt_locked, NULL));
        CHECK_OK(gmp_wg_wait(&lt_wg));
        CHECK_EQ(atomic_load(&lt_rounds), 20);
        atomic_store(&lt_rounds, 0);
        CHECK_OK(gmp_wg_add(&lt_wg, 3));
        CHECK_OK(gmp_go(lt_locked, NULL));
        CHECK_OK(gmp_go(lt_locked, NULL));
        CHECK_OK(gmp_go(lt_busy, NULL));
        CHECK_OK(gmp_wg_wait(&lt_wg));
        CHECK_EQ(atomic_load(&lt_rounds), 40);
        printf("locked_timer: GOMAXPROCS=%d ok\n", procs[k]);
    }
}

/* ---------------------------------------------------------------------------------- */
/* shrink_timers */

static gmp_wg st_wg = GMP_WG_INIT;
static atomic_int st_running, st_sleeping, st_woke;

static void st_sleeper(void *arg)
{
    (void)arg;
    /* Hold a P until all four run at once, so that each sleeps on its own P's heap. */
    atomic_fetch_add(&st_running, 1);
    while (atomic_load(&st_running) < 4)
        ;
    atomic_fetch_add(&st_sleeping, 1);
    int64_t t0 = gmp_now();
    CHECK_OK(gmp_sleep(100 * MS));
    CHECK(gmp_now() - t0 >= 100 * MS);
    atomic_fetch_add(&st_woke, 1);
    gmp_wg_done(&st_wg);
}

static void case_shrink_timers(void)
{
    CHECK_OK(gmp_maxprocs(4));
    CHECK_OK(gmp_wg_add(&st_wg, 4));
    for (int i = 0; i < 4; i++)
        CHECK_OK(gmp_go(st_sleeper, NULL));
    while (atomic_load(&st_sleeping) < 4)
        sleep_ms(1);
    sleep_ms(5); /* they are parked in gmp_sleep by now (not required for the check) */
    CHECK_EQ(gmp_maxprocs(1), 4);
    double t0 = now_sec();
    CHECK_OK(gmp_wg_wait(&st_wg));
    CHECK_EQ(atomic_load(&st_woke), 4);
    CHECK(now_sec() - t0 < 2.0);
    /* And back up, with timers started on P0 moving nowhere. */
    CHECK_EQ(gmp_maxprocs(4), 1);
    CHECK_OK(gmp_sleep(10 * MS));
    printf("shrink_timers: all 4 sleepers woke\n");
}

/* ---------------------------------------------------------------------------------- */
/* pingpong_fair */

static gmp_chan *pp_a, *pp_b;
static atomic_int pp_stop, pp_started;
static atomic_llong pp_rounds;
static gmp_wg pp_wg = GMP_WG_INIT;
static int64_t pp_spawned_at, pp_ran_at;

static void pp_ping(void *arg)
{
    (void)arg;
    int v = 1;
    atomic_store(&pp_started, 1);
    while (!atomic_load(&pp_stop)) {
        CHECK_OK(gmp_chan_send(pp_a, &v));
        CHECK_OK(gmp_chan_recv(pp_b, &v));
        atomic_fetch_add_explicit(&pp_rounds, 1, memory_order_relaxed);
    }
    v = -1;
    CHECK_OK(gmp_chan_send(pp_a, &v));
    gmp_wg_done(&pp_wg);
}

/* Echoes each value from `in` to `out` until it receives a negative one. */
static void pong_loop(gmp_chan *in, gmp_chan *out)
{
    int v;
    for (;;) {
        CHECK_OK(gmp_chan_recv(in, &v));
        if (v < 0)
            break;
        CHECK_OK(gmp_chan_send(out, &v));
    }
}

static void pp_pong(void *arg)
{
    (void)arg;
    pong_loop(pp_a, pp_b);
    gmp_wg_done(&pp_wg);
}

static void pp_third(void *arg)
{
    (void)arg;
    pp_ran_at = gmp_now();
    atomic_store(&pp_stop, 1);
    gmp_wg_done(&pp_wg);
}

static void case_pingpong_fair(void)
{
    CHECK_OK(gmp_maxprocs(1));
    CHECK_OK(gmp_chan_make(&pp_a, sizeof(int), 0));
    CHECK_OK(gmp_chan_make(&pp_b, sizeof(int), 0));
    CHECK_OK(gmp_wg_add(&pp_wg, 3));
    CHECK_OK(gmp_go(pp_pong, NULL));
    CHECK_OK(gmp_go(pp_ping, NULL));
    while (!atomic_load(&pp_started) || atomic_load(&pp_rounds) < 1000)
        sleep_ms(1);
    pp_spawned_at = gmp_now();
    CHECK_OK(gmp_go(pp_third, NULL));
    CHECK_OK(gmp_wg_wait(&pp_wg));
    long long late = (long long)(pp_ran_at - pp_spawned_at);
    printf("pingpong_fair: third goroutine ran after %.1f ms (%lld round trips)\n",
           (double)late / 1e6, atomic_load(&pp_rounds));
    CHECK(late < 200 * MS);
    gmp_chan_release(pp_a);
    gmp_chan_release(pp_b);
}

/* ---------------------------------------------------------------------------------- */
/* pingpong_fair_local */

static gmp_chan *pl_a, *pl_b;
static atomic_int pl_stop;
static atomic_llong pl_rounds;
static gmp_wg pl_wg = GMP_WG_INIT;
static int64_t pl_spawned_at, pl_ran_at;

static void pl_third(void *arg)
{
    (void)arg;
    pl_ran_at = gmp_now();
    atomic_store(&pl_stop, 1);
    gmp_wg_done(&pl_wg);
}

static void pl_ping(void *arg)
{
    (void)arg;
    int v = 1;
    while (!atomic_load(&pl_stop)) {
        if (atomic_load_explicit(&pl_rounds, memory_order_relaxed) == 1000) {
            /* Into runnext; the send below readies pong there and moves the third
             * goroutine to the tail of this P's local queue. */
            pl_spawned_at = gmp_now();
            CHECK(gmp_go(pl_third, NULL) > 0);
        }
        CHECK_OK(gmp_chan_send(pl_a, &v));
        CHECK_OK(gmp_chan_recv(pl_b, &v));
        atomic_fetch_add_explicit(&pl_rounds, 1, memory_order_relaxed);
    }
    v = -1;
    CHECK_OK(gmp_chan_send(pl_a, &v));
    gmp_wg_done(&pl_wg);
}

static void pl_pong(void *arg)
{
    (void)arg;
    pong_loop(pl_a, pl_b);
    gmp_wg_done(&pl_wg);
}

static void case_pingpong_fair_local(void)
{
    CHECK_OK(gmp_maxprocs(1));
    CHECK_OK(gmp_chan_make(&pl_a, sizeof(int), 0));
    CHECK_OK(gmp_chan_make(&pl_b, sizeof(int), 0));
    CHECK_OK(gmp_wg_add(&pl_wg, 3));
    CHECK(gmp_go(pl_pong, NULL) > 0);
    CHECK(gmp_go(pl_ping, NULL) > 0);
    CHECK_OK(gmp_wg_wait(&pl_wg));
    long long late = (long long)(pl_ran_at - pl_spawned_at);
    printf("pingpong_fair_local: third goroutine ran after %.1f ms (%lld round trips)\n",
           (double)late / 1e6, atomic_load(&pl_rounds));
    CHECK(pl_spawned_at > 0);
    CHECK(late < 100 * MS);
    gmp_chan_release(pl_a);
    gmp_chan_release(pl_b);
}

/* ---------------------------------------------------------------------------------- */
/* spin_fair */

static atomic_int sf_stop;
static gmp_wg sf_wg = GMP_WG_INIT;
static int64_t sf_worst;

static void sf_nothing(void *arg)
{
    (void)arg;
}

static void sf_spinner(void *arg)
{
    gmp_chan *ch = arg;
    int v;
    unsigned long n = 0;
    while (!atomic_load(&sf_stop)) {
        CHECK_EQ(gmp_chan_try_recv(ch, &v), -EAGAIN);
        if (++n % 1024 == 0)
            CHECK_OK(gmp_go(sf_nothing, NULL));
    }
    gmp_wg_done(&sf_wg);
}

static void sf_sleeper(void *arg)
{
    (void)arg;
    for (int i = 0; i < 20; i++) {
        int64_t t0 = gmp_now();
        CHECK_OK(gmp_sleep(1 * MS));
        int64_t late = gmp_now() - t0 - 1 * MS;
        if (late > sf_worst)
            sf_worst = late;
    }
    atomic_store(&sf_stop, 1);
    gmp_wg_done(&sf_wg);
}

static void case_spin_fair(void)
{
    CHECK_OK(gmp_maxprocs(1));
    gmp_chan *ch;
    CHECK_OK(gmp_chan_make(&ch, sizeof(int), 1));
    CHECK_OK(gmp_wg_add(&sf_wg, 2));
    CHECK_OK(gmp_go(sf_spinner, ch));
    CHECK_OK(gmp_go(sf_sleeper, NULL));
    CHECK_OK(gmp_wg_wait(&sf_wg));
    printf("spin_fair: worst sleep lateness %.1f ms\n", (double)sf_worst / 1e6);
    CHECK(sf_worst < 200 * MS);
    gmp_chan_release(ch);
}

/* ---------------------------------------------------------------------------------- */
/* spawn_fair (run with asyncpreemptoff=1: only the cooperative safe points act) */

static atomic_int spf_stop;
static int64_t spf_queued_at, spf_ran_at;
static gmp_wg spf_wg = GMP_WG_INIT;

static void spf_child(void *arg)
{
    (void)arg;
}

static void spf_spawner(void *arg)
{
    (void)arg;
    /* Spawns in a loop: each child goes to runnext and runs when the spawner is
     * preempted; nothing else in here is a safe point. */
    while (!atomic_load(&spf_stop))
        CHECK_OK(gmp_go(spf_child, NULL));
    gmp_wg_done(&spf_wg);
}

static void spf_queued(void *arg)
{
    (void)arg;
    spf_ran_at = gmp_now();
    atomic_store(&spf_stop, 1);
    gmp_wg_done(&spf_wg);
}

static void case_spawn_fair(void)
{
    CHECK_OK(gmp_maxprocs(1));
    CHECK_OK(gmp_wg_add(&spf_wg, 2));
    CHECK_OK(gmp_go(spf_spawner, NULL));
    sleep_ms(20);
    spf_queued_at = gmp_now();
    CHECK_OK(gmp_go(spf_queued, NULL)); /* from a foreign thread: the global queue */
    CHECK_OK(gmp_wg_wait(&spf_wg));
    int64_t late = spf_ran_at - spf_queued_at;
    printf("spawn_fair: a queued goroutine ran %.1f ms after it was queued\n", (double)late / 1e6);
    CHECK(late < 100 * MS);
}

/* ---------------------------------------------------------------------------------- */
/* timer_order: a short sleep started behind a long one wakes on time */

static gmp_wg to_wg = GMP_WG_INIT;
static atomic_int to_long_parked;
static int64_t to_short_took;

static void to_long(void *arg)
{
    (void)arg;
    atomic_store(&to_long_parked, 1);
    CHECK_OK(gmp_sleep(1000 * MS));
    gmp_wg_done(&to_wg);
}

static void to_short(void *arg)
{
    (void)arg;
    int64_t t0 = gmp_now();
    CHECK_OK(gmp_sleep(10 * MS));
    to_short_took = gmp_now() - t0;
    gmp_wg_done(&to_wg);
}

static void case_timer_order(void)
{
    CHECK_OK(gmp_maxprocs(2));
    CHECK_OK(gmp_wg_add(&to_wg, 2));
    CHECK_OK(gmp_go(to_long, NULL));
    while (!atomic_load(&to_long_parked))
        sleep_ms(1);
    /* Let every thread go idle: one waits for the 1 s timer. */
    struct gmp_sched_stats st;
    do {
        sleep_ms(5);
        CHECK_OK(gmp_stats(&st, NULL, 0));
    } while (st.idleprocs != st.gomaxprocs);
    sleep_ms(20);
    CHECK_OK(gmp_go(to_short, NULL));
    CHECK_OK(gmp_wg_wait(&to_wg));
    printf("timer_order: a 10 ms sleep behind a 1 s one took %.1f ms\n", (double)to_short_took / 1e6);
    CHECK(to_short_took < 100 * MS);
}

/* ---------------------------------------------------------------------------------- */
/* timer_cross_p: the earliest deadline is taken over every processor's timers */

#define TC_ROUNDS 8

static gmp_wg tc_long_wg = GMP_WG_INIT;
static gmp_wg tc_short_wg = GMP_WG_INIT;
static atomic_int tc_arrived;
static int64_t tc_short_took[TC_ROUNDS];

/* arg: the round * 2, plus 1 for the short sleeper. Both sleepers of a round spin until
 * both have arrived, so they run at the same time, on the two processors, when they arm
 * their timers: one processor holds a 1 s timer (and earlier rounds' ones), the other
 * the 10 ms one. */
static void tc_sleeper(void *arg)
{
    int v = (int)(intptr_t)arg, round = v / 2;
    atomic_fetch_add(&tc_arrived, 1);
    while (atomic_load(&tc_arrived) < 2 * (round + 1))
        ;
    if (v % 2) {
        int64_t t0 = gmp_now();
        CHECK_OK(gmp_sleep(10 * MS));
        tc_short_took[round] = gmp_now() - t0;
        CHECK_OK(gmp_wg_done(&tc_short_wg));
    } else {
        CHECK_OK(gmp_sleep(1000 * MS));
        CHECK_OK(gmp_wg_done(&tc_long_wg));
    }
}

static void case_timer_cross_p(void)
{
    CHECK_OK(gmp_maxprocs(2));
    CHECK_OK(gmp_wg_add(&tc_long_wg, TC_ROUNDS));
    int64_t worst = 0;
    for (int r = 0; r < TC_ROUNDS; r++) {
        CHECK_OK(gmp_wg_add(&tc_short_wg, 1));
        CHECK_OK(gmp_go(tc_sleeper, (void *)(intptr_t)(2 * r)));
        CHECK_OK(gmp_go(tc_sleeper, (void *)(intptr_t)(2 * r + 1)));
        CHECK_OK(gmp_wg_wait(&tc_short_wg));
        if (tc_short_took[r] > worst)
            worst = tc_short_took[r];
    }
    printf("timer_cross_p: the worst of %d 10 ms sleeps beside a 1 s one on the other "
           "processor took %.1f ms\n",
           TC_ROUNDS, (double)worst / 1e6);
    /* Whichever processor comes first when the idle thread looks for the earliest timer,
     * the 10 ms one is not held up by the 1 s one (that would be ~1000 ms). */
    CHECK(worst < 300 * MS);
    CHECK_OK(gmp_wg_wait(&tc_long_wg));
}

/* ---------------------------------------------------------------------------------- */
/* locked_exit_handoff: a goroutine that ends locked to its thread leaves its processor,
 * with the goroutines it just started on its run queue, to another thread */

#define LE_ROUNDS 50
#define LE_CHILDREN 8

static gmp_wg le_wg = GMP_WG_INIT;
static atomic_int le_ran;

static void le_child(void *arg)
{
    (void)arg;
    atomic_fetch_add(&le_ran, 1);
    CHECK_OK(gmp_wg_done(&le_wg));
}

/* Locks its thread, starts the children (they go to this processor's queue, and the
 * other processor's thread is woken to steal), and returns locked: its thread exits and
 * the processor is handed off at once, its queue still full, while that thread spins. */
static void le_parent(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_lock_os_thread());
    for (int i = 0; i < LE_CHILDREN; i++)
        CHECK_OK(gmp_go(le_child, NULL));
    CHECK_OK(gmp_wg_done(&le_wg));
}

static void case_locked_exit_handoff(void)
{
    CHECK_OK(gmp_maxprocs(2));
    for (int r = 0; r < LE_ROUNDS; r++) {
        CHECK_OK(gmp_wg_add(&le_wg, 1 + LE_CHILDREN));
        CHECK_OK(gmp_go(le_parent, NULL));
        CHECK_OK(gmp_wg_wait(&le_wg));
    }
    CHECK_EQ(atomic_load(&le_ran), LE_ROUNDS * LE_CHILDREN);
}

/* ---------------------------------------------------------------------------------- */
/* grow_runs_queued: raising GOMAXPROCS puts the new processor to work at once */

static atomic_int gr_hog_running, gr_waiter_ran;

/* Never calls the runtime (run with asynchronous preemption off): the only processor
 * stays with it until the waiter has run elsewhere. */
static void gr_hog(void *arg)
{
    (void)arg;
    atomic_store(&gr_hog_running, 1);
    double deadline = now_sec() + 10.0;
    while (!atomic_load(&gr_waiter_ran))
        CHECK(now_sec() < deadline);
}

static void gr_waiter(void *arg)
{
    (void)arg;
    atomic_store(&gr_waiter_ran, 1);
}

static void case_grow_runs_queued(void)
{
    CHECK_OK(gmp_maxprocs(1));
    CHECK_OK(gmp_go(gr_hog, NULL));
    WAIT_UNTIL(atomic_load(&gr_hog_running), 10);
    /* Queued behind the hog: no processor is free, so no thread is started for it. */
    CHECK_OK(gmp_go(gr_waiter, NULL));
    sleep_ms(20);
    CHECK(!atomic_load(&gr_waiter_ran));
    /* The new processor must get a thread now: nothing else will ever wake one. */
    int64_t t0 = gmp_now();
    CHECK_OK(gmp_maxprocs(2));
    WAIT_UNTIL(atomic_load(&gr_waiter_ran), 5);
    printf("grow_runs_queued: the queued goroutine ran %.1f ms after GOMAXPROCS 1 -> 2\n",
           (double)(gmp_now() - t0) / 1e6);
}

/* ---------------------------------------------------------------------------------- */
/* retake_spinner: a P taken back from a blocking call while the other P is busy and no
   thread is spinning or idle: handoffp starts a spinning M for it, and must count it in
   nmspinning first (a spinner it did not count ends its spin by taking the count below
   zero: "gmp: findrunnable: negative nmspinning"). */

static atomic_int rs_stop, rs_hog_running;
static gmp_wg rs_wg = GMP_WG_INIT;
static atomic_int rs_calls;

static void rs_hog(void *arg)
{
    (void)arg;
    atomic_store(&rs_hog_running, 1);
    while (!atomic_load(&rs_stop))
        ;
    gmp_wg_done(&rs_wg);
}

static int64_t rs_block(void *arg)
{
    (void)arg;
    sleep_ms(30); /* longer than sysmon's grace for a P with nothing queued (10 ms) */
    return 0;
}

static void rs_caller(void *arg)
{
    (void)arg;
    for (int i = 0; i < 8; i++) {
        CHECK_EQ(gmp_blocking(rs_block, NULL), 0);
        atomic_fetch_add(&rs_calls, 1);
    }
    gmp_wg_done(&rs_wg);
}

static void case_retake_spinner(void)
{
    CHECK_OK(gmp_maxprocs(2));
    CHECK_OK(gmp_wg_add(&rs_wg, 2));
    CHECK(gmp_go(rs_hog, NULL) > 0);
    WAIT_UNTIL(atomic_load(&rs_hog_running), 10);
    CHECK(gmp_go(rs_caller, NULL) > 0);
    WAIT_UNTIL(atomic_load(&rs_calls) == 8, 20);
    atomic_store(&rs_stop, 1);
    CHECK_OK(gmp_wg_wait(&rs_wg));
    gmp_sched_stats st;
    CHECK_OK(gmp_stats(&st, NULL, 0));
    printf("retake_spinner: 8 blocking calls retaken beside a busy P; spinning threads now %lld\n",
           (long long)st.spinningthreads);
    CHECK(st.spinningthreads >= 0);
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {
        {"timeout_race", case_timeout_race},   {"locked_timer", case_locked_timer},
        {"shrink_timers", case_shrink_timers}, {"pingpong_fair", case_pingpong_fair},
        {"spin_fair", case_spin_fair},         {"spawn_fair", case_spawn_fair},
        {"timer_order", case_timer_order},     {"timer_cross_p", case_timer_cross_p},
        {"locked_exit_handoff", case_locked_exit_handoff},
        {"grow_runs_queued", case_grow_runs_queued},
        {"pingpong_fair_local", case_pingpong_fair_local},
        {"retake_spinner", case_retake_spinner},
    };
    if (argc != 2) {
        fprintf(stderr, "usage: feature_mix CASE\n");
        return 2;
    }
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (strcmp(argv[1], cases[i].name) == 0) {
            current_case = cases[i].name;
            pthread_t wd;
            CHECK_EQ(pthread_create(&wd, NULL, watchdog, NULL), 0);
            cases[i].fn();
            atomic_store(&finished, 1);
            CHECK_EQ(pthread_join(wd, NULL), 0);
            return 0;
        }
    }
    fprintf(stderr, "feature_mix: unknown case %s\n", argv[1]);
    return 2;
}
