/*
 * demo: goroutines on the G/M/P scheduler, seen from the outside.
 *
 * Counts primes below 2,000,000 with 2,000 goroutines, each spawning 10 children that
 * test a slice of the range, joined with WaitGroups. Prints what the scheduler did:
 * the threads it used, the goroutines stolen between processors, and (with
 * GMP_DEBUG=schedtrace=MS) Go's SCHED lines while it runs.
 */
#define _POSIX_C_SOURCE 200809L
#include <gmp-sched/gmp.h>

#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#define LIMIT 2000000
#define PARENTS 2000
#define CHILDREN 10

static atomic_long primes;
static gmp_wg all = GMP_WG_INIT;

static int is_prime(long n)
{
    if (n < 2)
        return 0;
    for (long d = 2; d * d <= n; d++)
        if (n % d == 0)
            return 0;
    return 1;
}

struct slice { long lo, hi; gmp_wg *done; };

static void child(void *arg)
{
    struct slice *s = arg;
    long found = 0;
    for (long n = s->lo; n < s->hi; n++)
        found += is_prime(n);
    atomic_fetch_add(&primes, found);
    gmp_wg_done(s->done);
}

static void parent(void *arg)
{
    long lo = (long)(intptr_t)arg, step = LIMIT / PARENTS / CHILDREN;
    struct slice slices[CHILDREN]; /* lives on this goroutine's stack */
    gmp_wg kids = GMP_WG_INIT;
    gmp_wg_add(&kids, CHILDREN);
    for (int i = 0; i < CHILDREN; i++) {
        slices[i] = (struct slice){lo + i * step, lo + (i + 1) * step, &kids};
        gmp_go(child, &slices[i]);
    }
    gmp_wg_wait(&kids); /* parks this goroutine, not the thread */
    gmp_wg_done(&all);
}

int main(void)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    gmp_wg_add(&all, PARENTS);
    for (long i = 0; i < PARENTS; i++)
        gmp_go(parent, (void *)(intptr_t)(i * (LIMIT / PARENTS)));
    gmp_wg_wait(&all); /* the C main thread sleeps on a futex */
    clock_gettime(CLOCK_MONOTONIC, &t1);

    gmp_sched_stats st;
    gmp_stats(&st, NULL, 0);
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    printf("primes below %d: %ld (expected 148933)\n", LIMIT, atomic_load(&primes));
    printf("%.1f ms, %lu goroutines on %d processors, %d OS threads, %lu stolen\n", ms,
           (unsigned long)st.spawned, st.gomaxprocs, st.threads, (unsigned long)st.steals);
    return atomic_load(&primes) == 148933 ? 0 : 1;
}
