/*
 * select_bench: the cost of gmp_select per item received. P senders put 0..N-1 on one
 * channel with plain gmp_chan_send; P receivers take them with gmp_select over that
 * channel, and with -cases 2 also a receive case on an unbuffered channel nobody sends on
 * (a "quit" case). Prints ns per item. HACKING.md ("Select and the ring") compares
 * libraries with it, run alternately with LD_LIBRARY_PATH.
 *
 *   cc -O2 -Wall -Wextra -Wpedantic -I include -o /tmp/select_bench scripts/select_bench.c \
 *      -L target/release -lgmp
 *   GMP_MAXPROCS=2 LD_LIBRARY_PATH=target/release /tmp/select_bench CASES CAP PAIRS [N]
 *
 * e.g. `1 16 1` (one select case, a 16-slot channel, one sender and one receiver), `2 0 1`
 * (two cases, unbuffered), `1 1024 4` (four senders, four receivers).
 */
#include <gmp-sched/gmp.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static gmp_chan *ch, *quit;
static long n = 2000000, pairs = 1;
static size_t ncases = 1;
static gmp_wg wg = GMP_WG_INIT, done = GMP_WG_INIT;
static atomic_long sum;

static long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static void sender(void *arg)
{
    for (long i = (long)(intptr_t)arg; i < n; i += pairs)
        if (gmp_chan_send(ch, &i) != 0)
            abort();
    gmp_wg_done(&wg);
}

static void receiver(void *arg)
{
    long k = (long)(intptr_t)arg, v = 0, s = 0;
    gmp_select_case cases[2] = {{ch, GMP_RECV, &v, 0}, {quit, GMP_RECV, NULL, 0}};
    /* Receiver k takes the share of sender k (the counts, not the values, are fixed). */
    long mine = (n - k + pairs - 1) / pairs;
    for (long i = 0; i < mine; i++) {
        if (gmp_select(cases, ncases, -1) != 0) {
            fprintf(stderr, "select_bench: unexpected case\n");
            exit(1);
        }
        s += v;
    }
    atomic_fetch_add(&sum, s);
    gmp_wg_done(&wg);
}

static void root(void *arg)
{
    (void)arg;
    gmp_wg_add(&wg, 2 * pairs);
    for (long k = 0; k < pairs; k++) {
        gmp_go(sender, (void *)(intptr_t)k);
        gmp_go(receiver, (void *)(intptr_t)k);
    }
    gmp_wg_wait(&wg);
    gmp_wg_done(&done);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: select_bench CASES(1|2) CAP PAIRS [N]\n");
        return 2;
    }
    ncases = (size_t)atoi(argv[1]);
    long cap = atol(argv[2]);
    pairs = atol(argv[3]);
    if (argc > 4)
        n = atol(argv[4]);
    if ((ncases != 1 && ncases != 2) || cap < 0 || pairs < 1 || n < pairs) {
        fprintf(stderr, "select_bench: bad arguments\n");
        return 2;
    }
    if (gmp_chan_make(&ch, sizeof(long), (size_t)cap) != 0 || gmp_chan_make(&quit, 0, 0) != 0)
        return 1;
    long t0 = now_ns();
    gmp_wg_add(&done, 1);
    gmp_go(root, NULL);
    gmp_wg_wait(&done);
    long t = now_ns() - t0;
    if (atomic_load(&sum) != (n - 1) * n / 2) {
        fprintf(stderr, "select_bench: wrong sum\n");
        return 1;
    }
    printf("select_bench cases=%zu cap=%ld pairs=%ld ns_per_item=%.1f\n", ncases, cap, pairs,
           (double)t / (double)n);
    return 0;
}
