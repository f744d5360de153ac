/*
 * torture: a seeded random mix of every feature of the runtime at once, for a bounded
 * time, with conservation checks on everything that can be counted and a watchdog that
 * fails the run when nothing makes progress.
 *
 * Usage: torture [SEED [MILLISECONDS [GOMAXPROCS [FEATURES]]]]
 * or the environment: TORTURE_SEED, TORTURE_MS (default 3000), TORTURE_PROCS (default:
 * leave GOMAXPROCS as GMP_MAXPROCS set it), TORTURE_FEATURES (default "all"),
 * TORTURE_STALL_MS (default 2000). FEATURES is a number (bit mask, 0x.. allowed) or a
 * comma-separated list of the names below, "all", and "-name" to remove one, e.g.
 * "all,-lock,-maxprocs". The first line printed names the seed and the features, so that
 * a failing run can be repeated exactly (the interleaving differs, the choices do not).
 *
 * Actors (each with its own xorshift generator seeded from the seed and its id):
 *  - 8 worker goroutines, each looping over random actions until the stop flag;
 *  - 2 foreign pthreads doing the same (feature "foreign"), except what needs a goroutine;
 *  - short-lived children the workers spawn (feature "spawn"), some with GMP_GO_PINNED
 *    ("pinned": their gettid() must never change), some with a small stack ("stack",
 *    which also switches the default stack size between 256 and 128 KiB now and then,
 *    while goroutines promised a stack of the other size wait to start), some with
 *    GMP_GO_LOCKED (with "lock": locked from their start, their gettid() must not change
 *    until they unlock at their end; one in five ends locked, taking its thread along);
 *    a worker waits for its children on a WaitGroup of its own ("wg": every child must
 *    have checked in when the wait returns), or leaves them to a global one;
 *  - a source and a sink goroutine per channel (features "chan" or "select"), so that a
 *    blocking send or receive without timeout always has a partner; with "pingpong" they
 *    run back to back, without "pingpong" they yield after every operation;
 *  - with "quiet", one 100 ms epoch in three (chosen by the seed) is quiet: workers and
 *    pumps mostly nap 0.2-3 ms on a timer (sometimes locked to their thread), so that
 *    processors go idle and timers are run by idle threads.
 * Actions: spawn, yield, send / receive (plain, try, with timeout: "timeout"), select over
 * 1-4 cases (no wait, no limit, or a timeout), mutex and rwmutex critical sections,
 * take and return a token of a pool guarded by a cond ("cond"), gmp_once_do on a
 * moving frontier of once objects, gmp_sleep, gmp_blocking (nanosleep, or a read of a
 * pipe that has data) and gmp_syscall (nanosleep), a mutex unlocked from inside gmp_blocking ("blkunlock"), a
 * gmp_lock_os_thread section (nested sometimes) doing yields, channel operations, sleeps
 * and blocking calls with gettid() checked after each ("lock"; pinned goroutines, which
 * must not wait for others while locked, make no channel operations there and only the
 * blocking calls that take no fd's turn lock), gmp_maxprocs(1..4)
 * at most every 2-20 ms ("maxprocs"), and the netpoller ("net"): a message over a fresh
 * registered socketpair with a deadline, a receive that must time out (not early), a
 * token through one registered pipe that every actor reads concurrently, and a close of
 * an fd a goroutine is parked on (it must wake with -EBADF); CPU-bound stretches of
 * 0.1-5 ms that call nothing the runtime could preempt them at ("spin": only the
 * asynchronous preemption signal stops them); and the netpoller's operations through plain
 * libc ("libc": read, write, poll with a timeout, nanosleep, a waitpid that fails with
 * ECHILD (a wait for init, a hand-off call made on a helper thread when goroutines are bound to the
 * caller's thread), getaddrinfo of localhost and of a numeric host (the runtime's resolver
 * on a goroutine), a posix_spawn'ed child writing into a pipe a goroutine reads and
 * reaped by waitpid, an fd number freed by stdio's fclose (a close the runtime does not
 * see) and given to an eventfd whose blocking read must wait for its count, close of an
 * fd a goroutine is parked in read on (plain, or inside gmp_blocking, where a reader
 * bound to the closer's thread makes the close itself), a write(2) or sendfile(2) of
 * 256 KiB to a pipe whose reader goroutine is parked in read(2): these park goroutines through the
 * interposer; the goroutine
 * must be on the same thread after each call); and scopes ("scope": a deadline or a
 * cancel by a goroutine of the scope ends a receive nobody answers, locks of a held
 * mutex and rwmutex (their words back at 0 once main unlocks them), a long gmp_sleep and,
 * with "libc", a read and a poll of an empty socket, each with the scope's error).
 *
 * Checks:
 *  - channels: every element carries (producer id << 32 | sequence) and a hash of it;
 *    the receiver checks the hash; per channel, the count, sum and hash-sum of the
 *    elements whose send succeeded equal those received (the buffers are drained after
 *    the close): a lost, duplicated or corrupted element fails. -EPIPE only after the
 *    close; a timed-out operation waited at least its timeout;
 *  - mutex / rwmutex: a counter of holders inside the section (writers alone, readers
 *    with no writer), and a counter updated by load + store across a yield inside the
 *    section equals the number of sections;
 *  - cond: the pool never holds more than its tokens and holds all of them at the end;
 *  - once: every function ran exactly once for every once object used, none for the
 *    others, and its effect is visible when gmp_once_do returns;
 *  - gmp_sleep waited at least what it was asked; locked and pinned goroutines stay on
 *    their thread; gmp_lock_os_thread from a foreign thread returns -EPERM;
 *  - pthread ("pthread"): a pthread mutex held across a CPU-bound stretch or a hooked
 *    nanosleep protects a counter updated by load + store (asynchronous preemption stops
 *    holders inside; waiters block in a futex the hooks do not see); lines through stdio
 *    on a fresh pipe or socket pair arrive whole, with no EAGAIN;
 *  - signal ("signal"): SIGUSR1, relayed to a channel (gmp_signal_notify), raised on the
 *    actor's own thread (raise: no other thread's call is interrupted) and the channel
 *    drained without waiting: never more relayed than raised, and at least one relayed
 *    by the end when any was raised;
 *  - sigwait ("sigwait"): sigwait, sigwaitinfo or sigtimedwait for SIGRTMIN+1, which
 *    the actor's thread blocks and a plain thread sends it 0-2 ms later (a wait no hook
 *    sees): the wait returns that signal (never EINTR), on the same thread, and the
 *    signal is never delivered to its handler;
 *  - metrics ("metrics"): gmp_metrics read meanwhile; counters only grow and a
 *    histogram's buckets add up to its count; the Prometheus text is written whole; the
 *    stack high-water marks (gmp_stack_usage) are whole pages within their stacks,
 *    deepest first, and count no more goroutines than gmp_stats has measured; a label
 *    set on the actor reads back;
 *  - every enabled action ran at least once (runs of 1 s or more); every goroutine ends
 *    (gmp_num_goroutine() drops to 0).
 * Watchdog: a plain pthread samples a progress counter (every completed action of a
 * worker, child or foreign thread; sources and sinks do not count). If it does not move for
 * TORTURE_STALL_MS, it prints "torture: no progress for ...", the seed, gmp_stats, the
 * run queue lengths, what main and each actor (children too, up to 256) are doing and
 * for how long, and aborts. Run with
 * GMP_DEBUG=schedtrace=500 to have the scheduler's own trace on stderr as well. The suite
 * and scripts/torture.sh add stacktrim=20: sysmon trims the stack caches every 20 ms
 * instead of every second, so that trims (stacks taken from dead goroutines and released)
 * happen throughout the run.
 */
#include "check.h"
#include "rng.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/wait.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include <gmp-sched/gmp.h>

/* The smallest stack a child gets: GMP_MIN_STACK, or twice that under AddressSanitizer,
 * whose redzones make every frame (the runtime's unoptimised ones in a debug build
 * included) several times larger: there the deepest of the actions' paths pass 16 KiB
 * (check_stack_marks saw a 16 KiB child's mark at 20 KiB, and the guard page hit). */
#if defined(__SANITIZE_ADDRESS__)
#define SMALL_STACK (2 * GMP_MIN_STACK)
#else
#define SMALL_STACK GMP_MIN_STACK
#endif

#define US 1000LL
#define MS 1000000LL

/* ---- features ---- */

enum {
    FT_SPAWN,
    FT_PINNED,
    FT_STACK,
    FT_WG,
    FT_YIELD,
    FT_CHAN,
    FT_TIMEOUT,
    FT_SELECT,
    FT_MUTEX,
    FT_RWMUTEX,
    FT_COND,
    FT_ONCE,
    FT_SLEEP,
    FT_BLOCKING,
    FT_BLKUNLOCK,
    FT_LOCK,
    FT_MAXPROCS,
    FT_FOREIGN,
    FT_PINGPONG,
    FT_QUIET,
    FT_NET,
    FT_SPIN,
    FT_LIBC,
    FT_PTHREAD,
    FT_SIGNAL,
    FT_METRICS,
    FT_SCOPE,
    FT_SIGWAIT,
    NFEATURES
};

static const char *const feature_names[NFEATURES] = {
    "spawn", "pinned", "stack", "wg", "yield", "chan", "timeout",
    "select", "mutex", "rwmutex", "cond", "once", "sleep", "blocking",
    "blkunlock", "lock", "maxprocs", "foreign", "pingpong", "quiet", "net", "spin",
    "libc", "pthread", "signal", "metrics", "scope", "sigwait",
};

static unsigned features;

static int on(int f)
{
    return (features >> f) & 1u;
}

/* ---- actions ---- */

enum {
    A_SPAWN,
    A_YIELD,
    A_SEND,
    A_RECV,
    A_SELECT,
    A_MUTEX,
    A_RWMUTEX,
    A_COND,
    A_ONCE,
    A_SLEEP,
    A_BLOCKING,
    A_BLKUNLOCK,
    A_LOCK,
    A_MAXPROCS,
    A_NET,
    A_SPIN,
    A_LIBC,
    A_PTHREAD,
    A_SIGNAL,
    A_METRICS,
    A_SCOPE,
    A_SIGWAIT,
    NACTIONS
};

static const char *const action_names[NACTIONS] = {
    "spawn", "yield", "send", "recv", "select", "mutex", "rwmutex",
    "cond", "once", "sleep", "blocking", "blkunlock", "lock", "maxprocs", "net", "spin",
    "libc", "pthread", "signal", "metrics", "scope", "sigwait",
};

/* The feature that enables each action. */
static const int action_feature[NACTIONS] = {
    FT_SPAWN, FT_YIELD, FT_CHAN, FT_CHAN, FT_SELECT, FT_MUTEX, FT_RWMUTEX,
    FT_COND, FT_ONCE, FT_SLEEP, FT_BLOCKING, FT_BLKUNLOCK, FT_LOCK, FT_MAXPROCS, FT_NET, FT_SPIN,
    FT_LIBC, FT_PTHREAD, FT_SIGNAL, FT_METRICS, FT_SCOPE, FT_SIGWAIT,
};

