/*
 * scope_locks.c -- scopes end mutex and rwmutex waits (gmp_mutex_lock, gmp_rwmutex_rlock,
 * gmp_rwmutex_lock), and their deadlines the semaphore waits, and the locks stay exact: what a cancelled waiter leaves in the
 * queue (its ghost) takes what was meant for it and passes it on.
 *
 * Steps, in order:
 *   mutex      eight goroutines wait for a held mutex, every other one in a scope; the
 *              cancel returns the four scoped ones -ECANCELED within 10 ms, without the
 *              lock; the unlock then lets the four others in, one at a time, and leaves
 *              the state and semaphore words at 0.
 *   after      in a cancelled scope a free mutex is still taken, a held one is refused at
 *              once, and gmp_mutex_lock_nocancel waits for it and takes it.
 *   thread     the main thread (not a goroutine) in a scope, waiting for a mutex a
 *              goroutine holds, is cancelled by another goroutine.
 *   rwmutex    readers cancelled while a writer holds the lock; a writer cancelled while
 *              it waits for the writers' mutex; a writer cancelled while it waits for the
 *              readers inside, with a reader queued behind it: that reader gets in once
 *              the readers inside have left. Afterwards every word is back at 0.
 *   deadline   a scope's deadline (30 ms) ends the waits that have no timeout of their
 *              own to carry it -- mutex, read and write locks, gmp_wg_wait, gmp_cond_wait
 *              -- with -ETIMEDOUT, in a goroutine and in the main thread.
 *   race       2000 rounds: a holder's unlock races with the cancel of three scoped
 *              waiters (each gets the lock or -ECANCELED), an unscoped waiter always gets
 *              it, and each round ends, once the holder's unlock has returned, with the
 *              words at 0.
 *   storm      16 goroutines lock and unlock one mutex (and one rwmutex) 3000 times each,
 *              half of them in scopes with deadlines of 0 to 200 µs, some holding the lock
 *              across a sleep (so waiters starve and the mutex hands itself over): the
 *              critical sections never overlap, every successful lock is counted, and at
 *              the end the words are 0.
 * Waits are for states (the mutex's waiter count, values on channels), never sleeps.
 */
#include "check.h"

#include <errno.h>
#include <gmp-sched/gmp.h>
#include <stdatomic.h>
#include <stdint.h>

#define US 1000LL
#define MS 1000000LL
#define SEC 1000000000LL
#define MAX_READERS (1 << 30)

static gmp_chan *results;

