/*
 * select_basic: gmp_select, Go's select.
 *
 *  1. Randomness: with N = 4 cases always ready (buffered channels kept full), 20,000
 *     selects choose each case within +-10% of 5,000 (a fair die gives sd ~61, so the
 *     bound is ~8 sd), in a goroutine and on the main thread.
 *  2. Duplicates: one channel in several cases (recv twice, send and recv) works; NULL
 *     channels disable their case and never fire.
 *  3. Default (timeout 0): -ETIMEDOUT at once when nothing is ready, as a channel
 *     operation's zero timeout gives; timeout: -ETIMEDOUT after about the timeout, never
 *     early; no cases with a timeout sleeps then -ETIMEDOUT.
 *  4. Closed: a recv case on a closed channel fires with status -EPIPE and buf zeroed,
 *     also when the close happens while the select waits (a goroutine's select, closed
 *     once gmp_stats shows it parked); a send case on a closed channel fires with
 *     -EPIPE, also when blocked at the close.
 *  5. Send cases, blocking selects woken by a peer's send or receive; select from a
 *     foreign thread (blocking and timed); select against select.
 *  6. Bad input: -EINVAL.
 */
#include "check.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include <gmp-sched/gmp.h>

#define MS 1000000LL

static gmp_wg wg = GMP_WG_INIT;

/* ---- 1. randomness ---- */

static void check_random(void)
{
    enum { N = 4, TRIALS = 20000 };
    gmp_chan *c[N];
    gmp_select_case cs[N];
    int vals[N];
    long counts[N] = {0};
    for (int i = 0; i < N; i++) {
        CHECK_EQ(gmp_chan_make(&c[i], sizeof(int), 1), 0);
        CHECK_EQ(gmp_chan_send(c[i], &i), 0);
        cs[i] = (gmp_select_case){c[i], GMP_RECV, &vals[i], 99};
    }
    for (int t = 0; t < TRIALS; t++) {
        int k = gmp_select(cs, N, -1);
        CHECK(k >= 0 && k < N);
        CHECK_EQ(cs[k].status, 0);
        CHECK_EQ(vals[k], k);
        counts[k]++;
        CHECK_EQ(gmp_chan_send(c[k], &k), 0); /* refill */
    }
    for (int i = 0; i < N; i++) {
        long expect = TRIALS / N;
        if (counts[i] < expect * 9 / 10 || counts[i] > expect * 11 / 10) {
            fprintf(stderr, "case %d chosen %ld times of %d\n", i, counts[i], TRIALS);
            CHECK(0);
        }
        CHECK_OK(gmp_chan_release(c[i]));
    }
}

static void random_goroutine(void *arg)
{
    (void)arg;
    check_random();
    CHECK_OK(gmp_wg_done(&wg));
}

/* ---- 2. duplicates and NULL ---- */

static void test_dup_null(void)
{
    gmp_chan *c;
    CHECK_EQ(gmp_chan_make(&c, sizeof(int), 2), 0);
    int a = -1, b = -1, v = 5;
    CHECK_EQ(gmp_chan_send(c, &(int){10}), 0);
    gmp_select_case cs[4] = {
        {NULL, GMP_RECV, &a, 0},
        {c, GMP_RECV, &a, 0},
        {c, GMP_RECV, &b, 0},
        {NULL, GMP_SEND, &v, 0},
    };
    int seen1 = 0, seen2 = 0;
    for (int t = 0; t < 200; t++) {
        a = b = -1;
        int k = gmp_select(cs, 4, -1);
        CHECK(k == 1 || k == 2);
        CHECK_EQ(k == 1 ? a : b, 10);
        seen1 += k == 1;
        seen2 += k == 2;
        CHECK_EQ(gmp_chan_send(c, &(int){10}), 0);
    }
    CHECK(seen1 > 0 && seen2 > 0);
    /* Send and receive on the same channel: buffered with room and data, either fires. */
    gmp_select_case sr[2] = {{c, GMP_SEND, &v, 0}, {c, GMP_RECV, &a, 0}};
    int k = gmp_select(sr, 2, -1);
    CHECK(k == 0 || k == 1);
    /* Only NULL channels: default -ETIMEDOUT, blocking -EINVAL. */
    gmp_select_case nul[2] = {{NULL, GMP_RECV, &a, 0}, {NULL, GMP_SEND, &v, 0}};
    CHECK_EQ(gmp_select(nul, 2, 0), -ETIMEDOUT);
    CHECK_EQ(gmp_select(nul, 2, -1), -EINVAL);
    CHECK_OK(gmp_chan_release(c));
}

