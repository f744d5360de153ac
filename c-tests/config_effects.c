/*
 * config_effects.c -- start-up settings take effect: GMP_STACK_SIZE, gmp_set_default_stack_size,
 * GMP_MAX_THREADS, and the default GOMAXPROCS (affinity mask, cgroup CPU quota).
 *
 * One case per run, named by argv[1]; the harness sets the environment and checks the
 * outcome (exit 0, or death by SIGABRT with the expected "gmp:" message):
 *   stack KIB         a goroutine of the default size uses KIB KiB of its stack
 *                     (4 KiB frames of a recursion); with GMP_STACK_SIZE=1M and KIB=700 it
 *                     must return, with no setting it must die with "stack overflow"
 *                     (the default is 256 KiB)
 *   set_stack KIB     the same after gmp_set_default_stack_size(1 MiB): must return
 *   threads N         GOMAXPROCS N, N goroutines that spin until all N run at once
 *                     (N threads needed); exit 0 when they did, 3 after 10 s without;
 *                     under GMP_MAX_THREADS=N-1 it must die with "thread exhaustion"
 *   maxprocs N        gmp_maxprocs(0) == N and gmp_num_cpu() equals the CPUs of the
 *                     affinity mask (run under `taskset -c 0` or in a cgroup with a quota)
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Uses about `kib` KiB of stack: one 4 KiB frame per level, each written. */
static int use_stack(int kib)
{
    volatile char frame[4096];
    frame[0] = (char)kib;
    frame[sizeof frame - 1] = (char)kib;
    if (kib <= 4)
        return frame[0];
    return use_stack(kib - 4) + frame[sizeof frame - 1];
}

static int stack_kib;
static atomic_int stack_done;

static void stack_user(void *arg)
{
    (void)arg;
    CHECK(use_stack(stack_kib) != 12345);
    atomic_store(&stack_done, 1);
}

static int run_stack(void)
{
    CHECK(gmp_go(stack_user, NULL) > 0);
    WAIT_UNTIL(atomic_load(&stack_done), 10.0);
    printf("config_effects: a goroutine used %d KiB of its stack\n", stack_kib);
    return 0;
}

static int nthreads;
static atomic_int running;

static void spinner(void *arg)
{
    (void)arg;
    atomic_fetch_add(&running, 1);
    double deadline = now_sec() + 10.0;
    /* Never yields: each spinner keeps its processor, so N of them need N threads. */
    while (atomic_load(&running) < nthreads && now_sec() < deadline) {
    }
}

int main(int argc, char **argv)
{
    CHECK(argc == 3);
    int n = atoi(argv[2]);
    if (strcmp(argv[1], "stack") == 0) {
        stack_kib = n;
        return run_stack();
    }
    if (strcmp(argv[1], "set_stack") == 0) {
        CHECK_EQ(gmp_set_default_stack_size(1 << 20), 0);
        stack_kib = n;
        return run_stack();
    }
    if (strcmp(argv[1], "threads") == 0) {
        nthreads = n;
        CHECK_OK(gmp_maxprocs(n));
        for (int i = 0; i < n; i++)
            CHECK(gmp_go(spinner, NULL) > 0);
        double deadline = now_sec() + 10.0;
        while (atomic_load(&running) < n && now_sec() < deadline)
            sleep_ms(1);
        printf("config_effects: %d of %d spinners ran at once\n", atomic_load(&running), n);
        return atomic_load(&running) == n ? 0 : 3;
    }
    if (strcmp(argv[1], "maxprocs") == 0) {
        cpu_set_t set;
        CHECK_EQ(sched_getaffinity(0, sizeof set, &set), 0);
        int procs = gmp_maxprocs(0); /* the first call: the runtime starts here */
        printf("config_effects: %d CPUs in the mask, gmp_num_cpu %d, GOMAXPROCS %d\n",
               CPU_COUNT(&set), gmp_num_cpu(), procs);
        CHECK_EQ(gmp_num_cpu(), CPU_COUNT(&set));
        CHECK_EQ(procs, n);
        gmp_sched_stats st;
        CHECK_OK(gmp_stats(&st, NULL, 0));
        CHECK_EQ(st.gomaxprocs, n);
        return 0;
    }
    fprintf(stderr, "config_effects: unknown case '%s'\n", argv[1]);
    return 2;
}
