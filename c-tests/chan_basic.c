/*
 * chan_basic: channel semantics, Go's to the letter.
 *
 *  1. Unbuffered and buffered send/recv between goroutines; values of a buffered channel
 *     come out in FIFO order.
 *  2. Blocked senders are served FIFO: senders that block in a known order (each starts
 *     after the previous one is parked in its send, seen through gmp_stats: nothing
 *     runnable) deliver their values in that order.
 *  3. Closed channels: recv drains the buffer, then -EPIPE with out zeroed; send -EPIPE;
 *     a sender blocked when the channel closes gets -EPIPE; a second close -EPIPE.
 *  4. try forms (-EAGAIN), timed forms (-ETIMEDOUT after about the timeout, never early),
 *     in a goroutine and on the main thread; len/cap; zero-size elements.
 *  5. The prime sieve over a chain of goroutines: the first 100 primes.
 *  6. Foreign threads: main and pthreads sending to and receiving from goroutines, a
 *     pthread blocked in recv woken by a goroutine's send and by close.
 *  7. retain/release and bad input (NULL channel/buffer, huge sizes -> -EINVAL).
 */
#include "check.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include <gmp-sched/gmp.h>

#define MS 1000000LL

static gmp_wg wg = GMP_WG_INIT;

/* ---- 1. basic send/recv ---- */

struct pair {
    gmp_chan *c;
    int n;
};

static void sender_n(void *arg)
{
    struct pair *p = arg;
    for (int i = 0; i < p->n; i++)
        CHECK_EQ(gmp_chan_send(p->c, &i), 0);
    CHECK_OK(gmp_wg_done(&wg));
}

static void receiver_n(void *arg)
{
    struct pair *p = arg;
    for (int i = 0; i < p->n; i++) {
        int v = -1;
        CHECK_EQ(gmp_chan_recv(p->c, &v), 0);
        CHECK_EQ(v, i);
    }
    CHECK_OK(gmp_wg_done(&wg));
}

static void test_basic(size_t cap)
{
    gmp_chan *c;
    CHECK_EQ(gmp_chan_make(&c, sizeof(int), cap), 0);
    struct pair p = {c, 10000};
    CHECK_OK(gmp_wg_add(&wg, 2));
    CHECK_OK(gmp_go(receiver_n, &p));
    CHECK_OK(gmp_go(sender_n, &p));
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_EQ(gmp_chan_release(c), 0);
}

static void test_buffered_fifo(void)
{
    gmp_chan *c;
    CHECK_EQ(gmp_chan_make(&c, sizeof(int), 8), 0);
    CHECK_EQ(gmp_chan_cap(c), 8);
    for (int i = 0; i < 8; i++) {
        CHECK_EQ(gmp_chan_len(c), i);
        CHECK_EQ(gmp_chan_send(c, &i), 0);
    }
    CHECK_EQ(gmp_chan_try_send(c, &(int){99}), -EAGAIN);
    for (int i = 0; i < 8; i++) {
        int v;
        CHECK_EQ(gmp_chan_recv(c, &v), 0);
        CHECK_EQ(v, i);
    }
    CHECK_EQ(gmp_chan_len(c), 0);
    CHECK_EQ(gmp_chan_try_recv(c, &(int){0}), -EAGAIN);
    CHECK_OK(gmp_chan_release(c));
}

/* ---- 2. FIFO of blocked senders ---- */

static atomic_int blocked_senders;

struct val {
    gmp_chan *c;
    int v;
};

static void blocking_sender(void *arg)
{
    struct val *s = arg;
    atomic_fetch_add(&blocked_senders, 1);
    CHECK_EQ(gmp_chan_send(s->c, &s->v), 0);
    CHECK_OK(gmp_wg_done(&wg));
}

static void test_sender_fifo(size_t cap)
{
    enum { N = 6 };
    gmp_chan *c;
    CHECK_EQ(gmp_chan_make(&c, sizeof(int), cap), 0);
    for (size_t i = 0; i < cap; i++)
        CHECK_EQ(gmp_chan_send(c, &(int){-1}), 0);
    struct val s[N];
    atomic_store(&blocked_senders, 0);
    CHECK_OK(gmp_wg_add(&wg, N));
    for (int i = 0; i < N; i++) {
        s[i].c = c;
        s[i].v = 100 + i;
        CHECK_OK(gmp_go(blocking_sender, &s[i]));
        /* Wait until it has announced itself and parked in the send (nothing runnable,
         * i + 1 goroutines alive: the senders started so far). */
        WAIT_UNTIL(atomic_load(&blocked_senders) == i + 1, 10.0);
        WAIT_BLOCKED(i + 1);
    }
    for (size_t i = 0; i < cap; i++) {
        int v;
        CHECK_EQ(gmp_chan_recv(c, &v), 0);
        CHECK_EQ(v, -1);
    }
    for (int i = 0; i < N; i++) {
        int v;
        CHECK_EQ(gmp_chan_recv(c, &v), 0);
        CHECK_EQ(v, 100 + i);
    }
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_OK(gmp_chan_release(c));
}

