/*
 * spawn_million.c -- 1,000,000 goroutines spawned from the C main thread.
 *
 * Scenario: the foreign main thread starts a million goroutines (they go to the global
 * run queue); each increments an atomic counter and signals a WaitGroup that main waits
 * on with a futex (the foreign-thread wait). Checks: every goroutine ran exactly once,
 * every gmp_go returned a positive id, gmp_num_goroutine() returns to 0 once they have
 * exited, and gmp_stats() counts them as spawned. And the goroutines start on stacks that
 * are already faulted in: a goroutine's first run takes the stack of the one that died last
 * on its P (the one holding it on top of the P's dead-G list), so the whole million touches
 * few new pages. Spilling the P's list from the top once put a G with an untouched stack
 * there after every spill: ~20,000 page faults per million spawns, and as many resident
 * pages.
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <stdatomic.h>
#include <sys/resource.h>

#define N 1000000L

static atomic_long counter;
static gmp_wg wg = GMP_WG_INIT;

static void body(void *arg)
{
    (void)arg;
    atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed);
    CHECK_EQ(gmp_wg_done(&wg), 0);
}

int main(void)
{
    CHECK_EQ(gmp_num_goroutine(), 0);
    CHECK_OK(gmp_wg_add(&wg, N));
    struct rusage r0, r1;
    CHECK_EQ(getrusage(RUSAGE_SELF, &r0), 0);
    double t0 = now_sec();
    for (long i = 0; i < N; i++) {
        int64_t id = gmp_go(body, NULL);
        if (id <= 0) {
            fprintf(stderr, "gmp_go #%ld returned %lld\n", i, (long long)id);
            CHECK(id > 0);
        }
    }
    double t1 = now_sec();
    CHECK_OK(gmp_wg_wait(&wg));
    double t2 = now_sec();
    CHECK_EQ(getrusage(RUSAGE_SELF, &r1), 0);
    CHECK_EQ(atomic_load(&counter), N);
    long faults = r1.ru_minflt - r0.ru_minflt;

    /* gmp_wg_done runs before the goroutine returns: allow the last ones to exit. */
    double deadline = now_sec() + 10.0;
    while (gmp_num_goroutine() != 0 && now_sec() < deadline)
        sleep_ms(1);
    CHECK_EQ(gmp_num_goroutine(), 0);

    gmp_sched_stats st;
    CHECK_OK(gmp_stats(&st, NULL, 0));
    CHECK((long long)st.spawned >= N);
    CHECK_EQ(st.goroutines, 0);
    /* The G records of the goroutines queued at once (allg: C main may run far ahead of the
     * Ms on a loaded machine) are new memory, 32 to a page; their stacks are mapped but
     * untouched until they run. Allow four pages per 32 Gs and 4,000 for everything else
     * (the Ms' first stacks, the run queue, slab bookkeeping). */
    long bound = 4000 + (long)(st.allg / 8);
    if (faults > bound)
        fprintf(stderr, "spawn_million: %ld minor page faults (allg %llu), bound %ld\n", faults,
                (unsigned long long)st.allg, bound);
    CHECK(faults <= bound);

    printf("spawn_million: spawned %ld in %.3f s, all done after %.3f s; %ld page faults, "
           "allg %llu\n",
           N, t1 - t0, t2 - t0, faults, (unsigned long long)st.allg);
    return 0;
}
