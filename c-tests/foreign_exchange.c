/*
 * foreign_exchange.c -- C main (a thread that is not an M) in a quick exchange with a
 * goroutine, and the scheduler's slices around the poller. One case per run (argv[1]).
 *
 *   chan1, chan2  C main and an echo goroutine ping-pong over two unbuffered channels at
 *            GOMAXPROCS=1 / 2, 20,000 round trips. In a quick exchange neither side
 *            sleeps in the kernel: C main spins for the answer, and an idle M spins for
 *            C main's next message (sys::foreign_wait, foreign::spin_for_foreign). The
 *            voluntary context switches of C main and of the Ms over the exchange must be
 *            under a quarter of the round trips (one or two per round trip when either
 *            side sleeps). Needs two CPUs (skipped on one, where nobody spins); best of
 *            three attempts, since another process may take a CPU for a while.
 *   socket   The same over a socketpair (gmp_read/gmp_write; C main waits in poll(2), the
 *            goroutine on the poller), GOMAXPROCS=1: fewer switches than half the round
 *            trips, and no preemption request over 300 ms of it (gmp_stats
 *            preempt_requests grows by at most 2). The echo goroutine runs microseconds
 *            at a time; it once inherited one time slice forever through the poller
 *            (readied into runnext), and sysmon asked for preemption every round.
 *   root     That last check with the driver a goroutine (GOMAXPROCS=1, both sides on
 *            the poller): at most 2 requests in 300 ms.
 *   burst    After a quick exchange C main spawns 2,000 goroutines of ~5 us of work each
 *            (GOMAXPROCS=1, so the global queue fills): the burst must take less than
 *            twice as long as the same burst after a long wait, plus 1 ms. A foreign
 *            hand-off in a quick exchange waits up to 2 us for an M to take its goroutine;
 *            doing that for every spawn of a burst made it ~10x slower.
 *   mailbox  Three foreign threads, each in a ping-pong with its own goroutine and spawning
 *            batches of goroutines, while C main changes GOMAXPROCS every 2 ms: every round
 *            trip answered and every spawned goroutine run once (the spinning M's mailbox,
 *            which a foreign hand-off fills directly, is contended and its P retired).
 *   idle     The spinning is bounded: after a quick exchange, C main waits 300 ms on a
 *            channel that a sleeping goroutine fills, and then 300 ms on a WaitGroup while
 *            goroutines sleep 1 ms at a time; the process's CPU time over each wait stays
 *            under a third of it (spinning without a bound takes all of it).
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

enum { ROUNDS = 20000 };

static void add_m_switches(const char *status, void *ctx)
{
    const char *key = "\nvoluntary_ctxt_switches:";
    const char *v = strstr(status, key);
    if (strncmp(status, "Name:\tgmp-m", 11) == 0 && v != NULL)
        *(long *)ctx += strtol(v + strlen(key), NULL, 10);
}

/* Voluntary context switches of this thread (C main) and of the Ms ("gmp-m*"). */
static long sleeps(void)
{
    struct rusage ru;
    CHECK(getrusage(RUSAGE_THREAD, &ru) == 0);
    long total = ru.ru_nvcsw;
    each_thread_file("status", add_m_switches, &total);
    return total;
}

