/*
 * select_sizes.c -- gmp_select with every number of cases around the switch from the
 * stack scratch arrays (up to 16 cases) to heap ones: 1, 2, 9-17, 32 and 100 cases.
 *
 * For each size n, from a goroutine:
 * 1. Ready at once: n buffered channels, one value in channel k for each k in turn (first,
 *    middle, last): the select must fire case k with that value, and leave the others.
 * 2. Blocking: no case ready; another goroutine sends to channel k once the select is
 *    parked (waited for: every goroutine blocked); the select fires case k.
 * 3. Send cases: n full-buffer channels plus one with room at k: the send fires there,
 *    and the value is in that channel only.
 * 4. Timeout: nothing ready, 1 ms: -ETIMEDOUT, no status written.
 * The other selects in the C tests have at most 6 cases, so a scratch array sized wrong
 * for 10-16 cases went unnoticed.
 */
#include "check.h"

#include <errno.h>
#include <gmp-sched/gmp.h>
#include <stdatomic.h>

#define MAXN 100

static gmp_chan *ch[MAXN];
static gmp_select_case cases[MAXN];
static long bufs[MAXN];
static atomic_int armed; /* blocking selects begun: main sends once it is parked */
static int send_to;

static void make_chans(int n, size_t cap)
{
    for (int i = 0; i < n; i++)
        CHECK_OK(gmp_chan_make(&ch[i], sizeof(long), cap));
}

static void release_chans(int n)
{
    for (int i = 0; i < n; i++)
        CHECK_OK(gmp_chan_release(ch[i]));
}

static void recv_cases(int n)
{
    for (int i = 0; i < n; i++) {
        bufs[i] = -1;
        cases[i] = (gmp_select_case){ch[i], GMP_RECV, &bufs[i], 99};
    }
}

static void check_only_fired(int n, int k)
{
    for (int i = 0; i < n; i++)
        CHECK_EQ(cases[i].status, i == k ? 0 : 99);
}

static void run_size(int n)
{
    int ks[3] = {0, n / 2, n - 1};
    /* 1. Ready at once. */
    make_chans(n, 1);
    for (int j = 0; j < 3; j++) {
        int k = ks[j];
        long v = 1000 + k;
        CHECK_OK(gmp_chan_send(ch[k], &v));
        recv_cases(n);
        CHECK_EQ(gmp_select(cases, (size_t)n, -1), k);
        CHECK_EQ(bufs[k], 1000 + k);
        check_only_fired(n, k);
        for (int i = 0; i < n; i++)
            CHECK_EQ(gmp_chan_len(ch[i]), 0);
    }
    /* 2. Blocking, then a sender. */
    for (int j = 0; j < 3; j++) {
        int k = ks[j];
        recv_cases(n);
        send_to = k;
        atomic_fetch_add(&armed, 1);
        CHECK_EQ(gmp_select(cases, (size_t)n, -1), k);
        CHECK_EQ(bufs[k], 2000 + k);
        check_only_fired(n, k);
    }
    /* 4. Timeout. */
    recv_cases(n);
    CHECK_EQ(gmp_select(cases, (size_t)n, 1000000), -ETIMEDOUT);
    for (int i = 0; i < n; i++)
        CHECK_EQ(cases[i].status, 99);
    release_chans(n);
    /* 3. Send cases: every channel full but k. */
    make_chans(n, 1);
    for (int j = 0; j < 3; j++) {
        int k = ks[j];
        for (int i = 0; i < n; i++) {
            long v = -5;
            if (i != k)
                CHECK_OK(gmp_chan_send(ch[i], &v));
            bufs[i] = 3000 + i;
            cases[i] = (gmp_select_case){ch[i], GMP_SEND, &bufs[i], 99};
        }
        CHECK_EQ(gmp_select(cases, (size_t)n, -1), k);
        check_only_fired(n, k);
        for (int i = 0; i < n; i++) {
            long v = 0;
            CHECK_EQ(gmp_chan_len(ch[i]), 1);
            CHECK_OK(gmp_chan_recv(ch[i], &v));
            CHECK_EQ(v, i == k ? 3000 + k : -5);
        }
    }
    release_chans(n);
}

static gmp_wg wg = GMP_WG_INIT;

static void selector(void *arg)
{
    (void)arg;
    static const int sizes[] = {1, 2, 9, 10, 11, 12, 13, 14, 15, 16, 17, 32, 100};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        run_size(sizes[s]);
    CHECK_OK(gmp_wg_done(&wg));
}

int main(void)
{
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK_OK(gmp_go(selector, NULL));
    int sends = 0;
    /* The blocking selects: 13 sizes x 3 positions. */
    while (sends < 13 * 3) {
        WAIT_UNTIL(atomic_load(&armed) == sends + 1 && all_goroutines_blocked(), 10.0);
        long v = 2000 + send_to;
        CHECK_OK(gmp_chan_send(ch[send_to], &v));
        sends++;
    }
    CHECK_OK(gmp_wg_wait(&wg));
    printf("select_sizes: ok\n");
    return 0;
}
