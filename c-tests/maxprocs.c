/*
 * maxprocs.c -- GOMAXPROCS from the environment, and resizing it with work in flight.
 *
 * Scenario: the harness runs this with GMP_MAXPROCS=3; the first call into the library
 * must see it. Then WORKERS goroutines loop on gmp_yield() until told to stop (and at
 * least MIN_YIELDS times), so they are all in flight while GOMAXPROCS is changed
 * 1 -> 4 -> 1 -> 2 ... first ROUNDS times from the foreign main thread, then ROUNDS times
 * from inside a goroutine (Go's procresize from a running G). After each resize every
 * worker must yield again before the next one (all are alive and scheduled under every
 * size; a worker lost or stuck on a removed processor stops the test). Checks: each set returns
 * the previous value, gmp_maxprocs(0), gmp_maxprocs(-1) and gmp_stats().gomaxprocs follow
 * it, every worker finishes with the right id sum and yield count, the bounds (1024 is
 * accepted, 1025 is -EINVAL and leaves the value alone).
 *
 * Then a shrink takes effect on processors whose threads are busy: four goroutines spin
 * (yielding now and then) at GOMAXPROCS=4, then 1. The process's CPU time over 300 ms,
 * divided by the wall time, must be at most 1.3 at 1 (a processor beyond GOMAXPROCS that
 * kept running would make it ~2 on two CPUs) and, on a machine with two CPUs or more,
 * over 1.3 at 4 (so the measure does see parallelism).
 */
#include "check.h"

#include <errno.h>
#include <gmp-sched/gmp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#define WORKERS 10000L
#define MIN_YIELDS 20L
#define ROUNDS 40

static const int sizes[] = {1, 4, 1, 2, 4, 3};
#define NSIZES ((int)(sizeof sizes / sizeof sizes[0]))

static atomic_int stop;
static atomic_llong id_sum;
static atomic_llong yields;
static atomic_long finished;
static gmp_wg workers_wg = GMP_WG_INIT;
/* Yields each worker has made so far, and a snapshot of them taken before a resize. */
static atomic_long progress[WORKERS];
static long snapshot[WORKERS];

static void worker(void *arg)
{
    long id = (long)(intptr_t)arg;
    long n = 0;
    while (n < MIN_YIELDS || !atomic_load_explicit(&stop, memory_order_relaxed)) {
        CHECK_EQ(gmp_yield(), 0);
        n++;
        atomic_store_explicit(&progress[id], n, memory_order_relaxed);
    }
    atomic_fetch_add(&yields, n);
    atomic_fetch_add(&id_sum, id);
    atomic_fetch_add(&finished, 1);
    CHECK_OK(gmp_wg_done(&workers_wg));
}

/* Sets n, checking the value returned and every way of reading it back. `current` is
 * what GOMAXPROCS is now (only one resizer runs at a time). */
static void resize(int *current, int n)
{
    CHECK_EQ(gmp_maxprocs(n), *current);
    *current = n;
    CHECK_EQ(gmp_maxprocs(0), n);
    CHECK_EQ(gmp_maxprocs(-1), n);
    gmp_sched_stats st;
    uint32_t lens[8];
    CHECK_EQ(gmp_stats(&st, lens, 8), n < 8 ? n : 8);
    CHECK_EQ(st.gomaxprocs, n);
}

static void take_snapshot(void)
{
    for (long i = 0; i < WORKERS; i++)
        snapshot[i] = atomic_load_explicit(&progress[i], memory_order_relaxed);
}

/* Whether every worker has yielded since the snapshot: all were alive and scheduled
 * under the new size. */
static int all_advanced(void)
{
    for (long i = 0; i < WORKERS; i++)
        if (atomic_load_explicit(&progress[i], memory_order_relaxed) == snapshot[i])
            return 0;
    return 1;
}

static gmp_wg resizer_wg = GMP_WG_INIT;
static int current;