/* ---- 3. closed ---- */

static void send_expect_epipe(void *arg)
{
    gmp_chan *c = arg;
    CHECK_EQ(gmp_chan_send(c, &(int){7}), -EPIPE);
    CHECK_OK(gmp_wg_done(&wg));
}

static void recv_expect_epipe(void *arg)
{
    gmp_chan *c = arg;
    int v = 1234;
    CHECK_EQ(gmp_chan_recv(c, &v), -EPIPE);
    CHECK_EQ(v, 0);
    CHECK_OK(gmp_wg_done(&wg));
}

static void test_closed(void)
{
    gmp_chan *c;
    CHECK_EQ(gmp_chan_make(&c, sizeof(int), 3), 0);
    for (int i = 1; i <= 3; i++)
        CHECK_EQ(gmp_chan_send(c, &i), 0);
    CHECK_EQ(gmp_chan_close(c), 0);
    CHECK_EQ(gmp_chan_close(c), -EPIPE);
    CHECK_EQ(gmp_chan_send(c, &(int){4}), -EPIPE);
    CHECK_EQ(gmp_chan_try_send(c, &(int){4}), -EPIPE);
    for (int i = 1; i <= 3; i++) {
        int v;
        CHECK_EQ(gmp_chan_recv(c, &v), 0);
        CHECK_EQ(v, i);
    }
    int v = 55;
    CHECK_EQ(gmp_chan_recv(c, &v), -EPIPE);
    CHECK_EQ(v, 0);
    v = 55;
    CHECK_EQ(gmp_chan_try_recv(c, &v), -EPIPE);
    CHECK_EQ(v, 0);
    CHECK_EQ(gmp_chan_recv_timeout(c, &v, 10 * MS), -EPIPE);
    CHECK_EQ(gmp_chan_recv(c, NULL), -EPIPE);

    /* Closed with room in the buffer: a send still fails and adds nothing. */
    gmp_chan *r;
    CHECK_EQ(gmp_chan_make(&r, sizeof(int), 4), 0);
    CHECK_EQ(gmp_chan_send(r, &(int){1}), 0);
    CHECK_EQ(gmp_chan_close(r), 0);
    CHECK_EQ(gmp_chan_send(r, &(int){2}), -EPIPE);
    CHECK_EQ(gmp_chan_try_send(r, &(int){3}), -EPIPE);
    CHECK_EQ(gmp_chan_len(r), 1);
    CHECK_EQ(gmp_chan_recv(r, &v), 0);
    CHECK_EQ(v, 1);
    CHECK_EQ(gmp_chan_recv(r, &v), -EPIPE);
    CHECK_OK(gmp_chan_release(r));
    CHECK_OK(gmp_chan_release(c));

    /* Blocked senders (unbuffered and full buffered) and receivers woken by close. */
    for (size_t cap = 0; cap <= 1; cap++) {
        CHECK_EQ(gmp_chan_make(&c, sizeof(int), cap), 0);
        if (cap)
            CHECK_EQ(gmp_chan_send(c, &(int){1}), 0);
        CHECK_OK(gmp_wg_add(&wg, 3));
        for (int i = 0; i < 3; i++)
            CHECK_OK(gmp_go(send_expect_epipe, c));
        WAIT_BLOCKED(3); /* all three blocked in send when the channel closes */
        CHECK_EQ(gmp_chan_close(c), 0);
        CHECK_OK(gmp_wg_wait(&wg));
        CHECK_OK(gmp_chan_release(c));
    }
    CHECK_EQ(gmp_chan_make(&c, sizeof(int), 0), 0);
    CHECK_OK(gmp_wg_add(&wg, 3));
    for (int i = 0; i < 3; i++)
        CHECK_OK(gmp_go(recv_expect_epipe, c));
    WAIT_BLOCKED(3); /* all three blocked in recv when the channel closes */
    CHECK_EQ(gmp_chan_close(c), 0);
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_OK(gmp_chan_release(c));
}