/* ---- 3. default and timeout ---- */

static void check_timeouts(void)
{
    gmp_chan *c1, *c2;
    CHECK_EQ(gmp_chan_make(&c1, sizeof(int), 0), 0);
    CHECK_EQ(gmp_chan_make(&c2, sizeof(int), 1), 0);
    CHECK_EQ(gmp_chan_send(c2, &(int){1}), 0); /* full: a send case blocks */
    int a = 3, v = 4;
    gmp_select_case cs[2] = {{c1, GMP_RECV, &a, 77}, {c2, GMP_SEND, &v, 77}};
    CHECK_EQ(gmp_select(cs, 2, 0), -ETIMEDOUT);
    CHECK_EQ(cs[0].status, 77);
    CHECK_EQ(cs[1].status, 77);
    /* The same zero timeout on the channel operations. */
    CHECK_EQ(gmp_chan_recv_timeout(c1, &a, 0), -ETIMEDOUT);
    CHECK_EQ(gmp_chan_send_timeout(c2, &v, 0), -ETIMEDOUT);
    int64_t t0 = gmp_now();
    CHECK_EQ(gmp_select(cs, 2, 40 * MS), -ETIMEDOUT);
    int64_t dt = gmp_now() - t0;
    CHECK(dt >= 40 * MS && dt < 1000 * MS);
    CHECK_EQ(cs[0].status, 77);
    CHECK_EQ(cs[1].status, 77);
    CHECK_EQ(a, 3);
    /* The select left no sudog behind. */
    CHECK_EQ(gmp_chan_try_send(c1, &v), -EAGAIN);
    CHECK_EQ(gmp_chan_try_recv(c2, &a), 0);
    CHECK_EQ(gmp_chan_try_recv(c2, &a), -EAGAIN);
    /* No cases at all. */
    CHECK_EQ(gmp_select(NULL, 0, 0), -ETIMEDOUT);
    t0 = gmp_now();
    CHECK_EQ(gmp_select(NULL, 0, 20 * MS), -ETIMEDOUT);
    CHECK(gmp_now() - t0 >= 20 * MS);
    CHECK_OK(gmp_chan_release(c1));
    CHECK_OK(gmp_chan_release(c2));
}

static void timeouts_goroutine(void *arg)
{
    (void)arg;
    check_timeouts();
    CHECK_OK(gmp_wg_done(&wg));
}

/* ---- 4. closed ---- */

/* A select run in a goroutine, so that main can see it parked (gmp_stats). */
struct select_job {
    gmp_select_case *cases;
    size_t n;
    int result;
};

static void select_in_goroutine(void *arg)
{
    struct select_job *j = arg;
    j->result = gmp_select(j->cases, j->n, -1);
    CHECK_OK(gmp_wg_done(&wg));
}

/* Runs gmp_select(cases, n, -1) in a goroutine, closes `c` once that goroutine is parked
 * in the select (the only goroutine alive, nothing runnable), returns what it returned. */
static int select_closed_while_waiting(gmp_select_case *cases, size_t n, gmp_chan *c)
{
    struct select_job j = {cases, n, -100};
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK_OK(gmp_go(select_in_goroutine, &j));
    WAIT_BLOCKED(1);
    CHECK_EQ(gmp_chan_close(c), 0);
    CHECK_OK(gmp_wg_wait(&wg));
    return j.result;
}