static int enabled_actions[NACTIONS];
static int nenabled;
static atomic_ulong action_count[NACTIONS];

/* ---- run state ---- */

static unsigned long long seed;
static long duration_ms = 3000;
static int procs_arg;
static long stall_ms = 2000;

static atomic_int stop;          /* set by main when the time is up */
static atomic_int closing;       /* set by main just before it closes the channels */
static atomic_int finished;      /* set by main when every check passed */
static atomic_ulong progress;    /* completed actions (watchdog) */
static atomic_ulong naps;        /* quiet phases */
static const char *_Atomic main_phase = "running";
static double t_start;

#define NWORKERS 8
#define NFOREIGN 2
#define NCHANS 4
#define NPUMPS (2 * NCHANS)
#define NCHILDSLOTS 256  /* children are tracked while this many slots last */
#define CHILD0 (NWORKERS + NFOREIGN + NPUMPS)
#define NSLOTS (CHILD0 + NCHILDSLOTS)

/* What each worker, foreign thread and pump is doing, for the watchdog's report: an
 * action, or one of these two. */
enum { A_NAP = NACTIONS, A_PUMP, NSLOT_ACTIONS };
static atomic_int slot_action[NSLOTS];
static atomic_int slot_inside[NSLOTS];
static atomic_int slot_locked[NSLOTS];
static atomic_llong slot_since[NSLOTS];
static atomic_ulong slot_iters[NSLOTS];
static atomic_int slot_taken[NSLOTS];   /* child slots */
static atomic_int slot_pinned[NSLOTS];
static atomic_int slot_fd[NSLOTS];      /* fd + 1 a libc child-process wait reads */
static atomic_int slot_child[NSLOTS];   /* that child's pid */

static atomic_uint next_pid = 1;

static gmp_wg workers_wg = GMP_WG_INIT;
static gmp_wg children_wg = GMP_WG_INIT; /* detached children */
static gmp_wg pumps_wg = GMP_WG_INIT;    /* sources and sinks */

static atomic_ulong children_spawned, children_done;

/* ---- random numbers (rng.h): each actor's state from the seed ---- */

static uint64_t rng_seed(uint64_t id)
{
    uint64_t x = splitmix(seed ^ splitmix(id));
    return x ? x : 1;
}

static long gettid_(void)
{
    return (long)syscall(SYS_gettid);
}

/* Whoever performs actions: a worker, a child, a foreign thread. */
struct actor {
    uint64_t rng;
    uint32_t pid;      /* producer id carried by what it sends */
    uint32_t seq;      /* next sequence number */
    int slot;          /* index in slot_*, or -1 */
    int goroutine;     /* 0 on a foreign thread */
    int pinned;        /* GMP_GO_PINNED: tid must never change */
    int locked;        /* GMP_GO_LOCKED: tid must not change until the final unlock */
    int small_stack;   /* started with SMALL_STACK */
    long tid;          /* first tid (pinned) */
    int depth;         /* 0 worker, 1 child, 2 grandchild */
    uint64_t created;  /* the last /sched/goroutines-created:goroutines it read */
    uint64_t timed;    /* the last /sched/latencies:seconds count it read */
};

static void actor_init(struct actor *a, int slot, int goroutine, int depth)
{
    memset(a, 0, sizeof *a);
    a->pid = atomic_fetch_add(&next_pid, 1);
    a->rng = rng_seed(a->pid);
    a->slot = slot;
    a->goroutine = goroutine;
    a->depth = depth;
    a->tid = gettid_();
}

static void slot_enter(const struct actor *a, int act)
{
    if (a->slot < 0)
        return;
    atomic_store(&slot_action[a->slot], act);
    atomic_store(&slot_since[a->slot], gmp_now());
    atomic_store(&slot_inside[a->slot], 1);
}

static void slot_leave(const struct actor *a)
{
    if (a->slot < 0)
        return;
    atomic_store(&slot_inside[a->slot], 0);
    atomic_store(&slot_since[a->slot], gmp_now());
    atomic_fetch_add(&slot_iters[a->slot], 1);
}

static void check_pinned(const struct actor *a)
{
    if (a->pinned || a->locked)
        CHECK_EQ(gettid_(), a->tid);
}

/* ---- channels ---- */

static const size_t chan_caps[NCHANS] = {0, 0, 1, 16};
static gmp_chan *chans[NCHANS];

struct elem {
    uint64_t v;
    uint64_t h;
};

struct tally {
    atomic_ullong n, sum, hsum;
};

static struct tally sent[NCHANS], recvd[NCHANS];

static struct elem make_elem(struct actor *a)
{
    struct elem e;
    e.v = (uint64_t)a->pid << 32 | a->seq++;
    e.h = splitmix(e.v);
    return e;
}

static void tally_add(struct tally *t, const struct elem *e)
{
    atomic_fetch_add(&t->n, 1);
    atomic_fetch_add(&t->sum, e->v);
    atomic_fetch_add(&t->hsum, e->h);
}

static void on_sent(int c, const struct elem *e)
{
    tally_add(&sent[c], e);
}

static void on_recvd(int c, const struct elem *e)
{
    if (e->h != splitmix(e->v)) {
        fprintf(stderr, "torture: chan %d: corrupt element v=%#llx h=%#llx (seed %llu)\n",
                c, (unsigned long long)e->v, (unsigned long long)e->h, seed);
        CHECK(e->h == splitmix(e->v));
    }
    CHECK((e->v >> 32) != 0 && (e->v >> 32) < atomic_load(&next_pid));
    tally_add(&recvd[c], e);
}

/* -EPIPE is only allowed once main began closing the channels. */
static void check_pipe(int r)
{
    if (r == -EPIPE)
        CHECK(atomic_load(&closing));
}

/* A timed-out operation started at t0 must have waited its timeout. */
static void check_waited(int64_t t0, int64_t timeout)
{
    int64_t waited = gmp_now() - t0;
    if (waited < timeout) {
        fprintf(stderr, "torture: timeout of %lld ns returned after %lld ns (seed %llu)\n",
                (long long)timeout, (long long)waited, seed);
        CHECK(waited >= timeout);
    }
}

/* A timeout: 0 (no wait) one time in four, 1-20 us (racing the operation) one time in
 * four, else up to 1 ms. */
static int64_t rnd_timeout(struct actor *a)
{
    switch (rnd_below(&a->rng, 4)) {
    case 0:
        return 0;
    case 1:
        return 1 + (int64_t)rnd_below(&a->rng, 20) * US;
    default:
        return 1 + (int64_t)rnd_below(&a->rng, 1000) * US;
    }
}

static void do_send(struct actor *a)
{
    int c = (int)rnd_below(&a->rng, NCHANS);
    struct elem e = make_elem(a);
    int mode = (int)rnd_below(&a->rng, on(FT_TIMEOUT) ? 3 : 2);
    int r;
    if (mode == 0) {
        r = gmp_chan_send(chans[c], &e);
    } else if (mode == 1) {
        r = gmp_chan_try_send(chans[c], &e);
        CHECK(r == 0 || r == -EAGAIN || r == -EPIPE);
    } else {
        int64_t to = rnd_timeout(a);
        int64_t t0 = gmp_now();
        r = gmp_chan_send_timeout(chans[c], &e, to);
        if (r == -ETIMEDOUT)
            check_waited(t0, to);
        CHECK(r == 0 || r == -ETIMEDOUT || r == -EPIPE);
    }
    check_pipe(r);
    if (r == 0)
        on_sent(c, &e);
    else
        CHECK(r == -EAGAIN || r == -ETIMEDOUT || r == -EPIPE);
}

static void do_recv(struct actor *a)
{
    int c = (int)rnd_below(&a->rng, NCHANS);
    struct elem e;
    int mode = (int)rnd_below(&a->rng, on(FT_TIMEOUT) ? 3 : 2);
    int r;
    if (mode == 0) {
        r = gmp_chan_recv(chans[c], &e);
    } else if (mode == 1) {
        r = gmp_chan_try_recv(chans[c], &e);
    } else {
        int64_t to = rnd_timeout(a);
        int64_t t0 = gmp_now();
        r = gmp_chan_recv_timeout(chans[c], &e, to);
        if (r == -ETIMEDOUT)
            check_waited(t0, to);
    }
    check_pipe(r);
    if (r == 0)
        on_recvd(c, &e);
    else
        CHECK(r == -EAGAIN || r == -ETIMEDOUT || r == -EPIPE);
}

static void do_select(struct actor *a)
{
    gmp_select_case cs[4];
    struct elem bufs[4];
    int chan_of[4];
    int n = 1 + (int)rnd_below(&a->rng, 4);
    int live = 0;
    for (int i = 0; i < n; i++) {
        int c = (int)rnd_below(&a->rng, NCHANS);
        int send = (int)rnd_below(&a->rng, 2);
        /* One case in eight is disabled (a NULL channel), but never all of them. */
        int null = rnd_below(&a->rng, 8) == 0 && !(i == n - 1 && live == 0);
        chan_of[i] = c;
        if (send)
            bufs[i] = make_elem(a);
        cs[i].chan = null ? NULL : chans[c];
        cs[i].op = send ? GMP_SEND : GMP_RECV;
        cs[i].buf = &bufs[i];
        cs[i].status = 12345;
        live += !null;
    }
    int64_t to;
    int mode = (int)rnd_below(&a->rng, on(FT_TIMEOUT) ? 3 : 2);
    to = mode == 0 ? -1 : mode == 1 ? 0 : rnd_timeout(a);
    int64_t t0 = gmp_now();
    int k = gmp_select(cs, (size_t)n, to);
    if (k == -ETIMEDOUT) {
        CHECK(to >= 0);
        check_waited(t0, to);
    } else {
        CHECK(k >= 0 && k < n);
        CHECK(cs[k].chan != NULL);
        check_pipe(cs[k].status);
        if (cs[k].status == 0) {
            if (cs[k].op == GMP_SEND)
                on_sent(chan_of[k], &bufs[k]);
            else
                on_recvd(chan_of[k], &bufs[k]);
        } else {
            CHECK_EQ(cs[k].status, -EPIPE);
        }
    }
    /* Only the case that fired has a status. */
    for (int i = 0; i < n; i++)
        if (i != k)
            CHECK_EQ(cs[i].status, 12345);
}

/* ---- sources and sinks: partners for blocking operations ---- */

static int quiet_now(void);
static void nap(struct actor *a);

struct pump {
    int chan;
    int source;
};

static struct pump pumps[NPUMPS];

