/*
 * bad_input.c -- argument checking, wrong-caller errors, and the misuses that abort.
 *
 * Without arguments: every documented -EINVAL / -EPERM case returns exactly that value,
 * leaves the state alone, and the neighbouring valid values are accepted (stack sizes
 * 16 KiB and 1 GiB, wg delta INT32_MAX, 1024 Ps). Also the foreign-thread answers:
 * gmp_goid() == 0, gmp_yield() == 0, gmp_goexit() == -EPERM.
 *
 * With argv[1] naming a misuse, the program must die by SIGABRT with a "gmp:" message
 * (the harness checks the signal and stderr); reaching the end of a case is a failure:
 *   negative_wg            gmp_wg_add(-1) on a zero WaitGroup from main
 *                          ("gmp: sync: negative WaitGroup counter")
 *   negative_wg_goroutine  gmp_wg_done on a zero WaitGroup inside a goroutine (same)
 *   stack_overflow         a goroutine with a 64 KiB stack recursing without bound
 *                          ("gmp: goroutine N: stack overflow")
 *   thread_fuse            gmp_set_max_threads(2), then 4 Ps kept busy by goroutines
 *                          that never yield: 4 Ms are needed ("gmp: thread exhaustion")
 */
#include "check.h"

#include <sys/resource.h>

#include <errno.h>
#include <gmp-sched/gmp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

static atomic_long ran;

static void count(void *arg)
{
    gmp_wg *wg = arg;
    CHECK(gmp_goid() > 0);
    CHECK_EQ(gmp_yield(), 0);
    atomic_fetch_add(&ran, 1);
    CHECK_OK(gmp_wg_done(wg));
}

static void check_go_attr(size_t stack_size, uint32_t flags, int64_t expect_err)
{
    gmp_wg wg = GMP_WG_INIT;
    gmp_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.stack_size = stack_size;
    attr.flags = flags;
    CHECK_OK(gmp_wg_add(&wg, 1));
    int64_t r = gmp_go_attr(count, &wg, &attr);
    if (expect_err) {
        if (r != expect_err)
            fprintf(stderr, "gmp_go_attr(stack_size=%zu, flags=%#x) = %lld\n", stack_size,
                    flags, (long long)r);
        CHECK_EQ(r, expect_err);
        CHECK_OK(gmp_wg_done(&wg));
    } else {
        CHECK(r > 0);
        CHECK_OK(gmp_wg_wait(&wg));
    }
}

/* `bad_input nomem`: with the address space limited (RLIMIT_AS) to what the process uses
 * plus 64 MiB, a goroutine with a 1 GiB stack cannot get one: gmp_go_attr returns -ENOMEM
 * (not -EINVAL, which is for a size outside the documented range), and a default
 * goroutine still starts afterwards (the record was given back). */
static int nomem(void)
{
    check_go_attr(0, 0, 0); /* the runtime, its threads and first stacks exist */
    limit_address_space((size_t)64 << 20);
    check_go_attr((size_t)1 << 30, 0, -ENOMEM);
    check_go_attr(0, 0, 0);
    printf("bad_input nomem: a 1 GiB stack beyond RLIMIT_AS is -ENOMEM\n");
    return 0;
}

static void argument_errors(void)
{
    gmp_wg wg = GMP_WG_INIT;
    int dummy = 0;

    /* Foreign-thread answers (this is the C main thread). */
    CHECK_EQ(gmp_goid(), 0);
    CHECK_EQ(gmp_yield(), 0);
    CHECK_EQ(gmp_goexit(), -EPERM);
    CHECK(gmp_num_cpu() >= 1);
    CHECK(gmp_num_goroutine() >= 0);

    /* gmp_go / gmp_go_attr. */
    CHECK_EQ(gmp_go(NULL, &dummy), -EINVAL);
    CHECK_EQ(gmp_go_attr(NULL, &dummy, NULL), -EINVAL);
    gmp_attr zero;
    memset(&zero, 0, sizeof zero);
    CHECK_EQ(gmp_go_attr(NULL, &dummy, &zero), -EINVAL);
    check_go_attr(1, 0, -EINVAL);
    check_go_attr(16 * 1024 - 1, 0, -EINVAL);
    check_go_attr((size_t)1 << 40, 0, -EINVAL);
    check_go_attr(((size_t)1 << 30) + 1, 0, -EINVAL);
    check_go_attr(0, 4, -EINVAL);
    check_go_attr(0, GMP_GO_LOCKED | 8u, -EINVAL);
    check_go_attr(0, 0x80000000u, -EINVAL);
    check_go_attr(0, GMP_GO_PINNED | 4u, -EINVAL);
    check_go_attr(16 * 1024, 0, 0);       /* GMP_MIN_STACK */
    check_go_attr((size_t)1 << 30, 0, 0); /* GMP_MAX_STACK */
    check_go_attr(0, 0, 0);
    check_go_attr(0, GMP_GO_PINNED, 0);
    check_go_attr(0, GMP_GO_LOCKED, 0);
    check_go_attr(0, GMP_GO_PINNED | GMP_GO_LOCKED, 0);
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK(gmp_go_attr(count, &wg, NULL) > 0); /* NULL attr: the defaults */
    CHECK_OK(gmp_wg_wait(&wg));

    /* WaitGroup. */
    CHECK_EQ(gmp_wg_add(NULL, 1), -EINVAL);
    CHECK_EQ(gmp_wg_done(NULL), -EINVAL);
    CHECK_EQ(gmp_wg_wait(NULL), -EINVAL);
    CHECK_EQ(gmp_wg_add(&wg, (int64_t)1 << 40), -EINVAL);
    CHECK_EQ(gmp_wg_add(&wg, -((int64_t)1 << 40)), -EINVAL);
    CHECK_EQ(gmp_wg_add(&wg, (int64_t)INT32_MAX + 1), -EINVAL);
    CHECK_EQ(gmp_wg_add(&wg, -(int64_t)INT32_MAX - 1), -EINVAL); /* |INT32_MIN| > INT32_MAX */
    CHECK_OK(gmp_wg_wait(&wg)); /* the rejected adds left the counter at zero */
    CHECK_OK(gmp_wg_add(&wg, INT32_MAX));
    CHECK_OK(gmp_wg_add(&wg, -(int64_t)INT32_MAX));
    CHECK_OK(gmp_wg_wait(&wg));

    /* Stats. */
    uint32_t lens[4];
    CHECK_EQ(gmp_stats(NULL, NULL, 0), -EINVAL);
    CHECK_EQ(gmp_stats(NULL, lens, 4), -EINVAL);
    gmp_sched_stats st;
    CHECK_OK(gmp_stats(&st, NULL, 0));
    CHECK_OK(gmp_stats(&st, NULL, 4)); /* no array: nothing written */
    CHECK_EQ(gmp_stats(&st, lens, 0), 0);

    /* GOMAXPROCS. */
    int procs = gmp_maxprocs(0);
    CHECK(procs >= 1);
    CHECK_EQ(gmp_maxprocs(5000), -EINVAL);
    CHECK_EQ(gmp_maxprocs(1025), -EINVAL);
    CHECK_EQ(gmp_maxprocs(0), procs);
    CHECK_EQ(gmp_maxprocs(1024), procs);
    CHECK_EQ(gmp_maxprocs(procs), 1024);

    /* Thread fuse (the harness leaves GMP_MAX_THREADS unset: default 10,000). */
    CHECK_EQ(gmp_set_max_threads(0), -EINVAL);
    CHECK_EQ(gmp_set_max_threads(-1), -EINVAL);
    CHECK_EQ(gmp_set_max_threads(20000), 10000);
    CHECK_EQ(gmp_set_max_threads(10000), 20000);

    /* Default stack size: same bounds as gmp_go_attr. */
    CHECK_EQ(gmp_set_default_stack_size(1), -EINVAL);
    CHECK_EQ(gmp_set_default_stack_size((size_t)1 << 40), -EINVAL);
    CHECK_OK(gmp_set_default_stack_size(256 * 1024));

    CHECK(atomic_load(&ran) >= 5);
}