static void test_closed(void)
{
    gmp_chan *c, *never;
    CHECK_EQ(gmp_chan_make(&c, sizeof(int), 0), 0);
    CHECK_EQ(gmp_chan_make(&never, sizeof(int), 0), 0);
    int a = 9, b = 9;
    gmp_select_case cs[2] = {{never, GMP_RECV, &b, 0}, {c, GMP_RECV, &a, 0}};
    /* Closed while waiting. */
    CHECK_EQ(select_closed_while_waiting(cs, 2, c), 1);
    CHECK_EQ(cs[1].status, -EPIPE);
    CHECK_EQ(a, 0);
    /* Already closed. */
    a = 9;
    cs[1].status = 1;
    CHECK_EQ(gmp_select(cs, 2, 0), 1);
    CHECK_EQ(cs[1].status, -EPIPE);
    CHECK_EQ(a, 0);
    /* Send case on a closed channel. */
    gmp_select_case sc[2] = {{never, GMP_RECV, &b, 0}, {c, GMP_SEND, &a, 0}};
    CHECK_EQ(gmp_select(sc, 2, -1), 1);
    CHECK_EQ(sc[1].status, -EPIPE);
    /* A send case blocked when the channel closes. */
    gmp_chan *c2;
    CHECK_EQ(gmp_chan_make(&c2, sizeof(int), 0), 0);
    sc[1].chan = c2;
    sc[1].status = 1;
    CHECK_EQ(select_closed_while_waiting(sc, 2, c2), 1);
    CHECK_EQ(sc[1].status, -EPIPE);
    CHECK_OK(gmp_chan_release(c));
    CHECK_OK(gmp_chan_release(c2));
    CHECK_OK(gmp_chan_release(never));
}

/* ---- 5. send cases, peers, foreign threads ---- */

struct peers {
    gmp_chan *in, *out;
    int n;
};

/* Receives n values from `out` and sends n values to `in`, in any interleaving the
 * selecting side chooses. */
static void peer(void *arg)
{
    struct peers *p = arg;
    int sent = 0, got = 0, v;
    while (sent < p->n || got < p->n) {
        gmp_select_case cs[2] = {
            {sent < p->n ? p->in : NULL, GMP_SEND, &sent, 0},
            {got < p->n ? p->out : NULL, GMP_RECV, &v, 0},
        };
        int k = gmp_select(cs, 2, -1);
        CHECK_EQ(cs[k].status, 0);
        if (k == 0) {
            sent++;
        } else {
            CHECK_EQ(v, got);
            got++;
        }
    }
    CHECK_OK(gmp_wg_done(&wg));
}

/* The selecting side: sends 0..n-1 on `out`, receives 0..n-1 from `in`. */
static void selector(struct peers *p, int64_t timeout)
{
    int sent = 0, got = 0, v;
    while (sent < p->n || got < p->n) {
        gmp_select_case cs[2] = {
            {sent < p->n ? p->out : NULL, GMP_SEND, &sent, 0},
            {got < p->n ? p->in : NULL, GMP_RECV, &v, 0},
        };
        int k = gmp_select(cs, 2, timeout);
        if (k == -ETIMEDOUT)
            continue;
        CHECK(k >= 0);
        CHECK_EQ(cs[k].status, 0);
        if (k == 0) {
            sent++;
        } else {
            CHECK_EQ(v, got);
            got++;
        }
    }
}

static void selector_goroutine(void *arg)
{
    selector(arg, -1);
    CHECK_OK(gmp_wg_done(&wg));
}

static void *selector_thread(void *arg)
{
    selector(arg, 1 * MS);
    return NULL;
}

