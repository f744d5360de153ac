/*
 * maxprocs_shrink_watch.c -- after a goroutine shrinks GOMAXPROCS itself, sysmon still
 * watches the processor it runs on.
 *
 * A shrink retires a processor beyond the new count only when it next passes through its
 * scheduler; until then the goroutine that asked keeps running on it. Round after round,
 * a goroutine sets GOMAXPROCS to 2 and back to 1, starts a goroutine that counts and
 * yields, and computes for 150 ms without calling the library: the counter must move
 * meanwhile, which only sysmon's preemption signal makes possible: sysmon must count
 * the processor being retired as busy, or it takes every processor for idle and sleeps
 * until one leaves the idle list.
 */
#include "check.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

#include <gmp-sched/gmp.h>

#define ROUNDS 6

static gmp_wg done = GMP_WG_INIT;
static gmp_wg counter_done = GMP_WG_INIT;
static atomic_long counts;
static atomic_int stop;
static volatile uint64_t sink;

static void watchdog(int sig)
{
    (void)sig;
    static const char msg[] = "maxprocs_shrink_watch: hung (watchdog)\n";
    if (write(2, msg, sizeof msg - 1) < 0) {
        /* nothing more to do */
    }
    _exit(3);
}

static void counter(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        atomic_fetch_add(&counts, 1);
        CHECK_EQ(gmp_yield(), 0);
    }
    gmp_wg_done(&counter_done);
}

static void computer(void *arg)
{
    (void)arg;
    for (int round = 0; round < ROUNDS; round++) {
        CHECK(gmp_maxprocs(2) > 0);
        CHECK_EQ(gmp_maxprocs(1), 2);
        atomic_store(&stop, 0);
        atomic_store(&counts, 0);
        gmp_wg_add(&counter_done, 1);
        CHECK(gmp_go(counter, NULL) > 0);
        int64_t t0 = gmp_now();
        uint64_t x = 1;
        while (gmp_now() - t0 < 150 * 1000000LL)
            for (int i = 0; i < 100000; i++)
                x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        sink = x;
        long seen = atomic_load(&counts);
        atomic_store(&stop, 1);
        gmp_wg_wait(&counter_done);
        if (seen == 0) {
            fprintf(stderr, "maxprocs_shrink_watch: round %d: the counter never ran during "
                    "150 ms of computing at GOMAXPROCS=1\n", round);
            _exit(1);
        }
    }
    gmp_wg_done(&done);
}

int main(void)
{
    signal(SIGALRM, watchdog);
    alarm(30);
    gmp_wg_add(&done, 1);
    CHECK(gmp_go(computer, NULL) > 0);
    gmp_wg_wait(&done);
    alarm(0);
    printf("maxprocs_shrink_watch: %d rounds preempted\n", ROUNDS);
    return 0;
}
