/*
 * spawn_million.c -- 1,000,000 goroutines spawned from the C main thread.
 *
 * Scenario: the foreign main thread starts a million goroutines (they go to the global
 * run queue); each increments an atomic counter and signals a WaitGroup that main waits
 * on with a futex (the foreign-thread wait). Checks: every goroutine ran exactly once,
 * every gmp_go returned a positive id, gmp_num_goroutine() returns to 0 once they have
 * exited, and gmp_stats() counts them as spawned.
 */
#include "check.h"

#include <gmp.h>
#include <stdatomic.h>

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
    CHECK_EQ(atomic_load(&counter), N);

    /* gmp_wg_done runs before the goroutine returns: allow the last ones to exit. */
    double deadline = now_sec() + 10.0;
    while (gmp_num_goroutine() != 0 && now_sec() < deadline)
        sleep_ms(1);
    CHECK_EQ(gmp_num_goroutine(), 0);

    gmp_sched_stats st;
    CHECK_OK(gmp_stats(&st, NULL, 0));
    CHECK((long long)st.spawned >= N);
    CHECK_EQ(st.goroutines, 0);

    printf("spawn_million: spawned %ld in %.3f s, all done after %.3f s\n", N, t1 - t0,
           t2 - t0);
    return 0;
}
