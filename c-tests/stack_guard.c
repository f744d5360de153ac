/*
 * stack_guard.c -- big frames and alloca cannot jump the guard below a goroutine stack.
 *
 * Functions here are compiled without stack-clash protection (as most C is): a frame
 * bigger than the guard below a stack moves the stack pointer past it in one step, and
 * its first store lands wherever that is. The guard is wide enough (64 KiB) for such
 * frames to land in it, and a fault there is reported as the goroutine's overflow.
 *
 * Scenario (no argument): goroutine A fills a 32 KiB canary on its stack and parks on a
 * channel; goroutine B, whose stack is the next one up in the same slab (both have an
 * unusual stack size, so they get a fresh slab, lowest stack first), descends to 20 KB
 * above the bottom of its stack and calls a function with a 14 KB frame, which fits.
 * Checks: B's call returns its value, and A's canary is intact once A is woken.
 *
 * Misuse cases (each must abort with "gmp: goroutine N: stack overflow"):
 *   jump    as above, but B calls the 14 KB frame 2 KB above its bottom: the frame's
 *           lowest bytes would be 12 KB below it (with a one-page guard: inside A's
 *           canary, no fault at all);
 *   frame   unbounded recursion of 14 KB frames that store at their lowest byte first;
 *   alloca  unbounded recursion of 12 KiB alloca blocks, stored at their lowest byte.
 */
#include "check.h"

#include <alloca.h>
#include <gmp-sched/gmp.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__)
#define NO_CLASH __attribute__((noinline, optimize("no-stack-clash-protection")))
#else
#define NO_CLASH __attribute__((noinline))
#endif

/* Not the default, not a size another test or the runtime uses: a fresh slab. */
#define STACK_SIZE (64 * 1024 + 3 * 4096)
#define BIG 14000
#define CANARY (32 * 1024)

static gmp_wg a_ready = GMP_WG_INIT, b_done = GMP_WG_INIT, a_done = GMP_WG_INIT;
static gmp_chan *wake_a;
static size_t b_remaining; /* how far above the bottom of its stack B calls big_frame */
static int b_result;

/* A 14 KB frame whose first store is its lowest byte. */
NO_CLASH static int big_frame(int seed)
{
    volatile char buf[BIG];
    buf[0] = (char)seed;
    buf[BIG - 1] = (char)(seed + 1);
    return buf[0] + buf[BIG - 1];
}

/* Recurses with small frames until `lo + remaining`, then calls big_frame. */
NO_CLASH static int descend(uintptr_t lo, size_t remaining, int seed)
{
    volatile char pad[256];
    pad[0] = (char)seed;
    if ((uintptr_t)&pad[0] > lo + remaining + 512)
        return descend(lo, remaining, seed) + pad[0] - seed;
    return big_frame(seed);
}

static void goroutine_a(void *arg)
{
    (void)arg;
    volatile unsigned char canary[CANARY];
    for (size_t i = 0; i < CANARY; i++)
        canary[i] = (unsigned char)(0xA5 ^ i);
    CHECK_EQ(gmp_wg_done(&a_ready), 0);
    int v = 0;
    CHECK_EQ(gmp_chan_recv(wake_a, &v), 0);
    for (size_t i = 0; i < CANARY; i++) {
        if (canary[i] != (unsigned char)(0xA5 ^ i)) {
            fprintf(stderr, "stack_guard: A's canary overwritten at byte %zu of %d\n", i,
                    CANARY);
            CHECK(0);
        }
    }
    CHECK_EQ(gmp_wg_done(&a_done), 0);
}

static void goroutine_b(void *arg)
{
    (void)arg;
    char here;
    /* The goroutine starts at the top of its stack: its first frames are in the top page. */
    uintptr_t top = ((uintptr_t)&here + 4095) & ~(uintptr_t)4095;
    uintptr_t lo = top - STACK_SIZE;
    b_result = descend(lo, b_remaining, 7);
    CHECK_EQ(gmp_wg_done(&b_done), 0);
}

static void neighbours(size_t remaining)
{
    b_remaining = remaining;
    CHECK_OK(gmp_chan_make(&wake_a, sizeof(int), 0));
    gmp_attr attr = {0};
    attr.stack_size = STACK_SIZE;
    CHECK_OK(gmp_wg_add(&a_ready, 1));
    CHECK_OK(gmp_wg_add(&b_done, 1));
    CHECK_OK(gmp_wg_add(&a_done, 1));
    CHECK_OK(gmp_go_attr(goroutine_a, NULL, &attr));
    CHECK_OK(gmp_wg_wait(&a_ready));
    CHECK_OK(gmp_go_attr(goroutine_b, NULL, &attr));
    CHECK_OK(gmp_wg_wait(&b_done));
    CHECK_EQ(b_result, 7 + 8);
    int v = 1;
    CHECK_EQ(gmp_chan_send(wake_a, &v), 0);
    CHECK_OK(gmp_wg_wait(&a_done));
    CHECK_EQ(gmp_chan_release(wake_a), 0);
}

/* Deeper than any stack here can go; volatile so that the recursion is not provably
 * infinite to the compiler. */
static volatile int depth_limit = 1 << 30;

NO_CLASH static int deep_frames(int n)
{
    volatile char buf[BIG];
    buf[0] = (char)n;
    if (n >= depth_limit)
        return 0;
    return deep_frames(n + 1) + buf[0];
}

NO_CLASH static int deep_alloca(int n)
{
    volatile char *p = alloca(12 * 1024);
    p[0] = (char)n;
    if (n >= depth_limit)
        return 0;
    return deep_alloca(n + 1) + p[0];
}

static volatile int sink;

static void run_frames(void *arg)
{
    (void)arg;
    sink = deep_frames(0);
}

static void run_alloca(void *arg)
{
    (void)arg;
    sink = deep_alloca(0);
}

static void overflow_in(gmp_func f)
{
    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK_OK(gmp_go(f, NULL));
    CHECK_OK(gmp_wg_wait(&wg)); /* never returns: the overflow aborts the process */
    fprintf(stderr, "stack_guard: the overflow did not abort\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        neighbours(20 * 1024);
        printf("stack_guard: a 14 KB frame 20 KB above the bottom fits; neighbour intact\n");
        return 0;
    }
    if (strcmp(argv[1], "jump") == 0)
        neighbours(2 * 1024);
    else if (strcmp(argv[1], "frame") == 0)
        overflow_in(run_frames);
    else if (strcmp(argv[1], "alloca") == 0)
        overflow_in(run_alloca);
    else
        fprintf(stderr, "stack_guard: unknown case %s\n", argv[1]);
    return 1;
}
