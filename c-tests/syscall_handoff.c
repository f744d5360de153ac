/*
 * syscall_handoff.c -- a goroutine blocked in a syscall does not hold up the others.
 *
 * At GOMAXPROCS=1, four goroutines do CPU work (with a gmp_yield every 1,000 steps so
 * they share the one processor) for 200 ms, counting steps. Run A: alone. Run B: a fifth
 * goroutine, started first, is blocked the whole 200 ms in gmp_read on an empty pipe
 * (written after the window). sysmon must retake the processor from the blocked reader
 * and hand it to another thread, so B keeps >= 90% of A's throughput. A and B alternate
 * three times and the best of each is compared (the machine is shared). Run C: as B, with
 * the reader in gmp_syscall(SYS_read) instead, which must hand off alike. Also checks the
 * reader got its byte and that its gettid() did not change across the call.
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <stdatomic.h>
#include <sys/syscall.h>

static atomic_int stop;
static atomic_long steps;
static int pipefd[2];
static atomic_int reader_ok;
static int raw_reader;

static void worker(void *arg)
{
    gmp_wg *wg = arg;
    volatile unsigned long x = 1;
    long n = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        for (int i = 0; i < 1000; i++)
            x = x * 2862933555777941757UL + 3037000493UL;
        n++;
        CHECK_OK(gmp_yield());
    }
    atomic_fetch_add(&steps, n);
    CHECK_OK(gmp_wg_done(wg));
}

static void reader(void *arg)
{
    gmp_wg *wg = arg;
    long t0 = (long)syscall(SYS_gettid);
    char c = 0;
    if (raw_reader)
        CHECK_EQ(gmp_syscall(SYS_read, pipefd[0], (long)&c, 1, 0, 0, 0), 1);
    else
        CHECK_EQ(gmp_read(pipefd[0], &c, 1), 1);
    CHECK_EQ(c, 'x');
    CHECK_EQ((long)syscall(SYS_gettid), t0);
    atomic_store(&reader_ok, 1);
    CHECK_OK(gmp_wg_done(wg));
}

/* with_reader: 0 none, 1 in gmp_read, 2 in gmp_syscall. */
static long run(int with_reader)
{
    raw_reader = with_reader == 2;
    gmp_wg wg = GMP_WG_INIT;
    atomic_store(&stop, 0);
    atomic_store(&steps, 0);
    atomic_store(&reader_ok, 0);
    CHECK_OK(gmp_wg_add(&wg, with_reader ? 5 : 4));
    if (with_reader)
        CHECK_OK(gmp_go(reader, &wg));
    for (int i = 0; i < 4; i++)
        CHECK_OK(gmp_go(worker, &wg));
    sleep_ms(200);
    atomic_store(&stop, 1);
    if (with_reader)
        CHECK_EQ(write(pipefd[1], "x", 1), 1);
    CHECK_OK(gmp_wg_wait(&wg));
    if (with_reader)
        CHECK(atomic_load(&reader_ok));
    return atomic_load(&steps);
}

int main(void)
{
    CHECK_OK(gmp_maxprocs(1));
    CHECK_EQ(pipe(pipefd), 0);
    run(0); /* warm up: threads, stacks */
    long best_a = 0, best_b = 0, best_c = 0;
    for (int i = 0; i < 3; i++) {
        long a = run(0), b = run(1), c = run(2);
        if (a > best_a)
            best_a = a;
        if (b > best_b)
            best_b = b;
        if (c > best_c)
            best_c = c;
    }
    double ratio = (double)best_b / (double)best_a;
    double ratio_raw = (double)best_c / (double)best_a;
    printf("syscall_handoff: without reader %ld steps, with blocked reader %ld steps: %.3f, "
           "reader in gmp_syscall %ld steps: %.3f\n",
           best_a, best_b, ratio, best_c, ratio_raw);
    CHECK(ratio >= 0.90);
    CHECK(ratio_raw >= 0.90);
    return 0;
}