/* ---- 4. try, timed, zero-size ---- */

static void check_timeouts(void)
{
    gmp_chan *c;
    CHECK_EQ(gmp_chan_make(&c, sizeof(int), 0), 0);
    int v = 77;
    CHECK_EQ(gmp_chan_try_recv(c, &v), -EAGAIN);
    CHECK_EQ(gmp_chan_try_send(c, &v), -EAGAIN);
    CHECK_EQ(gmp_chan_recv_timeout(c, &v, 0), -ETIMEDOUT);
    int64_t t0 = gmp_now();
    CHECK_EQ(gmp_chan_recv_timeout(c, &v, 50 * MS), -ETIMEDOUT);
    int64_t dt = gmp_now() - t0;
    CHECK(dt >= 50 * MS);
    CHECK(dt < 1000 * MS);
    CHECK_EQ(v, 77);
    t0 = gmp_now();
    CHECK_EQ(gmp_chan_send_timeout(c, &v, 30 * MS), -ETIMEDOUT);
    dt = gmp_now() - t0;
    CHECK(dt >= 30 * MS);
    CHECK(dt < 1000 * MS);
    /* The timed-out waiters left the queues: a try finds nobody. */
    CHECK_EQ(gmp_chan_try_recv(c, &v), -EAGAIN);
    CHECK_EQ(gmp_chan_try_send(c, &v), -EAGAIN);
    CHECK_OK(gmp_chan_release(c));
}

static void timeouts_goroutine(void *arg)
{
    (void)arg;
    check_timeouts();
    CHECK_OK(gmp_wg_done(&wg));
}

static void late_sender(void *arg)
{
    gmp_chan *c = arg;
    CHECK_OK(gmp_sleep(10 * MS));
    CHECK_EQ(gmp_chan_send(c, &(int){42}), 0);
    CHECK_OK(gmp_wg_done(&wg));
}

static void test_try_timed(void)
{
    check_timeouts();
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK_OK(gmp_go(timeouts_goroutine, NULL));
    CHECK_OK(gmp_wg_wait(&wg));

    /* A timed receive that succeeds before its deadline. */
    gmp_chan *c;
    CHECK_EQ(gmp_chan_make(&c, sizeof(int), 0), 0);
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK_OK(gmp_go(late_sender, c));
    int v = 0;
    CHECK_EQ(gmp_chan_recv_timeout(c, &v, 5000 * MS), 0);
    CHECK_EQ(v, 42);
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_OK(gmp_chan_release(c));
}

static void zero_sender(void *arg)
{
    gmp_chan *c = arg;
    for (int i = 0; i < 1000; i++)
        CHECK_EQ(gmp_chan_send(c, NULL), 0);
    CHECK_OK(gmp_wg_done(&wg));
}

static void test_zero_size(void)
{
    for (size_t cap = 0; cap <= 4; cap += 4) {
        gmp_chan *c;
        CHECK_EQ(gmp_chan_make(&c, 0, cap), 0);
        CHECK_OK(gmp_wg_add(&wg, 1));
        CHECK_OK(gmp_go(zero_sender, c));
        for (int i = 0; i < 1000; i++)
            CHECK_EQ(gmp_chan_recv(c, NULL), 0);
        CHECK_OK(gmp_wg_wait(&wg));
        if (cap) {
            CHECK_EQ(gmp_chan_try_send(c, NULL), 0);
            CHECK_EQ(gmp_chan_len(c), 1);
        }
        CHECK_EQ(gmp_chan_close(c), 0);
        if (cap)
            CHECK_EQ(gmp_chan_recv(c, NULL), 0);
        CHECK_EQ(gmp_chan_recv(c, NULL), -EPIPE);
        CHECK_OK(gmp_chan_release(c));
    }
}

/* ---- 5. prime sieve (Go's classic) ---- */

struct filter {
    gmp_chan *in, *out;
    int prime;
};

static void generate(void *arg)
{
    gmp_chan *out = arg;
    for (int i = 2;; i++)
        if (gmp_chan_send(out, &i) < 0)
            break;
    CHECK_OK(gmp_chan_release(out));
}

