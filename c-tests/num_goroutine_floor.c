/*
 * num_goroutine_floor.c -- gmp_num_goroutine never counts fewer goroutines than live
 * through the call, however many start and end meanwhile.
 *
 * Four goroutines wait on a channel for the whole test. Plain threads and a goroutine
 * start short goroutines as fast as they can, which end on whichever processor runs
 * them; other threads read the count without pause. Every count must include the four
 * waiters: a count that adds up per-processor figures one at a time would miss a
 * goroutine's start on one processor and see its end on another.
 */
#include "check.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

#include <gmp-sched/gmp.h>

#define WAITERS 4
#define SPAWNERS 2
#define READERS 2
#define SECONDS 2

static gmp_chan *hold;
static gmp_wg waiters_done = GMP_WG_INIT;
static atomic_int stop;
static atomic_int waiting;
static atomic_long reads, spawns, low;

static void waiter(void *arg)
{
    (void)arg;
    int v;
    atomic_fetch_add(&waiting, 1);
    CHECK_EQ(gmp_chan_recv(hold, &v), -EPIPE);
    CHECK_EQ(gmp_wg_done(&waiters_done), 0);
}

static void nothing(void *arg)
{
    (void)arg;
}

static void spawn_loop(void)
{
    while (!atomic_load(&stop)) {
        CHECK(gmp_go(nothing, NULL) > 0);
        atomic_fetch_add(&spawns, 1);
    }
}

static void *spawner_thread(void *arg)
{
    (void)arg;
    spawn_loop();
    return NULL;
}

static void spawner_goroutine(void *arg)
{
    spawn_loop();
    CHECK_EQ(gmp_wg_done(arg), 0);
}

static void *reader_thread(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        int64_t n = gmp_num_goroutine();
        if (n < WAITERS) {
            atomic_fetch_add(&low, 1);
            fprintf(stderr, "num_goroutine_floor: counted %lld goroutines, %d wait throughout\n",
                    (long long)n, WAITERS);
        }
        atomic_fetch_add(&reads, 1);
    }
    return NULL;
}

int main(void)
{
    alarm(60);
    CHECK_EQ(gmp_chan_make(&hold, sizeof(int), 0), 0);
    CHECK_EQ(gmp_wg_add(&waiters_done, WAITERS), 0);
    for (int i = 0; i < WAITERS; i++)
        CHECK(gmp_go(waiter, NULL) > 0);
    while (atomic_load(&waiting) < WAITERS)
        usleep(100);
    gmp_wg spawner_done = GMP_WG_INIT;
    CHECK_EQ(gmp_wg_add(&spawner_done, 1), 0);
    CHECK(gmp_go(spawner_goroutine, &spawner_done) > 0);
    pthread_t spawners[SPAWNERS], readers[READERS];
    for (int i = 0; i < SPAWNERS; i++)
        CHECK_EQ(pthread_create(&spawners[i], NULL, spawner_thread, NULL), 0);
    for (int i = 0; i < READERS; i++)
        CHECK_EQ(pthread_create(&readers[i], NULL, reader_thread, NULL), 0);
    sleep(SECONDS);
    atomic_store(&stop, 1);
    for (int i = 0; i < SPAWNERS; i++)
        CHECK_EQ(pthread_join(spawners[i], NULL), 0);
    for (int i = 0; i < READERS; i++)
        CHECK_EQ(pthread_join(readers[i], NULL), 0);
    CHECK_EQ(gmp_wg_wait(&spawner_done), 0);
    CHECK_EQ(gmp_chan_close(hold), 0);
    CHECK_EQ(gmp_wg_wait(&waiters_done), 0);
    CHECK_EQ(gmp_chan_release(hold), 0);
    CHECK_EQ(atomic_load(&low), 0);
    printf("num_goroutine_floor: %ld counts over %ld spawns, none below %d\n",
           atomic_load(&reads), atomic_load(&spawns), WAITERS);
    return 0;
}
