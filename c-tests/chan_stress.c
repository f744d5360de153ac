/*
 * chan_stress: conservation under contention, at GOMAXPROCS 1, 2 and 4 (three rounds,
 * set with gmp_maxprocs inside the program).
 *
 * Each scenario runs 8 producer goroutines and 6 consumers (5 goroutines and 1 pthread)
 * over unbuffered and buffered channels, plain or through select (two channels, send and
 * receive cases, some with timeouts), while a closer goroutine closes the channel(s) at a
 * random moment. Every value is sent at most once; afterwards:
 *  - every value whose send returned 0 was received exactly once (count array);
 *  - no value whose send returned -EPIPE (or was never attempted) was received;
 *  - each producer sent a prefix of its values and, unless it sent them all, was refused
 *    (-EPIPE) exactly once, on the value after that prefix.
 *
 * With CHAN_STRESS_REFUSE_MEMBARRIER=1 set, main first installs a seccomp filter that
 * makes membarrier(2) fail with EPERM, after the library registered for it when it was
 * loaded: the runtime's locks must then still work, sleeping in bounded polls (sys::Lock;
 * run with GMP_DEBUG=lockspin=0 so that every contended lock sleeps).
 */
#include "check.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#endif

#include <gmp-sched/gmp.h>

#define MS 1000000LL
#define PRODUCERS 8
#define CONSUMERS 6 /* the last one is a pthread */
#define PER_PRODUCER 12000
#define NVALUES (PRODUCERS * PER_PRODUCER)

enum { SENT_OK = 1, SENT_EPIPE = 2 };

static unsigned char sent[NVALUES];
static atomic_int received[NVALUES];
static gmp_wg wg = GMP_WG_INIT;

struct scenario {
    gmp_chan *c[2];
    int use_select;
    int close_after_ms;
};

static struct scenario sc;

static void record_recv(int v)
{
    CHECK(v >= 0 && v < NVALUES);
    atomic_fetch_add(&received[v], 1);
}

static void producer(void *arg)
{
    int id = (int)(intptr_t)arg;
    for (int j = 0; j < PER_PRODUCER; j++) {
        int v = id * PER_PRODUCER + j;
        int r;
        if (!sc.use_select) {
            /* Mix the plain, timed and try forms. */
            if (j % 3 == 0) {
                while ((r = gmp_chan_send_timeout(sc.c[0], &v, 1 * MS)) == -ETIMEDOUT)
                    ;
            } else if (j % 7 == 0) {
                while ((r = gmp_chan_try_send(sc.c[0], &v)) == -EAGAIN)
                    CHECK_OK(gmp_yield());
            } else {
                r = gmp_chan_send(sc.c[0], &v);
            }
        } else {
            gmp_select_case cs[2] = {{sc.c[0], GMP_SEND, &v, 0}, {sc.c[1], GMP_SEND, &v, 0}};
            for (;;) {
                int k = gmp_select(cs, 2, (j & 1) ? 1 * MS : -1);
                if (k == -ETIMEDOUT)
                    continue;
                CHECK(k == 0 || k == 1);
                r = cs[k].status;
                if (r == -EPIPE) {
                    /* That channel is closed: keep trying the other one. */
                    cs[k].chan = NULL;
                    if (cs[1 - k].chan != NULL)
                        continue;
                }
                break;
            }
        }
        if (r == 0) {
            sent[v] = SENT_OK;
        } else {
            CHECK_EQ(r, -EPIPE);
            sent[v] = SENT_EPIPE;
            break;
        }
    }
    CHECK_OK(gmp_wg_done(&wg));
}

static void consume(int idx)
{
    int v;
    if (!sc.use_select) {
        for (;;) {
            int r = (idx & 1) ? gmp_chan_recv_timeout(sc.c[0], &v, 1 * MS)
                              : gmp_chan_recv(sc.c[0], &v);
            if (r == -ETIMEDOUT)
                continue;
            if (r == -EPIPE) {
                CHECK_EQ(v, 0);
                return;
            }
            CHECK_EQ(r, 0);
            record_recv(v);
        }
    }
    gmp_select_case cs[2] = {{sc.c[0], GMP_RECV, &v, 0}, {sc.c[1], GMP_RECV, &v, 0}};
    while (cs[0].chan || cs[1].chan) {
        int k = gmp_select(cs, 2, (idx & 1) ? 1 * MS : -1);
        if (k == -ETIMEDOUT)
            continue;
        CHECK(k == 0 || k == 1);
        if (cs[k].status == -EPIPE) {
            CHECK_EQ(v, 0);
            cs[k].chan = NULL;
            continue;
        }
        CHECK_EQ(cs[k].status, 0);
        record_recv(v);
    }
}

static void consumer(void *arg)
{
    consume((int)(intptr_t)arg);
    CHECK_OK(gmp_wg_done(&wg));
}

