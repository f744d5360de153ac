/*
 * atomic_costs: what the single instructions the runtime's hot paths are made of cost on
 * the machine it runs on, one thread, nothing shared: a lock taken and released as the runtime's
 * Lock does it with Go's protocol (lock cmpxchg, then xchg) and with the asymmetric
 * unlock (lock cmpxchg, then a plain store and a load of the sleeper count), one locked add, a store followed by a SeqCst
 * fence, stmxcsr (read on every goroutine -> scheduler switch) and pause (the unit of
 * every spin, sys::calibrate_pause). README ("Performance against Go") explains the
 * rows that differ between CPU families with them.
 *
 *   cc -O2 -Wall -Wextra -o /tmp/atomic_costs scripts/atomic_costs.c
 *   /tmp/atomic_costs [iterations]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* The best of five timings of `body` over n iterations, in ns per iteration. */
#define BEST_OF_5(n, body)                                                                     \
    ({                                                                                         \
        double best_ = 1e30;                                                                   \
        for (int r_ = 0; r_ < 5; r_++) {                                                       \
            double t0_ = now_ns();                                                             \
            for (long i_ = 0; i_ < (n); i_++) {                                                \
                body;                                                                          \
            }                                                                                  \
            double d_ = (now_ns() - t0_) / (double)(n);                                        \
            if (d_ < best_)                                                                    \
                best_ = d_;                                                                    \
        }                                                                                      \
        best_;                                                                                 \
    })

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 20000000;
    if (n <= 0) {
        fprintf(stderr, "usage: %s [iterations > 0]\n", argv[0]);
        return 2;
    }
    static _Alignas(64) uint32_t word;
    static _Alignas(64) uint32_t asym[2]; /* state, sleepers: as in sys::Lock */
    static _Alignas(64) uint64_t counter;
    uint32_t mxcsr;

    double lock_pair = BEST_OF_5(n, {
        uint32_t expected = 0;
        __atomic_compare_exchange_n(&word, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
        __atomic_exchange_n(&word, 0, __ATOMIC_RELEASE);
    });
    double lock_asym = BEST_OF_5(n, {
        uint32_t expected = 0;
        __atomic_compare_exchange_n(&asym[0], &expected, 1, 0, __ATOMIC_ACQUIRE,
                                    __ATOMIC_RELAXED);
        __atomic_store_n(&asym[0], 0, __ATOMIC_RELEASE);
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        if (__atomic_load_n(&asym[1], __ATOMIC_RELAXED) != 0)
            abort();
    });
    double xadd = BEST_OF_5(n, __atomic_fetch_add(&counter, 1, __ATOMIC_SEQ_CST));
    double fence = BEST_OF_5(n, {
        __atomic_store_n(&counter, (uint64_t)i_, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
    });
    double stmxcsr = BEST_OF_5(n, __asm__ volatile("stmxcsr %0" : "=m"(mxcsr)));
    double pause = BEST_OF_5(n / 10, __asm__ volatile("pause"));

    printf("lock+unlock (lock cmpxchg, xchg): %.2f ns\n", lock_pair);
    printf("lock+unlock, asymmetric unlock:   %.2f ns\n", lock_asym);
    printf("lock xadd:                        %.2f ns\n", xadd);
    printf("store + SeqCst fence:             %.2f ns\n", fence);
    printf("stmxcsr:                          %.2f ns\n", stmxcsr);
    printf("pause:                            %.2f ns\n", pause);
    return 0;
}
