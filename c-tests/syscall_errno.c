/*
 * syscall_errno.c -- errno read through a hoisted address stays right across
 * gmp_blocking (the goroutine never changes threads inside a blocking call).
 *
 * At GOMAXPROCS=2, four goroutines each loop 3,000 times: `int *e = &errno` taken once
 * before the loop (at -O2 the compiler would hoist it anyway: __errno_location is
 * const), then *e = 0, gmp_blocking(fn) where fn sleeps (every 4th call 100 us, long
 * enough for sysmon to retake the processor, so the return may have to wait for one),
 * sets errno = EAGAIN and returns -1; then *e must be EAGAIN and gettid() unchanged; every
 * 4th round also a 100 us nanosleep through gmp_syscall, after which *e (untouched) and
 * gettid() must be unchanged too.
 * Two CPU goroutines yielding in a loop keep the processors busy meanwhile. Also: the
 * gmp_read family never touches errno (a failing gmp_read leaves the caller's errno).
 *
 * `syscall_errno safepoint` (run with GMP_DEBUG=asyncpreemptoff=1): the preemption
 * request honoured on the way out of gmp_blocking (and of gmp_syscall: every other call
 * below goes through it instead) keeps the goroutine on its thread. Two
 * workers each run 25 ms of CPU (over two 10 ms slices: sysmon marks the processor for
 * preemption, and without the signal nothing acts on the mark) and then make a short
 * gmp_blocking call, 30 times, while two yielding goroutines keep both processors busy.
 * The mark is honoured as the call returns; gettid() must not change. A third worker,
 * started pinned, does the same and must still be pinned afterwards (its own record in
 * gmp_dump says so): the binding for one stop must not replace a pinned goroutine's own,
 * or dropping it unpins the goroutine. Then, at
 * GOMAXPROCS=1, that the mark is honoured at all: a worker that only burns 25 ms of CPU
 * and calls gmp_blocking, 20 times, lets a yielding goroutine run across (at least 15 of)
 * its calls; without the safe point nothing else runs until the worker ends.
 */
#include "check.h"

#include <errno.h>
#include <gmp-sched/gmp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static atomic_int stop;

static int64_t set_eagain(void *arg)
{
    long i = (long)(intptr_t)arg;
    if (i % 4 == 0)
        usleep(100);
    errno = EAGAIN;
    return -1;
}

static void worker(void *arg)
{
    gmp_wg *wg = arg;
    int *e = &errno;
    long t0 = (long)syscall(SYS_gettid);
    for (long i = 0; i < 3000; i++) {
        *e = 0;
        CHECK_EQ(gmp_blocking(set_eagain, (void *)(intptr_t)i), -1);
        CHECK_EQ(*e, EAGAIN);
        CHECK_EQ((long)syscall(SYS_gettid), t0);
        if (i % 4 == 1) {
            struct timespec ts = {0, 100000};
            long r;
            while ((r = gmp_syscall(SYS_nanosleep, (long)&ts, (long)&ts, 0, 0, 0, 0)) == -EINTR)
                ;
            CHECK_EQ(r, 0);
            CHECK_EQ(*e, EAGAIN);
            CHECK_EQ((long)syscall(SYS_gettid), t0);
        }
    }
    *e = 77;
    char c;
    CHECK_EQ(gmp_read(-1, &c, 1), -EBADF);
    CHECK_EQ(*e, 77);
    CHECK_OK(gmp_wg_done(wg));
}

static void spinner(void *arg)
{
    gmp_wg *wg = arg;
    while (!atomic_load(&stop)) {
        volatile int x = 0;
        for (int i = 0; i < 5000; i++)
            x += i;
        CHECK_OK(gmp_yield());
    }
    CHECK_OK(gmp_wg_done(wg));
}

static int64_t set_eagain_now(void *arg)
{
    (void)arg;
    errno = EAGAIN;
    return -1;
}

static long slices(void)
{
    int *e = &errno;
    long t0 = (long)syscall(SYS_gettid);
    for (int i = 0; i < 30; i++) {
        double until = now_sec() + 0.025;
        volatile long x = 0;
        while (now_sec() < until)
            for (int k = 0; k < 1000; k++)
                x += k;
        /* Every other call through gmp_syscall, which has the same safe point (and leaves
         * errno alone). */
        if (i % 2) {
            *e = EAGAIN;
            CHECK_EQ(gmp_syscall(SYS_getppid, 0, 0, 0, 0, 0, 0), (long)getppid());
        } else {
            *e = 0;
            CHECK_EQ(gmp_blocking(set_eagain_now, NULL), -1);
        }
        CHECK_EQ((long)syscall(SYS_gettid), t0);
        CHECK_EQ(*e, EAGAIN);
    }
    return t0;
}

