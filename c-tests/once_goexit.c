/*
 * once_goexit.c -- a once whose function calls gmp_goexit counts as done.
 *
 * Go's Once marks itself done with a deferred store, which runtime.Goexit runs: the other
 * callers return (and the function is never run again). Here the first caller's function
 * yields for a while (so that 20 goroutines and main pile up on the once), then calls
 * gmp_goexit. Every waiter must return, the function must have run once, and a later
 * gmp_once_do on the same once must not run its function. A goroutine that ends this way
 * leaves nothing behind (the goroutine count drops to zero). Then the same with the
 * function calling gmp_goexit uncontended, in a goroutine that never blocked. Last, a
 * goroutine that completed a once normally (from a deeper frame, since returned) and
 * then calls gmp_goexit ends cleanly: the once's cleanup record left the goroutine when
 * the function returned, so the exit does not run it again on a dead frame.
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <stddef.h>
#include <stdint.h>

#define WAITERS 20

static gmp_once once = GMP_ONCE_INIT;
static gmp_once once2 = GMP_ONCE_INIT;
static int calls;
static int exited_through; /* set if code after gmp_goexit ran */

static void exiting_fn(void *arg)
{
    (void)arg;
    __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
    double t0 = now_sec();
    while (now_sec() - t0 < 0.020)
        CHECK_OK(gmp_yield());
    gmp_goexit();
    exited_through = 1;
}

static void never(void *arg)
{
    (void)arg;
    CHECK(!"the once function ran a second time");
}

static void caller(void *arg)
{
    CHECK_OK(gmp_once_do(&once, exiting_fn, NULL));
    /* Only the waiters get here: the first caller ended inside the function. */
    CHECK_OK(gmp_wg_done(arg));
}

static void first(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_once_do(&once, exiting_fn, NULL));
    exited_through = 1;
}

static void quick_exit_fn(void *arg)
{
    (void)arg;
    gmp_goexit();
}

static void quick(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_once_do(&once2, quick_exit_fn, NULL));
    exited_through = 1;
}

static gmp_once once3 = GMP_ONCE_INIT;
static int normal_calls, after_exit;

static void normal_fn(void *arg)
{
    (void)arg;
    __atomic_add_fetch(&normal_calls, 1, __ATOMIC_SEQ_CST);
}

__attribute__((noinline)) static void run_once3(void)
{
    CHECK_OK(gmp_once_do(&once3, normal_fn, NULL));
}

/* Overwrites the stack below the caller's frame, where run_once3's frames were. (Under
 * ASan this stack may be a reused one whose earlier goroutine left frames abandoned by
 * gmp_goexit: the runtime unpoisons an exiting goroutine's stack.) */
__attribute__((noinline)) static void scribble(void)
{
    volatile char junk[4096];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (char)0xA5;
}

static void done_then_exit(void *arg)
{
    (void)arg;
    run_once3();
    scribble();
    gmp_goexit();
    __atomic_store_n(&after_exit, 1, __ATOMIC_SEQ_CST);
}

int main(void)
{
    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_go(first, NULL));
    /* Let `first` enter the function before the waiters arrive. */
    while (__atomic_load_n(&calls, __ATOMIC_SEQ_CST) == 0)
        sleep_ms(1);
    CHECK_OK(gmp_wg_add(&wg, WAITERS));
    for (int i = 0; i < WAITERS; i++)
        CHECK_OK(gmp_go(caller, &wg));
    CHECK_OK(gmp_once_do(&once, never, NULL)); /* main waits on the once too */
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_EQ(calls, 1);
    CHECK_OK(gmp_once_do(&once, never, NULL));

    CHECK_OK(gmp_go(quick, NULL));
    for (int i = 0; gmp_num_goroutine() != 0; i++) {
        CHECK(i < 10000);
        sleep_ms(1);
    }
    CHECK_OK(gmp_once_do(&once2, never, NULL));
    CHECK_EQ(exited_through, 0);

    CHECK_OK(gmp_go(done_then_exit, NULL));
    for (int i = 0; gmp_num_goroutine() != 0; i++) {
        CHECK(i < 10000);
        sleep_ms(1);
    }
    CHECK_EQ(__atomic_load_n(&after_exit, __ATOMIC_SEQ_CST), 0);
    CHECK_EQ(__atomic_load_n(&normal_calls, __ATOMIC_SEQ_CST), 1);
    CHECK_OK(gmp_once_do(&once3, never, NULL));
    printf("gmp_goexit in the once function: once done, %d waiters returned\n", WAITERS);
    return 0;
}
