/*
 * stack_trim.c -- after a burst of goroutines the memory of their stacks goes back to the
 * system (Go frees dead goroutines' stacks at each GC), but a program that spawns in
 * bursts keeps the stacks it reuses.
 *
 * `stack_trim idle` (GOMAXPROCS=2): a burst of 2,000 goroutines, spawned from main, each
 * writes 64 KiB of its stack and waits on a channel until all have; then they end. The
 * resident set grew by at least 70% of 2,000 x 64 KiB. The program then does nothing:
 * within 10 s the resident set must be back within 24 MiB of where it was before the
 * first burst (here it takes ~2 s, and ~5 MiB stay) (the caches each keep a floor of stacks, and the Ps' own caches 64 each). A second
 * burst then runs as well (its goroutines find their stacks zeroed below where they
 * wrote, as any fresh stack), and its memory goes back too.
 *
 * `stack_trim off` (run with GMP_DEBUG=stacktrim=0): the same burst, and 3 s of idleness
 * later the memory is still there (the knob turns the trim off, so `idle` above measures
 * the trim and nothing else).
 *
 * `stack_trim bursts` (GOMAXPROCS=2): 12 bursts of 1,000 goroutines that each write 16
 * KiB of stack, one every 200 ms (2.4 s: at least two trims of the caches happen in
 * between). The stacks are reused, not released and faulted back in: bursts 2 to 11
 * together take fewer than 6,000 minor page faults (4,000 pages are written per burst).
 * Trimming whole lists at each trim instead costs ~5,000 faults in the burst after each
 * trim, over 10,000 in all (tried); here they take 0-600 each, and on a loaded machine
 * (the suite runs tests in parallel) up to ~1,200 even with the trim off (new threads,
 * more goroutines alive at once).
 */
#include "check.h"

#include <errno.h>
#include <gmp-sched/gmp.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/resource.h>

static gmp_chan *gate;
static atomic_long touched;
static atomic_long bad;
static long depth;

static void deep(void *arg)
{
    gmp_wg *wg = arg;
    volatile unsigned char buf[64 * 1024];
    long n = depth < (long)sizeof buf ? depth : (long)sizeof buf;
    /* Below what this goroutine writes, a stack holds zeros or what an earlier goroutine
     * left; what it writes it must read back. */
    for (long i = 0; i < n; i += 512)
        buf[i] = (unsigned char)(i >> 9);
    for (long i = 0; i < n; i += 512)
        if (buf[i] != (unsigned char)(i >> 9))
            atomic_fetch_add(&bad, 1);
    atomic_fetch_add(&touched, 1);
    CHECK_EQ(gmp_chan_recv(gate, NULL), -EPIPE);
    CHECK_OK(gmp_wg_done(wg));
}

/* n goroutines that each write `d` bytes of stack and wait until all have. */
static void burst(long n, long d)
{
    depth = d;
    CHECK_OK(gmp_chan_make(&gate, 0, 0));
    atomic_store(&touched, 0);
    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&wg, n));
    for (long i = 0; i < n; i++)
        CHECK_OK(gmp_go(deep, &wg));
    WAIT_UNTIL(atomic_load(&touched) == n, 20);
    CHECK_OK(gmp_chan_close(gate));
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_OK(gmp_chan_release(gate));
    CHECK_EQ(atomic_load(&bad), 0);
}

static long minflt(void)
{
    struct rusage ru;
    CHECK_EQ(getrusage(RUSAGE_SELF, &ru), 0);
    return ru.ru_minflt;
}

static void idle_case(void)
{
    const long n = 2000, d = 64 * 1024;
    burst(100, d); /* threads, caches */
    long r0 = rss_kib();
    for (int round = 0; round < 2; round++) {
        burst(n, d);
        long r1 = rss_kib();
        double t0 = now_sec();
        WAIT_UNTIL(rss_kib() - r0 < 24 * 1024, 10);
        printf("stack_trim idle: round %d: rss %ld KiB before, %ld after the burst, back to "
               "%ld in %.1f s\n",
               round, r0, r1, rss_kib(), now_sec() - t0);
        CHECK(r1 - r0 > n * d / 1024 * 7 / 10);
    }
}

static void off_case(void)
{
    const long n = 2000, d = 64 * 1024;
    burst(100, d);
    long r0 = rss_kib();
    burst(n, d);
    sleep_ms(3000);
    long r1 = rss_kib();
    printf("stack_trim off: rss %ld KiB before the burst, %ld 3 s after it\n", r0, r1);
    CHECK(r1 - r0 > n * d / 1024 * 7 / 10);
}

static void bursts_case(void)
{
    const long n = 1000, d = 16 * 1024;
    long total = 0;
    for (int i = 0; i < 12; i++) {
        long f0 = minflt();
        burst(n, d);
        long f = minflt() - f0;
        printf("stack_trim bursts: burst %d: %ld minor faults\n", i, f);
        if (i >= 2)
            total += f;
        sleep_ms(200);
    }
    printf("stack_trim bursts: %ld faults in bursts 2-11\n", total);
    CHECK(total < 6000);
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    CHECK_OK(gmp_maxprocs(2));
    if (strcmp(argv[1], "idle") == 0)
        idle_case();
    else if (strcmp(argv[1], "bursts") == 0)
        bursts_case();
    else if (strcmp(argv[1], "off") == 0)
        off_case();
    else
        CHECK(!"unknown case");
    return 0;
}