static int32_t load32(const int32_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static uint32_t loadu32(const uint32_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

/* Waits (a state, polled) until `*word` equals `want`. */
static void wait_word(const int32_t *word, int32_t want)
{
    int64_t until = gmp_now() + 10 * SEC;
    while (load32(word) != want) {
        if (gmp_now() >= until)
            fprintf(stderr, "scope_locks: the word is %d, not %d\n", load32(word), want);
        CHECK(gmp_now() < until);
        gmp_sleep(50 * US);
    }
}

static void check_mutex_idle(gmp_mutex *m)
{
    CHECK_EQ(load32(&m->state), 0);
    CHECK_EQ(loadu32(&m->sema), 0);
}

static void check_rwmutex_idle(gmp_rwmutex *rw)
{
    check_mutex_idle(&rw->w);
    CHECK_EQ(load32(&rw->reader_count), 0);
    CHECK_EQ(load32(&rw->reader_wait), 0);
    CHECK_EQ(loadu32(&rw->writer_sem), 0);
    CHECK_EQ(loadu32(&rw->reader_sem), 0);
}

static void send_int(gmp_chan *c, int v)
{
    CHECK_OK(gmp_chan_send(c, &v));
}

static int recv_int(gmp_chan *c)
{
    int v;
    CHECK_OK(gmp_chan_recv_timeout(c, &v, 10 * SEC));
    return v;
}

/* ---- mutex ---- */

static gmp_mutex mu = GMP_MUTEX_INIT;
static int inside; /* guarded by mu */

static void locker(void *arg)
{
    (void)arg;
    int r = gmp_mutex_lock(&mu);
    if (r == 0) {
        CHECK_EQ(inside, 0);
        inside = 1;
        gmp_sleep(100 * US);
        inside = 0;
        CHECK_OK(gmp_mutex_unlock(&mu));
    }
    send_int(results, r);
}

/* Starts lockers outside every scope: a goroutine started before any, on request. */
static gmp_chan *spawn_req;

static void spawner(void *arg)
{
    (void)arg;
    for (;;) {
        int fn = recv_int(spawn_req);
        if (fn == 0)
            return;
        CHECK_OK(gmp_go(locker, NULL));
    }
}

static void step_mutex(void)
{
    CHECK_OK(gmp_mutex_lock(&mu));
    gmp_scope *s = NULL;
    CHECK_OK(gmp_scope_begin(&s, -1));
    for (int i = 0; i < 8; i++) {
        if (i % 2 == 0)
            CHECK_OK(gmp_go(locker, NULL)); /* in s */
        else
            send_int(spawn_req, 1);         /* in no scope */
        /* One waiter more each time: queued in this order. */
        wait_word(&mu.state, 1 | (i + 1) << 3);
    }
    int64_t t0 = gmp_now();
    CHECK_OK(gmp_scope_cancel(s));
    CHECK_OK(gmp_scope_wait(s));
    int64_t took = gmp_now() - t0;
    CHECK_OK(gmp_scope_end(s));
    if (took > 10 * MS)
        fprintf(stderr, "scope_locks: cancel took %lld ns\n", (long long)took);
    CHECK(took <= 10 * MS);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(recv_int(results), -ECANCELED);
    /* The waiters' counts are all still there (four of them the ghosts'). */
    CHECK_EQ(load32(&mu.state), 1 | 8 << 3);
    CHECK_OK(gmp_mutex_unlock(&mu));
    for (int i = 0; i < 4; i++)
        CHECK_EQ(recv_int(results), 0);
    check_mutex_idle(&mu);
    /* Usable as before. */
    CHECK_OK(gmp_mutex_lock(&mu));
    CHECK_OK(gmp_mutex_unlock(&mu));
    check_mutex_idle(&mu);
}

/* ---- after a cancel ---- */

static gmp_chan *go_unlock;

static void unlocker(void *arg)
{
    gmp_mutex *m = arg;
    CHECK_EQ(recv_int(go_unlock), 1);
    CHECK_OK(gmp_mutex_unlock(m));
}

static void step_after(void)
{
    gmp_mutex m = GMP_MUTEX_INIT;
    /* Started before the scope, so its receive is not cancelled with it. */
    CHECK_OK(gmp_go(unlocker, &m));
    gmp_scope *s = NULL;
    CHECK_OK(gmp_scope_begin(&s, -1));
    CHECK_OK(gmp_scope_cancel(s));
    CHECK_OK(gmp_mutex_lock(&m));              /* free: taken */
    CHECK_EQ(gmp_mutex_lock(&m), -ECANCELED);  /* held: refused at once */
    CHECK_EQ(load32(&m.state), 1);             /* no waiter left behind */
    CHECK_EQ((gmp_mutex_lock)(&m), -ECANCELED); /* the out-of-line call too */
    send_int(go_unlock, 1);                     /* buffered: not a wait */
    CHECK_OK(gmp_mutex_lock_nocancel(&m));     /* waits for the unlocker */
    CHECK_OK(gmp_mutex_unlock(&m));
    check_mutex_idle(&m);
    CHECK_EQ(gmp_mutex_lock_nocancel(NULL), -EINVAL);
    gmp_rwmutex rw = GMP_RWMUTEX_INIT;
    CHECK_OK(gmp_rwmutex_lock(&rw));
    CHECK_EQ(gmp_rwmutex_rlock(&rw), -ECANCELED);
    CHECK_EQ(gmp_rwmutex_lock(&rw), -ECANCELED);
    CHECK_OK(gmp_rwmutex_unlock(&rw));
    check_rwmutex_idle(&rw);
    CHECK_OK(gmp_scope_end(s));
}

/* ---- a plain thread's lock, cancelled ---- */

static gmp_scope *_Atomic main_scope;

static void cancel_when_queued(void *arg)
{
    gmp_mutex *m = arg;
    wait_word(&m->state, 1 | 1 << 3);
    CHECK_OK(gmp_scope_cancel(atomic_load(&main_scope)));
}

static void step_thread(void)
{
    gmp_mutex m = GMP_MUTEX_INIT;
    CHECK_OK(gmp_mutex_lock(&m));
    gmp_scope *s = NULL;
    CHECK_OK(gmp_scope_begin(&s, -1));
    atomic_store(&main_scope, s);
    /* A goroutine of the scope that cancels it once this thread waits for the lock. */
    CHECK_OK(gmp_go(cancel_when_queued, &m));
    CHECK_EQ(gmp_mutex_lock(&m), -ECANCELED);
    CHECK_OK(gmp_scope_wait(s));
    CHECK_OK(gmp_scope_end(s));
    CHECK_OK(gmp_mutex_unlock(&m));
    check_mutex_idle(&m);
}

/* ---- rwmutex ---- */

static gmp_rwmutex rwm = GMP_RWMUTEX_INIT;

static void reader(void *arg)
{
    (void)arg;
    int r = gmp_rwmutex_rlock(&rwm);
    if (r == 0)
        CHECK_OK(gmp_rwmutex_runlock(&rwm));
    send_int(results, r);
}

static void writer(void *arg)
{
    (void)arg;
    int r = gmp_rwmutex_lock(&rwm);
    if (r == 0)
        CHECK_OK(gmp_rwmutex_unlock(&rwm));
    send_int(results, r);
}

/* Runs fn as a goroutine in a scope of its own; returns the scope (current until ended). */
static gmp_scope *go_scoped(gmp_func fn)
{
    gmp_scope *s = NULL;
    CHECK_OK(gmp_scope_begin(&s, -1));
    CHECK_OK(gmp_go(fn, NULL));
    return s;
}

static void cancel_end(gmp_scope *s)
{
    CHECK_OK(gmp_scope_cancel(s));
    CHECK_OK(gmp_scope_end(s));
}

static void step_rwmutex(void)
{
    /* Readers cancelled behind a writer. */
    CHECK_OK(gmp_rwmutex_lock(&rwm));
    gmp_scope *s = go_scoped(reader);
    gmp_go(reader, NULL); /* inside s too: s is current */
    wait_word(&rwm.reader_count, -MAX_READERS + 2);
    cancel_end(s);
    CHECK_EQ(recv_int(results), -ECANCELED);
    CHECK_EQ(recv_int(results), -ECANCELED);
    CHECK_OK(gmp_go(reader, NULL)); /* unscoped */
    wait_word(&rwm.reader_count, -MAX_READERS + 3);
    CHECK_OK(gmp_rwmutex_unlock(&rwm));
    CHECK_EQ(recv_int(results), 0);
    check_rwmutex_idle(&rwm);

    /* A writer cancelled while it waits for the writers' mutex. */
    CHECK_OK(gmp_rwmutex_lock(&rwm));
    s = go_scoped(writer);
    wait_word(&rwm.w.state, 1 | 1 << 3);
    cancel_end(s);
    CHECK_EQ(recv_int(results), -ECANCELED);
    CHECK_OK(gmp_rwmutex_unlock(&rwm));
    check_rwmutex_idle(&rwm);

    /* A writer cancelled while it waits for the reader inside (this thread), with a
     * reader queued behind it. */
    CHECK_OK(gmp_rwmutex_rlock(&rwm));
    s = go_scoped(writer);
    wait_word(&rwm.reader_count, 1 - MAX_READERS);
    CHECK_OK(gmp_scope_end(s)); /* ending the scope cancels it */
    CHECK_EQ(recv_int(results), -ECANCELED);
    CHECK_OK(gmp_go(reader, NULL));
    wait_word(&rwm.reader_count, 2 - MAX_READERS);
    /* The writer's ghost holds the lock for it: new readers still queue. */
    CHECK_EQ(gmp_rwmutex_tryrlock(&rwm), -EBUSY);
    CHECK_OK(gmp_rwmutex_runlock(&rwm));
    CHECK_EQ(recv_int(results), 0);
    check_rwmutex_idle(&rwm);
    CHECK_OK(gmp_rwmutex_trylock(&rwm));
    CHECK_OK(gmp_rwmutex_unlock(&rwm));
}

/* ---- deadlines ---- */

static gmp_mutex dmu = GMP_MUTEX_INIT;
static gmp_rwmutex drw = GMP_RWMUTEX_INIT;
static gmp_wg dwg = GMP_WG_INIT;
static gmp_mutex dcmu = GMP_MUTEX_INIT;
static gmp_cond dcv = GMP_COND_INIT;

/* Each wait that has no timeout of its own, in a scope with a 30 ms deadline: it ends
 * with -ETIMEDOUT between 20 ms and 5 s after the scope began. Returns how many did. */
static int deadline_waits(void)
{
    int n = 0;
    for (int kind = 0; kind < 5; kind++) {
        gmp_scope *s = NULL;
        int64_t t0 = gmp_now();
        CHECK_OK(gmp_scope_begin(&s, 30 * MS));
        int r = 0;
        switch (kind) {
        case 0: r = gmp_mutex_lock(&dmu); break;
        case 1: r = gmp_rwmutex_rlock(&drw); break;
        case 2: r = gmp_rwmutex_lock(&drw); break;
        case 3: r = gmp_wg_wait(&dwg); break;
        default:
            CHECK_OK(gmp_mutex_lock(&dcmu)); /* free: taken even so */
            r = gmp_cond_wait(&dcv, &dcmu);  /* returns holding it */
            CHECK_OK(gmp_mutex_unlock(&dcmu));
            break;
        }
        int64_t took = gmp_now() - t0;
        if (r != -ETIMEDOUT || took < 20 * MS || took > 5 * SEC)
            fprintf(stderr, "scope_locks: deadline wait %d returned %d after %lld ns\n", kind, r,
                    (long long)took);
        CHECK_EQ(r, -ETIMEDOUT);
        CHECK(took >= 20 * MS && took <= 5 * SEC);
        CHECK_EQ(gmp_scope_err(s), -ETIMEDOUT);
        CHECK_OK(gmp_scope_end(s));
        n++;
    }
    return n;
}

static void deadline_goroutine(void *arg)
{
    (void)arg;
    send_int(results, deadline_waits());
}

static void step_deadline(void)
{
    CHECK_OK(gmp_mutex_lock(&dmu));
    CHECK_OK(gmp_rwmutex_lock(&drw));
    CHECK_OK(gmp_wg_add(&dwg, 1));
    CHECK_OK(gmp_go(deadline_goroutine, NULL)); /* a goroutine: the deadline's timer */
    CHECK_EQ(recv_int(results), 5);
    CHECK_EQ(deadline_waits(), 5);              /* this thread: a timed sleep */
    CHECK_OK(gmp_mutex_unlock(&dmu));
    CHECK_OK(gmp_rwmutex_unlock(&drw));
    CHECK_OK(gmp_wg_done(&dwg));
    CHECK_OK(gmp_wg_wait(&dwg));
    check_mutex_idle(&dmu);
    check_rwmutex_idle(&drw);
    /* The cond's tombstones let later signals through. */
    CHECK_OK(gmp_cond_signal(&dcv));
    CHECK_OK(gmp_cond_broadcast(&dcv));
}

/* ---- race ---- */

static gmp_mutex rmu = GMP_MUTEX_INIT;
static atomic_int rinside;

static void race_locker(void *arg)
{
    (void)arg;
    int r = gmp_mutex_lock(&rmu);
    if (r == 0) {
        CHECK_EQ(atomic_fetch_add(&rinside, 1), 0);
        atomic_fetch_sub(&rinside, 1);
        CHECK_OK(gmp_mutex_unlock(&rmu));
    }
    send_int(results, r);
}

static gmp_chan *race_go, *race_done;

static void race_holder(void *arg)
{
    (void)arg;
    CHECK_EQ(recv_int(race_go), 1);
    CHECK_OK(gmp_mutex_unlock(&rmu));
    send_int(race_done, 1);
}

static void step_race(void)
{
    int got = 0, cancelled = 0;
    for (int round = 0; round < 2000; round++) {
        CHECK_OK(gmp_mutex_lock(&rmu));
        gmp_scope *s = NULL;
        CHECK_OK(gmp_go(race_locker, NULL)); /* unscoped */
        /* The unlock (once all four are queued) races with the scope's end. */
        CHECK_OK(gmp_go(race_holder, NULL));
        CHECK_OK(gmp_scope_begin(&s, -1));
        for (int i = 0; i < 3; i++)
            CHECK_OK(gmp_go(race_locker, NULL));
        wait_word(&rmu.state, 1 | 4 << 3);
        send_int(race_go, 1);
        CHECK_OK(gmp_scope_end(s));
        int zeros = 0;
        for (int i = 0; i < 4; i++) {
            int r = recv_int(results);
            CHECK(r == 0 || r == -ECANCELED);
            r == 0 ? zeros++ : cancelled++;
        }
        CHECK(zeros >= 1); /* the unscoped one always */
        got += zeros - 1;
        /* The words are idle once every unlock has returned: the holder's release may
         * still be running the ghost it dequeued (WOKEN set for it, the count added)
         * after the waiters it did not reach have finished. */
        CHECK_EQ(recv_int(race_done), 1);
        check_mutex_idle(&rmu);
    }
    printf("scope_locks: race: %d scoped locks taken, %d cancelled\n", got, cancelled);
}

/* ---- storm ---- */

enum { STORM_G = 16, STORM_N = 3000 };
static gmp_mutex smu = GMP_MUTEX_INIT;
static gmp_rwmutex srw = GMP_RWMUTEX_INIT;
static long scount;                /* guarded by smu */
static long swrites;               /* guarded by srw (write) */
static atomic_long slocked, swlocked;
static atomic_int sreaders, swriters;

static void storm(void *arg)
{
    int id = (int)(intptr_t)arg;
    uint32_t x = (uint32_t)id * 2654435761u + 1;
    for (int i = 0; i < STORM_N; i++) {
        x = x * 1103515245u + 12345u;
        gmp_scope *s = NULL;
        if (id % 2)
            CHECK_OK(gmp_scope_begin(&s, (int64_t)(x >> 8) % (200 * US)));
        if (x & 0x10000) {
            int r = gmp_mutex_lock(&smu);
            CHECK(r == 0 || (s && (r == -ETIMEDOUT || r == -ECANCELED)));
            if (r == 0) {
                scount++;
                atomic_fetch_add(&slocked, 1);
                if ((x & 0xff) == 0)
                    gmp_sleep(2 * MS); /* long enough for waiters to starve */
                CHECK_OK(gmp_mutex_unlock(&smu));
            }
        } else if (x & 0x20000) {
            int r = gmp_rwmutex_lock(&srw);
            CHECK(r == 0 || (s && (r == -ETIMEDOUT || r == -ECANCELED)));
            if (r == 0) {
                CHECK_EQ(atomic_fetch_add(&swriters, 1), 0);
                CHECK_EQ(atomic_load(&sreaders), 0);
                swrites++;
                atomic_fetch_add(&swlocked, 1);
                atomic_fetch_sub(&swriters, 1);
                CHECK_OK(gmp_rwmutex_unlock(&srw));
            }
        } else {
            int r = gmp_rwmutex_rlock(&srw);
            CHECK(r == 0 || (s && (r == -ETIMEDOUT || r == -ECANCELED)));
            if (r == 0) {
                atomic_fetch_add(&sreaders, 1);
                CHECK_EQ(atomic_load(&swriters), 0);
                if ((x & 0xff) == 1)
                    gmp_sleep(200 * US);
                atomic_fetch_sub(&sreaders, 1);
                CHECK_OK(gmp_rwmutex_runlock(&srw));
            }
        }
        if (s)
            CHECK_OK(gmp_scope_end(s));
    }
    send_int(results, id);
}

static void step_storm(void)
{
    for (int i = 0; i < STORM_G; i++)
        CHECK_OK(gmp_go(storm, (void *)(intptr_t)i));
    for (int i = 0; i < STORM_G; i++)
        (void)recv_int(results);
    CHECK_EQ(scount, atomic_load(&slocked));
    CHECK_EQ(swrites, atomic_load(&swlocked));
    check_mutex_idle(&smu);
    check_rwmutex_idle(&srw);
    printf("scope_locks: storm: %ld mutex locks, %ld write locks\n", scount, swrites);
}

int main(void)
{
    CHECK_OK(gmp_chan_make(&results, sizeof(int), 64));
    CHECK_OK(gmp_chan_make(&go_unlock, sizeof(int), 1));
    CHECK_OK(gmp_chan_make(&spawn_req, sizeof(int), 0));
    CHECK_OK(gmp_chan_make(&race_go, sizeof(int), 1));
    CHECK_OK(gmp_chan_make(&race_done, sizeof(int), 1));
    CHECK_OK(gmp_go(spawner, NULL));
    step_mutex();
    step_after();
    step_thread();
    step_rwmutex();
    step_deadline();
    step_race();
    step_storm();
    send_int(spawn_req, 0);
    CHECK_OK(gmp_chan_release(spawn_req));
    CHECK_OK(gmp_chan_release(race_go));
    CHECK_OK(gmp_chan_release(race_done));
    CHECK_OK(gmp_chan_release(go_unlock));
    CHECK_OK(gmp_chan_release(results));
    printf("scope_locks: mutex and rwmutex waits ended by scopes, the locks exact\n");
    return 0;
}