static void pump_main(void *arg)
{
    struct pump *p = arg;
    struct actor a;
    actor_init(&a, NWORKERS + NFOREIGN + (int)(p - pumps), 1, 0);
    for (;;) {
        struct elem e;
        int r;
        slot_enter(&a, A_PUMP);
        if (p->source) {
            e = make_elem(&a);
            r = gmp_chan_send(chans[p->chan], &e);
            if (r == 0)
                on_sent(p->chan, &e);
        } else {
            r = gmp_chan_recv(chans[p->chan], &e);
            if (r == 0)
                on_recvd(p->chan, &e);
        }
        slot_leave(&a);
        if (r == -EPIPE)
            break;
        CHECK_OK(r);
        if (quiet_now())
            nap(&a);
        else if (!on(FT_PINGPONG))
            gmp_yield();
    }
    CHECK(atomic_load(&closing));
    CHECK_OK(gmp_wg_done(&pumps_wg));
}

/* ---- mutex, rwmutex ---- */

static gmp_mutex mu = GMP_MUTEX_INIT;
static atomic_int mu_inside;
static atomic_long mu_counter;   /* load + store under the mutex */
static atomic_long mu_sections;

static void pause_inside(struct actor *a)
{
    if (rnd_below(&a->rng, 2) == 0)
        gmp_yield();
}

static void do_mutex(struct actor *a)
{
    if (rnd_below(&a->rng, 4) == 0) {
        int r = gmp_mutex_trylock(&mu);
        if (r == -EBUSY)
            return;
        CHECK_EQ(r, 0);
    } else {
        CHECK_OK(gmp_mutex_lock(&mu));
    }
    CHECK_EQ(atomic_fetch_add(&mu_inside, 1), 0);
    long c = atomic_load_explicit(&mu_counter, memory_order_relaxed);
    pause_inside(a);
    atomic_store_explicit(&mu_counter, c + 1, memory_order_relaxed);
    CHECK_EQ(atomic_fetch_sub(&mu_inside, 1), 1);
    CHECK_OK(gmp_mutex_unlock(&mu));
    atomic_fetch_add(&mu_sections, 1);
}

static gmp_rwmutex rw = GMP_RWMUTEX_INIT;
static atomic_int rw_readers, rw_writers;
static atomic_long rw_counter, rw_wsections;

static void do_rwmutex(struct actor *a)
{
    if (rnd_below(&a->rng, 3) == 0) {
        CHECK_OK(gmp_rwmutex_lock(&rw));
        CHECK_EQ(atomic_fetch_add(&rw_writers, 1), 0);
        CHECK_EQ(atomic_load(&rw_readers), 0);
        long c = atomic_load_explicit(&rw_counter, memory_order_relaxed);
        pause_inside(a);
        atomic_store_explicit(&rw_counter, c + 1, memory_order_relaxed);
        CHECK_EQ(atomic_load(&rw_readers), 0);
        CHECK_EQ(atomic_fetch_sub(&rw_writers, 1), 1);
        CHECK_OK(gmp_rwmutex_unlock(&rw));
        atomic_fetch_add(&rw_wsections, 1);
    } else {
        CHECK_OK(gmp_rwmutex_rlock(&rw));
        atomic_fetch_add(&rw_readers, 1);
        CHECK_EQ(atomic_load(&rw_writers), 0);
        pause_inside(a);
        CHECK_EQ(atomic_load(&rw_writers), 0);
        atomic_fetch_sub(&rw_readers, 1);
        CHECK_OK(gmp_rwmutex_runlock(&rw));
    }
}

/* ---- cond: a pool of tokens ---- */

#define NTOKENS 3
static gmp_mutex pool_mu = GMP_MUTEX_INIT;
static gmp_cond pool_cond = GMP_COND_INIT;
static int pool_tokens = NTOKENS;   /* under pool_mu */
static atomic_int tokens_out;

static void do_cond(struct actor *a)
{
    int got = 0;
    CHECK_OK(gmp_mutex_lock(&pool_mu));
    while (pool_tokens == 0 && !atomic_load(&stop))
        CHECK_OK(gmp_cond_wait(&pool_cond, &pool_mu));
    if (pool_tokens > 0) {
        pool_tokens--;
        got = 1;
    }
    CHECK_OK(gmp_mutex_unlock(&pool_mu));
    if (!got)
        return;
    CHECK(atomic_fetch_add(&tokens_out, 1) < NTOKENS);
    pause_inside(a);
    atomic_fetch_sub(&tokens_out, 1);
    CHECK_OK(gmp_mutex_lock(&pool_mu));
    pool_tokens++;
    CHECK(pool_tokens <= NTOKENS);
    int bcast = rnd_below(&a->rng, 4) == 0;
    int after = (int)rnd_below(&a->rng, 2);
    if (!after)
        CHECK_OK(bcast ? gmp_cond_broadcast(&pool_cond) : gmp_cond_signal(&pool_cond));
    CHECK_OK(gmp_mutex_unlock(&pool_mu));
    if (after)
        CHECK_OK(bcast ? gmp_cond_broadcast(&pool_cond) : gmp_cond_signal(&pool_cond));
}

/* ---- once: callers crowd a moving frontier of once objects ---- */

#define NONCE 65536
static gmp_once onces[NONCE];
static atomic_int once_calls[NONCE];
static atomic_char once_used[NONCE];
static atomic_int once_front;

static void once_fn(void *arg)
{
    int i = (int)(intptr_t)arg;
    CHECK_EQ(atomic_fetch_add(&once_calls[i], 1), 0);
    if (gmp_goid() != 0 && (splitmix((uint64_t)i) & 1))
        gmp_yield();
    atomic_fetch_add(&once_front, 1);
}

static void do_once(struct actor *a)
{
    int front = atomic_load(&once_front);
    int i = front + (int)rnd_below(&a->rng, 4);
    if (i >= NONCE)
        i = (int)rnd_below(&a->rng, NONCE);
    atomic_store(&once_used[i], 1);
    CHECK_OK(gmp_once_do(&onces[i], once_fn, (void *)(intptr_t)i));
    CHECK_EQ(atomic_load(&once_calls[i]), 1);
}

/* ---- sleep, blocking calls ---- */

static void do_sleep(struct actor *a)
{
    int64_t ns = (int64_t)rnd_below(&a->rng, 500) * US;
    int64_t t0 = gmp_now();
    CHECK_EQ(gmp_sleep(ns), 0);
    check_waited(t0, ns);
}

static int pipefd[2];

static int64_t blk_nanosleep(void *arg)
{
    long ns = *(long *)arg;
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
    return 7;
}

static int64_t blk_pipe(void *arg)
{
    char c;
    (void)arg;
    return read(pipefd[0], &c, 1);
}

/* `own_only`: only calls that wait for nothing but the kernel (a locked pinned goroutine:
 * the pipe's reads and writes take the fd's turn lock, which a goroutine bound to its
 * thread may hold or be handed). */
static void do_blocking(struct actor *a, int own_only)
{
    int kind = own_only ? 0 : (int)rnd_below(&a->rng, 3);
    if (kind == 0) {
        long ns = (long)rnd_below(&a->rng, 300) * 1000;
        if (ns % 2000 == 0) {
            CHECK_EQ(gmp_blocking(blk_nanosleep, &ns), 7);
        } else {
            /* The preemption signal may interrupt it (-EINTR, as in Go): sleep the rest. */
            struct timespec ts = {0, ns};
            long r;
            while ((r = gmp_syscall(SYS_nanosleep, (long)&ts, (long)&ts, 0, 0, 0, 0)) == -EINTR)
                ;
            CHECK_EQ(r, 0);
        }
    } else {
        /* Write first: the pipe always holds at least as many bytes as readers. */
        char c = 'x';
        CHECK_EQ(write(pipefd[1], &c, 1), 1);
        if (kind == 1)
            CHECK_EQ(gmp_blocking(blk_pipe, NULL), 1);
        else
            CHECK_EQ(gmp_read(pipefd[0], &c, 1), 1);
    }
}

static gmp_mutex bmu = GMP_MUTEX_INIT;
static atomic_int bmu_inside;
static atomic_long bmu_sections;

static int64_t blk_unlock(void *arg)
{
    long ns = *(long *)arg;
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
    CHECK_EQ(atomic_fetch_sub(&bmu_inside, 1), 1);
    return gmp_mutex_unlock(&bmu);
}

static void do_blkunlock(struct actor *a)
{
    long ns = (long)rnd_below(&a->rng, 100) * 1000;
    CHECK_OK(gmp_mutex_lock(&bmu));
    CHECK_EQ(atomic_fetch_add(&bmu_inside, 1), 0);
    CHECK_EQ(gmp_blocking(blk_unlock, &ns), 0);
    atomic_fetch_add(&bmu_sections, 1);
}

/* ---- LockOSThread ---- */

static void do_lock(struct actor *a)
{
    if (!a->goroutine) {
        CHECK_EQ(gmp_lock_os_thread(), -EPERM);
        CHECK_EQ(gmp_unlock_os_thread(), -EPERM);
        return;
    }
    int depth = gmp_lock_os_thread();
    CHECK(depth >= 1);
    if (a->slot >= 0)
        atomic_store(&slot_locked[a->slot], 1);
    long tid = gettid_();
    int rounds = 1 + (int)rnd_below(&a->rng, 3);
    for (int i = 0; i < rounds; i++) {
        switch (rnd_below(&a->rng, 6)) {
        case 0:
            gmp_yield();
            break;
        /* A pinned goroutine cannot move off the thread it locks, so the goroutines
         * bound there (pinned, or stopped there for one stop) wait until it unlocks, and it
         * must not wait for them: it makes no channel exchanges while locked, and no
         * interposed pipe call (the fd's turn lock: a sibling pinned there, woken by its
         * unlock, was left runnable behind the locked goroutine parked on the lock). */
        case 1:
            if (on(FT_CHAN) && !a->pinned)
                do_send(a);
            break;
        case 2:
            if (on(FT_CHAN) && !a->pinned)
                do_recv(a);
            break;
        case 3:
            if (on(FT_SLEEP))
                do_sleep(a);
            break;
        case 4:
            if (on(FT_BLOCKING))
                do_blocking(a, a->pinned);
            break;
        default:
            CHECK_EQ(gmp_lock_os_thread(), depth + 1);
            CHECK_EQ(gettid_(), tid);
            gmp_yield();
            CHECK_EQ(gmp_unlock_os_thread(), depth);
            break;
        }
        CHECK_EQ(gettid_(), tid);
    }
    CHECK_EQ(gmp_unlock_os_thread(), depth - 1);
    if (a->slot >= 0)
        atomic_store(&slot_locked[a->slot], 0);
}

/* ---- GOMAXPROCS ---- */

static atomic_llong next_procs_change;

