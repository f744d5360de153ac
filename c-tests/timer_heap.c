/*
 * timer_heap.c -- one P's timer heap holding hundreds of timers: every timer fires in
 * time and never early, and a stopped timer never fires.
 *
 * The C tests elsewhere keep a handful of timers armed at once, so a heap whose sifts
 * are wrong (a 4-ary heap needs depth 3 or more to show it) or whose `remove` takes the
 * wrong slot goes unnoticed. Here, at GOMAXPROCS 1 (every timer on the one P's heap):
 *
 * - 256 goroutines each wait in gmp_chan_recv_timeout on a channel of their own, with
 *   timeouts of 600 ms + k * 7 ms, k a permutation of 0..255 (armed in scrambled order,
 *   so that the heap is built by sift_up from every position);
 * - once all of them wait (WAIT_BLOCKED), main sends to one channel in three, in
 *   another scrambled order: each of those receivers wakes with the value and stops its
 *   timer, which is then removed from the middle of the heap (sift_up or sift_down from
 *   there), while the others' timers fire one by one from the root (sift_down from the
 *   root: every run removes the earliest).
 * Asserted for each goroutine: a receiver that was sent to got the value (never
 * -ETIMEDOUT: its timer was stopped, and main sent long before its deadline); the others
 * return -ETIMEDOUT no earlier than their timeout and at most 100 ms after it (a timer
 * buried below later ones in a broken heap waits for those: 200-300 ms with sift_up's
 * parent index off for every fourth slot, while 2-6 ms is usual on a loaded machine); every
 * goroutine returns within 10 s (a remove that takes another timer's slot leaves that
 * timer never firing). Each goroutine then waits 5 ms more from the same frame (a second
 * timer at the first one's address: a stopped timer left on the heap would now share its
 * timer with a live slot, and the heap's index bookkeeping breaks), and the program runs
 * on 200 ms past the last deadline, when such a stale timer would fire.
 */
#include "check.h"

#include <errno.h>
#include <gmp-sched/gmp.h>
#include <stdatomic.h>

#define N 256
#define BASE_MS 600
#define STEP_MS 7
#define LATE_MS 100

static gmp_chan *ch[N];
static int64_t timeout_ns[N];
static atomic_int sent[N];   /* main delivered a value to i */
static atomic_int done;      /* goroutines that returned */
static atomic_int timed_out; /* of which by -ETIMEDOUT */
static _Atomic int64_t worst_late; /* ns */

static void waiter(void *arg)
{
    int i = (int)(intptr_t)arg;
    int v = -1;
    int64_t t0 = gmp_now();
    int r = gmp_chan_recv_timeout(ch[i], &v, timeout_ns[i]);
    int64_t waited = gmp_now() - t0;
    if (r == 0) {
        CHECK_EQ(v, i);
        CHECK_EQ(atomic_load(&sent[i]), 1);
        CHECK(waited < timeout_ns[i]);
    } else {
        CHECK_EQ(r, -ETIMEDOUT);
        CHECK_EQ(atomic_load(&sent[i]), 0);
        CHECK(waited >= timeout_ns[i]);
        if (waited > timeout_ns[i] + LATE_MS * 1000000LL) {
            fprintf(stderr, "timer_heap: timer %d (%lld ms) fired %lld ms late\n", i,
                    (long long)(timeout_ns[i] / 1000000),
                    (long long)((waited - timeout_ns[i]) / 1000000));
            CHECK(waited <= timeout_ns[i] + LATE_MS * 1000000LL);
        }
        int64_t late = waited - timeout_ns[i], w = atomic_load(&worst_late);
        while (late > w && !atomic_compare_exchange_weak(&worst_late, &w, late))
            ;
        atomic_fetch_add(&timed_out, 1);
    }
    /* A second, short wait from the same frame: its timer sits where the first one did,
     * so a first timer left on the heap by a stop that did not remove it would now share
     * its slot's timer with this one. */
    t0 = gmp_now();
    CHECK_EQ(gmp_chan_recv_timeout(ch[i], &v, 5000000), -ETIMEDOUT);
    waited = gmp_now() - t0;
    CHECK(waited >= 5000000);
    CHECK(waited <= (5 + LATE_MS) * 1000000LL);
    atomic_fetch_add(&done, 1);
}

int main(void)
{
    CHECK_OK(gmp_maxprocs(1));
    CHECK_EQ(gmp_maxprocs(0), 1);
    for (int i = 0; i < N; i++) {
        CHECK_OK(gmp_chan_make(&ch[i], sizeof(int), 0));
        int k = (i * 97 + 31) % N; /* 97 is prime to 256: a permutation */
        timeout_ns[i] = (BASE_MS + (int64_t)k * STEP_MS) * 1000000LL;
    }
    int64_t start = gmp_now();
    for (int i = 0; i < N; i++)
        CHECK_OK(gmp_go(waiter, (void *)(intptr_t)i));
    WAIT_BLOCKED(N);
    /* One in three, in the order of another permutation. */
    int nsent = 0;
    for (int j = 0; j < N; j++) {
        int i = (j * 61 + 7) % N;
        if (i % 3 != 0)
            continue;
        int v = i;
        atomic_store(&sent[i], 1);
        CHECK_OK(gmp_chan_send(ch[i], &v));
        nsent++;
    }
    /* The sends took far less than the first timeout: no receiver of them can have
     * timed out (if this fails, the machine was too slow for the test, not the heap). */
    CHECK(gmp_now() - start < (BASE_MS - 100) * 1000000LL);
    WAIT_UNTIL(atomic_load(&done) == N, 10.0);
    CHECK_EQ(atomic_load(&timed_out), N - nsent);
    /* Past every deadline: a stopped timer firing now would abort the program. */
    int64_t last = start + (BASE_MS + (int64_t)(N - 1) * STEP_MS) * 1000000LL;
    while (gmp_now() < last + 200 * 1000000LL)
        sleep_ms(10);
    WAIT_UNTIL(gmp_num_goroutine() == 0, 10.0);
    for (int i = 0; i < N; i++)
        CHECK_OK(gmp_chan_release(ch[i]));
    printf("timer_heap: ok (%d timers, %d stopped, worst %lld ms late)\n", N, nsent,
           (long long)(atomic_load(&worst_late) / 1000000));
    return 0;
}
