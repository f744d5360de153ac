/*
 * contract_locks: C code that holds a pthread lock or relies on its thread's state runs in
 * goroutines as it runs on threads -- preemption and the hooks change who waits, nothing
 * else. One case per run (argv[1]); GOMAXPROCS comes from the environment.
 *
 *   mutex     workers take a pthread mutex around a compute loop that calls nothing of
 *             ours (so only asynchronous preemption stops them, inside the critical
 *             section); the others block in pthread_mutex_lock, a futex wait the hooks do
 *             not see. Every worker finishes; the mutex protected its count.
 *   rwlock    the same with a pthread rwlock, readers and writers.
 *   tls       each worker writes its id to a __thread slot, computes, and checks the slot
 *             still holds its id: no other goroutine ran on its thread meanwhile (a
 *             preempted goroutine's thread waits for it; its P goes elsewhere).
 *   handoff   workers take a mutex around write + fdatasync of a regular file (a
 *             logger that syncs each record): the holder's P moves on during the hooked
 *             write, the others block in the mutex; every record is written.
 *   condvar   a producer and consumers through a pthread condition variable with a
 *             timed wait (an absolute deadline: FUTEX_WAIT_BITSET), the consumers
 *             outnumbering the Ps.
 *
 * Each run has a watchdog: a hang fails the test with a message, and the runtime's
 * goroutine dump goes to stderr.
 */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <gmp-sched/gmp.h>

static gmp_wg wg = GMP_WG_INIT;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static long shared_count;
static volatile unsigned long sink;

static int workers;
static int rounds;

/* About `us` microseconds of work that calls nothing (no gmp call, no libc call). */
static void compute(int us)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        for (int i = 0; i < 2000; i++)
            sink += (unsigned long)i * 2654435761u;
        clock_gettime(CLOCK_MONOTONIC, &t);
        long el = (t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000;
        if (el >= us)
            return;
    }
}

static void watchdog(int sig)
{
    (void)sig;
    static const char msg[] = "contract_locks: hung (watchdog); goroutines:\n";
    if (write(2, msg, sizeof msg - 1) < 0) {
        /* nothing more to do */
    }
    gmp_dump(2);
    _exit(3);
}

/* ---------------------------------------------------------------------------------- */

static void mutex_worker(void *arg)
{
    (void)arg;
    for (int r = 0; r < rounds; r++) {
        CHECK_EQ(pthread_mutex_lock(&mu), 0);
        long before = shared_count;
        compute(3000);
        shared_count = before + 1;
        CHECK_EQ(pthread_mutex_unlock(&mu), 0);
    }
    gmp_wg_done(&wg);
}

static void rwlock_worker(void *arg)
{
    long id = (long)(intptr_t)arg;
    for (int r = 0; r < rounds; r++) {
        if ((id + r) % 3 == 0) {
            CHECK_EQ(pthread_rwlock_wrlock(&rw), 0);
            long before = shared_count;
            compute(2000);
            shared_count = before + 1;
        } else {
            CHECK_EQ(pthread_rwlock_rdlock(&rw), 0);
            long seen = shared_count;
            compute(2000);
            CHECK_EQ(shared_count, seen);
        }
        CHECK_EQ(pthread_rwlock_unlock(&rw), 0);
    }
    gmp_wg_done(&wg);
}

static _Thread_local volatile long tls_owner;
static atomic_long tls_checks;

static void tls_worker(void *arg)
{
    long id = (long)(intptr_t)arg + 1;
    for (int r = 0; r < rounds * 4; r++) {
        tls_owner = id;
        compute(4000);
        if (tls_owner != id) {
            fprintf(stderr, "tls: worker %ld found %ld in its thread's slot\n", id, tls_owner);
            _exit(1);
        }
        atomic_fetch_add(&tls_checks, 1);
    }
    gmp_wg_done(&wg);
}

static int log_fd = -1;
static atomic_long records;

static void handoff_worker(void *arg)
{
    long id = (long)(intptr_t)arg;
    char line[64];
    int n = snprintf(line, sizeof line, "worker %ld record\n", id);
    for (int r = 0; r < rounds * 4; r++) {
        CHECK_EQ(pthread_mutex_lock(&mu), 0);
        CHECK_EQ(write(log_fd, line, (size_t)n), n);
        CHECK_EQ(fdatasync(log_fd), 0);
        compute(200);
        CHECK_EQ(pthread_mutex_unlock(&mu), 0);
        atomic_fetch_add(&records, 1);
    }
    gmp_wg_done(&wg);
}