static void do_maxprocs(struct actor *a)
{
    long long now = gmp_now(), due = atomic_load(&next_procs_change);
    if (now < due ||
        !atomic_compare_exchange_strong(&next_procs_change, &due,
                                        now + (2 + rnd_below(&a->rng, 19)) * MS)) {
        /* Not yet: a query. */
        CHECK(gmp_maxprocs(0) >= 1);
        return;
    }
    int n = 1 + (int)rnd_below(&a->rng, 4);
    int prev = gmp_maxprocs(n);
    CHECK(prev >= 1);
}

/* ---- spawning ---- */

struct child {
    int depth;
    int pinned;
    int locked;        /* GMP_GO_LOCKED */
    int end_locked;    /* ... and it ends without unlocking */
    int small_stack;   /* SMALL_STACK */
    atomic_int *checkin;   /* NULL when detached */
    gmp_wg *wg;
};

static void run_action(struct actor *a, int act);

static void child_main(void *arg)
{
    struct child *c = arg;
    struct actor a;
    int slot = -1;
    for (int i = CHILD0; i < NSLOTS && slot < 0; i++)
        if (atomic_exchange(&slot_taken[i], 1) == 0)
            slot = i;
    actor_init(&a, slot, 1, c->depth);
    a.pinned = c->pinned;
    a.locked = c->locked;
    a.small_stack = c->small_stack;
    if (slot >= 0) {
        atomic_store(&slot_action[slot], -1);
        atomic_store(&slot_pinned[slot], a.pinned);
        atomic_store(&slot_iters[slot], 0);
    }
    /* Children of a small stack use some of it. */
    volatile char scratch[2048];
    memset((char *)scratch, (int)(a.pid & 0x7f), sizeof scratch);
    int n = 1 + (int)rnd_below(&a.rng, 4);
    for (int i = 0; i < n; i++) {
        run_action(&a, enabled_actions[rnd_below(&a.rng, (uint32_t)nenabled)]);
        check_pinned(&a);
    }
    CHECK_EQ(scratch[0], (char)(a.pid & 0x7f));
    if (a.locked && !c->end_locked) {
        CHECK_EQ(gmp_unlock_os_thread(), 0);
        a.locked = 0;
    }
    atomic_fetch_add(&children_done, 1);
    if (c->checkin != NULL)
        atomic_fetch_add(c->checkin, 1);
    gmp_wg *wg = c->wg;
    free(c);
    if (slot >= 0)
        atomic_store(&slot_taken[slot], 0);
    CHECK_OK(gmp_wg_done(wg));
}

static void do_spawn(struct actor *a)
{
    if (a->depth >= 2) {
        gmp_yield();
        return;
    }
    int n = 1 + (int)rnd_below(&a->rng, 4);
    /* From the count of children, not the actor's generator: a seed's choices stay what
     * they were before this was added (the seeds the tests use were chosen with them). */
    long nspawned = atomic_load(&children_spawned);
    if (on(FT_STACK) && nspawned % 61 == 7)
        CHECK_OK(gmp_set_default_stack_size((nspawned / 61) % 2 ? 256 * 1024 : 128 * 1024));
    int wait = on(FT_WG) && rnd_below(&a->rng, 4) != 0;
    gmp_wg local = GMP_WG_INIT;
    atomic_int checkin = 0;
    gmp_wg *wg = wait ? &local : &children_wg;
    CHECK_OK(gmp_wg_add(wg, n));
    for (int i = 0; i < n; i++) {
        struct child *c = malloc(sizeof *c);
        CHECK(c != NULL);
        memset(c, 0, sizeof *c);
        c->depth = a->depth + 1;
        c->pinned = on(FT_PINNED) && rnd_below(&a->rng, 3) == 0;
        c->checkin = wait ? &checkin : NULL;
        c->wg = wg;
        gmp_attr attr = {0};
        /* From the count of spawns, as the stack size switch above. */
        long k = atomic_fetch_add(&children_spawned, 1);
        c->locked = on(FT_LOCK) && k % 7 == 3;
        c->end_locked = c->locked && k % 35 == 3;
        attr.flags = (c->pinned ? GMP_GO_PINNED : 0) | (c->locked ? GMP_GO_LOCKED : 0);
        if (on(FT_STACK) && rnd_below(&a->rng, 3) == 0)
            attr.stack_size = rnd_below(&a->rng, 2) ? SMALL_STACK : 64 * 1024;
        c->small_stack = attr.stack_size == SMALL_STACK;
        CHECK_OK(gmp_go_attr(child_main, c, &attr));
    }
    if (wait) {
        CHECK_OK(gmp_wg_wait(&local));
        CHECK_EQ(atomic_load(&checkin), n);
    }
}

/* ---- quiet phases ---- */

/* A channel nobody sends on: a receive with a timeout on it is a timer. */
static gmp_chan *silent;
static int64_t t_start_ns;

/* The run is cut into 100 ms epochs; with "quiet", one in three (chosen by the seed) is
 * quiet: actors mostly nap and the sources and sinks pause, so processors go idle and
 * timers are run by idle threads rather than by busy processors. */
static int quiet_now(void)
{
    if (!on(FT_QUIET))
        return 0;
    uint64_t epoch = (uint64_t)((gmp_now() - t_start_ns) / (100 * MS));
    return splitmix(seed ^ (epoch * 0x9e3779b97f4a7c15ULL)) % 3 == 0;
}

/* Waits 0.2-3 ms on a timer (gmp_sleep, or a receive with a timeout on a silent
 * channel), a blocking call, or not at all, as the features allow; sometimes with the
 * goroutine locked to its thread. */
static void nap(struct actor *a)
{
    int64_t ns = 200 * US + (int64_t)rnd_below(&a->rng, 2800) * US;
    int locked = on(FT_LOCK) && a->goroutine && rnd_below(&a->rng, 2) == 0;
    long tid = 0;
    slot_enter(a, A_NAP);
    if (locked) {
        /* The thread it is locked to when the lock returns (not always the one it called
         * from: a thread with goroutines bound to it is not locked). */
        CHECK_EQ(gmp_lock_os_thread(), a->locked + 1);
        tid = gettid_();
        if (a->slot >= 0)
            atomic_store(&slot_locked[a->slot], 1);
    }
    int64_t t0 = gmp_now();
    if (on(FT_SLEEP) && (!on(FT_TIMEOUT) || rnd_below(&a->rng, 2) == 0)) {
        CHECK_EQ(gmp_sleep(ns), 0);
        check_waited(t0, ns);
    } else if (on(FT_TIMEOUT)) {
        CHECK_EQ(gmp_chan_recv_timeout(silent, NULL, ns), -ETIMEDOUT);
        check_waited(t0, ns);
    } else if (on(FT_BLOCKING)) {
        long l = (long)ns;
        CHECK_EQ(gmp_blocking(blk_nanosleep, &l), 7);
    } else {
        gmp_yield();
    }
    if (locked) {
        CHECK_EQ(gettid_(), tid);
        CHECK_EQ(gmp_unlock_os_thread(), a->locked);
        if (a->slot >= 0)
            atomic_store(&slot_locked[a->slot], 0);
    }
    slot_leave(a);
}

/* ---- net: sockets and pipes through the poller ---- */

static int netpipe[2];            /* registered; shared by every actor (concurrent readers) */
static atomic_long net_closed_wakeups;

/* A goroutine that waits on an fd someone else closes. */
struct closer_box {
    int fd;
    atomic_int entered;
    int64_t result;
    gmp_wg done;
};

static void net_closed_reader(void *arg)
{
    struct closer_box *box = arg;
    char b;
    atomic_store(&box->entered, 1);
    box->result = gmp_recv(box->fd, &b, 1, 0);
    gmp_wg_done(&box->done);
}

static void do_net(struct actor *a)
{
    int kind = (int)rnd_below(&a->rng, a->goroutine ? 4 : 3);
    if (kind == 0) {
        /* A message over a fresh socketpair, with a deadline. */
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        CHECK_OK(gmp_fd_register(sv[0]));
        CHECK_OK(gmp_fd_register(sv[1]));
        char out[64], in[64];
        int n = 1 + (int)rnd_below(&a->rng, sizeof out);
        for (int k = 0; k < n; k++)
            out[k] = (char)(a->seq + (uint32_t)k);
        CHECK_EQ(gmp_send(sv[1], out, (size_t)n, 0), n);
        int got = 0;
        while (got < n) {
            int64_t r = gmp_recv_timeout(sv[0], in + got, (size_t)(n - got), 0, 2000 * MS);
            CHECK_OK(r);
            CHECK(r > 0);
            got += (int)r;
        }
        CHECK_EQ(memcmp(in, out, (size_t)n), 0);
        CHECK_OK(gmp_close(sv[0]));
        CHECK_OK(gmp_close(sv[1]));
    } else if (kind == 1) {
        /* A deadline on an empty socket: -ETIMEDOUT, not before it is due. */
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        CHECK_OK(gmp_fd_register(sv[0]));
        int64_t to = (int64_t)(100 + rnd_below(&a->rng, 1900)) * US, t0 = gmp_now();
        char b;
        CHECK_EQ(gmp_recv_timeout(sv[0], &b, 1, 0, to), -ETIMEDOUT);
        CHECK(gmp_now() - t0 >= to);
        CHECK_OK(gmp_close(sv[0]));
        close(sv[1]);
    } else if (kind == 2) {
        /* The shared pipe: write a token, read a token (the pipe always holds at least as
         * many tokens as there are readers in here), readers served one at a time. */
        char c = 't';
        CHECK_EQ(gmp_write(netpipe[1], &c, 1), 1);
        CHECK_EQ(gmp_read(netpipe[0], &c, 1), 1);
        CHECK_EQ(c, 't');
    } else {
        /* Close while a goroutine waits on the fd: it wakes with -EBADF. */
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        CHECK_OK(gmp_fd_register(sv[0]));
        struct closer_box box = {.fd = sv[0], .result = 1, .done = GMP_WG_INIT};
        CHECK_OK(gmp_wg_add(&box.done, 1));
        CHECK_OK(gmp_go(net_closed_reader, &box));
        while (!atomic_load(&box.entered))
            CHECK_OK(gmp_yield());
        CHECK_OK(gmp_sleep(1 * MS)); /* into the poller (-EBADF either way) */
        CHECK_OK(gmp_close(sv[0]));
        CHECK_OK(gmp_wg_wait(&box.done));
        CHECK_EQ(box.result, -EBADF);
        atomic_fetch_add(&net_closed_wakeups, 1);
        close(sv[1]);
    }
}

/* ---- spin: CPU-bound code that calls nothing (only asynchronous preemption stops it) ---- */

static void do_spin(struct actor *a)
{
    int64_t until = gmp_now() + (int64_t)(100 + rnd_below(&a->rng, 4900)) * US;
    unsigned long x = a->seq;
    /* No call inside the loop but the vDSO clock every 4096 rounds. */
    for (unsigned long i = 0;; i++) {
        x = x * 6364136223846793005UL + 1442695040888963407UL;
        if ((i & 4095) == 0 && gmp_now() >= until)
            break;
    }
    __asm__ volatile("" : : "r"(x));
}

