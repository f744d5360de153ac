/*
 * sanitize.c -- a channel program for valgrind (and the sanitizers): goroutines and C main
 * pass values through channels, wait on a WaitGroup, sleep; it must run clean.
 * With argv[1] = "uaf", a goroutine reads a heap block after freeing it: the tool must
 * still report it (the stack annotations must not hide real bugs). With "stack_overflow",
 * a goroutine writes past a local array: ASan must report it in that frame's variable
 * (it can only when it knows the goroutine's stack: the fiber annotations). With "race",
 * two goroutines increment a global without synchronisation: ThreadSanitizer must report
 * it (its annotations order only what the runtime orders).
 * The clean run also hands plain memory from one goroutine to another, both running at
 * once, through a buffered channel that never has a waiter, so that after its first calm
 * run it leaves exclusive mode (its lock-free path): the receiver reads what the sender
 * wrote before sending, which ThreadSanitizer must see as ordered (the channel's
 * acquire/release hooks, which the lock-free path must not skip).
 * It also has C main meet goroutines parked on an unbuffered channel of 24-byte elements:
 * a send into a parked receiver's buffer, a close that zeroes it, a receive out of a
 * parked sender's. The goroutine used its buffer before it parked; the runtime's copy
 * (memmove) or zeroing (memset), which ThreadSanitizer sees through its interceptors,
 * comes after, ordered by the channel lock, which ThreadSanitizer must be told of. The
 * same edge is Go's "a receive from an unbuffered channel is synchronized before the
 * completion of the corresponding send": C main, its send done, overwrites what the
 * parked receiver wrote before it received (a race report even with the suppressions
 * when the edge is missing). With argv[1] = "parked", only that part runs (the TSan run
 * without the suppressions, which hide every interceptor libgmp calls).
 * With "race_bound", the race is reported on a goroutine whose M has another goroutine
 * bound to it (both GMP_GO_PINNED, GOMAXPROCS 1), where a blocking call the interposer
 * sees goes to a helper thread while the goroutine parks. TSan's symbolizer opens files
 * through those hooks while TSan holds its thread-registry lock: the report must end (a
 * park there would leave the lock held by a switched-out fiber and every thread waiting
 * for it; the alarm ends such a run).
 * With "fd_reuse", main makes a socketpair (TSan records the fds), closes both ends with
 * gmp_close (a system call TSan does not see) and a thread unordered with it makes a
 * socketpair that gets the same numbers: the runtime's close-before-reuse edge must keep
 * TSan from taking the reuse for a race on the fds.
 */
#include "check.h"

#include <errno.h>
#include <stdatomic.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PAIRS 8
#define ROUNDS 200

static gmp_wg wg = GMP_WG_INIT;
static volatile long sink;

void sanitize_echo(void *arg)
{
    struct gmp_chan **ch = arg;
    long v;
    for (int i = 0; i < ROUNDS; i++) {
        CHECK_EQ(gmp_chan_recv(ch[0], &v), 0);
        v *= 2;
        CHECK_EQ(gmp_chan_send(ch[1], &v), 0);
    }
    CHECK_OK(gmp_sleep(1000000));
    gmp_wg_done(&wg);
}

void sanitize_uaf(void *arg)
{
    (void)arg;
    long *p = malloc(8 * sizeof *p);
    CHECK(p != NULL);
    memset(p, 0, 8 * sizeof *p);
    long *volatile dangling = p; /* hidden from the compiler's use-after-free warning */
    free(p);
    sink = dangling[3]; /* use after free */
    gmp_wg_done(&wg);
}

static volatile int past_end = 8;

__attribute__((noinline)) void sanitize_overflow_frame(void)
{
    volatile char local_buf[8];
    local_buf[past_end] = 1;
    sink = local_buf[0];
}

void sanitize_overflow(void *arg)
{
    (void)arg;
    sanitize_overflow_frame();
    gmp_wg_done(&wg);
}