static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static long queue_len;
static int producing = 1;
static atomic_long consumed;

static void consumer(void *arg)
{
    (void)arg;
    CHECK_EQ(pthread_mutex_lock(&mu), 0);
    for (;;) {
        while (queue_len == 0 && producing) {
            struct timespec dl;
            clock_gettime(CLOCK_REALTIME, &dl);
            dl.tv_sec += 5;
            int rc = pthread_cond_timedwait(&cv, &mu, &dl);
            CHECK(rc == 0 || rc == ETIMEDOUT);
        }
        if (queue_len == 0 && !producing)
            break;
        queue_len--;
        CHECK_EQ(pthread_mutex_unlock(&mu), 0);
        compute(500);
        atomic_fetch_add(&consumed, 1);
        CHECK_EQ(pthread_mutex_lock(&mu), 0);
    }
    CHECK_EQ(pthread_mutex_unlock(&mu), 0);
    gmp_wg_done(&wg);
}

static void producer(void *arg)
{
    long total = (long)(intptr_t)arg;
    for (long i = 0; i < total; i++) {
        compute(200);
        CHECK_EQ(pthread_mutex_lock(&mu), 0);
        queue_len++;
        CHECK_EQ(pthread_cond_signal(&cv), 0);
        CHECK_EQ(pthread_mutex_unlock(&mu), 0);
    }
    CHECK_EQ(pthread_mutex_lock(&mu), 0);
    producing = 0;
    CHECK_EQ(pthread_cond_broadcast(&cv), 0);
    CHECK_EQ(pthread_mutex_unlock(&mu), 0);
    gmp_wg_done(&wg);
}

static void spawn_all(void (*fn)(void *), int n)
{
    gmp_wg_add(&wg, n);
    for (int i = 0; i < n; i++)
        CHECK(gmp_go(fn, (void *)(intptr_t)i) >= 0);
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    const char *c = argv[1];
    signal(SIGALRM, watchdog);
    alarm(60);
    int procs = gmp_maxprocs(0);
    workers = procs * 3;
    rounds = 20;
    if (strcmp(c, "mutex") == 0) {
        spawn_all(mutex_worker, workers);
        gmp_wg_wait(&wg);
        CHECK_EQ(shared_count, (long)workers * rounds);
    } else if (strcmp(c, "rwlock") == 0) {
        spawn_all(rwlock_worker, workers);
        gmp_wg_wait(&wg);
        long writes = 0;
        for (int id = 0; id < workers; id++)
            for (int r = 0; r < rounds; r++)
                writes += (id + r) % 3 == 0;
        CHECK_EQ(shared_count, writes);
    } else if (strcmp(c, "tls") == 0) {
        spawn_all(tls_worker, workers);
        gmp_wg_wait(&wg);
        CHECK_EQ(atomic_load(&tls_checks), (long)workers * rounds * 4);
    } else if (strcmp(c, "handoff") == 0) {
        char path[] = "/tmp/gmp-contract-XXXXXX";
        log_fd = mkstemp(path);
        CHECK(log_fd >= 0);
        unlink(path);
        spawn_all(handoff_worker, 8);
        gmp_wg_wait(&wg);
        CHECK_EQ(atomic_load(&records), 8L * rounds * 4);
        off_t size = lseek(log_fd, 0, SEEK_END);
        CHECK(size >= 8L * rounds * 4 * 15);
        close(log_fd);
    } else if (strcmp(c, "condvar") == 0) {
        long total = 400;
        spawn_all(consumer, workers);
        gmp_wg_add(&wg, 1);
        CHECK(gmp_go(producer, (void *)(intptr_t)total) >= 0);
        gmp_wg_wait(&wg);
        CHECK_EQ(atomic_load(&consumed), total);
    } else {
        fprintf(stderr, "unknown case %s\n", c);
        return 2;
    }
    printf("contract_locks %s: ok (GOMAXPROCS=%d)\n", c, procs);
    return 0;
}
