/*
 * lazy_stacks.c -- a goroutine spawned by a goroutine gets its stack when it first runs,
 * and gmp_go still reports running out of memory.
 *
 * `lazy_stacks` (no argument), at GOMAXPROCS=1: a root goroutine runs a tree of
 * goroutines in which each spawns 10 children and sums what they send back (skynet: 5
 * levels, 111,111 goroutines). Tens of thousands are queued at once while only a few
 * thousand have started (a parent keeps its stack while it waits for its children).
 * Checks: the sum; the page faults taken while the tree ran (getrusage's minor faults):
 * the first time, fewer than 1.5 per goroutine started and not ended at the peak, plus
 * 1,000 (the stacks the tree needs, and the runtime's records for the queued goroutines);
 * the second time, fewer than half that number plus 500 (the dead goroutines kept those
 * stacks). Stacks given at spawn time went to queued goroutines, which left the starting
 * ones without a dead goroutine's stack: that library took 5,400 and 2,500 faults here
 * with ~1,300 goroutines started and not ended at the peak.
 *
 * `lazy_stacks nomem`, at GOMAXPROCS=1: with the address space limited (RLIMIT_AS) to
 * what the process maps plus 64 MiB, a root goroutine spawns goroutines that wait on a
 * channel until gmp_go fails. Checks: it fails with -ENOMEM (the promise of a stack could
 * not be kept, so the spawn is refused, not the start), after at least 16 spawns; every
 * goroutine it did spawn runs to its end once the channel is closed; and spawning works
 * again afterwards (the dead goroutines' stacks are reused).
 */
#include "check.h"

#include <errno.h>
#include <gmp-sched/gmp.h>
#include <stdatomic.h>
#include <string.h>

#define DIV 10
#define LEAVES 100000L

typedef struct node {
    gmp_chan *c; /* where to send the sum; the node owns one reference */
    long num, size;
} node;

static atomic_long live, maxlive;

static void tree(void *arg)
{
    node me = *(const node *)arg; /* the parent's copy lives until it has our sum */
    long now = atomic_fetch_add(&live, 1) + 1;
    long seen = atomic_load(&maxlive);
    while (now > seen && !atomic_compare_exchange_weak(&maxlive, &seen, now))
        ;
    long sum = 0;
    if (me.size == 1) {
        sum = me.num;
    } else {
        gmp_chan *rc;
        CHECK_OK(gmp_chan_make(&rc, sizeof(long), DIV));
        node kids[DIV];
        long sub = me.size / DIV;
        for (long i = 0; i < DIV; i++) {
            kids[i] = (node){.c = rc, .num = me.num + i * sub, .size = sub};
            CHECK_OK(gmp_chan_retain(rc));
            CHECK(gmp_go(tree, &kids[i]) > 0);
        }
        for (long i = 0; i < DIV; i++) {
            long v;
            CHECK_OK(gmp_chan_recv(rc, &v));
            sum += v;
        }
        CHECK_OK(gmp_chan_release(rc));
    }
    atomic_fetch_sub(&live, 1);
    CHECK_OK(gmp_chan_send(me.c, &sum));
    CHECK_OK(gmp_chan_release(me.c));
}

static long minor_faults(void)
{
    struct rusage ru;
    CHECK_EQ(getrusage(RUSAGE_SELF, &ru), 0);
    return ru.ru_minflt;
}

struct root {
    long sum, faults;
    gmp_wg done;
};

static void tree_root(void *arg)
{
    struct root *r = arg;
    gmp_chan *c;
    CHECK_OK(gmp_chan_make(&c, sizeof(long), 1));
    node top = {.c = c, .num = 0, .size = LEAVES};
    CHECK_OK(gmp_chan_retain(c));
    long f0 = minor_faults();
    CHECK(gmp_go(tree, &top) > 0);
    CHECK_OK(gmp_chan_recv(c, &r->sum));
    r->faults = minor_faults() - f0;
    CHECK_OK(gmp_chan_release(c));
    CHECK_OK(gmp_wg_done(&r->done));
}

static int run_tree(void)
{
    CHECK_OK(gmp_maxprocs(1));
    /* Warm up: the runtime, its threads, the first stacks and channel allocations. */
    for (int round = 0; round < 2; round++) {
        struct root r = {0, 0, GMP_WG_INIT};
        atomic_store(&maxlive, 0);
        CHECK_OK(gmp_wg_add(&r.done, 1));
        CHECK(gmp_go(tree_root, &r) > 0);
        CHECK_OK(gmp_wg_wait(&r.done));
        CHECK_EQ(r.sum, LEAVES * (LEAVES - 1) / 2);
        long peak = atomic_load(&maxlive);
        printf("lazy_stacks: round %d: %ld goroutines started and not ended at the peak, "
               "%ld page faults\n",
               round, peak, r.faults);
        CHECK(peak > 0);
        if (round == 0)
            CHECK(r.faults < peak * 3 / 2 + 1000);
        else
            CHECK(r.faults < peak / 2 + 500);
    }
    return 0;
}

static gmp_chan *gate;
static atomic_long ran;

static void waiter(void *arg)
{
    long v;
    CHECK_EQ(gmp_chan_recv(gate, &v), -EPIPE); /* closed */
    atomic_fetch_add(&ran, 1);
    CHECK_OK(gmp_wg_done(arg));
}

struct nomem_state {
    long spawned;
    int64_t failure;
    gmp_wg all, done;
};

static void nomem_root(void *arg)
{
    struct nomem_state *s = arg;
    struct rlimit old = limit_address_space((size_t)64 << 20);
    for (;;) {
        CHECK_OK(gmp_wg_add(&s->all, 1));
        int64_t id = gmp_go(waiter, &s->all);
        if (id <= 0) {
            s->failure = id;
            CHECK_OK(gmp_wg_add(&s->all, -1));
            break;
        }
        s->spawned++;
        CHECK(s->spawned < 100000); /* 64 MiB hold ~200 stacks with their guards */
    }
    CHECK_OK(gmp_chan_close(gate));
    CHECK_OK(gmp_wg_wait(&s->all));
    /* The dead goroutines hold their stacks: spawning works again, limit and all. */
    for (int i = 0; i < 100; i++) {
        CHECK_OK(gmp_wg_add(&s->all, 1));
        CHECK(gmp_go(waiter, &s->all) > 0);
        CHECK_OK(gmp_wg_wait(&s->all));
    }
    CHECK_EQ(setrlimit(RLIMIT_AS, &old), 0);
    CHECK_OK(gmp_wg_done(&s->done));
}

static int nomem(void)
{
    CHECK_OK(gmp_maxprocs(1));
    CHECK_OK(gmp_chan_make(&gate, sizeof(long), 0));
    struct nomem_state s = {0, 0, GMP_WG_INIT, GMP_WG_INIT};
    CHECK_OK(gmp_wg_add(&s.done, 1));
    CHECK(gmp_go(nomem_root, &s) > 0);
    CHECK_OK(gmp_wg_wait(&s.done));
    printf("lazy_stacks nomem: %ld goroutines spawned, then gmp_go = %lld\n", s.spawned,
           (long long)s.failure);
    CHECK_EQ(s.failure, -ENOMEM);
    CHECK(s.spawned >= 16);
    CHECK_EQ(atomic_load(&ran), s.spawned + 100);
    CHECK_OK(gmp_chan_release(gate));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "nomem") == 0)
        return nomem();
    CHECK_EQ(argc, 1);
    return run_tree();
}
