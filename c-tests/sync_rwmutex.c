/*
 * sync_rwmutex.c -- gmp_rwmutex: shared readers, exclusive writers, writer preference.
 *
 * Scenario 1 (readers share): two reader goroutines each take the read lock, then wait
 * (yielding, bounded by 5 s) until both are inside at once -- impossible if readers
 * excluded each other.
 *
 * Scenario 2 (a pending writer keeps new readers out): main holds a read lock; a writer
 * goroutine blocks in lock; a second reader goroutine started after it must not get in
 * while the writer waits (checked once both are parked: the lock's reader count shows the
 * pending writer and the waiting reader, and gmp_stats shows nothing runnable). When main
 * releases its read lock the writer goes first, then the second reader.
 *
 * Scenario 3 (invariants under load), at GOMAXPROCS 2: 6 reader and 2 writer goroutines
 * plus one reader and one writer pthread hammer one rwmutex. Inside a read section no
 * writer is inside; inside a write section nobody else is. Writers increment a plain
 * counter, which must be exact at the end. Some sections yield while holding the lock;
 * at some moment at least two readers are inside at once.
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <pthread.h>
#include <stdatomic.h>

static gmp_rwmutex rw = GMP_RWMUTEX_INIT;

/* ---- scenario 1 ---- */

static atomic_int readers_in;

static void sharing_reader(void *arg)
{
    CHECK_OK(gmp_rwmutex_rlock(&rw));
    atomic_fetch_add(&readers_in, 1);
    double t0 = now_sec();
    while (atomic_load(&readers_in) < 2) {
        CHECK(now_sec() - t0 < 5.0);
        CHECK_OK(gmp_yield());
    }
    CHECK_OK(gmp_rwmutex_runlock(&rw));
    CHECK_OK(gmp_wg_done(arg));
}

static void scenario_readers_share(void)
{
    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&wg, 2));
    CHECK(gmp_go(sharing_reader, &wg) > 0);
    CHECK(gmp_go(sharing_reader, &wg) > 0);
    CHECK_OK(gmp_wg_wait(&wg));
}

/* ---- scenario 2 ---- */

/* What a pending writer subtracts from reader_count (Go's rwmutexMaxReaders). */
#define WRITER_PENDING (1 << 30)

static atomic_int order_next;
static atomic_int writer_order, reader2_order;

static void pending_writer(void *arg)
{
    CHECK_OK(gmp_rwmutex_lock(&rw));
    atomic_store(&writer_order, atomic_fetch_add(&order_next, 1) + 1);
    CHECK_OK(gmp_rwmutex_unlock(&rw));
    CHECK_OK(gmp_wg_done(arg));
}

static void late_reader(void *arg)
{
    CHECK_OK(gmp_rwmutex_rlock(&rw));
    atomic_store(&reader2_order, atomic_fetch_add(&order_next, 1) + 1);
    CHECK_OK(gmp_rwmutex_runlock(&rw));
    CHECK_OK(gmp_wg_done(arg));
}

static void scenario_writer_preference(void)
{
    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_rwmutex_rlock(&rw));
    CHECK_OK(gmp_wg_add(&wg, 2));
    CHECK(gmp_go(pending_writer, &wg) > 0);
    /* The writer announces itself (reader_count goes negative by 2^30), sees our read
     * lock and parks. */
    WAIT_UNTIL(atomic_load((_Atomic int32_t *)&rw.reader_count) == 1 - WRITER_PENDING, 10.0);
    WAIT_BLOCKED(1);
    CHECK(gmp_go(late_reader, &wg) > 0);
    /* The late reader counts itself in, sees the pending writer and parks too. */
    WAIT_UNTIL(atomic_load((_Atomic int32_t *)&rw.reader_count) == 2 - WRITER_PENDING, 10.0);
    WAIT_BLOCKED(2);
    CHECK_EQ(atomic_load(&writer_order), 0);
    CHECK_EQ(atomic_load(&reader2_order), 0);
    CHECK_OK(gmp_rwmutex_runlock(&rw));
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_EQ(atomic_load(&writer_order), 1);
    CHECK_EQ(atomic_load(&reader2_order), 2);
}

