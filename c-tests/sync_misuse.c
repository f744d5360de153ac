/*
 * sync_misuse.c -- argument checking of the sync API, and the misuses that abort.
 *
 * Without arguments: every gmp_mutex_*, gmp_rwmutex_*, gmp_cond_* function and
 * gmp_once_do returns -EINVAL for a NULL or misaligned object pointer (gmp_once_do also
 * for a NULL function, gmp_cond_wait for either pointer), and the objects passed
 * alongside are left usable.
 *
 * With argv[1] naming a misuse, the program must die by SIGABRT with Go's panic text
 * after "gmp: " (the harness checks the signal and stderr); reaching the end of a case is
 * a failure:
 *   mutex_unlock_unlocked      gmp_mutex_unlock on a free mutex
 *                              ("gmp: sync: unlock of unlocked mutex")
 *   mutex_unlock_goroutine     the same inside a goroutine
 *   rwmutex_runlock_unlocked   gmp_rwmutex_runlock on a free rwmutex
 *                              ("gmp: sync: RUnlock of unlocked RWMutex")
 *   rwmutex_runlock_writer     gmp_rwmutex_runlock while only a writer holds it (same)
 *   rwmutex_unlock_unlocked    gmp_rwmutex_unlock on a free rwmutex
 *                              ("gmp: sync: Unlock of unlocked RWMutex")
 *   cond_wait_unlocked         gmp_cond_wait with a mutex the caller does not hold
 *                              ("gmp: sync: unlock of unlocked mutex")
 */
#include "check.h"

#include <errno.h>
#include <gmp-sched/gmp.h>
#include <string.h>

static int fn_calls;

static void fn(void *arg)
{
    (void)arg;
    fn_calls++;
}

/* Storage for misaligned pointers: one byte past an aligned address. */
static _Alignas(16) unsigned char raw[64];

static void argument_errors(void)
{
    void *odd = raw + 1;
    gmp_mutex m = GMP_MUTEX_INIT;
    gmp_rwmutex rw = GMP_RWMUTEX_INIT;
    gmp_cond c = GMP_COND_INIT;
    gmp_once o = GMP_ONCE_INIT;

    CHECK_EQ(gmp_mutex_lock(NULL), -EINVAL);
    CHECK_EQ(gmp_mutex_trylock(NULL), -EINVAL);
    CHECK_EQ(gmp_mutex_unlock(NULL), -EINVAL);
    CHECK_EQ(gmp_mutex_lock(odd), -EINVAL);
    CHECK_EQ(gmp_mutex_trylock(odd), -EINVAL);
    CHECK_EQ(gmp_mutex_unlock(odd), -EINVAL);

    CHECK_EQ(gmp_rwmutex_rlock(NULL), -EINVAL);
    CHECK_EQ(gmp_rwmutex_runlock(NULL), -EINVAL);
    CHECK_EQ(gmp_rwmutex_lock(NULL), -EINVAL);
    CHECK_EQ(gmp_rwmutex_unlock(NULL), -EINVAL);
    CHECK_EQ(gmp_rwmutex_rlock(odd), -EINVAL);
    CHECK_EQ(gmp_rwmutex_runlock(odd), -EINVAL);
    CHECK_EQ(gmp_rwmutex_lock(odd), -EINVAL);
    CHECK_EQ(gmp_rwmutex_unlock(odd), -EINVAL);

    CHECK_EQ(gmp_cond_signal(NULL), -EINVAL);
    CHECK_EQ(gmp_cond_broadcast(NULL), -EINVAL);
    CHECK_EQ(gmp_cond_signal(odd), -EINVAL);
    CHECK_EQ(gmp_cond_broadcast(odd), -EINVAL);
    CHECK_OK(gmp_mutex_lock(&m));
    CHECK_EQ(gmp_cond_wait(NULL, &m), -EINVAL);
    CHECK_EQ(gmp_cond_wait(&c, NULL), -EINVAL);
    CHECK_EQ(gmp_cond_wait(NULL, NULL), -EINVAL);
    CHECK_EQ(gmp_cond_wait(odd, &m), -EINVAL);
    CHECK_EQ(gmp_cond_wait(&c, odd), -EINVAL);
    /* The mutex is still held by us: the failed waits did not touch it. */
    CHECK_EQ(gmp_mutex_trylock(&m), -EBUSY);
    CHECK_OK(gmp_mutex_unlock(&m));

    CHECK_EQ(gmp_once_do(NULL, fn, NULL), -EINVAL);
    CHECK_EQ(gmp_once_do(odd, fn, NULL), -EINVAL);
    CHECK_EQ(gmp_once_do(&o, NULL, NULL), -EINVAL);
    CHECK_EQ(fn_calls, 0);
    CHECK_EQ(gmp_once_do(&o, fn, NULL), 0);
    CHECK_EQ(fn_calls, 1);

    /* The objects still work. */
    CHECK_EQ(gmp_mutex_trylock(&m), 0);
    CHECK_OK(gmp_mutex_unlock(&m));
    CHECK_OK(gmp_rwmutex_rlock(&rw));
    CHECK_OK(gmp_rwmutex_runlock(&rw));
    CHECK_OK(gmp_rwmutex_lock(&rw));
    CHECK_OK(gmp_rwmutex_unlock(&rw));
    CHECK_OK(gmp_cond_signal(&c));
    CHECK_OK(gmp_cond_broadcast(&c));
}