#define HANDOFFS 5000

/* Written by sanitize_writer before it sends each index, read by sanitize_reader after
 * it receives it: ordered only by the channel. */
static long handed[HANDOFFS];
/* Indices sent so far, and the two goroutines' meeting point; relaxed, so that they
 * order nothing for TSan. */
static atomic_long handed_sent;
static atomic_int handoff_in;

/* Meets the other side (bounded: 1 s), so that both run at once on the two threads. */
static void handoff_meet(void)
{
    atomic_fetch_add_explicit(&handoff_in, 1, memory_order_relaxed);
    double t0 = now_sec();
    while (atomic_load_explicit(&handoff_in, memory_order_relaxed) < 2 && now_sec() - t0 < 1.0)
        ;
}

void sanitize_writer(void *arg)
{
    struct gmp_chan *ch = arg;
    handoff_meet();
    for (long i = 0; i < HANDOFFS; i++) {
        handed[i] = 3 * i + 1;
        CHECK_EQ(gmp_chan_send(ch, &i), 0);
        atomic_fetch_add_explicit(&handed_sent, 1, memory_order_relaxed);
    }
    gmp_wg_done(&wg);
}

/* Receives only what is already sent, so that the channel never has a waiter and stays
 * out of exclusive mode after its first calm run (a waiting receiver would also order
 * the two goroutines through the scheduler). */
void sanitize_reader(void *arg)
{
    struct gmp_chan *ch = arg;
    handoff_meet();
    for (long n = 0; n < HANDOFFS; n++) {
        double t0 = now_sec();
        while (atomic_load_explicit(&handed_sent, memory_order_relaxed) <= n)
            if (now_sec() - t0 > 0.001)
                gmp_yield(); /* the writer shares our thread after all */
        long i;
        CHECK_EQ(gmp_chan_recv(ch, &i), 0);
        CHECK_EQ(i, n);
        CHECK_EQ(handed[i], 3 * i + 1);
    }
    gmp_wg_done(&wg);
}

/* Three words: the runtime copies it with memmove and zeroes it with memset (it copies 4,
 * 8 and 16 bytes inline, where ThreadSanitizer cannot see it). */
struct trio {
    long v[3];
};

/* Written by sanitize_parked_receiver before its first receive, then by C main once its
 * send to it has completed: ordered only by that receive and send. */
static long before_receive;

/* Fills and reads a buffer, parks in a receive into it that C main's send completes, then
 * does so again with another buffer for one that C main's close completes (ThreadSanitizer
 * reports one race per address). */
void sanitize_parked_receiver(void *arg)
{
    struct gmp_chan *ch = arg;
    struct trio t[2];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 3; i++)
            t[round].v[i] = -1 - i;
        sink = t[round].v[0] + t[round].v[1] + t[round].v[2];
        if (round == 0)
            before_receive = 1;
        int r = gmp_chan_recv(ch, &t[round]);
        if (round == 0) {
            CHECK_EQ(r, 0);
            for (int i = 0; i < 3; i++)
                CHECK_EQ(t[round].v[i], 40 + i);
        } else {
            CHECK_EQ(r, -EPIPE);
            for (int i = 0; i < 3; i++)
                CHECK_EQ(t[round].v[i], 0);
        }
    }
    gmp_wg_done(&wg);
}

/* Fills its buffer and parks in a send that C main's receive completes. */
void sanitize_parked_sender(void *arg)
{
    struct gmp_chan *ch = arg;
    struct trio t;
    for (int i = 0; i < 3; i++)
        t.v[i] = 50 + i;
    CHECK_EQ(gmp_chan_send(ch, &t), 0);
    gmp_wg_done(&wg);
}

/* C main (a foreign thread) completes operations of goroutines parked on a channel
 * (WAIT_BLOCKED: they are, each time). */