/* ---- scenario 3 ---- */

#define READERS 6
#define WRITERS 2
#define ROUNDS 20000

static atomic_int nreaders, nwriters;
static long writes; /* protected by rw (write side) */
static atomic_long max_readers_seen;

static void read_section(int i)
{
    CHECK_OK(gmp_rwmutex_rlock(&rw));
    long n = atomic_fetch_add(&nreaders, 1) + 1;
    CHECK_EQ(atomic_load(&nwriters), 0);
    long seen = atomic_load(&max_readers_seen);
    while (n > seen && !atomic_compare_exchange_weak(&max_readers_seen, &seen, n)) {
    }
    if (i % 500 == 0)
        CHECK_OK(gmp_yield());
    CHECK_EQ(atomic_load(&nwriters), 0);
    atomic_fetch_sub(&nreaders, 1);
    CHECK_OK(gmp_rwmutex_runlock(&rw));
}

static void write_section(int i)
{
    CHECK_OK(gmp_rwmutex_lock(&rw));
    CHECK_EQ(atomic_fetch_add(&nwriters, 1), 0);
    CHECK_EQ(atomic_load(&nreaders), 0);
    writes++;
    if (i % 500 == 0)
        CHECK_OK(gmp_yield());
    CHECK_EQ(atomic_load(&nreaders), 0);
    CHECK_EQ(atomic_fetch_sub(&nwriters, 1), 1);
    CHECK_OK(gmp_rwmutex_unlock(&rw));
}

static void reader(void *arg)
{
    for (int i = 0; i < ROUNDS; i++)
        read_section(i);
    CHECK_OK(gmp_wg_done(arg));
}

static void writer(void *arg)
{
    for (int i = 0; i < ROUNDS; i++)
        write_section(i);
    CHECK_OK(gmp_wg_done(arg));
}

static void *reader_thread(void *arg)
{
    (void)arg;
    for (int i = 0; i < ROUNDS; i++)
        read_section(i);
    return NULL;
}

static void *writer_thread(void *arg)
{
    (void)arg;
    for (int i = 0; i < ROUNDS; i++)
        write_section(i);
    return NULL;
}

static void scenario_load(void)
{
    gmp_wg wg = GMP_WG_INIT;
    pthread_t rt, wt;
    CHECK_OK(gmp_maxprocs(2));
    CHECK_OK(gmp_wg_add(&wg, READERS + WRITERS));
    for (int i = 0; i < READERS; i++)
        CHECK(gmp_go(reader, &wg) > 0);
    for (int i = 0; i < WRITERS; i++)
        CHECK(gmp_go(writer, &wg) > 0);
    CHECK_EQ(pthread_create(&rt, NULL, reader_thread, NULL), 0);
    CHECK_EQ(pthread_create(&wt, NULL, writer_thread, NULL), 0);
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_EQ(pthread_join(rt, NULL), 0);
    CHECK_EQ(pthread_join(wt, NULL), 0);
    CHECK_OK(gmp_rwmutex_lock(&rw));
    CHECK_EQ(writes, (long)(WRITERS + 1) * ROUNDS);
    CHECK_OK(gmp_rwmutex_unlock(&rw));
    printf("load: %ld writes, at most %ld readers inside at once\n", writes,
           atomic_load(&max_readers_seen));
    /* Readers share under load too (readers yield inside every 500th section). */
    CHECK(atomic_load(&max_readers_seen) >= 2);
}

int main(void)
{
    scenario_readers_share();
    scenario_writer_preference();
    scenario_load();
    printf("sync_rwmutex: ok\n");
    return 0;
}