static void unlock_in_goroutine(void *arg)
{
    gmp_mutex *m = arg;
    CHECK_OK(gmp_mutex_unlock(m));
}

static int misuse(const char *which)
{
    if (strcmp(which, "mutex_unlock_unlocked") == 0) {
        gmp_mutex m = GMP_MUTEX_INIT;
        CHECK_OK(gmp_mutex_unlock(&m));
        fprintf(stderr, "unlock of an unlocked mutex returned\n");
        return 1;
    }
    if (strcmp(which, "mutex_unlock_goroutine") == 0) {
        static gmp_mutex m = GMP_MUTEX_INIT;
        gmp_wg wg = GMP_WG_INIT;
        CHECK_OK(gmp_wg_add(&wg, 1));
        CHECK(gmp_go(unlock_in_goroutine, &m) > 0);
        gmp_wg_wait(&wg); /* never completed: the goroutine aborts the process */
        return 1;
    }
    if (strcmp(which, "rwmutex_runlock_unlocked") == 0) {
        gmp_rwmutex rw = GMP_RWMUTEX_INIT;
        CHECK_OK(gmp_rwmutex_runlock(&rw));
        fprintf(stderr, "RUnlock of an unlocked RWMutex returned\n");
        return 1;
    }
    if (strcmp(which, "rwmutex_runlock_writer") == 0) {
        gmp_rwmutex rw = GMP_RWMUTEX_INIT;
        CHECK_OK(gmp_rwmutex_lock(&rw));
        CHECK_OK(gmp_rwmutex_runlock(&rw));
        fprintf(stderr, "RUnlock of a write-locked RWMutex returned\n");
        return 1;
    }
    if (strcmp(which, "rwmutex_unlock_unlocked") == 0) {
        gmp_rwmutex rw = GMP_RWMUTEX_INIT;
        CHECK_OK(gmp_rwmutex_unlock(&rw));
        fprintf(stderr, "Unlock of an unlocked RWMutex returned\n");
        return 1;
    }
    if (strcmp(which, "cond_wait_unlocked") == 0) {
        gmp_mutex m = GMP_MUTEX_INIT;
        gmp_cond c = GMP_COND_INIT;
        CHECK_OK(gmp_cond_wait(&c, &m));
        fprintf(stderr, "cond wait with an unlocked mutex returned\n");
        return 1;
    }
    fprintf(stderr, "sync_misuse: unknown case '%s'\n", which);
    return 2;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        return misuse(argv[1]);
    argument_errors();
    printf("sync_misuse: ok\n");
    return 0;
}