static void parked_peers(void)
{
    struct gmp_chan *ch;
    CHECK_OK(gmp_chan_make(&ch, sizeof(struct trio), 0));
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK_OK(gmp_go(sanitize_parked_receiver, ch));
    WAIT_BLOCKED(1);
    struct trio t = {{40, 41, 42}};
    CHECK_EQ(gmp_chan_send(ch, &t), 0);
    CHECK_EQ(before_receive, 1);
    before_receive = 2;
    WAIT_BLOCKED(1);
    CHECK_EQ(gmp_chan_close(ch), 0);
    CHECK_OK(gmp_wg_wait(&wg));
    gmp_chan_release(ch);

    CHECK_OK(gmp_chan_make(&ch, sizeof(struct trio), 0));
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK_OK(gmp_go(sanitize_parked_sender, ch));
    WAIT_BLOCKED(1);
    CHECK_EQ(gmp_chan_recv(ch, &t), 0);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(t.v[i], 50 + i);
    CHECK_OK(gmp_wg_wait(&wg));
    gmp_chan_release(ch);
}

static long racy_counter;
static atomic_int racers_in;

void sanitize_racer(void *arg)
{
    (void)arg;
    /* Meet the other racer first (relaxed: no happens-before), so that the two loops run
     * at the same time on the two threads; a runtime switch between them (a yield)
     * would order them for TSan and could hide the race. Bounded: 1 s. */
    atomic_fetch_add_explicit(&racers_in, 1, memory_order_relaxed);
    double t0 = now_sec();
    while (atomic_load_explicit(&racers_in, memory_order_relaxed) < 2 && now_sec() - t0 < 1.0)
        ;
    for (int i = 0; i < 100000; i++)
        racy_counter++;
    gmp_wg_done(&wg);
}

/* race_bound: 1 once the waiter runs (pinned to the racer's M), 2 once main wrote. */
static atomic_int bound_state;
static gmp_wg bound_wg = GMP_WG_INIT;

void sanitize_bound_waiter(void *arg)
{
    (void)arg;
    atomic_store_explicit(&bound_state, 1, memory_order_relaxed);
    CHECK_OK(gmp_wg_wait(&bound_wg)); /* parked, bound to the racer's M */
    gmp_wg_done(&wg);
}

void sanitize_bound_racer(void *arg)
{
    (void)arg;
    gmp_attr pin = {0, GMP_GO_PINNED};
    CHECK(gmp_go_attr(sanitize_bound_waiter, NULL, &pin) > 0);
    /* One P: the waiter runs on this M (and is pinned to it) when this one yields. */
    while (atomic_load_explicit(&bound_state, memory_order_relaxed) < 1)
        CHECK_OK(gmp_yield());
    /* main's write, seen through a relaxed load: no happens-before. Bounded: 5 s. */
    double t0 = now_sec();
    while (atomic_load_explicit(&bound_state, memory_order_relaxed) < 2 && now_sec() - t0 < 5.0)
        ;
    sink = racy_counter; /* the race, reported (and symbolized) on this goroutine */
    gmp_wg_done(&bound_wg);
    gmp_wg_done(&wg);
}

/* fd_reuse: the numbers main closed (relaxed: no happens-before), -1 until then. */
static atomic_int reuse_fd[2] = {-1, -1};