/* ---- misuse cases: each must abort ---- */

static void negative_wg_in_goroutine(void *arg)
{
    (void)arg;
    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_done(&wg));
    fprintf(stderr, "gmp_wg_done on a zero WaitGroup returned\n");
    _exit(1);
}

/* Each frame touches all of a 1 KiB buffer, so the recursion cannot jump over a guard
 * page, and uses the result after the call, so it is not a tail call. */
static long recurse(long depth)
{
    volatile char frame[1024];
    for (size_t i = 0; i < sizeof frame; i++)
        frame[i] = (char)(depth + (long)i);
    if (depth > 100000000L)
        return frame[0];
    return recurse(depth + 1) + frame[depth % (long)sizeof frame];
}

static void overflow(void *arg)
{
    long r = recurse(0);
    *(long *)arg = r;
    fprintf(stderr, "recursion through 100 GB of frames returned\n");
    _exit(1);
}

/* Keeps its P for 20 s without calling into the library. */
static void busy(void *arg)
{
    double t0 = now_sec();
    volatile uint64_t x = 1;
    while (now_sec() - t0 < 20.0)
        x = x * 3 + 1;
    CHECK_OK(gmp_wg_done(arg));
}

static int misuse(const char *which)
{
    if (strcmp(which, "negative_wg") == 0) {
        gmp_wg wg = GMP_WG_INIT;
        CHECK_OK(gmp_wg_add(&wg, -1));
        fprintf(stderr, "gmp_wg_add(-1) on a zero WaitGroup returned\n");
        return 1;
    }
    if (strcmp(which, "negative_wg_goroutine") == 0) {
        gmp_wg wg = GMP_WG_INIT;
        CHECK_OK(gmp_wg_add(&wg, 1));
        CHECK(gmp_go(negative_wg_in_goroutine, NULL) > 0);
        gmp_wg_wait(&wg); /* never completed: the goroutine aborts the process */
        return 1;
    }
    if (strcmp(which, "stack_overflow") == 0) {
        gmp_wg wg = GMP_WG_INIT;
        gmp_attr attr;
        long result = 0;
        memset(&attr, 0, sizeof attr);
        attr.stack_size = 64 * 1024;
        CHECK_OK(gmp_wg_add(&wg, 1));
        CHECK(gmp_go_attr(overflow, &result, &attr) > 0);
        CHECK_OK(gmp_wg_wait(&wg));
        return 1;
    }
    if (strcmp(which, "thread_fuse") == 0) {
        gmp_wg wg = GMP_WG_INIT;
        CHECK_OK(gmp_set_max_threads(2));
        CHECK_OK(gmp_maxprocs(4));
        CHECK_OK(gmp_wg_add(&wg, 4));
        for (int i = 0; i < 4; i++)
            CHECK(gmp_go(busy, &wg) > 0);
        CHECK_OK(gmp_wg_wait(&wg));
        fprintf(stderr, "4 busy Ps ran to the end under a 2-thread fuse\n");
        return 1;
    }
    fprintf(stderr, "bad_input: unknown case '%s'\n", which);
    return 2;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        return strcmp(argv[1], "nomem") == 0 ? nomem() : misuse(argv[1]);
    argument_errors();
    printf("bad_input: ok\n");
    return 0;
}