static void test_peers(void)
{
    for (size_t cap = 0; cap <= 3; cap += 3) {
        struct peers p = {NULL, NULL, 5000};
        CHECK_EQ(gmp_chan_make(&p.in, sizeof(int), cap), 0);
        CHECK_EQ(gmp_chan_make(&p.out, sizeof(int), cap), 0);
        /* select against select, both goroutines */
        CHECK_OK(gmp_wg_add(&wg, 2));
        CHECK_OK(gmp_go(peer, &p));
        CHECK_OK(gmp_go(selector_goroutine, &p));
        CHECK_OK(gmp_wg_wait(&wg));
        /* main thread selecting against a goroutine, blocking */
        CHECK_OK(gmp_wg_add(&wg, 1));
        CHECK_OK(gmp_go(peer, &p));
        selector(&p, -1);
        CHECK_OK(gmp_wg_wait(&wg));
        /* a pthread selecting with short timeouts */
        pthread_t t;
        CHECK_OK(gmp_wg_add(&wg, 1));
        CHECK_OK(gmp_go(peer, &p));
        CHECK_EQ(pthread_create(&t, NULL, selector_thread, &p), 0);
        pthread_join(t, NULL);
        CHECK_OK(gmp_wg_wait(&wg));
        CHECK_OK(gmp_chan_release(p.in));
        CHECK_OK(gmp_chan_release(p.out));
    }
}

/* ---- 6. bad input ---- */

static void test_bad_input(void)
{
    gmp_chan *c;
    CHECK_EQ(gmp_chan_make(&c, sizeof(int), 1), 0);
    int v = 0;
    gmp_select_case bad_op[1] = {{c, 3, &v, 0}};
    CHECK_EQ(gmp_select(bad_op, 1, 0), -EINVAL);
    gmp_select_case bad_op_null[1] = {{NULL, 0, &v, 0}};
    CHECK_EQ(gmp_select(bad_op_null, 1, 0), -EINVAL);
    gmp_select_case null_buf[1] = {{c, GMP_SEND, NULL, 0}};
    CHECK_EQ(gmp_select(null_buf, 1, 0), -EINVAL);
    CHECK_EQ(gmp_select(NULL, 1, 0), -EINVAL);
    CHECK_EQ(gmp_select(NULL, 0, -1), -EINVAL);
    gmp_select_case ok[1] = {{c, GMP_RECV, NULL, 0}};
    CHECK_EQ(gmp_select(ok, 65537, 0), -EINVAL);
    /* A receive case may discard its value. */
    CHECK_EQ(gmp_chan_send(c, &v), 0);
    CHECK_EQ(gmp_select(ok, 1, 0), 0);
    CHECK_OK(gmp_chan_release(c));
}

/* Many cases (beyond the stack scratch space): the one ready case is found. */
static void test_many_cases(void)
{
    enum { N = 1000 };
    static gmp_select_case cs[N];
    gmp_chan *c[N];
    for (int i = 0; i < N; i++) {
        CHECK_EQ(gmp_chan_make(&c[i], sizeof(int), 1), 0);
        cs[i] = (gmp_select_case){c[i], GMP_RECV, NULL, 0};
    }
    CHECK_EQ(gmp_chan_send(c[777], &(int){1}), 0);
    CHECK_EQ(gmp_select(cs, N, -1), 777);
    CHECK_EQ(gmp_select(cs, N, 0), -ETIMEDOUT);
    CHECK_EQ(gmp_select(cs, N, 5 * MS), -ETIMEDOUT);
    for (int i = 0; i < N; i++)
        CHECK_OK(gmp_chan_release(c[i]));
}

int main(void)
{
    check_random();
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK_OK(gmp_go(random_goroutine, NULL));
    CHECK_OK(gmp_wg_wait(&wg));
    test_dup_null();
    check_timeouts();
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK_OK(gmp_go(timeouts_goroutine, NULL));
    CHECK_OK(gmp_wg_wait(&wg));
    test_closed();
    test_peers();
    test_bad_input();
    test_many_cases();
    printf("select_basic: ok\n");
    return 0;
}