/* Plain libc on a fresh socketpair, no gmp call (the interposer, "libc"). */
struct libc_box {
    int fd;
    atomic_int entered;
    ssize_t result;
    int err;
    gmp_wg done;
};

static void libc_closed_reader(void *arg)
{
    struct libc_box *box = arg;
    char b;
    atomic_store(&box->entered, 1);
    box->result = read(box->fd, &b, 1);
    box->err = errno;
    gmp_wg_done(&box->done);
}

/* For kind 6 of do_libc: reads a pipe to its end; the byte count, or -1 if a byte broke
 * the pattern (byte i == i % 251). */
static void libc_pipe_drainer(void *arg)
{
    struct libc_box *box = arg;
    unsigned char b[4096];
    ssize_t total = 0;
    atomic_store(&box->entered, 1);
    for (;;) {
        ssize_t r = read(box->fd, b, sizeof b);
        CHECK(r >= 0);
        if (r == 0)
            break;
        for (ssize_t k = 0; k < r; k++)
            if (b[k] != (unsigned char)((total + k) % 251))
                total = -1 - r;
        total += r;
    }
    box->result = total;
    gmp_wg_done(&box->done);
}

static int64_t libc_close_blocking(void *arg)
{
    return close((int)(intptr_t)arg) == 0 ? 0 : -errno;
}

/* Plain read, write, poll, nanosleep and close, as an unmodified blocking library makes
 * them: on a goroutine they park it (the interposer) and it resumes on the thread it
 * called from; on a foreign thread they are libc's. */
/* For kind 5 of do_libc: counts an eventfd up by one a moment later. */
static void libc_eventfd_writer(void *arg)
{
    struct libc_box *box = arg;
    CHECK_OK(gmp_sleep((int64_t)(50 + (box->fd & 127)) * US));
    uint64_t one = 1;
    CHECK_EQ(write(box->fd, &one, sizeof one), (ssize_t)sizeof one);
    gmp_wg_done(&box->done);
}

static void do_libc(struct actor *a)
{
    long tid0 = gettid_();
    /* Kind 3 parks a goroutine it starts: goroutines only. */
    static const int goroutine_kinds[] = {0, 1, 2, 3, 4, 5, 6};
    static const int foreign_kinds[] = {0, 1, 2, 4, 5};
    int kind = a->goroutine ? goroutine_kinds[rnd_below(&a->rng, 7)]
                            : foreign_kinds[rnd_below(&a->rng, 5)];
    if (kind == 0) {
        /* A message over a socketpair, read in pieces as it comes. */
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        char out[64], in[64];
        int n = 1 + (int)rnd_below(&a->rng, sizeof out);
        for (int k = 0; k < n; k++)
            out[k] = (char)(a->seq + (uint32_t)k);
        CHECK_EQ(write(sv[1], out, (size_t)n), n);
        int got = 0;
        while (got < n) {
            ssize_t r = read(sv[0], in + got, (size_t)(n - got));
            CHECK(r > 0);
            got += (int)r;
        }
        CHECK_EQ(memcmp(in, out, (size_t)n), 0);
        CHECK_EQ(close(sv[0]), 0);
        CHECK_EQ(close(sv[1]), 0);
    } else if (kind == 1) {
        /* poll on an empty socket times out, not before it is due. */
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        int ms = 1 + (int)rnd_below(&a->rng, 3);
        struct pollfd p = {sv[0], POLLIN, 0};
        int64_t t0 = gmp_now();
        CHECK_EQ(poll(&p, 1, ms), 0);
        CHECK(gmp_now() - t0 >= ms * MS);
        CHECK_EQ(close(sv[0]), 0);
        CHECK_EQ(close(sv[1]), 0);
    } else if (kind == 2) {
        struct timespec ts = {0, (long)(100 + rnd_below(&a->rng, 1900)) * 1000};
        int64_t t0 = gmp_now();
        CHECK_EQ(nanosleep(&ts, NULL), 0);
        CHECK(gmp_now() - t0 >= ts.tv_nsec);
        /* A hand-off call (no children: it fails at once), made on a helper thread when
         * goroutines are bound to this one; the errno is the call's either way. */
        errno = 0;
        CHECK_EQ(waitpid(1, NULL, 0), -1); /* init is nobody's child here */
        CHECK_EQ(errno, ECHILD);
        /* Name resolution (on a goroutine the runtime's resolver, elsewhere libc's):
         * /etc/hosts's localhost and a numeric host, each list freed by libc. Not on
         * the smallest stack: a lookup (libc's too) wants more than 16 KiB, and under
         * ASan the allocator's own slow path alone takes several. */
        if (!a->small_stack) {
            struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
            struct addrinfo *res = NULL;
            CHECK_EQ(getaddrinfo("localhost", "80", &hints, &res), 0);
            CHECK(res != NULL && res->ai_family == AF_INET && res->ai_addrlen == sizeof(struct sockaddr_in));
            CHECK_EQ(((struct sockaddr_in *)res->ai_addr)->sin_port, htons(80));
            freeaddrinfo(res);
            hints.ai_family = AF_UNSPEC;
            hints.ai_flags = AI_NUMERICHOST | AI_CANONNAME;
            CHECK_EQ(getaddrinfo("::1", "7", &hints, &res), 0);
            CHECK(res != NULL && res->ai_family == AF_INET6 && res->ai_next == NULL);
            CHECK(res->ai_canonname != NULL && strcmp(res->ai_canonname, "::1") == 0);
            freeaddrinfo(res);
        }
    } else if (kind == 4) {
        /* A child process writing into a pipe a goroutine reads: the child sees the pipe
         * as the program made it (blocking), the reader gets every byte, and waitpid
         * (a hand-off call) reaps the child. */
        int p[2];
        CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
        posix_spawn_file_actions_t fa;
        CHECK_EQ(posix_spawn_file_actions_init(&fa), 0);
        CHECK_EQ(posix_spawn_file_actions_adddup2(&fa, p[1], 1), 0);
        char *argv[] = {"/bin/echo", "torture-child", NULL};
        char *envp[] = {NULL};
        pid_t pid;
        CHECK_EQ(posix_spawn(&pid, "/bin/echo", &fa, NULL, argv, envp), 0);
        CHECK_EQ(posix_spawn_file_actions_destroy(&fa), 0);
        CHECK_EQ(close(p[1]), 0);
        if (a->slot >= 0) {
            atomic_store(&slot_child[a->slot], pid);
            atomic_store(&slot_fd[a->slot], p[0] + 1);
        }
        char buf[64];
        size_t got = 0;
        for (;;) {
            ssize_t r = read(p[0], buf + got, sizeof buf - 1 - got);
            CHECK(r >= 0);
            if (r == 0)
                break;
            got += (size_t)r;
        }
        buf[got] = 0;
        CHECK(strcmp(buf, "torture-child\n") == 0);
        if (a->slot >= 0)
            atomic_store(&slot_fd[a->slot], 0);
        int status = -1;
        CHECK_EQ(waitpid(pid, &status, 0), pid);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        CHECK_EQ(close(p[0]), 0);
    } else if (kind == 5) {
        /* A number freed by a close the runtime does not see (stdio's fclose) and given to
         * an eventfd: its blocking read waits for the count, the eventfd is not taken for
         * the old socket. */
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        FILE *f = fdopen(sv[0], "r");
        CHECK(f != NULL);
        CHECK_EQ(fclose(f), 0);
        int e = eventfd(0, EFD_CLOEXEC);
        CHECK(e >= 0);
        struct libc_box box = {.fd = e, .done = GMP_WG_INIT};
        if (a->goroutine) {
            CHECK_OK(gmp_wg_add(&box.done, 1));
            CHECK_OK(gmp_go(libc_eventfd_writer, &box));
        } else {
            uint64_t one = 1;
            CHECK_EQ(write(e, &one, sizeof one), (ssize_t)sizeof one);
        }
        uint64_t v = 0;
        CHECK_EQ(read(e, &v, sizeof v), (ssize_t)sizeof v);
        CHECK_EQ(v, 1);
        if (a->goroutine)
            CHECK_OK(gmp_wg_wait(&box.done));
        CHECK_EQ(close(e), 0);
        CHECK_EQ(close(sv[1]), 0);
    } else if (kind == 6) {
        /* write(2) of four times a pipe's capacity to a blocking pipe whose reader
         * goroutine is parked in read(2), on this thread if it ran here (without
         * RWF_NOWAIT the write goes through the hand-off, which must leave this thread to
         * the reader): one call writes it all, and every byte arrives. Every other time
         * sendfile(2) sends it instead. */
        int p[2];
        CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
        struct libc_box box = {.fd = p[0], .done = GMP_WG_INIT};
        CHECK_OK(gmp_wg_add(&box.done, 1));
        CHECK_OK(gmp_go(libc_pipe_drainer, &box));
        while (!atomic_load(&box.entered))
            CHECK_OK(gmp_yield());
        size_t n = 256 * 1024;
        unsigned char *big = malloc(n);
        CHECK(big != NULL);
        for (size_t k = 0; k < n; k++)
            big[k] = (unsigned char)(k % 251);
        if (a->seq & 1) {
            CHECK_EQ(write(p[1], big, n), (ssize_t)n);
        } else {
            /* Or by sendfile(2) from a file (the hand-off: into a pipe Linux moves what
             * fits and returns, so it loops on the counts). */
            int f = memfd_create("torture-sendfile", MFD_CLOEXEC);
            CHECK(f >= 0);
            CHECK_EQ(write(f, big, n), (ssize_t)n);
            off_t off = 0;
            while ((size_t)off < n) {
                ssize_t r = sendfile(p[1], f, &off, n - (size_t)off);
                CHECK(r > 0);
            }
            CHECK_EQ(off, (off_t)n);
            CHECK_EQ(close(f), 0);
        }
        free(big);
        CHECK_EQ(close(p[1]), 0);
        CHECK_OK(gmp_wg_wait(&box.done));
        CHECK_EQ(box.result, (ssize_t)n);
        CHECK_EQ(close(p[0]), 0);
    } else {
        /* close while a goroutine is parked in read: it fails with EBADF. */
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        struct libc_box box = {.fd = sv[0], .result = 1, .done = GMP_WG_INIT};
        CHECK_OK(gmp_wg_add(&box.done, 1));
        CHECK_OK(gmp_go(libc_closed_reader, &box));
        while (!atomic_load(&box.entered))
            CHECK_OK(gmp_yield());
        CHECK_OK(gmp_sleep(1 * MS));
        /* From inside gmp_blocking too: a reader bound to this thread cannot leave the fd
         * before the close returns, and makes the close itself (netpoll's deferred close). */
        if (rnd_below(&a->rng, 2))
            CHECK_EQ(gmp_blocking(libc_close_blocking, (void *)(intptr_t)sv[0]), 0);
        else
            CHECK_EQ(close(sv[0]), 0);
        CHECK_OK(gmp_wg_wait(&box.done));
        CHECK_EQ(box.result, -1);
        CHECK_EQ(box.err, EBADF);
        CHECK_EQ(close(sv[1]), 0);
    }
    /* Not a switch point the compiler knows of: the same thread afterwards (kinds 3, 5
     * and 6 wait with gmp calls, which may move the goroutine). */
    if (kind != 3 && kind != 5 && kind != 6)
        CHECK_EQ(gettid_(), tid0);
}

