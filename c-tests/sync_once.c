/*
 * sync_once.c -- gmp_once_do: exactly one call, and every caller returns after it.
 *
 * At GOMAXPROCS 2, 100 goroutines and 4 pthreads wait at a start line, then all call
 * gmp_once_do on one GMP_ONCE_INIT gmp_once. The function counts its calls, takes ~20 ms
 * (yielding on a goroutine, so the other callers pile up on the once and park or sleep),
 * and then writes a plain (non-atomic) value. Every caller, on return, must see
 * calls == 1 and the value written. A second round of calls on the same once must not
 * call the function again. Last, a program built against an older header calls the
 * library's `gmp_once` symbol (gmp_once_do under its old name): it runs a function once.
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <pthread.h>
#include <stdatomic.h>

#define GOROUTINES 100
#define THREADS 4

static gmp_once once = GMP_ONCE_INIT;
static atomic_int calls;
static atomic_int ready_count;
static atomic_int go_flag;
static int value; /* plain: written by the once function, read by every caller */

static void init_fn(void *arg)
{
    CHECK_EQ((intptr_t)arg, 7);
    atomic_fetch_add(&calls, 1);
    double t0 = now_sec();
    while (now_sec() - t0 < 0.020)
        CHECK_OK(gmp_yield());
    value = 42;
}

static void never(void *arg)
{
    (void)arg;
    CHECK(!"the once function ran a second time");
}

static void count_fn(void *arg)
{
    (void)arg;
    atomic_fetch_add(&calls, 1);
}

/* The exported symbol an older header declared as `int gmp_once(gmp_once_t *, gmp_func,
 * void *)`; this header's gmp_once is the type, so the test names the symbol by hand. */
extern int old_gmp_once(gmp_once *o, gmp_func func, void *arg) __asm__("gmp_once");

static void call_once(void)
{
    atomic_fetch_add(&ready_count, 1);
    while (!atomic_load(&go_flag))
        CHECK_OK(gmp_yield());
    CHECK_OK(gmp_once_do(&once, init_fn, (void *)(intptr_t)7));
    CHECK_EQ(value, 42);
    CHECK_EQ(atomic_load(&calls), 1);
    CHECK_OK(gmp_once_do(&once, never, NULL));
}

static void caller(void *arg)
{
    call_once();
    CHECK_OK(gmp_wg_done(arg));
}

static void *caller_thread(void *arg)
{
    (void)arg;
    call_once();
    return NULL;
}

int main(void)
{
    gmp_wg wg = GMP_WG_INIT;
    pthread_t th[THREADS];
    CHECK_OK(gmp_maxprocs(2));
    CHECK_OK(gmp_wg_add(&wg, GOROUTINES));
    for (int i = 0; i < GOROUTINES; i++)
        CHECK(gmp_go(caller, &wg) > 0);
    for (int t = 0; t < THREADS; t++)
        CHECK_EQ(pthread_create(&th[t], NULL, caller_thread, NULL), 0);
    double t0 = now_sec();
    while (atomic_load(&ready_count) < GOROUTINES + THREADS) {
        CHECK(now_sec() - t0 < 10.0);
        sleep_ms(1);
    }
    atomic_store(&go_flag, 1);
    CHECK_OK(gmp_wg_wait(&wg));
    for (int t = 0; t < THREADS; t++)
        CHECK_EQ(pthread_join(th[t], NULL), 0);
    CHECK_EQ(atomic_load(&calls), 1);
    CHECK_OK(gmp_once_do(&once, never, NULL));

    static gmp_once old = GMP_ONCE_INIT;
    atomic_store(&calls, 0);
    CHECK_OK(old_gmp_once(&old, count_fn, NULL));
    CHECK_OK(old_gmp_once(&old, count_fn, NULL));
    CHECK_EQ(atomic_load(&calls), 1);
    printf("sync_once: ok\n");
    return 0;
}
