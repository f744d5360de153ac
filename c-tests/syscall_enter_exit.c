/*
 * syscall_enter_exit.c -- gmp_entersyscall / gmp_exitsyscall around a real blocking call.
 *
 * 1. At GOMAXPROCS=1 goroutine A brackets a raw read(2) of an empty pipe (not gmp_read)
 *    with gmp_entersyscall and gmp_exitsyscall. Goroutine B, runnable on the only
 *    processor, writes the byte A waits for: the program ends only because the processor
 *    was handed off while A's thread sat in the kernel. Checks: both calls return 0; A is
 *    on the same thread after the pair; B ran on another thread while A was inside (a
 *    second thread exists: gmp_stats threads >= 2); A's read returned the byte.
 * 2. Pairing: a second gmp_entersyscall inside the pair is -EINVAL, gmp_exitsyscall
 *    without gmp_entersyscall is -EINVAL; on the foreign main thread both return 0.
 * 3. 20 rounds of the same hand-off, each waiting until A is inside read (its thread
 *    asleep in the kernel, seen in /proc) before B is started.
 * 4. The fast path: a call that returns before sysmon looks finds its processor where it
 *    left it and goes on (Go's exitsyscall fast path), without a trip through the
 *    scheduler. 1,000 enter/getppid/exit rounds with nothing else to run, on one thread,
 *    add (almost) nothing to gmp_stats' schedticks; the slow path (waiting for a
 *    processor to be handed over) counts one per round and is ~300x slower.
 */
#include "check.h"

#include <errno.h>
#include <gmp-sched/gmp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static int pipefd[2];
static atomic_long a_tid, b_tid;
static atomic_int a_inside;

static long tid(void)
{
    return (long)syscall(SYS_gettid);
}

/* Whether thread `t` of this process is asleep (state S) in the kernel. */
static int thread_sleeping(long t)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%ld/stat", t);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *close_paren = strrchr(buf, ')');
    return close_paren && close_paren[1] == ' ' && close_paren[2] == 'S';
}

static void reader(void *arg)
{
    long t0 = tid();
    atomic_store(&a_tid, t0);
    /* Set before entering: B can run only once the processor was handed off, which
     * happens only after gmp_entersyscall. */
    atomic_store(&a_inside, 1);
    CHECK_EQ(gmp_entersyscall(), 0);
    CHECK_EQ(gmp_entersyscall(), -EINVAL); /* already inside */
    char c = 0;
    ssize_t n = read(pipefd[0], &c, 1);
    int err = errno;
    CHECK_EQ(gmp_exitsyscall(), 0);
    atomic_store(&a_inside, 0);
    if (n != 1)
        fprintf(stderr, "read: %s\n", strerror(err));
    CHECK_EQ(n, 1);
    CHECK_EQ(c, 'x');
    CHECK_EQ(tid(), t0);
    CHECK_EQ(gmp_exitsyscall(), -EINVAL); /* not inside */
    CHECK_OK(gmp_wg_done(arg));
}

static void writer(void *arg)
{
    atomic_store(&b_tid, tid());
    /* A is still inside its read: B runs beside it, on another thread. */
    CHECK_EQ(atomic_load(&a_inside), 1);
    CHECK(tid() != atomic_load(&a_tid));
    gmp_sched_stats st;
    CHECK_OK(gmp_stats(&st, NULL, 0));
    CHECK(st.threads >= 2);
    CHECK_EQ(gmp_write(pipefd[1], "x", 1), 1);
    CHECK_OK(gmp_wg_done(arg));
}

#define FAST_ROUNDS 1000
static int fast_done;
static double fast_secs;
static uint64_t fast_ticks;

static void fast_path(void *arg)
{
    long t0 = tid();
    uint64_t ticks0 = sched_stats().schedticks;
    double start = now_sec();
    for (fast_done = 0; fast_done < FAST_ROUNDS; fast_done++) {
        CHECK_EQ(gmp_entersyscall(), 0);
        CHECK(getppid() > 0);
        CHECK_EQ(gmp_exitsyscall(), 0);
        CHECK_EQ(tid(), t0);
    }
    fast_secs = now_sec() - start;
    fast_ticks = sched_stats().schedticks - ticks0;
    CHECK_OK(gmp_wg_done(arg));
}

int main(void)
{
    CHECK_EQ(gmp_entersyscall(), 0); /* foreign thread: nothing to do */
    CHECK_EQ(gmp_exitsyscall(), 0);
    CHECK_OK(gmp_maxprocs(1));
    CHECK_EQ(pipe(pipefd), 0);

    /* 1: B queued behind A on the only processor. */
    {
        gmp_wg wg = GMP_WG_INIT;
        CHECK_OK(gmp_wg_add(&wg, 2));
        CHECK(gmp_go(reader, &wg) > 0);
        CHECK(gmp_go(writer, &wg) > 0);
        /* Without a hand-off B never runs and A never returns. */
        WAIT_UNTIL(atomic_load(&b_tid) != 0, 10.0);
        CHECK_OK(gmp_wg_wait(&wg));
        CHECK(atomic_load(&b_tid) != atomic_load(&a_tid));
    }
    /* 3: A inside read first (asleep in the kernel), then B. */
    for (int r = 0; r < 20; r++) {
        gmp_wg wg = GMP_WG_INIT;
        CHECK_OK(gmp_wg_add(&wg, 2));
        atomic_store(&a_tid, 0);
        atomic_store(&b_tid, 0);
        CHECK(gmp_go(reader, &wg) > 0);
        WAIT_UNTIL(atomic_load(&a_inside) && thread_sleeping(atomic_load(&a_tid)), 10.0);
        CHECK(gmp_go(writer, &wg) > 0);
        WAIT_UNTIL(atomic_load(&b_tid) != 0, 10.0);
        CHECK_OK(gmp_wg_wait(&wg));
    }
    /* 4 */
    {
        gmp_wg wg = GMP_WG_INIT;
        CHECK_OK(gmp_wg_add(&wg, 1));
        CHECK(gmp_go(fast_path, &wg) > 0);
        CHECK_OK(gmp_wg_wait(&wg));
        printf("fast path: %d enter/exit rounds in %.2f ms, %llu schedticks\n", FAST_ROUNDS,
               fast_secs * 1e3, (unsigned long long)fast_ticks);
        CHECK_EQ(fast_done, FAST_ROUNDS);
        /* A round's hand-off by sysmon (a syscall older than its 10 ms grace) is allowed. */
        CHECK(fast_ticks < FAST_ROUNDS / 10);
    }
    printf("syscall_enter_exit: 21 hand-offs around a raw read\n");
    return 0;
}
