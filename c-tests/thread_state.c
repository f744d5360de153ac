/*
 * thread_state.c -- the runtime's threads do not inherit a foreign thread's state.
 *
 * Before its first gmp call, main blocks SIGINT, confines itself to one CPU and renames
 * itself "weird"; all of that would be cloned into every thread it creates. Then it
 * starts goroutines (the first threads of the runtime are created from main), and each
 * checks from inside, at several points (it sleeps in between, so it may move between
 * threads): its thread's signal mask does not block SIGINT, its affinity has as many
 * CPUs as the process had at start (more than one on a machine with more), and its
 * thread name is the runtime's ("gmp-..."). gmp_num_cpu() counts the process's CPUs, not
 * main's one.
 */
#include "check.h"

#include <gmp.h>
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
    CHECK(!sigismember(&mask, SIGINT));
    CHECK_EQ(affinity_count(), process_cpus);
    char name[17] = {0};
    CHECK_EQ(prctl(PR_GET_NAME, name, 0, 0, 0), 0);
    if (strncmp(name, "gmp-", 4) != 0) {
        fprintf(stderr, "thread name %s\n", name);
        CHECK(strncmp(name, "gmp-", 4) == 0);
    }
    tids[__atomic_fetch_add(&ntids, 1, __ATOMIC_SEQ_CST)] = (int)syscall(SYS_gettid);
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
    printf("%d checks on %d threads: SIGINT unblocked, %d CPUs, runtime's names\n", ntids,
           distinct, process_cpus);
    return 0;
}
