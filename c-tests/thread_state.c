/*
 * thread_state.c -- what the runtime's threads take from the thread that started the
 * runtime, and what they do not.
 *
 * Before its first gmp call, main blocks SIGINT (to collect it with sigwait) and SIGURG,
 * confines itself to one CPU and renames itself "weird"; all of that would be cloned into
 * every thread it creates. Then it starts goroutines (the first threads of the runtime
 * are created from main), and each checks from inside, at several points (it sleeps in
 * between, so it may move between threads): its thread's signal mask blocks SIGINT (the
 * mask the runtime was started with is honoured, as Go does) but not SIGURG (preemption's
 * signal, which the runtime needs), its affinity has as many CPUs as the process had at
 * start (more than one on a machine with more), and its thread name is the runtime's
 * ("gmp-..."). gmp_num_cpu() counts the process's CPUs, not main's one. Then a sigwait
 * thread collects 10 SIGINTs sent to the process (kill) while the runtime's threads
 * exist: with SIGINT open on an M, the first one killed the process.
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#define GOROUTINES 8
#define CHECKS 10

static int process_cpus;
static int tids[GOROUTINES * CHECKS];
static int ntids;

static int affinity_count(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CHECK_EQ(sched_getaffinity(0, sizeof set, &set), 0);
    return CPU_COUNT(&set);
}

static void check_thread(void)
{
    sigset_t mask;
    CHECK_EQ(pthread_sigmask(SIG_BLOCK, NULL, &mask), 0);
    CHECK(sigismember(&mask, SIGINT));
    CHECK(!sigismember(&mask, SIGURG));
    CHECK_EQ(affinity_count(), process_cpus);
    char name[17] = {0};
    CHECK_EQ(prctl(PR_GET_NAME, name, 0, 0, 0), 0);
    if (strncmp(name, "gmp-", 4) != 0) {
        fprintf(stderr, "thread name %s\n", name);
        CHECK(strncmp(name, "gmp-", 4) == 0);
    }
    tids[__atomic_fetch_add(&ntids, 1, __ATOMIC_SEQ_CST)] = (int)syscall(SYS_gettid);
}

static int sigints;

static void *sigwaiter(void *arg)
{
    (void)arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    for (int i = 0; i < 10; i++) {
        int sig = 0;
        CHECK_EQ(sigwait(&set, &sig), 0);
        CHECK_EQ(sig, SIGINT);
        __atomic_fetch_add(&sigints, 1, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

static void worker(void *arg)
{
    gmp_wg *wg = arg;
    for (int i = 0; i < CHECKS; i++) {
        check_thread();
        CHECK_OK(gmp_sleep(200000));
    }
    CHECK_OK(gmp_wg_done(wg));
}

int main(void)
{
    process_cpus = affinity_count();

    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGURG);
    CHECK_EQ(pthread_sigmask(SIG_BLOCK, &block, NULL), 0);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    CHECK_EQ(sched_setaffinity(0, sizeof one, &one), 0);
    CHECK_EQ(prctl(PR_SET_NAME, "weird", 0, 0, 0), 0);

    CHECK_EQ(gmp_num_cpu(), process_cpus);
    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&wg, GOROUTINES));
    for (int i = 0; i < GOROUTINES; i++)
        CHECK_OK(gmp_go(worker, &wg));
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_EQ(ntids, GOROUTINES * CHECKS);

    int distinct = 0;
    for (int i = 0; i < ntids; i++) {
        int seen = 0;
        for (int j = 0; j < i; j++)
            seen |= tids[j] == tids[i];
        distinct += !seen;
    }
    /* Main's own state is its business: untouched. */
    CHECK_EQ(affinity_count(), 1);

    /* Process-directed SIGINTs reach the sigwait thread, never an M. Goroutines keep
     * threads busy and idle meanwhile. */
    pthread_t waiter;
    CHECK_EQ(pthread_create(&waiter, NULL, sigwaiter, NULL), 0);
    CHECK_OK(gmp_wg_add(&wg, GOROUTINES));
    ntids = 0;
    for (int i = 0; i < GOROUTINES; i++)
        CHECK_OK(gmp_go(worker, &wg));
    for (int i = 0; i < 10; i++) {
        CHECK_EQ(kill(getpid(), SIGINT), 0);
        WAIT_UNTIL(__atomic_load_n(&sigints, __ATOMIC_SEQ_CST) == i + 1, 10.0);
    }
    CHECK_EQ(pthread_join(waiter, NULL), 0);
    CHECK_OK(gmp_wg_wait(&wg));
    printf("%d checks on %d threads: SIGINT blocked as in main, SIGURG open, %d CPUs, "
           "runtime's names; 10 SIGINTs reached the sigwait thread\n",
           GOROUTINES * CHECKS, distinct, process_cpus);
    return 0;
}