/* ---- pthread: C code's own locks and stdio inside goroutines ---- */

static pthread_mutex_t pt_mu = PTHREAD_MUTEX_INITIALIZER;
static long pt_counter;          /* load + store across the section, under pt_mu */
static atomic_long pt_sections;  /* sections completed */
static atomic_int pt_holders;

/* A pthread mutex held across a CPU-bound stretch (asynchronous preemption stops the
 * holder inside: its thread must run nothing else until it resumes) or across a sleep in
 * a hooked nanosleep (the holder parks; the others wait in pthread_mutex_lock, a futex the
 * hooks do not see, and must give their P up); or a line through stdio on a pipe, which
 * must never see O_NONBLOCK the program did not set. */
static void do_pthread(struct actor *a)
{
    int kind = (int)rnd_below(&a->rng, 3);
    if (kind < 2) {
        CHECK_EQ(pthread_mutex_lock(&pt_mu), 0);
        CHECK_EQ(atomic_fetch_add(&pt_holders, 1), 0);
        long x = pt_counter;
        if (kind == 0) {
            int64_t until = gmp_now() + (int64_t)(50 + rnd_below(&a->rng, 450)) * US;
            unsigned long h = a->seq;
            for (unsigned long i = 0;; i++) {
                h = h * 6364136223846793005UL + 1;
                if ((i & 1023) == 0 && gmp_now() >= until)
                    break;
            }
            __asm__ volatile("" : : "r"(h));
        } else {
            struct timespec ts = {0, (long)(20 + rnd_below(&a->rng, 200)) * 1000};
            CHECK_EQ(nanosleep(&ts, NULL), 0);
        }
        pt_counter = x + 1;
        atomic_fetch_sub(&pt_holders, 1);
        atomic_fetch_add(&pt_sections, 1);
        CHECK_EQ(pthread_mutex_unlock(&pt_mu), 0);
        return;
    }
    /* A pipe, or a socket pair (stdio on accepted sockets is the same case). */
    int p[2];
    if (rnd_below(&a->rng, 2))
        CHECK_EQ(pipe(p), 0);
    else
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, p), 0);
    CHECK_EQ(fcntl(p[0], F_GETFL) & O_NONBLOCK, 0);
    FILE *w = fdopen(p[1], "w");
    FILE *r = fdopen(p[0], "r");
    CHECK(w != NULL && r != NULL);
    int n = 1 + (int)rnd_below(&a->rng, 8);
    for (int i = 0; i < n; i++)
        CHECK(fprintf(w, "%lu %d\n", (unsigned long)a->seq, i) > 0);
    CHECK_EQ(fclose(w), 0);
    char line[64];
    for (int i = 0; i < n; i++) {
        CHECK(fgets(line, sizeof line, r) != NULL);
        char want[64];
        snprintf(want, sizeof want, "%lu %d\n", (unsigned long)a->seq, i);
        CHECK(strcmp(line, want) == 0);
    }
    CHECK(fgets(line, sizeof line, r) == NULL && !ferror(r));
    CHECK_EQ(fclose(r), 0);
}

static gmp_chan *sig_ch; /* int: SIGUSR1 relayed */
static atomic_ulong sig_raised, sig_relayed;

static void drain_signals(void)
{
    int v;
    while (gmp_chan_try_recv(sig_ch, &v) == 0) {
        CHECK_EQ(v, SIGUSR1);
        atomic_fetch_add(&sig_relayed, 1);
    }
}

/* A wait for a signal the thread blocks, which no hook sees (its P goes to others
 * meanwhile): SIGRTMIN+1 sent to the waiting thread by a plain thread after 0-2 ms. A
 * goroutine locks its thread from the mask to the restore. Counted if ever delivered. */
static atomic_ulong sigwait_stray;

static void on_sigwait_stray(int sig)
{
    (void)sig;
    atomic_fetch_add(&sigwait_stray, 1);
}

struct sigwait_send {
    long tid;
    long delay_ns;
};

static void *sigwait_sender(void *arg)
{
    struct sigwait_send *s = arg;
    struct timespec ts = {0, s->delay_ns};
    nanosleep(&ts, NULL);
    CHECK_EQ(syscall(SYS_tgkill, getpid(), s->tid, SIGRTMIN + 1), 0);
    free(s);
    return NULL;
}

static void do_sigwait(struct actor *a)
{
    int kind = (int)rnd_below(&a->rng, 3);
    int sig = SIGRTMIN + 1;
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, sig);
    int depth = 0;
    if (a->goroutine)
        CHECK((depth = gmp_lock_os_thread()) > 0);
    CHECK_EQ(pthread_sigmask(SIG_BLOCK, &set, &old), 0);
    long tid = gettid_();
    struct sigwait_send *s = malloc(sizeof *s);
    CHECK(s != NULL);
    s->tid = tid;
    s->delay_ns = (long)rnd_below(&a->rng, 2000) * 1000;
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, sigwait_sender, s), 0);
    siginfo_t info;
    memset(&info, 0, sizeof info);
    if (kind == 0) {
        int got = 0;
        CHECK_EQ(sigwait(&set, &got), 0);
        CHECK_EQ(got, sig);
    } else if (kind == 1) {
        CHECK_EQ(sigwaitinfo(&set, &info), sig);
    } else {
        struct timespec ts = {10, 0};
        CHECK_EQ(sigtimedwait(&set, &info, &ts), sig);
    }
    if (kind != 0)
        CHECK(info.si_signo == sig && info.si_pid == getpid());
    CHECK_EQ(gettid_(), tid);
    CHECK_EQ(pthread_sigmask(SIG_SETMASK, &old, NULL), 0);
    if (a->goroutine)
        CHECK_EQ(gmp_unlock_os_thread(), depth - 1);
    CHECK_EQ(pthread_join(t, NULL), 0);
}

static void do_signal(struct actor *a)
{
    (void)a;
    atomic_fetch_add(&sig_raised, 1);
    CHECK_EQ(raise(SIGUSR1), 0);
    drain_signals();
}

/* Stack high-water marks read while everything runs: whole pages within their stacks,
 * deepest first, no more goroutines than gmp_stats has measured (read after them). */
static void check_stack_marks(void)
{
    enum { MAXMARKS = 64 };
    struct gmp_stack_mark *m = calloc(MAXMARKS, sizeof *m);
    CHECK(m != NULL);
    int n = gmp_stack_usage(m, MAXMARKS);
    CHECK(n >= 0);
    uint64_t counted = 0;
    for (int i = 0; i < n && i < MAXMARKS; i++) {
        CHECK(m[i].func != NULL && m[i].samples >= 1);
        CHECK(m[i].high_water <= m[i].stack_size && m[i].high_water % 4096 == 0);
        CHECK(i == 0 || m[i - 1].high_water >= m[i].high_water);
        counted += m[i].samples;
    }
    free(m);
    struct gmp_sched_stats st;
    CHECK(gmp_stats(&st, NULL, 0) >= 0);
    CHECK(n > MAXMARKS || counted <= st.stack_samples);
}

/* Metrics read while everything runs: counters only grow, a histogram's buckets add up
 * to its count, and the Prometheus text is written whole. */
static void do_metrics(struct actor *a)
{
    /* On the heap: ~9 KiB, and goroutines here may have 16 KiB stacks. */
    struct gmp_metric *m = calloc(32, sizeof *m);
    CHECK(m != NULL);
    int n = gmp_metrics(m, 32);
    CHECK(n >= 10 && n <= 32);
    for (int i = 0; i < n; i++) {
        if (strcmp(m[i].name, "/sched/goroutines-created:goroutines") == 0) {
            CHECK(m[i].value >= a->created);
            a->created = m[i].value;
        } else if (m[i].kind == GMP_METRIC_HISTOGRAM) {
            uint64_t sum = 0;
            for (int b = 0; b < GMP_METRIC_BUCKETS; b++)
                sum += m[i].buckets[b];
            CHECK_EQ(sum, m[i].value);
            CHECK(m[i].value >= a->timed);
            a->timed = m[i].value;
        }
    }
    free(m);
    check_stack_marks();
    /* Labels: set on this goroutine (or thread) and read back while dumps and spawns run
     * elsewhere. */
    char val[32], got[32];
    snprintf(val, sizeof val, "%p/%llu", (void *)a, (unsigned long long)a->created);
    CHECK_EQ(gmp_labels_set("actor", val), 0);
    CHECK_EQ(gmp_labels_get("actor", got, sizeof got), (int)strlen(val));
    CHECK(strcmp(got, val) == 0);
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    /* A CPU profile over the Prometheus write, while other actors switch, spawn and dump:
     * one actor's at a time (the others are refused). */
    int prof = gmp_cpuprofile_start(fd, 1000);
    CHECK(prof == 0 || prof == -EBUSY);
    CHECK_EQ(gmp_metrics_write_prometheus(fd), 0);
    if (prof == 0)
        CHECK_EQ(gmp_cpuprofile_stop(), 0);
    /* A flight recorder for a moment (one actor at a time; a traced run's trace holds the
     * place), its window written to /dev/null while everything else runs. */
    int r = gmp_trace_flight_start(1, 1);
    CHECK(r == 0 || r == -EBUSY);
    if (r == 0) {
        CHECK_EQ(gmp_trace_flight_write(fd), 0);
        CHECK_EQ(gmp_trace_flight_stop(), 0);
    }
    CHECK_EQ(close(fd), 0);
}

/* ---- scopes ---- */

static gmp_chan *never_chan; /* nobody sends on it */
/* Held from the start until the end: a scope ends every wait for them, and the ghosts
 * those waits leave run when main unlocks them at the end, which must leave every word
 * at 0. */
static gmp_mutex never_mu = GMP_MUTEX_INIT;
static gmp_rwmutex never_rw = GMP_RWMUTEX_INIT;

static void scope_canceller(void *arg)
{
    /* It belongs to the scope it cancels: its own sleep is the scope's too. */
    CHECK_OK(gmp_sleep(200 * US));
    CHECK_OK(gmp_scope_cancel((gmp_scope *)arg));
}

