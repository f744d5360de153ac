/*
 * netpoll_locked.c -- a goroutine locked to its thread waits on the poller while every
 * other processor is idle: the fd's event must still wake it.
 *
 * At GOMAXPROCS=2 a goroutine locks its thread, sleeps a moment (the other threads go
 * idle: no timer is pending, nobody waits on the poller), then reads an empty pipe, with
 * gmp_read and with a plain read(2) through the hooks. A plain thread writes one byte
 * 100 ms later. A goroutine that is not locked parks in its M's scheduler, whose last
 * idle pass blocks in the poller; a locked one's M stops instead and hands its processor
 * off, which must then start a thread to poll (Go's handoffp: "the last running P and
 * nobody is polling network"). Each read must return the byte within 5 s; the watchdog
 * fails a hang.
 */
#include "check.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include <gmp-sched/gmp.h>

#define ROUNDS 6

static gmp_wg done = GMP_WG_INIT;
static int pipefd[2];

static void watchdog(int sig)
{
    (void)sig;
    static const char msg[] = "netpoll_locked: hung (watchdog): the locked reader was never woken\n";
    if (write(2, msg, sizeof msg - 1) < 0) {
        /* nothing more to do */
    }
    gmp_dump(2);
    _exit(3);
}

static void *late_writer(void *arg)
{
    (void)arg;
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    CHECK_EQ(write(pipefd[1], "x", 1), 1);
    return NULL;
}

static void reader(void *arg)
{
    (void)arg;
    CHECK_EQ(gmp_lock_os_thread(), 1);
    for (int round = 0; round < ROUNDS; round++) {
        /* Everything else goes idle meanwhile. */
        CHECK_EQ(gmp_sleep(30 * 1000000LL), 0);
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, late_writer, NULL), 0);
        int64_t t0 = gmp_now();
        char c = 0;
        if (round % 2 == 0)
            CHECK_EQ(gmp_read(pipefd[0], &c, 1), 1);
        else
            CHECK_EQ(read(pipefd[0], &c, 1), 1);
        int64_t waited = gmp_now() - t0;
        CHECK_EQ(c, 'x');
        CHECK(waited < 5000 * 1000000LL);
        CHECK_EQ(pthread_join(t, NULL), 0);
    }
    CHECK_EQ(gmp_unlock_os_thread(), 0);
    gmp_wg_done(&done);
}

int main(void)
{
    signal(SIGALRM, watchdog);
    alarm(30);
    CHECK(gmp_maxprocs(2) > 0);
    CHECK_EQ(pipe(pipefd), 0); /* through the hooks: registered, blocking for the program */
    gmp_wg_add(&done, 1);
    CHECK(gmp_go(reader, NULL) > 0);
    gmp_wg_wait(&done);
    alarm(0);
    printf("netpoll_locked: %d reads woken\n", ROUNDS);
    return 0;
}
