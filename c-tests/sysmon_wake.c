/*
 * sysmon_wake.c -- what wakes sysmon, and what it does for Ps that nobody else watches.
 * One case per run (argv[1]); C main never waits inside the runtime (it polls with
 * nanosleep), so no foreign wait gives sysmon a timeout of its own.
 *
 *   deep     Every P idle for 100 ms (sysmon is in its deep sleep, which has no timeout
 *            here). Then, at GOMAXPROCS=1, main starts H, which starts V and spins without
 *            a safe point until V has run. V runs only if H is preempted (by signal), which
 *            only sysmon asks for: the P leaving the idle list must end sysmon's sleep.
 *            V must run within 5 s (it takes ~10 ms).
 *   syscall  Sysmon backed off (a goroutine yields for 300 ms: nothing to retake, so its
 *            sleep grows to 10 ms). Then the goroutine spawns B and makes a blocking call
 *            that only B ends. Entering the call wakes sysmon, which retakes the P for B
 *            within about 100 us; without the wake-up the hand-off waits out sysmon's
 *            10 ms sleep and one more round. 21 rounds; the median hand-off must be under
 *            3 ms.
 *   slice    The other side of the 10 ms slice: a goroutine that computes for 4 ms and
 *            yields, 200 times at GOMAXPROCS=1, is never asked to yield: gmp_stats
 *            preempt_requests grows by at most 3 more than the bursts that a loaded
 *            machine stretched to 9 ms or more (0 requests seen on a quiet one). Run with
 *            GMP_DEBUG=asyncpreemptoff=1: a request is then only a mark, which the yield
 *            clears, and does not itself stretch the burst it interrupts. Asking for a P seen twice with one
 *            schedtick, whatever the time between, makes ~15; tracking the slice start
 *            wrongly, ~100.
 *   timers   GOMAXPROCS=1, asynchronous preemption off (GMP_DEBUG=asyncpreemptoff=1, set
 *            by the harness), the first goroutines of the process: S starts H and sleeps
 *            50 ms; H, run next on the same P, spins without a safe point for up to 5 s.
 *            No M watches S's timer (the P never went idle, so no M became the timer M),
 *            so sysmon runs it: S is readied to the global queue (gmp_stats runqueue 1)
 *            while H still spins.
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_int v_ran, h_started, stop;

/* ---- deep ---- */

static void v(void *arg)
{
    (void)arg;
    atomic_store(&v_ran, 1);
}

static void h_until_v(void *arg)
{
    (void)arg;
    CHECK(gmp_go(v, NULL) > 0);
    /* No gmp_* call, no safe point: only a preemption signal lets V run on this P. */
    while (!atomic_load(&v_ran))
        ;
}

static void noop(void *arg)
{
    (void)arg;
}

static void case_deep(void)
{
    CHECK_OK(gmp_maxprocs(1));
    CHECK(gmp_go(noop, NULL) > 0); /* the runtime and sysmon start */
    WAIT_UNTIL(all_goroutines_blocked() && sched_stats().goroutines == 0, 5);
    /* Sysmon sees every P idle within one round (at most 10 ms) and sleeps without end. */
    sleep_ms(100);
    double t0 = now_sec();
    CHECK(gmp_go(h_until_v, NULL) > 0);
    WAIT_UNTIL(atomic_load(&v_ran), 5);
    printf("deep: V ran %.1f ms after H started\n", (now_sec() - t0) * 1e3);
}

/* ---- syscall ---- */

#define ROUNDS 21
static int pipefd[2];
static atomic_llong entered, b_started;
static double handoff_ms[ROUNDS];

static int64_t read_byte(void *arg)
{
    (void)arg;
    char c;
    return read(pipefd[0], &c, 1);
}

static void b(void *arg)
{
    (void)arg;
    atomic_store(&b_started, gmp_now());
    CHECK_EQ(gmp_write(pipefd[1], "x", 1), 1);
}