/* A scope with a deadline of 0.1-2 ms, or one a goroutine started in it cancels: a
 * receive nobody answers, locks of a mutex and an rwmutex held until the end (read or
 * write), a gmp_sleep of a second and (goroutines, with "libc") a read
 * and a poll of an empty socket through the interposer all end with the scope's error
 * (ETIMEDOUT or ECANCELED), the data of the socket untouched; the scope's goroutines
 * are done when gmp_scope_wait returns. */
static void do_scope(struct actor *a)
{
    int kind = (int)rnd_below(&a->rng, 2);
    int64_t to = kind == 0 ? (100 + (int64_t)rnd_below(&a->rng, 1900)) * US : -1;
    int want = kind == 0 ? -ETIMEDOUT : -ECANCELED;
    gmp_scope *s = NULL;
    CHECK_OK(gmp_scope_begin(&s, to));
    if (kind == 1)
        CHECK_OK(gmp_go(scope_canceller, s));
    int v;
    CHECK_EQ(gmp_chan_recv(never_chan, &v), want);
    CHECK_EQ(gmp_mutex_lock(&never_mu), want);
    if (rnd_below(&a->rng, 2))
        CHECK_EQ(gmp_rwmutex_rlock(&never_rw), want);
    else
        CHECK_EQ(gmp_rwmutex_lock(&never_rw), want);
    if (a->goroutine && on(FT_LIBC)) {
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        char b;
        errno = 0;
        CHECK_EQ(read(sv[0], &b, 1), -1);
        CHECK_EQ(errno, -want);
        struct pollfd p = {sv[0], POLLIN, 0};
        errno = 0;
        CHECK_EQ(poll(&p, 1, 10000), -1);
        CHECK_EQ(errno, -want);
        CHECK_EQ(write(sv[1], "x", 1), 1);
        CHECK_EQ(close(sv[0]), 0);
        CHECK_EQ(close(sv[1]), 0);
    }
    CHECK_EQ(gmp_sleep(1000 * MS), want);
    CHECK_OK(gmp_scope_wait(s));
    CHECK_EQ(gmp_scope_err(s), want);
    CHECK_OK(gmp_scope_end(s));
}

/* ---- the action loop ---- */

static void run_action(struct actor *a, int act)
{
    slot_enter(a, act);
    switch (act) {
    case A_SPAWN: do_spawn(a); break;
    case A_YIELD: CHECK_OK(gmp_yield()); break;
    case A_SEND: do_send(a); break;
    case A_RECV: do_recv(a); break;
    case A_SELECT: do_select(a); break;
    case A_MUTEX: do_mutex(a); break;
    case A_RWMUTEX: do_rwmutex(a); break;
    case A_COND: do_cond(a); break;
    case A_ONCE: do_once(a); break;
    case A_SLEEP: do_sleep(a); break;
    case A_BLOCKING: do_blocking(a, 0); break;
    case A_BLKUNLOCK: do_blkunlock(a); break;
    case A_LOCK: do_lock(a); break;
    case A_MAXPROCS: do_maxprocs(a); break;
    case A_NET: do_net(a); break;
    case A_SPIN: do_spin(a); break;
    case A_LIBC: do_libc(a); break;
    case A_PTHREAD: do_pthread(a); break;
    case A_SIGNAL: do_signal(a); break;
    case A_METRICS: do_metrics(a); break;
    case A_SCOPE: do_scope(a); break;
    case A_SIGWAIT: do_sigwait(a); break;
    default: CHECK(0);
    }
    slot_leave(a);
    atomic_fetch_add(&action_count[act], 1);
    atomic_fetch_add(&progress, 1);
}

static void actor_loop(struct actor *a)
{
    while (!atomic_load(&stop)) {
        if (quiet_now() && rnd_below(&a->rng, 4) != 0) {
            nap(a);
            atomic_fetch_add(&naps, 1);
            atomic_fetch_add(&progress, 1);
            continue;
        }
        run_action(a, enabled_actions[rnd_below(&a->rng, (uint32_t)nenabled)]);
    }
}

static void worker_main(void *arg)
{
    struct actor a;
    actor_init(&a, (int)(intptr_t)arg, 1, 0);
    actor_loop(&a);
    CHECK_OK(gmp_wg_done(&workers_wg));
}

static void *foreign_main(void *arg)
{
    struct actor a;
    actor_init(&a, (int)(intptr_t)arg, 0, 0);
    actor_loop(&a);
    return NULL;
}

/* ---- watchdog ---- */

/* For the report: what the pipe a stalled actor reads looks like (readiness, every fd
 * of this process on the same pipe, with its flags) and whether its writer has exited. */
static void describe_wait(int fd, int pid)
{
    char path[64], target[64], other[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n < 0) {
        fprintf(stderr, "torture:   fd %d: %s\n", fd, strerror(errno));
        return;
    }
    target[n] = 0;
    struct pollfd pf = {fd, POLLIN, 0};
    int r = poll(&pf, 1, 0);
    fprintf(stderr, "torture:   fd %d is %s, poll %d revents %#x; fds on it:", fd, target, r,
            pf.revents);
    for (int d = 0; d < 4096; d++) {
        snprintf(path, sizeof path, "/proc/self/fd/%d", d);
        ssize_t m = readlink(path, other, sizeof other - 1);
        if (m < 0)
            continue;
        other[m] = 0;
        if (strcmp(other, target) == 0)
            fprintf(stderr, " %d (flags %#x)", d, fcntl(d, F_GETFL));
    }
    char stat[256] = "gone";
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        if (fgets(stat, sizeof stat, f) == NULL)
            strcpy(stat, "unreadable");
        fclose(f);
    }
    fprintf(stderr, "; child %d: %s\n", pid, stat);
}

static void report(const char *why)
{
    gmp_sched_stats st;
    uint32_t lens[8] = {0};
    int nl = gmp_stats(&st, lens, 8);
    fprintf(stderr, "torture: %s (seed %llu, features %#x, procs %d, %.0f ms into the run)\n",
            why, seed, features, procs_arg, (now_sec() - t_start) * 1000);
    fprintf(stderr,
            "torture: gmp_stats gomaxprocs=%d idleprocs=%d threads=%d spinningthreads=%d "
            "needspinning=%d idlethreads=%d runqueue=%lld goroutines=%lld steals=%llu "
            "spawned=%llu schedticks=%llu\n",
            st.gomaxprocs, st.idleprocs, st.threads, st.spinningthreads, st.needspinning,
            st.idlethreads, (long long)st.runqueue, (long long)st.goroutines,
            (unsigned long long)st.steals, (unsigned long long)st.spawned,
            (unsigned long long)st.schedticks);
    fprintf(stderr, "torture: runq lens:");
    for (int i = 0; i < nl; i++)
        fprintf(stderr, " %u", lens[i]);
    fprintf(stderr, "\ntorture: main: %s; progress=%lu children %lu/%lu "
            "gmp_num_goroutine=%lld\n", atomic_load(&main_phase), atomic_load(&progress),
            atomic_load(&children_done), atomic_load(&children_spawned),
            (long long)gmp_num_goroutine());
    long long now = gmp_now();
    for (int i = 0; i < NSLOTS; i++) {
        int act = atomic_load(&slot_action[i]);
        char who[32];
        if (i < NWORKERS)
            snprintf(who, sizeof who, "worker %d", i);
        else if (i < NWORKERS + NFOREIGN)
            snprintf(who, sizeof who, "foreign %d", i - NWORKERS);
        else if (i < CHILD0)
            snprintf(who, sizeof who, "%s %d", pumps[i - NWORKERS - NFOREIGN].source
                     ? "source" : "sink", pumps[i - NWORKERS - NFOREIGN].chan);
        else if (atomic_load(&slot_taken[i]))
            snprintf(who, sizeof who, "child%s", atomic_load(&slot_pinned[i]) ? " (pinned)" : "");
        else
            continue;
        if (act < 0) {
            fprintf(stderr, "torture: %s: not started\n", who);
            continue;
        }
        fprintf(stderr, "torture: %s: %s %s%s for %lld ms, %lu done\n", who,
                atomic_load(&slot_inside[i]) ? "in" : "after",
                act < NACTIONS ? action_names[act] : act == A_NAP ? "nap" : "chan op",
                atomic_load(&slot_locked[i]) ? " (locked to its thread)" : "",
                (now - atomic_load(&slot_since[i])) / MS, atomic_load(&slot_iters[i]));
        if (atomic_load(&slot_fd[i]) > 0)
            describe_wait(atomic_load(&slot_fd[i]) - 1, atomic_load(&slot_child[i]));
    }
    for (int c = 0; c < NCHANS; c++)
        if (chans[c] != NULL)
            fprintf(stderr, "torture: chan %d cap %zu len %lld\n", c, chan_caps[c],
                    (long long)gmp_chan_len(chans[c]));
    fflush(stderr);
}

static void *watchdog_main(void *arg)
{
    (void)arg;
    unsigned long last = atomic_load(&progress);
    double last_move = now_sec();
    while (!atomic_load(&finished)) {
        sleep_ms(50);
        unsigned long p = atomic_load(&progress);
        double t = now_sec();
        if (p != last) {
            last = p;
            last_move = t;
        } else if ((t - last_move) * 1000 >= (double)stall_ms) {
            char why[96];
            snprintf(why, sizeof why, "no progress for %.1f s", (double)stall_ms / 1000);
            report(why);
            /* Every goroutine's state and frames, for the post-mortem. */
            gmp_dump(2);
            abort();
        }
    }
    return NULL;
}

/* ---- arguments ---- */

static unsigned parse_features(const char *s)
{
    char *end;
    if (s[0] >= '0' && s[0] <= '9') {
        unsigned long v = strtoul(s, &end, 0);
        CHECK(*end == '\0');
        return (unsigned)v;
    }
    unsigned mask = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok != NULL; tok = strtok(NULL, ",")) {
        int neg = tok[0] == '-';
        const char *name = tok + neg;
        unsigned bits = 0;
        if (strcmp(name, "all") == 0) {
            bits = (1u << NFEATURES) - 1;
        } else if (strcmp(name, "none") == 0) {
            bits = 0;
        } else {
            for (int f = 0; f < NFEATURES; f++)
                if (strcmp(name, feature_names[f]) == 0)
                    bits = 1u << f;
            if (bits == 0) {
                fprintf(stderr, "torture: unknown feature \"%s\"\n", name);
                exit(2);
            }
        }
        mask = neg ? mask & ~bits : mask | bits;
    }
    return mask;
}

static const char *arg_or_env(int argc, char **argv, int i, const char *env)
{
    if (argc > i)
        return argv[i];
    return getenv(env);
}