static void filter(void *arg)
{
    struct filter *f = arg;
    int v;
    while (gmp_chan_recv(f->in, &v) == 0) {
        if (v % f->prime != 0 && gmp_chan_send(f->out, &v) < 0)
            break;
    }
    /* Propagate the shutdown both ways: upstream (its sends fail) and downstream. */
    int r = gmp_chan_close(f->in); /* -EPIPE: a neighbour closed it first */
    CHECK(r == 0 || r == -EPIPE);
    r = gmp_chan_close(f->out);
    CHECK(r == 0 || r == -EPIPE);
    CHECK_OK(gmp_chan_release(f->in));
    CHECK_OK(gmp_chan_release(f->out));
    CHECK_OK(gmp_wg_done(&wg));
}

static void test_sieve(void)
{
    static const int first[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29};
    static struct filter fs[100];
    gmp_chan *ch;
    CHECK_EQ(gmp_chan_make(&ch, sizeof(int), 0), 0);
    CHECK_OK(gmp_chan_retain(ch));
    CHECK_OK(gmp_wg_add(&wg, 100));
    CHECK_OK(gmp_go(generate, ch));
    int last = 0;
    for (int i = 0; i < 100; i++) {
        int prime;
        CHECK_EQ(gmp_chan_recv(ch, &prime), 0);
        if (i < 10)
            CHECK_EQ(prime, first[i]);
        CHECK(prime > last);
        for (int d = 2; d * d <= prime; d++)
            CHECK(prime % d != 0);
        last = prime;
        gmp_chan *ch1;
        CHECK_EQ(gmp_chan_make(&ch1, sizeof(int), 0), 0);
        CHECK_OK(gmp_chan_retain(ch1));
        fs[i] = (struct filter){ch, ch1, prime};
        CHECK_OK(gmp_go(filter, &fs[i]));
        ch = ch1;
    }
    CHECK_EQ(last, 541); /* the 100th prime */
    /* Shut the chain down from its end: every filter ends, the generator too. */
    CHECK_EQ(gmp_chan_close(ch), 0);
    CHECK_OK(gmp_chan_release(ch));
    CHECK_OK(gmp_wg_wait(&wg));
}

/* ---- 6. foreign threads ---- */

static void *thread_sender(void *arg)
{
    struct pair *p = arg;
    for (int i = 0; i < p->n; i++)
        CHECK_EQ(gmp_chan_send(p->c, &i), 0);
    return NULL;
}

static void *thread_receiver(void *arg)
{
    struct pair *p = arg;
    for (int i = 0; i < p->n; i++) {
        int v = -1;
        CHECK_EQ(gmp_chan_recv(p->c, &v), 0);
        CHECK_EQ(v, i);
    }
    return NULL;
}

static atomic_int thread_blocked;

static void *thread_recv_until_closed(void *arg)
{
    gmp_chan *c = arg;
    int v = 0;
    atomic_store(&thread_blocked, 1);
    CHECK_EQ(gmp_chan_recv(c, &v), 0);
    CHECK_EQ(v, 31337);
    v = 5;
    CHECK_EQ(gmp_chan_recv(c, &v), -EPIPE);
    CHECK_EQ(v, 0);
    return NULL;
}

static void delayed_send_then_close(void *arg)
{
    gmp_chan *c = arg;
    CHECK_OK(gmp_sleep(20 * MS));
    CHECK_EQ(gmp_chan_send(c, &(int){31337}), 0);
    CHECK_OK(gmp_sleep(20 * MS));
    CHECK_EQ(gmp_chan_close(c), 0);
    CHECK_OK(gmp_wg_done(&wg));
}

static void test_foreign(void)
{
    for (size_t cap = 0; cap <= 16; cap += 16) {
        gmp_chan *c;
        CHECK_EQ(gmp_chan_make(&c, sizeof(int), cap), 0);
        struct pair p = {c, 20000};
        /* pthread -> goroutine */
        pthread_t t;
        CHECK_OK(gmp_wg_add(&wg, 1));
        CHECK_OK(gmp_go(receiver_n, &p));
        CHECK_EQ(pthread_create(&t, NULL, thread_sender, &p), 0);
        pthread_join(t, NULL);
        CHECK_OK(gmp_wg_wait(&wg));
        /* goroutine -> pthread */
        CHECK_OK(gmp_wg_add(&wg, 1));
        CHECK_OK(gmp_go(sender_n, &p));
        CHECK_EQ(pthread_create(&t, NULL, thread_receiver, &p), 0);
        pthread_join(t, NULL);
        CHECK_OK(gmp_wg_wait(&wg));
        /* main <-> pthread, no goroutine involved */
        CHECK_EQ(pthread_create(&t, NULL, thread_sender, &p), 0);
        thread_receiver(&p);
        pthread_join(t, NULL);
        CHECK_OK(gmp_chan_release(c));
    }
    /* A pthread blocked in recv, woken by a goroutine's send and then by close. */
    gmp_chan *c;
    CHECK_EQ(gmp_chan_make(&c, sizeof(int), 0), 0);
    pthread_t t;
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK_EQ(pthread_create(&t, NULL, thread_recv_until_closed, c), 0);
    CHECK_OK(gmp_go(delayed_send_then_close, c));
    pthread_join(t, NULL);
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_OK(gmp_chan_release(c));
}

