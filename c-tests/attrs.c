/*
 * attrs.c -- goroutine attributes: stack size and GMP_GO_PINNED.
 *
 * Scenario 1: a goroutine started with stack_size = 1 MiB uses a 512 KiB local array,
 * writing and reading back every byte (the default 256 KiB stack could not hold it).
 *
 * Scenario 2: at GMP_MAXPROCS=2, a pinned goroutine yields 1,000 times and parks 100
 * times on a WaitGroup completed by a helper goroutine (so it is made ready from
 * another thread's P), while 4 default goroutines yield 10,000 times each. Checks: the
 * pinned goroutine's gettid() never changes; the default goroutines do migrate (at
 * least one of them is seen on two or more threads: a yielding goroutine stays on its P's
 * queue unless stolen, so they also sleep 100 µs every 500 yields, after which the
 * timer readies them on whichever P runs it, and idle Ps steal).
 *
 * Scenario 3: scenario 1's goroutine started right after default-sized goroutines died on
 * the same processor (GOMAXPROCS=1, from a root goroutine), 5 times: a goroutine about to
 * run for the first time trades its stack for a dead goroutine's warm one only when both
 * have the same size; a 1 MiB request must not end up on a dead 256 KiB stack.
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static long tid(void)
{
    return (long)syscall(SYS_gettid);
}

/* ---- scenario 1 ---- */

#define BIG (512 * 1024)

static void big_frame(void *arg)
{
    volatile unsigned char buf[BIG];
    for (size_t i = 0; i < BIG; i++)
        buf[i] = (unsigned char)(i * 7);
    unsigned long sum = 0, expect = 0;
    for (size_t i = 0; i < BIG; i++) {
        sum += buf[i];
        expect += (unsigned char)(i * 7);
    }
    CHECK_EQ(sum, expect);
    CHECK_OK(gmp_wg_done(arg));
}

static void scenario_big_stack(void)
{
    gmp_wg wg = GMP_WG_INIT;
    gmp_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.stack_size = 1024 * 1024;
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK(gmp_go_attr(big_frame, &wg, &attr) > 0);
    CHECK_OK(gmp_wg_wait(&wg));
}

/* ---- scenario 2 ---- */

#define PIN_YIELDS 1000
#define PIN_PARKS 100
#define OTHERS 4
#define OTHER_YIELDS 10000
#define MAX_TIDS 16

static atomic_long pinned_moves;
static long pinned_tid;

struct other {
    long tids[MAX_TIDS];
    int ntids;
    gmp_wg *wg;
};

static void note_tid(struct other *o)
{
    long t = tid();
    for (int i = 0; i < o->ntids; i++)
        if (o->tids[i] == t)
            return;
    if (o->ntids < MAX_TIDS)
        o->tids[o->ntids++] = t;
}

static void other_main(void *arg)
{
    struct other *o = arg;
    note_tid(o);
    for (int i = 0; i < OTHER_YIELDS; i++) {
        CHECK_EQ(gmp_yield(), 0);
        note_tid(o);
        if (i % 500 == 499) {
            /* A short sleep: the P may go idle and steal, and the timer readies this
             * goroutine on whichever P runs it. */
            CHECK_OK(gmp_sleep(100 * 1000));
            note_tid(o);
        }
    }
    CHECK_OK(gmp_wg_done(o->wg));
}

static void helper(void *arg)
{
    for (int i = 0; i < 3; i++)
        CHECK_EQ(gmp_yield(), 0);
    CHECK_OK(gmp_wg_done(arg));
}

static void pinned_main(void *arg)
{
    long t0 = tid();
    pinned_tid = t0;
    for (int i = 0; i < PIN_YIELDS; i++) {
        CHECK_EQ(gmp_yield(), 0);
        if (tid() != t0)
            atomic_fetch_add(&pinned_moves, 1);
    }
    for (int i = 0; i < PIN_PARKS; i++) {
        gmp_wg wg = GMP_WG_INIT;
        CHECK_OK(gmp_wg_add(&wg, 1));
        CHECK(gmp_go(helper, &wg) > 0);
        CHECK_OK(gmp_wg_wait(&wg));
        if (tid() != t0)
            atomic_fetch_add(&pinned_moves, 1);
    }
    CHECK_OK(gmp_wg_done(arg));
}

static void scenario_pinned(void)
{
    CHECK_OK(gmp_maxprocs(2));
    gmp_wg wg = GMP_WG_INIT;
    static struct other others[OTHERS];
    CHECK_OK(gmp_wg_add(&wg, OTHERS + 1));
    for (int i = 0; i < OTHERS; i++) {
        others[i].ntids = 0;
        others[i].wg = &wg;
        CHECK(gmp_go(other_main, &others[i]) > 0);
    }
    gmp_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.flags = GMP_GO_PINNED;
    CHECK(gmp_go_attr(pinned_main, &wg, &attr) > 0);
    CHECK_OK(gmp_wg_wait(&wg));

    int most = 0;
    for (int i = 0; i < OTHERS; i++) {
        printf("attrs: default goroutine %d ran on %d thread(s)\n", i, others[i].ntids);
        if (others[i].ntids > most)
            most = others[i].ntids;
    }
    printf("attrs: pinned goroutine stayed on tid %ld, moved %ld times\n", pinned_tid,
           atomic_load(&pinned_moves));
    CHECK(pinned_tid > 0);
    CHECK_EQ(atomic_load(&pinned_moves), 0);
    CHECK(most >= 2);
}

/* ---- scenario 3 ---- */

static void short_lived(void *arg)
{
    CHECK_OK(gmp_wg_done(arg));
}

static void big_after_dead(void *arg)
{
    gmp_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.stack_size = 1024 * 1024;
    for (int round = 0; round < 5; round++) {
        gmp_wg dead = GMP_WG_INIT, big = GMP_WG_INIT;
        CHECK_OK(gmp_wg_add(&dead, 8));
        for (int i = 0; i < 8; i++)
            CHECK(gmp_go(short_lived, &dead) > 0);
        CHECK_OK(gmp_wg_wait(&dead));
        /* Let the last of them finish exiting (gmp_wg_done runs before its exit). */
        CHECK_OK(gmp_yield());
        CHECK_OK(gmp_wg_add(&big, 1));
        CHECK(gmp_go_attr(big_frame, &big, &attr) > 0);
        CHECK_OK(gmp_wg_wait(&big));
    }
    CHECK_OK(gmp_wg_done(arg));
}

static void scenario_big_after_dead(void)
{
    CHECK_OK(gmp_maxprocs(1));
    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK(gmp_go(big_after_dead, &wg) > 0);
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_OK(gmp_maxprocs(2));
}

int main(void)
{
    scenario_big_stack();
    scenario_pinned();
    scenario_big_after_dead();
    return 0;
}