static void check_tally(int c)
{
    unsigned long long sn = atomic_load(&sent[c].n), rn = atomic_load(&recvd[c].n);
    unsigned long long ss = atomic_load(&sent[c].sum), rs = atomic_load(&recvd[c].sum);
    unsigned long long sh = atomic_load(&sent[c].hsum), rh = atomic_load(&recvd[c].hsum);
    if (sn != rn || ss != rs || sh != rh) {
        fprintf(stderr,
                "torture: chan %d (cap %zu) conservation broken (seed %llu): sent n=%llu "
                "sum=%#llx hash=%#llx, received n=%llu sum=%#llx hash=%#llx\n",
                c, chan_caps[c], seed, sn, ss, sh, rn, rs, rh);
        CHECK(0);
    }
}

static void on_leak(int64_t goid, const char *reason, void *arg)
{
    (void)arg;
    fprintf(stderr, "torture: leak reported: goroutine %lld [%s]\n", (long long)goid, reason);
    abort();
}

int main(int argc, char **argv)
{
    const char *s;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if ((s = arg_or_env(argc, argv, 1, "TORTURE_SEED")) != NULL)
        seed = strtoull(s, NULL, 0);
    else
        seed = (unsigned long long)time(NULL) ^ ((unsigned long long)getpid() << 20);
    if ((s = arg_or_env(argc, argv, 2, "TORTURE_MS")) != NULL)
        duration_ms = strtol(s, NULL, 0);
    if ((s = arg_or_env(argc, argv, 3, "TORTURE_PROCS")) != NULL)
        procs_arg = (int)strtol(s, NULL, 0);
    s = arg_or_env(argc, argv, 4, "TORTURE_FEATURES");
    features = parse_features(s != NULL ? s : "all");
    if ((s = getenv("TORTURE_STALL_MS")) != NULL)
        stall_ms = strtol(s, NULL, 0);
    CHECK(duration_ms >= 0 && stall_ms > 0 && procs_arg >= 0 && procs_arg <= 4);

    for (int act = 0; act < NACTIONS; act++)
        if (on(action_feature[act]))
            enabled_actions[nenabled++] = act;
    if (nenabled == 0) {
        fprintf(stderr, "torture: no action enabled by features %#x\n", features);
        return 2;
    }

    /* Every goroutine of the mix finishes: a leak report is a false one (on_leak). */
    CHECK_OK(gmp_set_leak_handler(on_leak, NULL));
    if (procs_arg > 0)
        gmp_maxprocs(procs_arg);
    else
        procs_arg = gmp_maxprocs(0);
    printf("torture: seed=%llu ms=%ld procs=%d features=%#x (", seed, duration_ms, procs_arg,
           features);
    for (int f = 0, first = 1; f < NFEATURES; f++)
        if (on(f)) {
            printf("%s%s", first ? "" : ",", feature_names[f]);
            first = 0;
        }
    printf(")\n");

    CHECK_EQ(pipe(pipefd), 0);
    CHECK_OK(gmp_pipe(netpipe));
    t_start = now_sec();
    t_start_ns = gmp_now();
    for (int i = 0; i < NSLOTS; i++)
        atomic_store(&slot_action[i], -1);

    pthread_t watchdog;
    CHECK_EQ(pthread_create(&watchdog, NULL, watchdog_main, NULL), 0);

    int pumps_on = on(FT_CHAN) || on(FT_SELECT);
    for (int c = 0; c < NCHANS; c++)
        CHECK_OK(gmp_chan_make(&chans[c], sizeof(struct elem), chan_caps[c]));
    CHECK_OK(gmp_chan_make(&never_chan, sizeof(int), 0));
    CHECK_OK(gmp_mutex_lock(&never_mu));
    CHECK_OK(gmp_rwmutex_lock(&never_rw));
    CHECK_OK(gmp_chan_make(&silent, 0, 0));
    /* The sigwait action's signal, should one be delivered instead of waited for. */
    signal(SIGRTMIN + 1, on_sigwait_stray);
    if (on(FT_SIGNAL)) {
        /* Kept until the process exits: a stop would give SIGUSR1 its default action. */
        int usr1 = SIGUSR1;
        CHECK_OK(gmp_chan_make(&sig_ch, sizeof(int), 64));
        CHECK_OK(gmp_signal_notify(sig_ch, &usr1, 1));
    }
    if (pumps_on) {
        CHECK_OK(gmp_wg_add(&pumps_wg, 2 * NCHANS));
        for (int i = 0; i < 2 * NCHANS; i++) {
            pumps[i].chan = i / 2;
            pumps[i].source = i % 2;
            CHECK_OK(gmp_go(pump_main, &pumps[i]));
        }
    }
    CHECK_OK(gmp_wg_add(&workers_wg, NWORKERS));
    for (int i = 0; i < NWORKERS; i++)
        CHECK_OK(gmp_go(worker_main, (void *)(intptr_t)i));
    pthread_t foreign[NFOREIGN];
    int nforeign = on(FT_FOREIGN) ? NFOREIGN : 0;
    for (int i = 0; i < nforeign; i++)
        CHECK_EQ(pthread_create(&foreign[i], NULL, foreign_main,
                                (void *)(intptr_t)(NWORKERS + i)), 0);

    double t_end = now_sec() + (double)duration_ms / 1000;
    while (now_sec() < t_end)
        sleep_ms(10);

    /* Stop: the flag, the cond's waiters, then close every channel so that blocked
     * senders and receivers return -EPIPE; then wait for everyone. */
    atomic_store(&stop, 1);
    CHECK_OK(gmp_mutex_lock(&pool_mu));
    CHECK_OK(gmp_cond_broadcast(&pool_cond));
    CHECK_OK(gmp_mutex_unlock(&pool_mu));
    atomic_store(&closing, 1);
    for (int c = 0; c < NCHANS; c++)
        CHECK_OK(gmp_chan_close(chans[c]));
    double t_drain = now_sec();
    atomic_store(&main_phase, "waiting for the workers");
    CHECK_OK(gmp_wg_wait(&workers_wg));
    atomic_fetch_add(&progress, 1);
    atomic_store(&main_phase, "joining the foreign threads");
    for (int i = 0; i < nforeign; i++)
        CHECK_EQ(pthread_join(foreign[i], NULL), 0);
    atomic_fetch_add(&progress, 1);
    atomic_store(&main_phase, "waiting for the detached children");
    CHECK_OK(gmp_wg_wait(&children_wg));
    atomic_fetch_add(&progress, 1);
    atomic_store(&main_phase, "waiting for the sources and sinks");
    CHECK_OK(gmp_wg_wait(&pumps_wg));
    atomic_fetch_add(&progress, 1);

    /* What is left in the buffers counts as received. */
    atomic_store(&main_phase, "draining the channels");
    for (int c = 0; c < NCHANS; c++) {
        struct elem e;
        int r;
        while ((r = gmp_chan_recv(chans[c], &e)) == 0)
            on_recvd(c, &e);
        CHECK_EQ(r, -EPIPE);
        check_tally(c);
    }

    CHECK_EQ(atomic_load(&children_done), atomic_load(&children_spawned));
    CHECK_EQ(atomic_load(&mu_counter), atomic_load(&mu_sections));
    CHECK_EQ(atomic_load(&rw_counter), atomic_load(&rw_wsections));
    CHECK_EQ(atomic_load(&mu_inside), 0);
    CHECK_EQ(atomic_load(&bmu_inside), 0);
    CHECK_EQ(atomic_load(&rw_readers) + atomic_load(&rw_writers), 0);
    CHECK_EQ(pool_tokens, NTOKENS);
    CHECK_EQ(gmp_mutex_trylock(&mu), 0);
    CHECK_EQ(gmp_mutex_trylock(&bmu), 0);
    /* The ghosts of the scoped waits for them run in these unlocks. */
    CHECK_OK(gmp_mutex_unlock(&never_mu));
    CHECK_OK(gmp_rwmutex_unlock(&never_rw));
    CHECK_EQ(never_mu.state, 0);
    CHECK_EQ(never_mu.sema, 0);
    CHECK_EQ(never_rw.w.state, 0);
    CHECK_EQ(never_rw.reader_count, 0);
    CHECK_EQ(never_rw.reader_wait, 0);
    CHECK_EQ(never_rw.reader_sem + never_rw.writer_sem + never_rw.w.sema, 0);
    int onces_run = 0;
    for (int i = 0; i < NONCE; i++) {
        CHECK_EQ(atomic_load(&once_calls[i]), atomic_load(&once_used[i]) ? 1 : 0);
        onces_run += atomic_load(&once_calls[i]);
    }

    /* The pthread mutex protected its counter. */
    CHECK_EQ(pt_counter, atomic_load(&pt_sections));
    if (on(FT_SIGNAL)) {
        double until = now_sec() + 5.0;
        drain_signals();
        while (atomic_load(&sig_raised) > 0 && atomic_load(&sig_relayed) == 0) {
            int v;
            if (gmp_chan_recv_timeout(sig_ch, &v, 100 * MS) == 0) {
                CHECK_EQ(v, SIGUSR1);
                atomic_fetch_add(&sig_relayed, 1);
            }
            CHECK(now_sec() < until);
        }
        drain_signals();
        CHECK(atomic_load(&sig_relayed) <= atomic_load(&sig_raised));
    }
    CHECK_EQ(atomic_load(&sigwait_stray), 0);

    /* Every goroutine ends. */
    atomic_store(&main_phase, "waiting for gmp_num_goroutine() == 0");
    double deadline = now_sec() + 10;
    while (gmp_num_goroutine() != 0 && now_sec() < deadline)
        sleep_ms(1);
    CHECK_EQ(gmp_num_goroutine(), 0);
    if (now_sec() - t_drain > 10) {
        report("draining took more than 10 s");
        CHECK(0);
    }

    printf("torture: actions");
    for (int act = 0; act < NACTIONS; act++)
        if (on(action_feature[act]))
            printf(" %s=%lu", action_names[act], atomic_load(&action_count[act]));
    printf("\ntorture: chans");
    for (int c = 0; c < NCHANS; c++)
        printf(" %d:cap%zu:%llu", c, chan_caps[c], atomic_load(&recvd[c].n));
    printf("; mutex=%ld rw-writes=%ld blkunlock=%ld onces=%d children=%lu naps=%lu\n",
           atomic_load(&mu_sections), atomic_load(&rw_wsections),
           atomic_load(&bmu_sections), onces_run, atomic_load(&children_spawned),
           atomic_load(&naps));
    if (duration_ms >= 1000)
        for (int act = 0; act < NACTIONS; act++)
            if (on(action_feature[act]) && atomic_load(&action_count[act]) == 0) {
                fprintf(stderr, "torture: action %s never ran (seed %llu)\n",
                        action_names[act], seed);
                CHECK(0);
            }

    atomic_store(&finished, 1);
    CHECK_EQ(pthread_join(watchdog, NULL), 0);
    for (int c = 0; c < NCHANS; c++)
        CHECK_OK(gmp_chan_release(chans[c]));
    CHECK_OK(gmp_chan_release(silent));
    printf("torture: ok seed=%llu\n", seed);
    return 0;
}