/* ---- 7. retain/release, bad input ---- */

static void test_bad_input(void)
{
    gmp_chan *c = NULL;
    CHECK_EQ(gmp_chan_make(NULL, 4, 0), -EINVAL);
    CHECK_EQ(gmp_chan_make(&c, GMP_CHAN_MAX_ELEM + 1, 0), -EINVAL);
    CHECK(c == NULL);
    CHECK_EQ(gmp_chan_make(&c, 8, ((size_t)1 << 31) + 1), -EINVAL);
    /* The limits themselves are accepted (zero-size elements need no buffer). */
    CHECK_OK(gmp_chan_make(&c, 0, (size_t)1 << 31));
    CHECK_EQ(gmp_chan_cap(c), (long long)1 << 31);
    CHECK_OK(gmp_chan_release(c));
    CHECK_OK(gmp_chan_make(&c, GMP_CHAN_MAX_ELEM, 1));
    CHECK_OK(gmp_chan_release(c));
    c = NULL;
    CHECK_EQ(gmp_chan_make(&c, GMP_CHAN_MAX_ELEM, SIZE_MAX / 2), -EINVAL);
    CHECK_EQ(gmp_chan_send(NULL, &c), -EINVAL);
    CHECK_EQ(gmp_chan_recv(NULL, &c), -EINVAL);
    CHECK_EQ(gmp_chan_try_send(NULL, &c), -EINVAL);
    CHECK_EQ(gmp_chan_try_recv(NULL, &c), -EINVAL);
    CHECK_EQ(gmp_chan_send_timeout(NULL, &c, 1), -EINVAL);
    CHECK_EQ(gmp_chan_recv_timeout(NULL, &c, 1), -EINVAL);
    CHECK_EQ(gmp_chan_close(NULL), -EINVAL);
    CHECK_EQ(gmp_chan_len(NULL), -EINVAL);
    CHECK_EQ(gmp_chan_cap(NULL), -EINVAL);
    CHECK_EQ(gmp_chan_retain(NULL), -EINVAL);
    CHECK_EQ(gmp_chan_release(NULL), -EINVAL);

    CHECK_EQ(gmp_chan_make(&c, 4, 1), 0);
    CHECK_EQ(gmp_chan_send(c, NULL), -EINVAL);
    CHECK_EQ(gmp_chan_try_send(c, NULL), -EINVAL);
    CHECK_EQ(gmp_chan_send(c, &(int){9}), 0);
    CHECK_EQ(gmp_chan_recv(c, NULL), 0); /* discard */
    /* Three references, released by three owners. */
    CHECK_EQ(gmp_chan_retain(c), 0);
    CHECK_EQ(gmp_chan_retain(c), 0);
    CHECK_EQ(gmp_chan_release(c), 0);
    CHECK_EQ(gmp_chan_release(c), 0);
    CHECK_EQ(gmp_chan_cap(c), 1);
    CHECK_EQ(gmp_chan_release(c), 0);

    /* The largest element size works. */
    CHECK_EQ(gmp_chan_make(&c, GMP_CHAN_MAX_ELEM, 2), 0);
    static unsigned char big[GMP_CHAN_MAX_ELEM], big2[GMP_CHAN_MAX_ELEM];
    memset(big, 0xab, sizeof big);
    CHECK_EQ(gmp_chan_send(c, big), 0);
    CHECK_EQ(gmp_chan_recv(c, big2), 0);
    CHECK(memcmp(big, big2, sizeof big) == 0);
    CHECK_OK(gmp_chan_release(c));
}

int main(void)
{
    test_basic(0);
    test_basic(1);
    test_basic(64);
    test_buffered_fifo();
    test_sender_fifo(0);
    test_sender_fifo(2);
    test_closed();
    test_try_timed();
    test_zero_size();
    test_sieve();
    test_foreign();
    test_bad_input();
    printf("chan_basic: ok\n");
    return 0;
}