static void resizer(void *arg)
{
    (void)arg;
    for (int r = 0; r < ROUNDS; r++) {
        take_snapshot();
        resize(&current, sizes[r % NSIZES]);
        double deadline = now_sec() + 30.0;
        while (!all_advanced()) {
            CHECK(now_sec() < deadline);
            CHECK_EQ(gmp_yield(), 0);
        }
    }
    CHECK_OK(gmp_wg_done(&resizer_wg));
}

static void noop(void *arg)
{
    atomic_fetch_add((atomic_long *)arg, 1);
}

static atomic_int spin_stop;

static void spinner(void *arg)
{
    while (!atomic_load(&spin_stop)) {
        for (volatile int k = 0; k < 2000; k++)
            ;
        CHECK_OK(gmp_yield());
    }
    CHECK_OK(gmp_wg_done(arg));
}

static double cpu_sec(void)
{
    struct timespec ts;
    CHECK_OK(clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts));
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU seconds per wall second over 300 ms: how many threads ran at once. */
static double parallelism(void)
{
    double c0 = cpu_sec(), w0 = now_sec();
    sleep_ms(300);
    return (cpu_sec() - c0) / (now_sec() - w0);
}

int main(void)
{
    const char *env = getenv("GMP_MAXPROCS");
    int first = gmp_maxprocs(0); /* the first call: starts the runtime */
    if (env != NULL)
        CHECK_EQ(first, atoi(env));
    else
        CHECK(first >= 1);
    current = first;

    CHECK_OK(gmp_wg_add(&workers_wg, WORKERS));
    for (long i = 0; i < WORKERS; i++)
        CHECK(gmp_go(worker, (void *)(intptr_t)i) > 0);

    /* Resizes from the foreign thread. */
    for (int r = 0; r < ROUNDS; r++) {
        take_snapshot();
        resize(&current, sizes[r % NSIZES]);
        WAIT_UNTIL(all_advanced(), 30.0);
    }
    /* Resizes from a goroutine. */
    CHECK_OK(gmp_wg_add(&resizer_wg, 1));
    CHECK(gmp_go(resizer, NULL) > 0);
    CHECK_OK(gmp_wg_wait(&resizer_wg));

    atomic_store(&stop, 1);
    CHECK_OK(gmp_wg_wait(&workers_wg));
    CHECK_EQ(atomic_load(&finished), WORKERS);
    CHECK_EQ(atomic_load(&id_sum), (long long)WORKERS * (WORKERS - 1) / 2);
    CHECK(atomic_load(&yields) >= WORKERS * MIN_YIELDS);

    /* Bounds. */
    CHECK_EQ(gmp_maxprocs(1025), -EINVAL);
    CHECK_EQ(gmp_maxprocs(0), current);
    resize(&current, 1024);
    {
        atomic_long ran = 0;
        for (int i = 0; i < 100; i++)
            CHECK(gmp_go(noop, &ran) > 0);
        double deadline = now_sec() + 10.0;
        while (atomic_load(&ran) < 100 && now_sec() < deadline)
            sleep_ms(1);
        CHECK_EQ(atomic_load(&ran), 100);
    }
    resize(&current, 2);

    /* A shrink takes effect on busy processors. */
    resize(&current, 4);
    gmp_wg spinners = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&spinners, 4));
    for (int i = 0; i < 4; i++)
        CHECK(gmp_go(spinner, &spinners) > 0);
    sleep_ms(50);
    double at4 = parallelism();
    resize(&current, 1);
    sleep_ms(50);
    double at1 = parallelism();
    atomic_store(&spin_stop, 1);
    CHECK_OK(gmp_wg_wait(&spinners));
    printf("maxprocs: 4 spinners use %.2f CPUs at GOMAXPROCS=4, %.2f at 1\n", at4, at1);
    CHECK(at1 <= 1.3);
    if (gmp_num_cpu() >= 2)
        CHECK(at4 > 1.3);
    resize(&current, 2);

    printf("maxprocs: %d resizes under %ld workers, %lld yields\n", 2 * ROUNDS, WORKERS,
           (long long)atomic_load(&yields));
    return 0;
}
