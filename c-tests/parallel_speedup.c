/*
 * parallel_speedup.c -- two CPU-bound goroutines run in parallel at GOMAXPROCS=2.
 *
 * Scenario: two goroutines each run a few hundred milliseconds of pure integer
 * arithmetic that never calls into the library (so nothing but a second P can run them
 * at the same time). The pair is timed with CLOCK_MONOTONIC at gmp_maxprocs(1) and at
 * gmp_maxprocs(2) in the same process, TRIALS times each; the check is
 * best(t2) < 0.75 * best(t1) (ideal 0.5); both goroutines' results are checked.
 * gmp_num_cpu() must equal the CPUs of the affinity mask; skipped (exit 0, "SKIP"
 * printed) only when that mask has fewer than two. The harness runs it with no other C test beside it.
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <sched.h>
#include <stdint.h>

#define TRIALS 3
#define TARGET_SEC 0.3 /* per goroutine */

struct job {
    uint64_t seed;
    uint64_t iters;
    uint64_t result;
    gmp_wg *wg;
};

/* A dependent chain of multiply-xorshift steps: neither vectorisable nor foldable. */
static uint64_t crunch(uint64_t x, uint64_t iters)
{
    for (uint64_t i = 0; i < iters; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        x ^= x >> 29;
    }
    return x;
}

static void job_main(void *arg)
{
    struct job *j = arg;
    j->result = crunch(j->seed, j->iters);
    CHECK_OK(gmp_wg_done(j->wg));
}

static volatile uint64_t sink;

static double time_pair(uint64_t iters, int procs)
{
    CHECK_OK(gmp_maxprocs(procs));
    CHECK_EQ(gmp_maxprocs(0), procs);
    gmp_wg wg = GMP_WG_INIT;
    struct job jobs[2] = {{1, iters, 0, &wg}, {2, iters, 0, &wg}};
    CHECK_OK(gmp_wg_add(&wg, 2));
    double t0 = now_sec();
    CHECK(gmp_go(job_main, &jobs[0]) > 0);
    CHECK(gmp_go(job_main, &jobs[1]) > 0);
    CHECK_OK(gmp_wg_wait(&wg));
    double t = now_sec() - t0;
    CHECK_EQ(jobs[0].result, crunch(1, iters));
    CHECK_EQ(jobs[1].result, crunch(2, iters));
    sink = jobs[0].result ^ jobs[1].result;
    return t;
}

int main(void)
{
    /* gmp_num_cpu must agree with the affinity mask, so that a broken one cannot turn
     * this test into a silent skip. */
    cpu_set_t set;
    CHECK_EQ(sched_getaffinity(0, sizeof set, &set), 0);
    int ncpu = gmp_num_cpu();
    CHECK_EQ(ncpu, CPU_COUNT(&set));
    if (ncpu < 2) {
        printf("parallel_speedup: SKIP: gmp_num_cpu() = %d\n", ncpu);
        return 0;
    }

    /* Calibrate on this thread: iterations for about TARGET_SEC. */
    uint64_t iters = 1u << 20;
    for (;;) {
        double t0 = now_sec();
        sink = crunch(3, iters);
        double t = now_sec() - t0;
        if (t > 0.05) {
            iters = (uint64_t)((double)iters * TARGET_SEC / t);
            break;
        }
        iters *= 4;
    }

    double best1 = 1e9, best2 = 1e9;
    for (int trial = 0; trial < TRIALS; trial++) {
        double t1 = time_pair(iters, 1);
        double t2 = time_pair(iters, 2);
        printf("parallel_speedup: trial %d: maxprocs=1 %.3f s, maxprocs=2 %.3f s (%.2f)\n",
               trial, t1, t2, t2 / t1);
        if (t1 < best1)
            best1 = t1;
        if (t2 < best2)
            best2 = t2;
    }
    printf("parallel_speedup: best %.3f s vs %.3f s: ratio %.2f (need < 0.75)\n", best1,
           best2, best2 / best1);
    CHECK(best2 < 0.75 * best1);
    return 0;
}