static void slice_worker(void *arg)
{
    slices();
    CHECK_OK(gmp_wg_done(arg));
}

/* Whether this goroutine's own record in gmp_dump says "pinned to thread". */
static int dump_says_pinned(void)
{
    static char text[1 << 16];
    int fds[2];
    CHECK_EQ(pipe(fds), 0);
    CHECK_EQ(gmp_dump(fds[1]), 0);
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    while (n < sizeof text - 1 && (r = read(fds[0], text + n, sizeof text - 1 - n)) > 0)
        n += (size_t)r;
    close(fds[0]);
    text[n] = 0;
    char head[64];
    snprintf(head, sizeof head, "goroutine %lld [running, pinned to thread]",
             (long long)gmp_goid());
    return strstr(text, head) != NULL;
}

/* Started pinned: the one-stop binding of those preemptions must not replace its own. */
static void pinned_slice_worker(void *arg)
{
    CHECK(dump_says_pinned());
    slices();
    CHECK(dump_says_pinned());
    CHECK_OK(gmp_wg_done(arg));
}

#define FAIR_ROUNDS 20
static atomic_long yields;
static int advanced;

static void yielder(void *arg)
{
    while (!atomic_load(&stop)) {
        atomic_fetch_add(&yields, 1);
        CHECK_OK(gmp_yield());
    }
    CHECK_OK(gmp_wg_done(arg));
}

static void burner(void *arg)
{
    long t0 = (long)syscall(SYS_gettid);
    for (int i = 0; i < FAIR_ROUNDS; i++) {
        double until = now_sec() + 0.025;
        volatile long x = 0;
        while (now_sec() < until)
            for (int k = 0; k < 1000; k++)
                x += k;
        long before = atomic_load(&yields);
        if (i % 2)
            CHECK_EQ(gmp_syscall(SYS_getppid, 0, 0, 0, 0, 0, 0), (long)getppid());
        else
            CHECK_EQ(gmp_blocking(set_eagain_now, NULL), -1);
        CHECK_EQ((long)syscall(SYS_gettid), t0);
        advanced += atomic_load(&yields) != before;
    }
    CHECK_OK(gmp_wg_done(arg));
}

static int safepoint_on_return(void)
{
    CHECK_OK(gmp_maxprocs(2));
    gmp_wg wg = GMP_WG_INIT, bg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&bg, 2));
    for (int i = 0; i < 2; i++)
        CHECK_OK(gmp_go(spinner, &bg));
    CHECK_OK(gmp_wg_add(&wg, 3));
    for (int i = 0; i < 2; i++)
        CHECK_OK(gmp_go(slice_worker, &wg));
    gmp_attr pinned = {0, GMP_GO_PINNED};
    CHECK_OK(gmp_go_attr(pinned_slice_worker, &wg, &pinned));
    CHECK_OK(gmp_wg_wait(&wg));
    atomic_store(&stop, 1);
    CHECK_OK(gmp_wg_wait(&bg));
    printf("preemption honoured on return from gmp_blocking: 90 returns on their thread\n");

    CHECK_OK(gmp_maxprocs(1));
    atomic_store(&stop, 0);
    gmp_wg bw = GMP_WG_INIT, yw = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&bw, 1));
    CHECK_OK(gmp_wg_add(&yw, 1));
    CHECK_OK(gmp_go(burner, &bw));
    CHECK_OK(gmp_go(yielder, &yw));
    CHECK_OK(gmp_wg_wait(&bw));
    atomic_store(&stop, 1);
    CHECK_OK(gmp_wg_wait(&yw));
    printf("GOMAXPROCS=1: the yielder ran across %d of %d blocking calls\n", advanced,
           FAIR_ROUNDS);
    CHECK(advanced >= FAIR_ROUNDS * 3 / 4);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "safepoint") == 0)
        return safepoint_on_return();
    CHECK_OK(gmp_maxprocs(2));
    gmp_wg wg = GMP_WG_INIT, bg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&bg, 2));
    for (int i = 0; i < 2; i++)
        CHECK_OK(gmp_go(spinner, &bg));
    CHECK_OK(gmp_wg_add(&wg, 4));
    for (int i = 0; i < 4; i++)
        CHECK_OK(gmp_go(worker, &wg));
    CHECK_OK(gmp_wg_wait(&wg));
    atomic_store(&stop, 1);
    CHECK_OK(gmp_wg_wait(&bg));
    printf("errno through a hoisted address: correct in 12000 blocking calls\n");
    return 0;
}
