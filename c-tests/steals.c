/*
 * steals.c -- work stealing moves goroutines from a busy P's local queue to an idle P.
 *
 * Scenario: at GOMAXPROCS=2 one goroutine spawns BATCHES batches of BATCH goroutines.
 * Spawned from a goroutine, they go to the spawner's own P (runnext, then its local run
 * queue; BATCH is below the 256-slot ring's half so nothing overflows to the global
 * queue), and each does ~20 us of arithmetic, so the other P finds them only by
 * stealing. After each batch the spawner samples gmp_stats() (the queues must show the
 * batch somewhere) and waits for the batch. Checks: every goroutine ran, the other P
 * stole from at least a quarter of the batches and took at least 5% of all goroutines,
 * spawned counts them, gmp_stats() writes exactly min(n, gomaxprocs) run queue lengths
 * and leaves the rest of the array alone, and the queues are empty at the end.
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <stdatomic.h>
#include <stdint.h>

#define BATCHES 100
#define BATCH 100
#define SENTINEL 0xdeadbeefu

static atomic_long ran;
static long max_queued; /* written by the spawner only */
static int batches_stolen_from; /* batches of which the other P stole some; spawner only */

static volatile uint64_t sink; /* keeps the children's arithmetic */

static void child(void *arg)
{
    gmp_wg *wg = arg;
    uint64_t x = (uint64_t)(uintptr_t)arg;
    double t0 = now_sec();
    while (now_sec() - t0 < 20e-6)
        for (int i = 0; i < 100; i++)
            x = x * 6364136223846793005ULL + 1;
    sink = x;
    atomic_fetch_add(&ran, 1);
    CHECK_OK(gmp_wg_done(wg));
}

static void spawner(void *arg)
{
    gmp_wg *done = arg;
    for (int b = 0; b < BATCHES; b++) {
        gmp_sched_stats before;
        CHECK_OK(gmp_stats(&before, NULL, 0));
        gmp_wg wg = GMP_WG_INIT;
        CHECK_OK(gmp_wg_add(&wg, BATCH));
        for (int i = 0; i < BATCH; i++)
            CHECK(gmp_go(child, &wg) > 0);
        gmp_sched_stats st;
        uint32_t lens[4] = {SENTINEL, SENTINEL, SENTINEL, SENTINEL};
        CHECK_EQ(gmp_stats(&st, lens, 4), 2);
        CHECK_EQ(lens[2], SENTINEL);
        long queued = st.runqueue + lens[0] + lens[1];
        if (queued > max_queued)
            max_queued = queued;
        CHECK_OK(gmp_wg_wait(&wg));
        gmp_sched_stats after;
        CHECK_OK(gmp_stats(&after, NULL, 0));
        if (after.steals > before.steals)
            batches_stolen_from++;
    }
    CHECK_OK(gmp_wg_done(done));
}

int main(void)
{
    CHECK_OK(gmp_maxprocs(2));
    CHECK_EQ(gmp_maxprocs(0), 2);

    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK(gmp_go(spawner, &wg) > 0);
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_EQ(atomic_load(&ran), (long)BATCHES * BATCH);

    double deadline = now_sec() + 10.0;
    while (gmp_num_goroutine() != 0 && now_sec() < deadline)
        sleep_ms(1);
    CHECK_EQ(gmp_num_goroutine(), 0);

    gmp_sched_stats st;
    uint32_t lens[3] = {SENTINEL, SENTINEL, SENTINEL};
    CHECK_EQ(gmp_stats(&st, lens, 1), 1); /* n < gomaxprocs */
    CHECK_EQ(lens[1], SENTINEL);
    CHECK_EQ(gmp_stats(&st, lens, 3), 2); /* n > gomaxprocs */
    CHECK_EQ(lens[2], SENTINEL);
    CHECK_EQ(lens[0], 0);
    CHECK_EQ(lens[1], 0);
    CHECK_EQ(st.runqueue, 0);
    CHECK_EQ(st.gomaxprocs, 2);
    CHECK(st.spawned >= (uint64_t)BATCHES * BATCH + 1);
    printf("steals: steals=%llu spawned=%llu schedticks=%llu max queued after a batch=%ld, "
           "batches stolen from %d of %d\n",
           (unsigned long long)st.steals, (unsigned long long)st.spawned,
           (unsigned long long)st.schedticks, max_queued, batches_stolen_from, BATCHES);
    /* A batch is 2 ms of work on one P's queue with the other P idle: stealing must
     * happen in many batches and move a good share of the goroutines (ideal: half; on a
     * loaded 2-core machine 60-96 batches and 27-43% were seen). */
    CHECK(batches_stolen_from >= BATCHES / 4);
    CHECK(st.steals >= (uint64_t)BATCHES * BATCH / 20);
    CHECK(max_queued > 0);
    CHECK(st.schedticks > 0);
    return 0;
}
