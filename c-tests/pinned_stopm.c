/*
 * pinned_stopm.c -- a pinned goroutine readied while its thread is going to sleep is
 * not stranded (park_idle's and stopm's look at the affinity queue).
 *
 * An M with nothing to run gives up its P and, going idle (park_idle, then stopm), marks
 * its affinity queue idle (affinity::go_idle) so that whoever next readies a goroutine
 * bound to it wakes it with a P. A goroutine readied before the mark is set finds no
 * mark and wakes nobody: the M must see it queued and take a P for it instead of
 * sleeping on the idle M list, where only a later, unrelated wakep would find it.
 *
 * The window is short; the debug build's hook GMP_DEBUG=idledelay=200000 stretches it
 * to 200 ms (park_idle sleeps before its go_idle). Each of 6 rounds, at GOMAXPROCS 2: the
 * pinned goroutine W blocks on a channel receive (its M runs out of work and enters the
 * window); 50 ms later the main thread (a foreign thread: it wakes nothing else) sends W
 * a value. In rounds 4-6, at GOMAXPROCS 1, W waits with a 10 s timeout: its M, the only one
 * with a P when the timer starts (no other M is woken for it), goes idle as the timer M (sleep_as_timer_m), which must have marked its queue
 * idle first or it sleeps through the send until the timeout. Asserted: W receives it
 * within 1 s (~150 ms when the M sees the queue; never, or after 10 s, when it does not:
 * nothing else runs), on the thread it started on. If the 50 ms sleep
 * misses the window (a slow machine, or a release build without the hook), the round
 * takes the marked-idle path, on which W must run at once too: the test cannot fail on
 * correct code, it only checks less.
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <stdatomic.h>
#include <sys/syscall.h>

#define ROUNDS 6

static gmp_chan *ch;
static atomic_int received;
static atomic_long w_tid;

static void w(void *arg)
{
    (void)arg;
    long t0 = (long)syscall(SYS_gettid);
    atomic_store(&w_tid, t0);
    for (int i = 1; i <= ROUNDS; i++) {
        int v = 0;
        if (i <= ROUNDS / 2)
            CHECK_OK(gmp_chan_recv(ch, &v));
        else
            CHECK_OK(gmp_chan_recv_timeout(ch, &v, 10 * 1000000000LL));
        CHECK_EQ(v, i);
        CHECK_EQ((long)syscall(SYS_gettid), t0);
        atomic_store(&received, v);
    }
}

int main(void)
{
    CHECK_OK(gmp_maxprocs(2));
    CHECK_OK(gmp_chan_make(&ch, sizeof(int), 0));
    gmp_attr a = {0};
    a.flags = GMP_GO_PINNED;
    CHECK_OK(gmp_go_attr(w, NULL, &a));
    WAIT_UNTIL(atomic_load(&w_tid) != 0, 10.0);
    double worst = 0;
    for (int i = 1; i <= ROUNDS; i++) {
        WAIT_BLOCKED(1);
        if (i == ROUNDS / 2 + 1)
            CHECK_OK(gmp_maxprocs(1));
        sleep_ms(50);
        double t = now_sec();
        CHECK_OK(gmp_chan_send(ch, &i));
        WAIT_UNTIL(atomic_load(&received) == i, 1.0);
        double took = now_sec() - t;
        if (took > worst)
            worst = took;
    }
    CHECK_OK(gmp_chan_release(ch));
    printf("pinned goroutine readied during its thread's stopm: %d rounds, worst %.0f ms\n",
           ROUNDS, worst * 1e3);
    return 0;
}
