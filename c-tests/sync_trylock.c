/*
 * sync_trylock: gmp_mutex_trylock, gmp_rwmutex_trylock and gmp_rwmutex_tryrlock (Go's
 * TryLock / TryRLock) succeed exactly when the lock could be taken without waiting.
 */
#include "check.h"

#include <errno.h>
#include <stdatomic.h>

#include <gmp-sched/gmp.h>

static gmp_rwmutex rw = GMP_RWMUTEX_INIT;
static gmp_wg wg = GMP_WG_INIT;
static atomic_int writer_waiting;

static void writer(void *arg)
{
    (void)arg;
    atomic_store(&writer_waiting, 1);
    CHECK_OK(gmp_rwmutex_lock(&rw)); /* waits for the reader below */
    CHECK_OK(gmp_rwmutex_unlock(&rw));
    CHECK_OK(gmp_wg_done(&wg));
}

int main(void)
{
    gmp_mutex m = GMP_MUTEX_INIT;
    CHECK_EQ(gmp_mutex_trylock(&m), 0);
    CHECK_EQ(gmp_mutex_trylock(&m), -EBUSY);
    CHECK_OK(gmp_mutex_unlock(&m));

    /* Free: both succeed. */
    CHECK_EQ(gmp_rwmutex_trylock(&rw), 0);
    /* A writer inside: neither. */
    CHECK_EQ(gmp_rwmutex_trylock(&rw), -EBUSY);
    CHECK_EQ(gmp_rwmutex_tryrlock(&rw), -EBUSY);
    CHECK_OK(gmp_rwmutex_unlock(&rw));
    /* Readers inside: more readers, no writer. */
    CHECK_EQ(gmp_rwmutex_tryrlock(&rw), 0);
    CHECK_EQ(gmp_rwmutex_tryrlock(&rw), 0);
    CHECK_EQ(gmp_rwmutex_trylock(&rw), -EBUSY);
    CHECK_OK(gmp_rwmutex_runlock(&rw));
    /* A writer waiting behind the remaining reader: no new reader gets in. */
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK_OK(gmp_go(writer, NULL));
    WAIT_UNTIL(atomic_load(&writer_waiting) && rw.reader_count < 0, 10.0);
    CHECK_EQ(gmp_rwmutex_tryrlock(&rw), -EBUSY);
    CHECK_EQ(gmp_rwmutex_trylock(&rw), -EBUSY);
    CHECK_OK(gmp_rwmutex_runlock(&rw));
    CHECK_OK(gmp_wg_wait(&wg));
    /* Free again. */
    CHECK_EQ(gmp_rwmutex_tryrlock(&rw), 0);
    CHECK_OK(gmp_rwmutex_runlock(&rw));
    CHECK_EQ(gmp_rwmutex_trylock(&rw), 0);
    CHECK_OK(gmp_rwmutex_unlock(&rw));
    CHECK_EQ(gmp_rwmutex_trylock(NULL), -EINVAL);
    CHECK_EQ(gmp_rwmutex_tryrlock(NULL), -EINVAL);
    printf("sync_trylock: ok\n");
    return 0;
}
