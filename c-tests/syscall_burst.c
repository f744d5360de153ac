/*
 * syscall_burst.c -- 1,000 goroutines blocked in syscalls at once, ten times over.
 *
 * At GOMAXPROCS=2, each burst starts 1,000 goroutines that block in gmp_read(1 byte) on
 * one empty pipe. sysmon hands each blocked goroutine's processor to another thread, so
 * all of them get to block (1,000 threads in read) and the program keeps going. Main then
 * writes 1,000 bytes and waits for all. Checks: every burst completes; during a burst the
 * thread count (gmp_stats threads) reaches 1,000 (every reader blocked in read on a thread
 * of its own) and is at most 1,000 + 16; it does not grow from the
 * first burst to the tenth (idle threads are reused). Afterwards the program is idle for
 * a second: its CPU time over that second (getrusage) is under 50 ms (idle threads and
 * sysmon sleep).
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <stdatomic.h>
#include <sys/resource.h>

#define N 1000
#define BURSTS 10

static int pipefd[2];
static atomic_int entered;
static atomic_int got;

static void reader(void *arg)
{
    gmp_wg *wg = arg;
    char c;
    atomic_fetch_add(&entered, 1);
    CHECK_EQ(gmp_read(pipefd[0], &c, 1), 1);
    atomic_fetch_add(&got, 1);
    CHECK_OK(gmp_wg_done(wg));
}

static int threads(void)
{
    gmp_sched_stats s;
    CHECK_OK(gmp_stats(&s, NULL, 0));
    return s.threads;
}

static double cpu_sec(void)
{
    struct rusage ru;
    CHECK_EQ(getrusage(RUSAGE_SELF, &ru), 0);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

int main(void)
{
    CHECK_OK(gmp_maxprocs(2));
    CHECK_EQ(pipe(pipefd), 0);
    static char buf[N];
    for (int i = 0; i < N; i++)
        buf[i] = 'b';
    int first = 0, max_seen = 0;
    for (int b = 0; b < BURSTS; b++) {
        gmp_wg wg = GMP_WG_INIT;
        atomic_store(&entered, 0);
        atomic_store(&got, 0);
        CHECK_OK(gmp_wg_add(&wg, N));
        double t0 = now_sec();
        for (int i = 0; i < N; i++)
            CHECK_OK(gmp_go(reader, &wg));
        /* All N in read at once: each holds its own thread (the count includes the
         * threads of the Ps, so at least N). */
        for (;;) {
            int t = threads();
            if (t > max_seen)
                max_seen = t;
            if (atomic_load(&entered) == N && t >= N)
                break;
            CHECK(now_sec() - t0 < 30);
            sleep_ms(1);
        }
        int during = threads();
        CHECK_EQ(atomic_load(&got), 0);
        CHECK_EQ(write(pipefd[1], buf, N), N);
        CHECK_OK(gmp_wg_wait(&wg));
        CHECK_EQ(atomic_load(&got), N);
        if (b == 0)
            first = during;
        printf("burst %d: %.1f ms, threads during %d, max %d\n", b, (now_sec() - t0) * 1e3,
               during, max_seen);
        CHECK(during >= N);
        CHECK(max_seen <= N + 16);
    }
    int last = threads();
    printf("threads after first burst %d, after last %d\n", first, last);
    CHECK(last <= first + 8);
    sleep_ms(200);
    double c0 = cpu_sec(), w0 = now_sec();
    sleep_ms(1000);
    double c1 = cpu_sec(), w1 = now_sec();
    printf("idle: %.2f ms CPU over %.0f ms\n", (c1 - c0) * 1e3, (w1 - w0) * 1e3);
    CHECK(c1 - c0 < 0.050);
    return 0;
}