static void *consumer_thread(void *arg)
{
    consume((int)(intptr_t)arg);
    return NULL;
}

static void closer(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_sleep(sc.close_after_ms * MS));
    CHECK_EQ(gmp_chan_close(sc.c[0]), 0);
    if (sc.c[1]) {
        CHECK_OK(gmp_sleep(1 * MS));
        CHECK_EQ(gmp_chan_close(sc.c[1]), 0);
    }
    CHECK_OK(gmp_wg_done(&wg));
}

static void run(size_t cap, int use_select, int close_after_ms)
{
    memset(sent, 0, sizeof sent);
    for (int i = 0; i < NVALUES; i++)
        atomic_store(&received[i], 0);
    sc.use_select = use_select;
    sc.close_after_ms = close_after_ms;
    CHECK_EQ(gmp_chan_make(&sc.c[0], sizeof(int), cap), 0);
    sc.c[1] = NULL;
    if (use_select)
        CHECK_EQ(gmp_chan_make(&sc.c[1], sizeof(int), cap), 0);

    CHECK_OK(gmp_wg_add(&wg, PRODUCERS + CONSUMERS - 1 + 1));
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, consumer_thread, (void *)(intptr_t)(CONSUMERS - 1)), 0);
    for (int i = 0; i < CONSUMERS - 1; i++)
        CHECK_OK(gmp_go(consumer, (void *)(intptr_t)i));
    for (int i = 0; i < PRODUCERS; i++)
        CHECK_OK(gmp_go(producer, (void *)(intptr_t)i));
    CHECK_OK(gmp_go(closer, NULL));
    CHECK_OK(gmp_wg_wait(&wg));
    pthread_join(t, NULL);

    long nsent = 0, nrefused = 0;
    for (int v = 0; v < NVALUES; v++) {
        int r = atomic_load(&received[v]);
        if (sent[v] == SENT_OK) {
            nsent++;
            if (r != 1) {
                fprintf(stderr, "value %d sent once, received %d times\n", v, r);
                CHECK(0);
            }
        } else {
            nrefused += sent[v] == SENT_EPIPE;
            if (r != 0) {
                fprintf(stderr, "value %d (send %d) received %d times\n", v, sent[v], r);
                CHECK(0);
            }
        }
    }
    /* Each producer's values are: sent, then at most one refused (the send that found
     * the channel closed ends it), then never attempted. So every producer that did not
     * send all its values was refused exactly once. */
    long unfinished = 0;
    for (int p = 0; p < PRODUCERS; p++) {
        const unsigned char *s = &sent[p * PER_PRODUCER];
        int j = 0;
        while (j < PER_PRODUCER && s[j] == SENT_OK)
            j++;
        if (j < PER_PRODUCER) {
            unfinished++;
            CHECK_EQ(s[j], SENT_EPIPE);
            for (j++; j < PER_PRODUCER; j++)
                CHECK_EQ(s[j], 0);
        }
    }
    CHECK_EQ(nrefused, unfinished);
    printf("  cap %zu %s close@%dms: %ld sent, %ld refused\n", cap,
           use_select ? "select" : "plain ", close_after_ms, nsent, nrefused);
    CHECK_OK(gmp_chan_release(sc.c[0]));
    if (sc.c[1])
        CHECK_OK(gmp_chan_release(sc.c[1]));
}

/* Makes membarrier(2) fail with EPERM in this thread and every thread it starts later
 * (the runtime's Ms start on the first gmp call). False where the filter is not written
 * for this architecture. */
static int refuse_membarrier(void)
{
#if defined(__x86_64__)
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_membarrier, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = (unsigned short)(sizeof f / sizeof f[0]), .filter = f};
    CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0);
    CHECK(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0);
    CHECK(syscall(__NR_membarrier, 1 << 3, 0, 0) == -1 && errno == EPERM);
    return 1;
#else
    return 0;
#endif
}

int main(void)
{
    const char *refuse = getenv("CHAN_STRESS_REFUSE_MEMBARRIER");
    if (refuse && refuse[0] == '1')
        printf("membarrier refused: %s\n", refuse_membarrier() ? "yes" : "not on this architecture");
    unsigned seed = (unsigned)gmp_now();
    printf("seed %u\n", seed);
    srand(seed);
    static const int procs[] = {1, 2, 4};
    for (int r = 0; r < 3; r++) {
        CHECK_OK(gmp_maxprocs(procs[r]));
        CHECK_EQ(gmp_maxprocs(0), procs[r]);
        printf("GOMAXPROCS %d\n", procs[r]);
        for (int use_select = 0; use_select <= 1; use_select++) {
            run(0, use_select, 1 + rand() % 40);
            run(1, use_select, 1 + rand() % 40);
            run(16, use_select, 1 + rand() % 40);
        }
    }
    printf("chan_stress: ok\n");
    return 0;
}
