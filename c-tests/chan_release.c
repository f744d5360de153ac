/*
 * chan_release.c -- releasing a channel that goroutines are blocked on.
 *
 * A blocked operation holds the channel itself: the owner may release its last reference
 * while others wait; they complete as Go's would, and the channel is freed after the last
 * of them. Run with MALLOC_PERTURB_ set (tests/c_chan.rs), so that memory freed too early
 * is scribbled over and a late access shows (a lock word of 0xA5A5A5A5 never unlocks).
 *
 * Scenario (no argument), each step with a fresh unbuffered channel:
 *   timeout  a goroutine blocks in gmp_chan_recv_timeout (300 ms) on the owner's handle;
 *            once it is parked the owner releases the channel. Checks: the receiver gets
 *            -ETIMEDOUT with its buffer untouched, within 5 s; the channel's memory is
 *            reused by the next gmp_chan_make (it was freed, not leaked).
 *   select   the same with gmp_select (one receive case, 300 ms).
 *   value    a goroutine blocks in gmp_chan_recv_timeout (10 s) on the owner's handle;
 *            the owner gives a sender goroutine a reference of its own (gmp_chan_retain)
 *            and releases its own; the sender sends 42 and releases. Checks: the receiver
 *            gets 42.
 * "Parked" is a state, not a sleep: the goroutine has set its flag, and every processor
 * is idle with no goroutine queued.
 *
 * Misuse cases (each must abort with a gmp: message):
 *   double_release  make, release, release;
 *   retain_released make, release, retain;
 *   send_released   make, release, try_send (a send into the freed buffer).
 */
#include "check.h"

#include <errno.h>
#include <gmp-sched/gmp.h>
#include <stdatomic.h>
#include <string.h>

static gmp_chan *ch;
static atomic_int started; /* goroutines about to block */
static gmp_chan *results;  /* int: each goroutine's outcome */

static void wait_parked(int n)
{
    double deadline = now_sec() + 10.0;
    for (;;) {
        gmp_sched_stats st;
        uint32_t lens[64] = {0};
        int np = gmp_stats(&st, lens, 64);
        CHECK(np >= 0);
        int queued = st.runqueue > 0;
        for (int i = 0; i < np; i++)
            queued |= lens[i] != 0;
        if (atomic_load(&started) == n && st.idleprocs == st.gomaxprocs && !queued)
            return;
        CHECK(now_sec() < deadline);
        sleep_ms(1);
    }
}

static int next_result(void)
{
    int r = 0;
    CHECK_EQ(gmp_chan_recv_timeout(results, &r, 5000000000LL), 0);
    return r;
}

static void recv_300ms(void *arg)
{
    (void)arg;
    int v = 7;
    atomic_fetch_add(&started, 1);
    int r = gmp_chan_recv_timeout(ch, &v, 300000000LL);
    CHECK_EQ(v, 7);
    CHECK_EQ(gmp_chan_send(results, &r), 0);
}

static void select_300ms(void *arg)
{
    (void)arg;
    int v = 7;
    gmp_select_case c = {ch, GMP_RECV, &v, 0};
    atomic_fetch_add(&started, 1);
    int r = gmp_select(&c, 1, 300000000LL);
    CHECK_EQ(v, 7);
    CHECK_EQ(gmp_chan_send(results, &r), 0);
}

static void recv_10s(void *arg)
{
    (void)arg;
    int v = 0;
    atomic_fetch_add(&started, 1);
    int r = gmp_chan_recv_timeout(ch, &v, 10000000000LL);
    CHECK_EQ(r, 0);
    CHECK_EQ(gmp_chan_send(results, &v), 0);
}

static void sender(void *arg)
{
    gmp_chan *mine = arg;
    int v = 42;
    CHECK_EQ(gmp_chan_send(mine, &v), 0);
    CHECK_EQ(gmp_chan_release(mine), 0);
}

static void release_while_blocked(gmp_func blocker, const char *what)
{
    atomic_store(&started, 0);
    CHECK_OK(gmp_chan_make(&ch, sizeof(int), 0));
    gmp_chan *old = ch;
    CHECK_OK(gmp_go(blocker, NULL));
    wait_parked(1);
    CHECK_EQ(gmp_chan_release(ch), 0);
    CHECK_EQ(next_result(), -ETIMEDOUT);
    /* The receiver freed the channel when it finished: its memory is made anew. */
    double deadline = now_sec() + 5.0;
    for (;;) {
        gmp_chan *again;
        CHECK_OK(gmp_chan_make(&again, sizeof(int), 0));
        int same = again == old;
        CHECK_EQ(gmp_chan_release(again), 0);
        if (same)
            break;
        CHECK(now_sec() < deadline);
        sleep_ms(1);
    }
    printf("chan_release: %s: the blocked receiver timed out, the channel was freed after\n",
           what);
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        gmp_chan *c;
        CHECK_OK(gmp_chan_make(&c, sizeof(int), 4));
        CHECK_EQ(gmp_chan_release(c), 0);
        if (strcmp(argv[1], "double_release") == 0)
            gmp_chan_release(c);
        else if (strcmp(argv[1], "retain_released") == 0)
            gmp_chan_retain(c);
        else if (strcmp(argv[1], "send_released") == 0) {
            int v = 1;
            gmp_chan_try_send(c, &v);
        }
        fprintf(stderr, "chan_release: %s did not abort\n", argv[1]);
        return 1;
    }
    CHECK_OK(gmp_chan_make(&results, sizeof(int), 16));

    release_while_blocked(recv_300ms, "timeout");
    release_while_blocked(select_300ms, "select");

    /* value */
    atomic_store(&started, 0);
    CHECK_OK(gmp_chan_make(&ch, sizeof(int), 0));
    CHECK_OK(gmp_go(recv_10s, NULL));
    wait_parked(1);
    CHECK_EQ(gmp_chan_retain(ch), 0);
    gmp_chan *for_sender = ch;
    CHECK_EQ(gmp_chan_release(ch), 0);
    CHECK_OK(gmp_go(sender, for_sender));
    CHECK_EQ(next_result(), 42);
    printf("chan_release: value: the blocked receiver got the other holder's value\n");

    CHECK_EQ(gmp_chan_release(results), 0);
    return 0;
}