static double cpu_sec(void)
{
    struct rusage ru;
    CHECK(getrusage(RUSAGE_SELF, &ru) == 0);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static int cpus(void)
{
    cpu_set_t set;
    CHECK(sched_getaffinity(0, sizeof set, &set) == 0);
    return CPU_COUNT(&set);
}

/* ---- channels ---- */

static gmp_chan *ping, *pong;

static void echo_chan(void *arg)
{
    (void)arg;
    long v;
    while (gmp_chan_recv(ping, &v) == 0)
        CHECK_OK(gmp_chan_send(pong, &v));
}

static void exchange_chan(long rounds)
{
    for (long i = 0; i < rounds; i++) {
        long v = i, back = -1;
        CHECK_OK(gmp_chan_send(ping, &v));
        CHECK_OK(gmp_chan_recv(pong, &back));
        CHECK_EQ(back, i);
    }
}

/* ---- sockets ---- */

static int sv[2];

static void echo_sock(void *arg)
{
    (void)arg;
    char buf[64];
    int64_t r;
    while ((r = gmp_read(sv[1], buf, sizeof buf)) > 0)
        CHECK_EQ(gmp_write(sv[1], buf, (size_t)r), r);
}

static void exchange_sock(long rounds)
{
    for (long i = 0; i < rounds; i++) {
        char msg[64], back[64];
        memset(msg, (int)(i & 0x7f), sizeof msg);
        CHECK_EQ(gmp_write(sv[0], msg, sizeof msg), (int64_t)sizeof msg);
        size_t got = 0;
        while (got < sizeof back) {
            int64_t r = gmp_read(sv[0], back + got, sizeof back - got);
            CHECK(r > 0);
            got += (size_t)r;
        }
        CHECK(memcmp(msg, back, sizeof msg) == 0);
    }
}

/* Runs exchanges for at least 300 ms; returns the growth of preempt_requests. */
static uint64_t requests_over_300ms(void (*exchange)(long))
{
    uint64_t before = sched_stats().preempt_requests;
    double t0 = now_sec();
    long rounds = 0;
    while (now_sec() - t0 < 0.3) {
        exchange(1000);
        rounds += 1000;
    }
    uint64_t grew = sched_stats().preempt_requests - before;
    printf("%ld round trips in %.0f ms, %llu preemption requests\n", rounds,
           (now_sec() - t0) * 1e3, (unsigned long long)grew);
    return grew;
}

/* Best of three: the switches per round trip of `rounds` exchanges. */
static double switches_per_round(void (*exchange)(long), long rounds)
{
    double best = 1e9;
    for (int attempt = 0; attempt < 3; attempt++) {
        long s0 = sleeps();
        double t0 = now_sec();
        exchange(rounds);
        double per = (double)(sleeps() - s0) / (double)rounds;
        printf("attempt %d: %.3f voluntary switches per round trip, %.2f us each\n",
               attempt, per, (now_sec() - t0) * 1e6 / (double)rounds);
        if (per < best)
            best = per;
    }
    return best;
}

/* ---- root ---- */

static gmp_wg root_done = GMP_WG_INIT;
static uint64_t root_requests;

static void root_driver(void *arg)
{
    (void)arg;
    root_requests = requests_over_300ms(exchange_sock);
    gmp_wg_done(&root_done);
}

/* ---- idle ---- */

static gmp_chan *late;
static gmp_wg nappers = GMP_WG_INIT;

static void send_late(void *arg)
{
    (void)arg;
    gmp_sleep(300 * 1000 * 1000LL);
    long v = 7;
    CHECK_OK(gmp_chan_send(late, &v));
}

static void napper(void *arg)
{
    (void)arg;
    for (int i = 0; i < 300; i++)
        gmp_sleep(1000 * 1000LL);
    gmp_wg_done(&nappers);
}

/* ---- burst ---- */

static gmp_wg burst_wg = GMP_WG_INIT;

static void work_5us(void *arg)
{
    (void)arg;
    double t0 = now_sec();
    while (now_sec() - t0 < 5e-6)
        ;
    gmp_wg_done(&burst_wg);
}

/* Seconds C main spends spawning `n` workers (then waits for them). */
static double burst(int n)
{
    gmp_wg_add(&burst_wg, n);
    double t0 = now_sec();
    for (int i = 0; i < n; i++)
        CHECK(gmp_go(work_5us, NULL) > 0);
    double t = now_sec() - t0;
    CHECK_OK(gmp_wg_wait(&burst_wg));
    return t;
}

/* ---- mailbox ---- */

enum { MB_THREADS = 3, MB_ROUNDS = 20000, MB_BATCH = 8 };

static gmp_chan *mb_ping[MB_THREADS], *mb_pong[MB_THREADS];
static gmp_wg mb_spawned = GMP_WG_INIT;
static atomic_long mb_ran, mb_started;
static atomic_int mb_finished;

static void mb_echo(void *arg)
{
    long k = (long)(intptr_t)arg, v;
    while (gmp_chan_recv(mb_ping[k], &v) == 0)
        CHECK_OK(gmp_chan_send(mb_pong[k], &v));
}

static void mb_worker(void *arg)
{
    (void)arg;
    atomic_fetch_add(&mb_ran, 1);
    gmp_wg_done(&mb_spawned);
}

/* A foreign thread in an exchange with its own echo goroutine; every 64 round trips it
 * also spawns a batch (its first spawn may go to the spinner's mailbox, the rest to the
 * global queue). */
static void *mb_thread(void *arg)
{
    long k = (long)(intptr_t)arg;
    for (long i = 0; i < MB_ROUNDS; i++) {
        long v = i * MB_THREADS + k, back = -1;
        CHECK_OK(gmp_chan_send(mb_ping[k], &v));
        CHECK_OK(gmp_chan_recv(mb_pong[k], &back));
        CHECK_EQ(back, v);
        if (i % 64 == 0) {
            CHECK_OK(gmp_wg_add(&mb_spawned, MB_BATCH));
            for (int j = 0; j < MB_BATCH; j++) {
                CHECK(gmp_go(mb_worker, NULL) > 0);
                atomic_fetch_add(&mb_started, 1);
            }
        }
    }
    CHECK_OK(gmp_chan_close(mb_ping[k]));
    atomic_fetch_add(&mb_finished, 1);
    return NULL;
}

/* Several foreign threads hand goroutines over at once (they compete for the one
 * mailbox) while C main keeps changing GOMAXPROCS (a spinner whose P leaves service
 * with a goroutine in its mailbox queues it instead of running it): every round trip
 * answered, every spawned goroutine run once. */
static void mailbox_stress(void)
{
    pthread_t th[MB_THREADS];
    for (long k = 0; k < MB_THREADS; k++) {
        CHECK_OK(gmp_chan_make(&mb_ping[k], sizeof(long), 0));
        CHECK_OK(gmp_chan_make(&mb_pong[k], sizeof(long), 0));
        CHECK(gmp_go(mb_echo, (void *)(intptr_t)k) > 0);
    }
    for (long k = 0; k < MB_THREADS; k++)
        CHECK(pthread_create(&th[k], NULL, mb_thread, (void *)(intptr_t)k) == 0);
    int procs[] = {1, 2, 3, 2};
    long resizes = 0;
    while (atomic_load(&mb_finished) < MB_THREADS) {
        CHECK_OK(gmp_maxprocs(procs[resizes++ % 4]));
        struct timespec nap = {0, 2 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    for (int k = 0; k < MB_THREADS; k++)
        CHECK(pthread_join(th[k], NULL) == 0);
    CHECK_OK(gmp_wg_wait(&mb_spawned));
    long started = atomic_load(&mb_started), ran = atomic_load(&mb_ran);
    printf("mailbox: %d threads x %d round trips, %ld GOMAXPROCS changes, %ld goroutines "
           "spawned, %ld ran\n", MB_THREADS, MB_ROUNDS, resizes, started, ran);
    CHECK_EQ(ran, started);
}

static void start_sock_echo(void)
{
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    CHECK_OK(gmp_fd_register(sv[0]));
    CHECK_OK(gmp_fd_register(sv[1]));
    CHECK(gmp_go(echo_sock, NULL) > 0);
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    const char *c = argv[1];
    if (strcmp(c, "mailbox") == 0) {
        mailbox_stress();
        return 0;
    }
    if (strcmp(c, "chan1") == 0 || strcmp(c, "chan2") == 0 || strcmp(c, "idle") == 0 ||
        strcmp(c, "burst") == 0) {
        CHECK_OK(gmp_maxprocs(strcmp(c, "chan2") == 0 ? 2 : 1));
        CHECK_OK(gmp_chan_make(&ping, sizeof(long), 0));
        CHECK_OK(gmp_chan_make(&pong, sizeof(long), 0));
        CHECK(gmp_go(echo_chan, NULL) > 0);
        exchange_chan(1000);
        if (strcmp(c, "burst") == 0) {
            burst(2000); /* allocates the goroutines both measured bursts reuse */
            /* After a long wait (the thread's next wait does not spin). */
            CHECK_OK(gmp_chan_make(&late, sizeof(long), 0));
            CHECK(gmp_go(send_late, NULL) > 0);
            long v = 0;
            CHECK_OK(gmp_chan_recv(late, &v));
            double slow = burst(2000);
            /* After a quick exchange. */
            exchange_chan(1000);
            double quick = burst(2000);
            printf("burst of 2000 spawns: %.2f ms after a long wait, %.2f ms after an "
                   "exchange\n", slow * 1e3, quick * 1e3);
            CHECK(quick < 2 * slow + 1e-3);
            return 0;
        }
        if (strcmp(c, "idle") == 0) {
            CHECK_OK(gmp_chan_make(&late, sizeof(long), 0));
            CHECK(gmp_go(send_late, NULL) > 0);
            double w0 = now_sec(), c0 = cpu_sec();
            long v = 0;
            CHECK_OK(gmp_chan_recv(late, &v));
            CHECK_EQ(v, 7);
            double wall = now_sec() - w0, cpu = cpu_sec() - c0;
            printf("channel wait: %.0f ms, %.1f ms of CPU\n", wall * 1e3, cpu * 1e3);
            CHECK(cpu < wall / 3);

            exchange_chan(1000);
            for (int i = 0; i < 4; i++) {
                gmp_wg_add(&nappers, 1);
                CHECK(gmp_go(napper, NULL) > 0);
            }
            w0 = now_sec(), c0 = cpu_sec();
            CHECK_OK(gmp_wg_wait(&nappers));
            wall = now_sec() - w0, cpu = cpu_sec() - c0;
            printf("WaitGroup wait: %.0f ms, %.1f ms of CPU\n", wall * 1e3, cpu * 1e3);
            CHECK(cpu < wall / 3);
            return 0;
        }
        if (cpus() < 2) {
            printf("skipped: one CPU, nobody spins\n");
            return 0;
        }
        CHECK(switches_per_round(exchange_chan, ROUNDS) < 0.25);
        return 0;
    }
    if (strcmp(c, "socket") == 0) {
        CHECK_OK(gmp_maxprocs(1));
        start_sock_echo();
        exchange_sock(1000);
        CHECK(requests_over_300ms(exchange_sock) <= 2);
        if (cpus() < 2) {
            printf("skipped the switch count: one CPU, nobody spins\n");
            return 0;
        }
        CHECK(switches_per_round(exchange_sock, ROUNDS / 4) < 0.5);
        return 0;
    }
    if (strcmp(c, "root") == 0) {
        CHECK_OK(gmp_maxprocs(1));
        start_sock_echo();
        gmp_wg_add(&root_done, 1);
        CHECK(gmp_go(root_driver, NULL) > 0);
        CHECK_OK(gmp_wg_wait(&root_done));
        CHECK(root_requests <= 2);
        return 0;
    }
    fprintf(stderr, "unknown case %s\n", c);
    return 2;
}