static void yield_then_block(void *arg)
{
    for (int r = 0; r < ROUNDS; r++) {
        /* 300 ms of switching: schedtick moves, nothing to retake: sysmon backs off. */
        double until = now_sec() + 0.3;
        while (now_sec() < until)
            CHECK_OK(gmp_yield());
        atomic_store(&b_started, 0);
        CHECK(gmp_go(b, NULL) > 0); /* queued on this P, behind the call below */
        atomic_store(&entered, gmp_now());
        CHECK_EQ(gmp_blocking(read_byte, NULL), 1);
        handoff_ms[r] = (double)(atomic_load(&b_started) - atomic_load(&entered)) / 1e6;
    }
    CHECK_OK(gmp_wg_done(arg));
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void case_syscall(void)
{
    CHECK_OK(gmp_maxprocs(1));
    CHECK_EQ(pipe(pipefd), 0);
    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK(gmp_go(yield_then_block, &wg) > 0);
    /* Not gmp_wg_wait: a foreign waiter would give sysmon a timeout of its own. */
    WAIT_UNTIL(sched_stats().goroutines == 0, 60);
    qsort(handoff_ms, ROUNDS, sizeof handoff_ms[0], cmp_double);
    printf("syscall: hand-off after a backed-off sysmon: min %.3f median %.3f max %.3f ms\n",
           handoff_ms[0], handoff_ms[ROUNDS / 2], handoff_ms[ROUNDS - 1]);
    CHECK(handoff_ms[ROUNDS / 2] < 3.0);
}

/* ---- slice ---- */

#define BURSTS 200

static int long_slices; /* bursts the OS stretched to 9 ms or more */

static void bursts(void *arg)
{
    for (int i = 0; i < BURSTS; i++) {
        double start = now_sec(), until = start + 0.004;
        while (now_sec() < until)
            ;
        long_slices += now_sec() - start >= 0.009;
        CHECK_OK(gmp_yield());
    }
    CHECK_OK(gmp_wg_done(arg));
}

static void case_slice(void)
{
    CHECK_OK(gmp_maxprocs(1));
    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&wg, 1));
    uint64_t r0 = sched_stats().preempt_requests;
    CHECK(gmp_go(bursts, &wg) > 0);
    WAIT_UNTIL(sched_stats().goroutines == 0, 30);
    uint64_t n = sched_stats().preempt_requests - r0;
    printf("slice: %llu preemption requests for %d bursts of 4 ms (%d stretched to 9 ms)\n",
           (unsigned long long)n, BURSTS, long_slices);
    CHECK(n <= (uint64_t)long_slices + 3);
}

/* ---- timers ---- */

static void h_spin(void *arg);

static void sleeper(void *arg)
{
    (void)arg;
    /* H runs next on this P, the moment we park: the P never goes idle, so no M becomes
     * the timer M, and with the only P busy none can be started for the timer. */
    CHECK(gmp_go(h_spin, NULL) > 0);
    CHECK_OK(gmp_sleep(50 * 1000 * 1000));
}

static void h_spin(void *arg)
{
    (void)arg;
    atomic_store(&h_started, 1);
    double until = now_sec() + 5.0;
    while (!atomic_load(&stop) && now_sec() < until)
        ;
}

static void case_timers(void)
{
    CHECK_OK(gmp_maxprocs(1));
    CHECK(gmp_go(sleeper, NULL) > 0);
    WAIT_UNTIL(atomic_load(&h_started), 5);
    double t0 = now_sec();
    /* S's timer ran beside the busy P: S waits in the global queue while H spins. */
    WAIT_UNTIL(sched_stats().runqueue == 1, 4);
    double ms = (now_sec() - t0) * 1e3;
    CHECK(now_sec() - t0 < 4.5); /* H still spins (it gives up after 5 s) */
    atomic_store(&stop, 1);
    WAIT_UNTIL(sched_stats().goroutines == 0, 10);
    printf("timers: the busy P's timer ran after %.1f ms\n", ms);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: sysmon_wake deep|syscall|slice|timers\n");
        return 2;
    }
    alarm(90); /* a hang fails the case */
    if (strcmp(argv[1], "deep") == 0)
        case_deep();
    else if (strcmp(argv[1], "syscall") == 0)
        case_syscall();
    else if (strcmp(argv[1], "slice") == 0)
        case_slice();
    else if (strcmp(argv[1], "timers") == 0)
        case_timers();
    else
        return 2;
    return 0;
}