static void *fd_reuser(void *arg)
{
    (void)arg;
    double t0 = now_sec();
    while (atomic_load_explicit(&reuse_fd[1], memory_order_relaxed) < 0 && now_sec() - t0 < 10.0)
        ;
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    /* The lowest free numbers: the ones main closed. */
    CHECK_EQ(sv[0], atomic_load_explicit(&reuse_fd[0], memory_order_relaxed));
    CHECK_EQ(sv[1], atomic_load_explicit(&reuse_fd[1], memory_order_relaxed));
    CHECK_EQ(close(sv[0]), 0);
    CHECK_EQ(close(sv[1]), 0);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "fd_reuse") == 0) {
        CHECK(gmp_maxprocs(0) > 0); /* the runtime (and its TSan support) starts */
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, fd_reuser, NULL), 0);
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        CHECK_EQ(gmp_close(sv[0]), 0);
        CHECK_EQ(gmp_close(sv[1]), 0);
        atomic_store_explicit(&reuse_fd[0], sv[0], memory_order_relaxed);
        atomic_store_explicit(&reuse_fd[1], sv[1], memory_order_relaxed);
        CHECK_EQ(pthread_join(t, NULL), 0);
        printf("fd_reuse done\n");
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "race_bound") == 0) {
        alarm(60); /* a hang inside TSan holds every thread, a watchdog thread too */
        CHECK(gmp_maxprocs(1) > 0);
        CHECK_OK(gmp_wg_add(&wg, 2));
        CHECK_OK(gmp_wg_add(&bound_wg, 1));
        gmp_attr pin = {0, GMP_GO_PINNED};
        CHECK(gmp_go_attr(sanitize_bound_racer, NULL, &pin) > 0);
        WAIT_UNTIL(atomic_load_explicit(&bound_state, memory_order_relaxed) == 1, 10.0);
        racy_counter = 1;
        atomic_store_explicit(&bound_state, 2, memory_order_relaxed);
        CHECK_OK(gmp_wg_wait(&wg));
        printf("race_bound done\n");
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "race") == 0) {
        CHECK_OK(gmp_wg_add(&wg, 2));
        CHECK_OK(gmp_go(sanitize_racer, NULL));
        CHECK_OK(gmp_go(sanitize_racer, NULL));
        CHECK_OK(gmp_wg_wait(&wg));
        printf("race done: %ld\n", racy_counter);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "stack_overflow") == 0) {
        CHECK_OK(gmp_wg_add(&wg, 1));
        CHECK_OK(gmp_go(sanitize_overflow, NULL));
        CHECK_OK(gmp_wg_wait(&wg));
        printf("stack_overflow done\n");
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "uaf") == 0) {
        CHECK_OK(gmp_wg_add(&wg, 1));
        CHECK_OK(gmp_go(sanitize_uaf, NULL));
        CHECK_OK(gmp_wg_wait(&wg));
        printf("uaf done\n");
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "parked") == 0) {
        parked_peers();
        printf("parked: ok\n");
        return 0;
    }
    struct gmp_chan *ch[PAIRS][2];
    CHECK_OK(gmp_wg_add(&wg, PAIRS));
    for (int i = 0; i < PAIRS; i++) {
        CHECK_OK(gmp_chan_make(&ch[i][0], sizeof(long), 0));
        CHECK_OK(gmp_chan_make(&ch[i][1], sizeof(long), 1));
        CHECK_OK(gmp_go(sanitize_echo, ch[i]));
    }
    long sum = 0;
    for (int r = 0; r < ROUNDS; r++)
        for (int i = 0; i < PAIRS; i++) {
            long v = r;
            CHECK_EQ(gmp_chan_send(ch[i][0], &v), 0);
            CHECK_EQ(gmp_chan_recv(ch[i][1], &v), 0);
            sum += v;
        }
    CHECK_OK(gmp_wg_wait(&wg));
    for (int i = 0; i < PAIRS; i++) {
        gmp_chan_release(ch[i][0]);
        gmp_chan_release(ch[i][1]);
    }
    CHECK_EQ(sum, (long)PAIRS * ROUNDS * (ROUNDS - 1));

    struct gmp_chan *flow;
    CHECK_OK(gmp_chan_make(&flow, sizeof(long), HANDOFFS));
    CHECK_OK(gmp_wg_add(&wg, 2));
    CHECK_OK(gmp_go(sanitize_reader, flow));
    CHECK_OK(gmp_go(sanitize_writer, flow));
    CHECK_OK(gmp_wg_wait(&wg));
    gmp_chan_release(flow);
    parked_peers();
    printf("sanitize: ok\n");
    return 0;
}
