/*
 * fuzz: a seeded random API fuzzer. Goroutines and plain pthreads make random valid and
 * invalid calls to every function of gmp.h on a shared pool of channels and sync objects;
 * every call's result is asserted against the header's documentation, values are
 * conserved across channels that are closed, released and replaced while in use, and a
 * watchdog fails the run when nothing makes progress or one actor is stuck.
 *
 * Usage: fuzz SEED SECONDS PROCS
 *   SEED     any unsigned number (0x.. allowed)
 *   SECONDS  how long the actors run (0 allowed: start, stop, check)
 *   PROCS    GOMAXPROCS at the start, 1..4 (the actors change it within 1..4)
 * Environment: FUZZ_STALL_MS (default 5000): the watchdog's limit; FUZZ_ABORT=1: a failure
 * ends in abort() (a core dump) instead of _exit(1); FUZZ_OPS_OFF=name,...: ops never
 * drawn, "fd-fork" naming op_fd's forked child (for an emulator, scripts/aarch64.sh).
 * A failure prints "fuzz: FAILED seed=S procs=P" and the command that repeats the run.
 * The seed fixes what every actor chooses, op by op (each op draws its parameters before
 * it makes a call, and no draw depends on a call's outcome); the interleaving differs from
 * run to run, so a rare failure may need a few repeats. The summary prints each actor's
 * generator state after its 256th op: equal for equal seeds.
 *
 * Actors, each with an xorshift generator seeded from the seed and its number:
 *  - 6 goroutines: g0 plain, g1 plain taking gmp_lock_os_thread around some ops, g2
 *    GMP_GO_PINNED, g3 GMP_GO_LOCKED, g4 plain with lock sections, g5 pinned with lock
 *    sections (a pinned goroutine that locks its thread must not wait for the goroutines
 *    bound to that thread: inside its lock sections it only makes calls that wait for
 *    nothing but the kernel or a timer, see CTX_PINLOCK);
 *  - 3 plain pthreads (foreign threads), which make the same calls, blocking ones
 *    included, and get -EPERM or 0 where the header says so for a thread that is not a
 *    goroutine;
 *  - children: short goroutines the actors start (plain, pinned, locked, both; default,
 *    64 KiB or minimal stacks), which make 0-3 ops and end (some by gmp_goexit; some
 *    locked ones end locked, taking their thread along);
 *  - main: the janitor. Every channel gets a lifetime (20-300 ms) when made; main closes
 *    channels past it and replaces closed channels in the pool, so that every operation
 *    without a timeout is unblocked within the lifetime plus a janitor round. At the end
 *    main closes every live channel until the actors are done.
 *
 * The pool: NSLOT slots, each holding a channel of one of 30 kinds (capacity 0, 1, 2, 3,
 * 7, 64 times element size 0, 1, 8, 24, 200 bytes), 3 mutexes, 2 rwmutexes, a cond with a
 * pool of tokens, a frontier of once objects; WaitGroups are local to the ops.
 * References: a slot owns one reference to its channel; every op takes a reference of its
 * own (gmp_chan_retain under the record's lock) for as long as it uses the channel. The
 * fuzzer mirrors the library's count; whoever drops the last reference drains the
 * channel with gmp_chan_try_recv (checking gmp_chan_len), checks its conservation and
 * releases it. Replacing a slot's channel (sometimes closed first, sometimes not) makes
 * the library reuse released channels' memory for new ones while old holders still
 * operate on theirs; the summary counts the reused addresses and the run fails if none
 * was reused.
 *
 * Ops (weights in `opdefs`): send and receive (blocking, try, timeout 0, 1-50 us,
 * 50 us - 2 ms, negative), select over 1-5 cases (sends, receives, NULL channels, NULL
 * buffers where allowed; timeout 0, positive or none), close (twice: -EPIPE), len/cap,
 * replace, an extra retain/release, mutex (the header's inline lock/unlock, which call
 * gmp_mutex_lock_slow/unlock_slow when contended, and the library's own; trylock; two in
 * order; unlocked inside gmp_blocking), rwmutex, cond (a token pool: waiters wait only
 * while tokens are out, and holders return them without waiting for anything; and
 * handshakes with one signalling goroutine, where a lost or spurious wake-up shows),
 * WaitGroup, once (also with a NULL function first), yield, sleep, spawn, GOMAXPROCS
 * changes (1..4, at most every 5 ms, each returning the previous value exactly),
 * gmp_num_goroutine, gmp_stats, gmp_metrics (counters only grow), gmp_stack_usage,
 * gmp_labels_set/get (read back; the dump reads every goroutine's meanwhile), a flight
 * recorder started, written to /dev/null and stopped,
 * gmp_cpuprofile_start/stop (one actor's profile at a time, over the metrics and labels),
 * gmp_now, gmp_goid,
 * gmp_num_cpu, gmp_dump,
 * gmp_set_default_stack_size, SIGUSR2 relayed to a channel (gmp_signal_notify),
 * sigwait, sigwaitinfo and sigtimedwait for a signal a plain thread sends the waiting
 * thread (or the actor sends itself first), and a sigtimedwait that times out,
 * entersyscall/exitsyscall pairs (with nested
 * and unpaired calls, and try operations inside), gmp_blocking (with nested calls inside),
 * gmp_syscall (getpid, gettid, nanosleep, refused and unknown numbers), lock sections,
 * the fd calls (pipes, socket pairs, datagrams, accept/connect, memfd pread/pwrite/fsync
 * and sendfile into a pipe, /dev/null, stdio on a pipe closed by fclose, an eventfd given a number fclose freed, a
 * forked child writing into a goroutine's pipe, a close under a goroutine parked in
 * read(2), write(2) of 256 KiB to a pipe whose reader goroutine is parked in read(2),
 * getaddrinfo with random hints over numeric
 * hosts and localhost), and invalid arguments to everything:
 * NULL channels, objects and out pointers, misaligned sync objects, oversized elements
 * and capacities, a NULL send buffer, selects with NULL cases, n > 65536, bad op codes,
 * no enabled case without a timeout, bad attributes, stack sizes, thread limits,
 * GOMAXPROCS > 1024, negative fds, empty event masks; each must return the exact value
 * the header documents.
 * Misuse the header documents as aborting (double release, use after the last release,
 * unlock of an unlocked mutex, a negative WaitGroup) is never made; those aborts have
 * their own tests (chan_release.c, sync_misuse.c, bad_input.c). Nor is a leak: a leak
 * report fails the run (on_leak), so every release the run makes, with goroutines
 * blocked in selects, timed waits and plain waits on other handles, is a near-miss the
 * reports must get right.
 *
 * Checks on channels: an element of 8 bytes or more carries (producer << 48 | sequence);
 * 24 and 200 byte elements also carry the channel's number and a hash, and 200 byte ones
 * a pattern derived from it. Each value has a state word (sent, failed, times received,
 * the channel it was sent on): a value received twice, on another channel, after its
 * send failed, or never sent fails the run at once; at the end every value whose send
 * returned 0 must have been received exactly once (the drains count), every other one
 * never. Smaller elements are counted per channel (1-byte ones carry a tag of the
 * channel). -EPIPE only after a close started; a send that starts after a close returned
 * gets -EPIPE; a receive that starts after another got -EPIPE, or after the close with an
 * empty buffer, gets -EPIPE; an op on a closed channel never reports -EAGAIN or
 * -ETIMEDOUT (a closed channel is always ready, in select too); -EPIPE zeroes the
 * receive buffer, -ETIMEDOUT leaves it alone, and so do select cases that did not fire;
 * of all closes of a channel exactly one returns 0; timeouts wait at least their time.
 * Elsewhere: mutual exclusion counters (a counter read and written across a yield under
 * each mutex), rwmutex readers never beside a writer, the token pool, once functions run
 * exactly once, WaitGroup waits see every child checked in, pinned and locked goroutines
 * never change thread (nor a goroutine across an entersyscall pair or a gmp_blocking
 * call), gmp_goid stable, gmp_now monotonic, every goroutine ends.
 *
 * Watchdog: a plain pthread watches a progress counter (every op the actors and children
 * complete) and how long each actor has been inside its current op. Every op ends in
 * bounded time, so if the counter does not move for FUZZ_STALL_MS, or one actor stays
 * inside one op that long (a lost wake-up while the others go on), it prints what each
 * actor is doing (op, slot, channel, timeout, for how long), the live channels,
 * gmp_stats, then gmp_dump(2), the FAILED line and the replay command, and ends the
 * process.
 */
#include "check.h"
#include "rng.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/sendfile.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <gmp-sched/gmp.h>

#define US 1000LL
#define MS 1000000LL

#define NGOR 6
#define NFOR 3
#define NACT (NGOR + NFOR)
#define NSLOT 8
#define NCHILDSLOTS 64      /* children shown by the watchdog */
#define MAXDETACHED 48      /* detached children alive at once */
#define NPROD (NACT + 2)    /* producers of values: the actors, children, main */
#define PROD_CHILD NACT
#define PROD_MAIN (NACT + 1)
#define MAXELEM 200
#define MAXCASES 5
#define DIGEST_OP 256

/* ---- run parameters ---- */

static unsigned long long seed;
static long run_secs;
static int start_procs;
static long stall_ms = 5000;
static int abort_on_fail;
static char replay_cmd[1024];
static char failed_text[1400];
static size_t failed_len;

static atomic_int stop;          /* the deadline passed: actors finish their op and end */
static atomic_int finished;      /* every check passed: the watchdog ends */
static atomic_ulong progress;    /* completed ops (the watchdog's counter) */
static const char *_Atomic main_phase = "starting";
static int64_t t_start;
static int devnull = -1;
static int spare_fds[2] = {-1, -1};   /* a registered pipe for calls with bad arguments */
static int ncpu_expected;

/* Storage for misaligned pointers: one byte past an aligned address. */
static _Alignas(16) unsigned char raw[64];

/* ---- random numbers (rng.h): each actor's state from the seed ---- */

static uint64_t rng_seed(uint64_t id)
{
    uint64_t x = splitmix(seed ^ splitmix(id + 0x5eed));
    return x ? x : 1;
}

static long gettid_(void)
{
    return (long)syscall(SYS_gettid);
}

/* ---- actors and what they are doing ---- */

enum { CTX_FULL = 1, CTX_PINLOCK = 2, CTX_LIGHT = 4, CTX_ALL = 7 };

struct actor {
    int idx;            /* status index: 0..NACT-1 actors, NACT.. child slots, -1 none */
    int prod;           /* producer index of the values it sends */
    uint64_t rng;
    int goroutine;      /* 0: a foreign thread */
    int pinned;         /* GMP_GO_PINNED: gettid() never changes */
    int locker;         /* makes lock sections */
    int lockdepth;      /* gmp_lock_os_thread count it holds */
    int light;          /* a child with a minimal stack: yields, sleeps and queries only */
    int scoped;         /* inside op_scope: a wait may end with -ECANCELED or -ETIMEDOUT */
    int depth;          /* 0 actor, 1 child, 2 grandchild */
    long tid;           /* the thread, while pinned or locked */
    int64_t goid;
    int64_t last_now;
    uint64_t last_spawned;
    uint64_t last_created, last_latencies; /* gmp_metrics, op_info */
    uint64_t last_stack_samples;           /* gmp_stats, op_info */
    unsigned long nops;
    uint64_t digest;
    char tag[16];       /* g0..g5, t0..t2, c<number> */
    char name[64];
};

struct status {
    atomic_int used;
    atomic_int op;       /* -1: not started */
    atomic_int inside;
    atomic_int slot;
    atomic_uint chan;
    atomic_llong timeout;
    atomic_llong since;
    atomic_ulong nops;
    atomic_int lockdepth;
    const char *_Atomic sub;
    char name[64];       /* actors: written before `used` is set */
};

static struct status status[NACT + NCHILDSLOTS];
static struct actor *actors[NACT];
static struct actor main_actor;

/* ---- failures ---- */

static const char *errname(long long r)
{
    switch (r) {
    case 0: return "0";
    case -EINVAL: return "-EINVAL";
    case -EPIPE: return "-EPIPE";
    case -EAGAIN: return "-EAGAIN";
    case -ETIMEDOUT: return "-ETIMEDOUT";
    case -EBUSY: return "-EBUSY";
    case -EPERM: return "-EPERM";
    case -EBADF: return "-EBADF";
    case -ENOMEM: return "-ENOMEM";
    case -ENOSYS: return "-ENOSYS";
    case -EINTR: return "-EINTR";
    case -EOVERFLOW: return "-EOVERFLOW";
    default: return "?";
    }
}

static void report(const char *why);

static atomic_int failing;

static _Noreturn void die(void)
{
    fputs(failed_text, stderr);
    fflush(stdout);
    fflush(stderr);
    if (abort_on_fail)
        abort();
    _exit(1);
}

static _Noreturn void fail_at(const struct actor *a, const char *file, int line,
                              const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static _Noreturn void fail_at(const struct actor *a, const char *file, int line,
                              const char *fmt, ...)
{
    if (atomic_exchange(&failing, 1)) {
        /* Another failure is being reported; it ends the process. */
        for (;;)
            sleep(1);
    }
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (a != NULL && a->idx >= 0) {
        const struct status *s = &status[a->idx];
        fprintf(stderr, "fuzz: %s:%d: CHECK failed in %s (op #%lu, slot %d, chan #%u): %s\n",
                file, line, a->name, a->nops, atomic_load(&s->slot), atomic_load(&s->chan), msg);
    } else {
        fprintf(stderr, "fuzz: %s:%d: CHECK failed in %s: %s\n", file, line,
                a != NULL ? a->name : "?", msg);
    }
    report("a check failed");
    die();
}

#define ACHECK(a, cond)                                                            \
    do {                                                                           \
        if (!(cond))                                                               \
            fail_at((a), __FILE__, __LINE__, "%s", #cond);                         \
    } while (0)

#define ACHECK_EQ(a, x, y)                                                         \
    do {                                                                           \
        long long ax_ = (long long)(x), ay_ = (long long)(y);                      \
        if (ax_ != ay_)                                                            \
            fail_at((a), __FILE__, __LINE__, "%s == %s (%lld %s != %lld %s)", #x,  \
                    #y, ax_, errname(ax_), ay_, errname(ay_));                     \
    } while (0)

static void check_oneof(const struct actor *a, const char *file, int line, const char *expr,
                        long long r, const int *vals, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (r == vals[i])
            return;
    char set[256];
    size_t len = 0;
    set[0] = 0;
    for (size_t i = 0; i < n && len < sizeof set - 32; i++)
        len += (size_t)snprintf(set + len, sizeof set - len, "%s%s", i ? ", " : "",
                                errname(vals[i]));
    fail_at(a, file, line, "%s returned %lld (%s), expected one of {%s}", expr, r, errname(r),
            set);
}

#define ACHECK_ONEOF(a, r, ...)                                                    \
    check_oneof((a), __FILE__, __LINE__, #r, (long long)(r), (const int[]){__VA_ARGS__}, \
                sizeof((const int[]){__VA_ARGS__}) / sizeof(int))

/* A crash or a runtime abort ("gmp: ..." and SIGABRT) prints the FAILED line too. The
 * handlers are installed before the runtime starts, so its SIGSEGV handler chains to
 * this one for faults that are not stack overflows. */
static void on_fatal(int sig)
{
    ssize_t w = write(2, failed_text, failed_len);
    (void)w;
    signal(sig, SIG_DFL);
    raise(sig);
}

/* ---- the watchdog's view ---- */

enum {
    OP_SEND, OP_RECV, OP_SELECT, OP_CLOSE, OP_LENCAP, OP_REPLACE, OP_RETAIN,
    OP_CHAN_INVALID, OP_SELECT_INVALID, OP_MUTEX, OP_RWMUTEX, OP_COND, OP_WG, OP_ONCE,
    OP_YIELD, OP_SLEEP, OP_SPAWN, OP_MAXPROCS, OP_INFO, OP_SYSCALL, OP_LOCK, OP_FD,
    OP_INVALID, OP_PTHREAD, OP_SIGNAL, OP_SCOPE, OP_SIGWAIT, NOPS
};

/* C code's own pthread mutex (op_pthread) needs the runtime's signal handler, which a
 * ThreadSanitizer build does not install (rt/unseen.rs): not drawn there. */
#if defined(__SANITIZE_THREAD__)
#define PTHREAD_WEIGHT 0
#else
#define PTHREAD_WEIGHT 2
#endif

struct opdef {
    const char *name;
    int weight;
    unsigned ctx;   /* the contexts it may run in */
};

/* CTX_PINLOCK: inside a lock section of a pinned goroutine, which must not wait for
 * another goroutine (one bound to its thread cannot run until it unlocks): no channel of
 * the pool, no sync object, no fuzzer lock, no fd turn lock. CTX_LIGHT: a child with a
 * minimal stack. */
static const struct opdef opdefs[NOPS] = {
    [OP_SEND] = {"send", 18, CTX_FULL},
    [OP_RECV] = {"recv", 18, CTX_FULL},
    [OP_SELECT] = {"select", 10, CTX_FULL},
    [OP_CLOSE] = {"close", 1, CTX_FULL},
    [OP_LENCAP] = {"len/cap", 3, CTX_FULL},
    [OP_REPLACE] = {"replace", 2, CTX_FULL},
    [OP_RETAIN] = {"retain", 2, CTX_FULL},
    [OP_CHAN_INVALID] = {"chan-invalid", 2, CTX_FULL | CTX_PINLOCK},
    [OP_SELECT_INVALID] = {"select-invalid", 2, CTX_FULL | CTX_PINLOCK},
    [OP_MUTEX] = {"mutex", 5, CTX_FULL},
    [OP_RWMUTEX] = {"rwmutex", 4, CTX_FULL},
    [OP_COND] = {"cond", 3, CTX_FULL},
    [OP_WG] = {"wg", 2, CTX_FULL},
    [OP_ONCE] = {"once", 2, CTX_FULL},
    [OP_YIELD] = {"yield", 3, CTX_ALL},
    [OP_SLEEP] = {"sleep", 2, CTX_ALL},
    [OP_SPAWN] = {"spawn", 3, CTX_FULL},
    [OP_MAXPROCS] = {"maxprocs", 1, CTX_FULL},
    [OP_INFO] = {"info", 2, CTX_ALL},
    [OP_SYSCALL] = {"syscall", 4, CTX_FULL | CTX_PINLOCK},
    [OP_LOCK] = {"lock-section", 3, CTX_FULL | CTX_PINLOCK},
    [OP_FD] = {"fd", 2, CTX_FULL},
    [OP_INVALID] = {"invalid", 2, CTX_FULL | CTX_PINLOCK},
    [OP_PTHREAD] = {"pthread", PTHREAD_WEIGHT, CTX_FULL},
    [OP_SIGNAL] = {"signal", 1, CTX_ALL},
    [OP_SCOPE] = {"scope", 3, CTX_FULL},
    [OP_SIGWAIT] = {"sigwait", 1, CTX_FULL | CTX_PINLOCK},
};

static atomic_ulong op_count[NOPS];

/* Each op's weight: opdefs', or 0 for the ops FUZZ_OPS_OFF names (a comma-separated list
 * of op names, and "fd-fork" for op_fd's forked child), for a platform without a
 * mechanism an op needs (scripts/aarch64.sh). */
static int op_weight[NOPS];
static int fd_fork_off;

/* Whether the comma-separated list `list` names `name`. */
static int names(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p != NULL && *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return 1;
        p = end != NULL ? end + 1 : p + len;
    }
    return 0;
}

static void set_op_weights(void)
{
    const char *off = getenv("FUZZ_OPS_OFF");
    for (int i = 0; i < NOPS; i++)
        op_weight[i] = names(off, opdefs[i].name) ? 0 : opdefs[i].weight;
    fd_fork_off = names(off, "fd-fork");
}

static void note(const struct actor *a, int op)
{
    if (a->idx < 0)
        return;
    struct status *s = &status[a->idx];
    atomic_store(&s->op, op);
    atomic_store(&s->slot, -1);
    atomic_store(&s->chan, 0);
    atomic_store(&s->timeout, INT64_MIN);
    atomic_store(&s->sub, NULL);
    atomic_store(&s->lockdepth, a->lockdepth);
    atomic_store(&s->since, gmp_now());
    atomic_store(&s->inside, 1);
}

static void note_sub(const struct actor *a, const char *sub)
{
    if (a->idx >= 0)
        atomic_store(&status[a->idx].sub, sub);
}

static void note_done(const struct actor *a)
{
    if (a->idx < 0)
        return;
    struct status *s = &status[a->idx];
    atomic_store(&s->inside, 0);
    atomic_store(&s->since, gmp_now());
    atomic_fetch_add(&s->nops, 1);
}

/* ---- spin locks of the fuzzer's own bookkeeping (never held across a wait) ---- */

typedef atomic_int spin_t;

static void spin_lock(spin_t *l)
{
    while (atomic_exchange_explicit(l, 1, memory_order_acquire))
        while (atomic_load_explicit(l, memory_order_relaxed))
            gmp_yield();
}

static int spin_trylock(spin_t *l)
{
    return atomic_exchange_explicit(l, 1, memory_order_acquire) == 0;
}

static void spin_unlock(spin_t *l)
{
    atomic_store_explicit(l, 0, memory_order_release);
}

/* ---- channel records ---- */

static const size_t kind_caps[] = {0, 1, 2, 3, 7, 64};
static const size_t kind_elems[] = {0, 1, 8, 24, 200};
#define NCAPS (sizeof kind_caps / sizeof kind_caps[0])
#define NELEMS (sizeof kind_elems / sizeof kind_elems[0])
#define NKINDS ((int)(NCAPS * NELEMS))

struct chrec {
    gmp_chan *c;
    uint32_t id;
    size_t elem, cap;
    unsigned char tag1;        /* what 1-byte elements carry */
    spin_t lock;
    atomic_int refs;           /* the library's count, mirrored; changed under `lock` */
    atomic_int closing;        /* a close started */
    atomic_int closed;         /* a close returned 0 */
    atomic_int close_ok;       /* closes that returned 0 */
    atomic_int close_calls;
    atomic_int epipe_seen;     /* a receive returned -EPIPE */
    atomic_ullong sent_ok, received, sends_failed;
    int64_t born, life;
    struct chrec *prev, *next; /* the registry of live records, under reg_lock */
};

static spin_t reg_lock;
static struct chrec *reg_head;
static atomic_int reg_count;
static atomic_uint next_chan_id = 1;
static atomic_ulong chans_made, chans_finalized, chans_closed_by_janitor;

/* Addresses of released channels, to count how many new channels reuse one. */
#define NRELEASED 512
static spin_t released_lock;
static gmp_chan *released[NRELEASED];
static unsigned released_next;
static atomic_ulong addr_reused;

struct slot {
    spin_t lock;
    struct chrec *rec;  /* holds one reference */
};

static struct slot slots[NSLOT];

/* ---- value bookkeeping ---- */

#define CHUNK_BITS 16
#define CHUNK (1u << CHUNK_BITS)
#define MAXCHUNKS 2048
#define SEQ_MASK ((1ULL << 48) - 1)

#define VS_RECV_MASK 0xFu
#define VS_SENDING 0x10u
#define VS_SENT 0x20u
#define VS_FAILED 0x40u
#define VS_CHAN_SHIFT 8
#define VS_CHAN_MASK 0xFFFFFFu

static atomic_uint *_Atomic chunks[NPROD][MAXCHUNKS];
static atomic_ullong pseq[NPROD];

static atomic_uint *vstate(const struct actor *a, int prod, uint64_t seq, int create)
{
    uint64_t ci = seq >> CHUNK_BITS;
    if (ci >= MAXCHUNKS)
        fail_at(a, __FILE__, __LINE__, "producer %d ran out of value states (seq %llu): "
                "run shorter", prod, (unsigned long long)seq);
    atomic_uint *ch = atomic_load(&chunks[prod][ci]);
    if (ch == NULL && create) {
        atomic_uint *fresh = calloc(CHUNK, sizeof *fresh);
        ACHECK(a, fresh != NULL);
        atomic_uint *expected = NULL;
        if (atomic_compare_exchange_strong(&chunks[prod][ci], &expected, fresh)) {
            ch = fresh;
        } else {
            free(fresh);
            ch = expected;
        }
    }
    return ch != NULL ? &ch[seq & (CHUNK - 1)] : NULL;
}

static int tagged(const struct chrec *r)
{
    return r->elem >= 8;
}

/* A value about to be sent on `r`, written into `buf`; `*st` its state (NULL for an
 * element too small to carry one). */
static void new_value(const struct actor *a, const struct chrec *r, unsigned char *buf,
                      atomic_uint **st)
{
    *st = NULL;
    if (r->elem == 0)
        return;
    if (r->elem == 1) {
        buf[0] = r->tag1;
        return;
    }
    uint64_t seq = atomic_fetch_add(&pseq[a->prod], 1);
    *st = vstate(a, a->prod, seq, 1);
    atomic_store(*st, VS_SENDING | (r->id & VS_CHAN_MASK) << VS_CHAN_SHIFT);
    uint64_t v = (uint64_t)(a->prod + 1) << 48 | seq;
    memcpy(buf, &v, 8);
    if (r->elem >= 24) {
        uint64_t cid = r->id;
        uint64_t h = splitmix(v ^ (cid << 20));
        memcpy(buf + 8, &cid, 8);
        memcpy(buf + 16, &h, 8);
        for (size_t i = 24; i < r->elem; i++)
            buf[i] = (unsigned char)((h >> ((i & 7) * 8)) + i);
    }
}

/* The outcome of a send of a value made by new_value. */
static void send_outcome(const struct actor *a, struct chrec *r, atomic_uint *st,
                         const unsigned char *buf, int sent, int rc)
{
    if (sent) {
        if (st != NULL)
            atomic_fetch_or(st, VS_SENT);
        atomic_fetch_add(&r->sent_ok, 1);
        return;
    }
    atomic_fetch_add(&r->sends_failed, 1);
    if (st != NULL) {
        unsigned old = atomic_fetch_or(st, VS_FAILED);
        if (old & VS_RECV_MASK) {
            uint64_t v;
            memcpy(&v, buf, 8);
            fail_at(a, __FILE__, __LINE__, "value %llu/%llu on chan #%u (elem %zu cap %zu) "
                    "was received although its send did not happen (%d, %s; in a select: the "
                    "case that fired, or the select's result)",
                    (unsigned long long)(v >> 48), (unsigned long long)(v & SEQ_MASK), r->id,
                    r->elem, r->cap, rc, errname(rc));
        }
    }
}

/* A value received from `r` into `buf` (NULL: discarded, only for untagged elements). */
static void on_recv(const struct actor *a, struct chrec *r, const unsigned char *buf)
{
    if (buf == NULL || r->elem == 0) {
        ACHECK(a, !tagged(r));
        atomic_fetch_add(&r->received, 1);
        return;
    }
    if (r->elem == 1) {
        if (buf[0] != r->tag1)
            fail_at(a, __FILE__, __LINE__, "chan #%u (elem 1 cap %zu): received byte %u, "
                    "its values carry %u", r->id, r->cap, buf[0], r->tag1);
        atomic_fetch_add(&r->received, 1);
        return;
    }
    uint64_t v;
    memcpy(&v, buf, 8);
    unsigned long long pid = v >> 48, seq = v & SEQ_MASK;
    if (pid < 1 || pid > NPROD || seq >= atomic_load(&pseq[pid - 1]))
        fail_at(a, __FILE__, __LINE__, "chan #%u (elem %zu cap %zu): received a value "
                "nobody made: %#llx", r->id, r->elem, r->cap, (unsigned long long)v);
    if (r->elem >= 24) {
        uint64_t cid, h;
        memcpy(&cid, buf + 8, 8);
        memcpy(&h, buf + 16, 8);
        if (cid != r->id)
            fail_at(a, __FILE__, __LINE__, "value %llu/%llu made for chan #%llu received "
                    "on chan #%u (elem %zu cap %zu)", pid, seq, (unsigned long long)cid,
                    r->id, r->elem, r->cap);
        if (h != splitmix(v ^ (cid << 20)))
            fail_at(a, __FILE__, __LINE__, "value %llu/%llu on chan #%u: corrupt hash",
                    pid, seq, r->id);
        for (size_t i = 24; i < r->elem; i++)
            if (buf[i] != (unsigned char)((h >> ((i & 7) * 8)) + i))
                fail_at(a, __FILE__, __LINE__, "value %llu/%llu on chan #%u: byte %zu "
                        "corrupt", pid, seq, r->id, i);
    }
    atomic_uint *st = vstate(a, (int)pid - 1, seq, 0);
    if (st == NULL)
        fail_at(a, __FILE__, __LINE__, "value %llu/%llu on chan #%u has no state", pid, seq,
                r->id);
    unsigned old = atomic_fetch_add(st, 1);
    if (!(old & VS_SENDING))
        fail_at(a, __FILE__, __LINE__, "value %llu/%llu received on chan #%u before its "
                "send started (state %#x)", pid, seq, r->id, old);
    if (((old >> VS_CHAN_SHIFT) & VS_CHAN_MASK) != (r->id & VS_CHAN_MASK))
        fail_at(a, __FILE__, __LINE__, "value %llu/%llu sent on chan #%u received on chan "
                "#%u", pid, seq, (old >> VS_CHAN_SHIFT) & VS_CHAN_MASK, r->id);
    if (old & VS_RECV_MASK)
        fail_at(a, __FILE__, __LINE__, "value %llu/%llu on chan #%u (elem %zu cap %zu) "
                "received twice", pid, seq, r->id, r->elem, r->cap);
    if (old & VS_FAILED)
        fail_at(a, __FILE__, __LINE__, "value %llu/%llu on chan #%u received although its "
                "send failed", pid, seq, r->id);
    atomic_fetch_add(&r->received, 1);
}

static int all_zero(const unsigned char *buf, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (buf[i] != 0)
            return 0;
    return 1;
}

static int all_byte(const unsigned char *buf, size_t n, unsigned char b)
{
    for (size_t i = 0; i < n; i++)
        if (buf[i] != b)
            return 0;
    return 1;
}

/* Lists (up to 10) values sent on chan `id` whose state is not final-consistent. */
static int list_bad_values(uint32_t id, int any_chan)
{
    int bad = 0;
    for (int p = 0; p < NPROD; p++) {
        uint64_t n = atomic_load(&pseq[p]);
        for (uint64_t s = 0; s < n; s++) {
            atomic_uint *ch = atomic_load(&chunks[p][s >> CHUNK_BITS]);
            if (ch == NULL)
                continue;
            unsigned st = atomic_load(&ch[s & (CHUNK - 1)]);
            unsigned cid = (st >> VS_CHAN_SHIFT) & VS_CHAN_MASK;
            if (!any_chan && cid != (id & VS_CHAN_MASK))
                continue;
            unsigned recvs = st & VS_RECV_MASK;
            const char *what = NULL;
            if (!(st & VS_SENDING))
                what = "has no send";
            else if ((st & VS_SENT) && recvs == 0)
                what = "was sent (0) but never received: lost";
            else if ((st & VS_SENT) && recvs > 1)
                what = "was received more than once";
            else if ((st & VS_FAILED) && recvs > 0)
                what = "was received although its send failed";
            else if (!(st & (VS_SENT | VS_FAILED)))
                what = "has no send outcome";
            if (what != NULL) {
                if (bad < 10)
                    fprintf(stderr, "fuzz: value %d/%llu on chan #%u %s (state %#x)\n", p + 1,
                            (unsigned long long)s, cid, what, st);
                bad++;
            }
        }
    }
    return bad;
}

/* ---- references ---- */

static void registry_add(struct chrec *r)
{
    spin_lock(&reg_lock);
    r->prev = NULL;
    r->next = reg_head;
    if (reg_head != NULL)
        reg_head->prev = r;
    reg_head = r;
    atomic_fetch_add(&reg_count, 1);
    spin_unlock(&reg_lock);
}

static void registry_remove(struct chrec *r)
{
    spin_lock(&reg_lock);
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        reg_head = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    atomic_fetch_sub(&reg_count, 1);
    spin_unlock(&reg_lock);
}

/* Makes a channel of `kind` living `life` ns, holding one reference (the caller's). */
static struct chrec *make_rec(const struct actor *a, int kind, int64_t life)
{
    struct chrec *r = calloc(1, sizeof *r);
    ACHECK(a, r != NULL);
    r->id = atomic_fetch_add(&next_chan_id, 1);
    r->cap = kind_caps[(size_t)kind / NELEMS];
    r->elem = kind_elems[(size_t)kind % NELEMS];
    r->tag1 = (unsigned char)(1 + r->id % 255);
    gmp_chan *c = (gmp_chan *)(uintptr_t)0x5a5a;
    ACHECK_EQ(a, gmp_chan_make(&c, r->elem, r->cap), 0);
    ACHECK(a, c != NULL && c != (gmp_chan *)(uintptr_t)0x5a5a);
    r->c = c;
    atomic_store(&r->refs, 1);
    r->born = gmp_now();
    r->life = life;
    ACHECK_EQ(a, gmp_chan_cap(c), (long long)r->cap);
    ACHECK_EQ(a, gmp_chan_len(c), 0);
    spin_lock(&released_lock);
    for (unsigned i = 0; i < NRELEASED; i++)
        if (released[i] == c) {
            atomic_fetch_add(&addr_reused, 1);
            released[i] = NULL;
            break;
        }
    spin_unlock(&released_lock);
    atomic_fetch_add(&chans_made, 1);
    registry_add(r);
    return r;
}

/* Adds a reference for the caller; someone else holds one throughout. */
static void rec_retain(const struct actor *a, struct chrec *r)
{
    spin_lock(&r->lock);
    ACHECK(a, atomic_load(&r->refs) > 0);
    ACHECK_EQ(a, gmp_chan_retain(r->c), 0);
    atomic_fetch_add(&r->refs, 1);
    spin_unlock(&r->lock);
}

/* Adds a reference if the record still has one (the registry's sweeps). */
static int rec_try_retain(const struct actor *a, struct chrec *r)
{
    int ok = 0;
    spin_lock(&r->lock);
    if (atomic_load(&r->refs) > 0) {
        ACHECK_EQ(a, gmp_chan_retain(r->c), 0);
        atomic_fetch_add(&r->refs, 1);
        ok = 1;
    }
    spin_unlock(&r->lock);
    return ok;
}

static void do_close(const struct actor *a, struct chrec *r, int expect_first);

/* The last reference: nobody else can operate on the channel. Drain it, check its
 * accounts, release it. */
static void finalize(const struct actor *a, struct chrec *r)
{
    note_sub(a, "finalizing a channel");
    int64_t len = gmp_chan_len(r->c);
    ACHECK(a, len >= 0 && (size_t)len <= r->cap);
    int64_t drained = 0;
    unsigned char buf[MAXELEM];
    int rc;
    for (;;) {
        memset(buf, 0xA5, sizeof buf);
        rc = gmp_chan_try_recv(r->c, buf);
        if (rc != 0)
            break;
        on_recv(a, r, buf);
        drained++;
    }
    if (atomic_load(&r->closing)) {
        ACHECK_EQ(a, rc, -EPIPE);
        ACHECK(a, all_zero(buf, r->elem));
        ACHECK_EQ(a, atomic_load(&r->close_ok), 1);
    } else {
        ACHECK_EQ(a, rc, -EAGAIN);
        ACHECK_EQ(a, atomic_load(&r->close_calls), 0);
    }
    if (drained != len)
        fail_at(a, __FILE__, __LINE__, "chan #%u (elem %zu cap %zu): gmp_chan_len said %lld "
                "with nobody else holding it, the drain found %lld", r->id, r->elem, r->cap,
                (long long)len, (long long)drained);
    ACHECK_EQ(a, gmp_chan_len(r->c), 0);
    /* Half of the channels nobody closed get closed now, by a choice fixed by the id. */
    if (!atomic_load(&r->closing) && (splitmix(seed ^ r->id) & 1)) {
        do_close(a, r, 1);
        ACHECK_EQ(a, gmp_chan_try_recv(r->c, buf), -EPIPE);
    }
    unsigned long long s = atomic_load(&r->sent_ok), rv = atomic_load(&r->received);
    if (s != rv) {
        fprintf(stderr, "fuzz: chan #%u (elem %zu cap %zu): %llu values sent, %llu received "
                "(drained %lld at the end)\n", r->id, r->elem, r->cap, s, rv,
                (long long)drained);
        if (tagged(r))
            list_bad_values(r->id, 0);
        fail_at(a, __FILE__, __LINE__, "chan #%u: conservation broken: sent %llu received "
                "%llu", r->id, s, rv);
    }
    registry_remove(r);
    gmp_chan *c = r->c;
    spin_lock(&released_lock);
    released[released_next++ % NRELEASED] = c;
    spin_unlock(&released_lock);
    atomic_fetch_add(&chans_finalized, 1);
    free(r);
    ACHECK_EQ(a, gmp_chan_release(c), 0);
    note_sub(a, NULL);
}

/* Drops the caller's reference; the last one finalizes. */
static void rec_put(const struct actor *a, struct chrec *r)
{
    spin_lock(&r->lock);
    int left = atomic_fetch_sub(&r->refs, 1) - 1;
    ACHECK(a, left >= 0);
    if (left > 0)
        ACHECK_EQ(a, gmp_chan_release(r->c), 0);
    spin_unlock(&r->lock);
    if (left == 0)
        finalize(a, r);
}

/* A reference to the channel in `slot`. */
static struct chrec *acquire(const struct actor *a, int slot)
{
    note_sub(a, "acquiring a slot");
    spin_lock(&slots[slot].lock);
    struct chrec *r = slots[slot].rec;
    rec_retain(a, r);
    spin_unlock(&slots[slot].lock);
    note_sub(a, NULL);
    if (a->idx >= 0) {
        atomic_store(&status[a->idx].slot, slot);
        atomic_store(&status[a->idx].chan, r->id);
    }
    return r;
}

/* Closes `r` (the caller holds a reference). `expect_first`: nobody else can close it. */
static void do_close(const struct actor *a, struct chrec *r, int expect_first)
{
    atomic_store(&r->closing, 1);
    atomic_fetch_add(&r->close_calls, 1);
    int rc = gmp_chan_close(r->c);
    if (expect_first)
        ACHECK_EQ(a, rc, 0);
    ACHECK_ONEOF(a, rc, 0, -EPIPE);
    if (rc == 0) {
        atomic_fetch_add(&r->close_ok, 1);
        atomic_store(&r->closed, 1);
    }
    /* Closed now, whoever did it. */
    ACHECK_EQ(a, gmp_chan_close(r->c), -EPIPE);
    atomic_fetch_add(&r->close_calls, 1);
}

/* Puts a new channel into `slot`; the old one is closed first if `close_old`, and its
 * slot reference dropped. */
static void replace(const struct actor *a, int slot, int kind, int64_t life, int close_old)
{
    struct chrec *fresh = make_rec(a, kind, life);
    spin_lock(&slots[slot].lock);
    struct chrec *old = slots[slot].rec;
    slots[slot].rec = fresh;
    spin_unlock(&slots[slot].lock);
    if (old == NULL)
        return;
    if (close_old)
        do_close(a, old, 0);
    rec_put(a, old);
}

/* Closes every live channel (`all`), or those past their lifetime. */
static void sweep(const struct actor *a, int all)
{
    struct chrec **list = NULL;
    size_t n = 0, capacity = 0;
    int64_t now = gmp_now();
    spin_lock(&reg_lock);
    for (struct chrec *r = reg_head; r != NULL; r = r->next) {
        if (atomic_load(&r->closed) || (!all && now - r->born < r->life))
            continue;
        if (!rec_try_retain(a, r))
            continue;
        if (n == capacity) {
            capacity = capacity ? 2 * capacity : 64;
            list = realloc(list, capacity * sizeof *list);
            ACHECK(a, list != NULL);
        }
        list[n++] = r;
    }
    spin_unlock(&reg_lock);
    for (size_t i = 0; i < n; i++) {
        if (!atomic_load(&list[i]->closed)) {
            do_close(a, list[i], 0);
            atomic_fetch_add(&chans_closed_by_janitor, 1);
        }
        rec_put(a, list[i]);
    }
    free(list);
}

/* ---- timeouts and channel calls by mode ---- */

enum { M_BLOCK, M_TRY, M_T0, M_TSHORT, M_TLONG, M_TNEG, NMODES };
static const char *const mode_names[NMODES] = {
    "blocking", "try", "timeout 0", "short timeout", "timeout", "negative timeout",
};

static int64_t draw_timeout(struct actor *a, int mode)
{
    uint32_t x = rnd_below(&a->rng, 2000);
    switch (mode) {
    case M_T0: return 0;
    case M_TSHORT: return 1 + (int64_t)(x % 50) * US;
    case M_TLONG: return 50 * US + (int64_t)x * US;
    case M_TNEG: return -1 - (int64_t)x;
    default: return INT64_MIN;
    }
}

static void check_waited(const struct actor *a, int64_t t0, int64_t timeout)
{
    int64_t waited = gmp_now() - t0;
    if (waited < timeout)
        fail_at(a, __FILE__, __LINE__, "a timeout of %lld ns returned -ETIMEDOUT after %lld ns",
                (long long)timeout, (long long)waited);
}

static int chan_send(gmp_chan *c, const void *p, int mode, int64_t to)
{
    switch (mode) {
    case M_BLOCK: return gmp_chan_send(c, p);
    case M_TRY: return gmp_chan_try_send(c, p);
    default: return gmp_chan_send_timeout(c, p, to);
    }
}

static int chan_recv(gmp_chan *c, void *p, int mode, int64_t to)
{
    switch (mode) {
    case M_BLOCK: return gmp_chan_recv(c, p);
    case M_TRY: return gmp_chan_try_recv(c, p);
    default: return gmp_chan_recv_timeout(c, p, to);
    }
}

static void note_timeout(const struct actor *a, int64_t to)
{
    if (a->idx >= 0)
        atomic_store(&status[a->idx].timeout, to);
}

/* Whether `rc` is the end a scope gives a wait (op_scope): -ECANCELED, or -ETIMEDOUT
 * before the call's own timeout. A call that may not wait (try, timeout 0) never sees it. */
static int scope_ended(const struct actor *a, int mode, int rc)
{
    if (!a->scoped || mode == M_TRY || mode == M_T0)
        return 0;
    return rc == -ECANCELED || rc == -ETIMEDOUT;
}

/* One send on `r` in `mode`, with every documented outcome checked. `nullelem`: a NULL
 * element pointer (-EINVAL unless the element size is 0). `closed_known`: the caller saw
 * the channel closed (-EPIPE is the only answer). */
static void send_on(struct actor *a, struct chrec *r, int mode, int64_t to, int nullelem,
                    int closed_known)
{
    unsigned char buf[MAXELEM];
    atomic_uint *st = NULL;
    if (nullelem && r->elem > 0) {
        ACHECK_EQ(a, chan_send(r->c, NULL, mode, to), -EINVAL);
        return;
    }
    new_value(a, r, buf, &st);
    int was_closed = closed_known || atomic_load(&r->closed);
    int64_t t0 = gmp_now();
    int rc = chan_send(r->c, nullelem ? NULL : buf, mode, to);
    int ended = scope_ended(a, mode, rc);
    switch (ended ? -1 : mode) {
    case -1: break;
    case M_BLOCK:
    case M_TNEG: ACHECK_ONEOF(a, rc, 0, -EPIPE); break;
    case M_TRY: ACHECK_ONEOF(a, rc, 0, -EAGAIN, -EPIPE); break;
    default: ACHECK_ONEOF(a, rc, 0, -ETIMEDOUT, -EPIPE); break;
    }
    if (was_closed && rc != -EPIPE)
        fail_at(a, __FILE__, __LINE__, "%s send on chan #%u (elem %zu cap %zu) closed before "
                "it started returned %d (%s), not -EPIPE", mode_names[mode], r->id, r->elem,
                r->cap, rc, errname(rc));
    if (rc == -EPIPE)
        ACHECK(a, atomic_load(&r->closing));
    if (rc == -ETIMEDOUT && !ended)
        check_waited(a, t0, to);
    send_outcome(a, r, st, buf, rc == 0, rc);
}

/* One receive from `r` in `mode`. `nullout`: into NULL (only where values carry no state). */
static void recv_on(struct actor *a, struct chrec *r, int mode, int64_t to, int nullout)
{
    unsigned char buf[MAXELEM];
    memset(buf, 0xA5, sizeof buf);
    int use_null = nullout && !tagged(r);
    int was_closed = atomic_load(&r->closed);
    int was_drained = atomic_load(&r->epipe_seen);
    int64_t len0 = was_closed ? gmp_chan_len(r->c) : -1;
    int64_t t0 = gmp_now();
    int rc = chan_recv(r->c, use_null ? NULL : buf, mode, to);
    int ended = scope_ended(a, mode, rc);
    switch (ended ? -1 : mode) {
    case -1: break;
    case M_BLOCK:
    case M_TNEG: ACHECK_ONEOF(a, rc, 0, -EPIPE); break;
    case M_TRY: ACHECK_ONEOF(a, rc, 0, -EAGAIN, -EPIPE); break;
    default: ACHECK_ONEOF(a, rc, 0, -ETIMEDOUT, -EPIPE); break;
    }
    if ((was_drained || len0 == 0) && rc != -EPIPE)
        fail_at(a, __FILE__, __LINE__, "%s receive on chan #%u (elem %zu cap %zu), closed and "
                "empty before it started (len %lld, -EPIPE seen %d), returned %d (%s)",
                mode_names[mode], r->id, r->elem, r->cap, (long long)len0, was_drained, rc,
                errname(rc));
    if (was_closed && rc != 0 && rc != -EPIPE)
        fail_at(a, __FILE__, __LINE__, "%s receive on chan #%u closed before it started "
                "returned %d (%s): a closed channel is always ready", mode_names[mode], r->id,
                rc, errname(rc));
    if (rc == 0) {
        on_recv(a, r, use_null ? NULL : buf);
    } else if (rc == -EPIPE) {
        ACHECK(a, atomic_load(&r->closing));
        if (!use_null && !all_zero(buf, r->elem))
            fail_at(a, __FILE__, __LINE__, "receive on chan #%u returned -EPIPE without "
                    "zeroing its %zu bytes", r->id, r->elem);
        atomic_store(&r->epipe_seen, 1);
    } else if (rc == -ETIMEDOUT || ended) {
        if (!ended)
            check_waited(a, t0, to);
        if (!use_null && !all_byte(buf, sizeof buf, 0xA5))
            fail_at(a, __FILE__, __LINE__, "receive on chan #%u timed out but wrote its buffer",
                    r->id);
    }
}

/* ---- channel ops ---- */

static void op_send(struct actor *a)
{
    int slot = (int)rnd_below(&a->rng, NSLOT);
    int mode = (int)rnd_below(&a->rng, NMODES);
    int64_t to = draw_timeout(a, mode);
    int nullelem = rnd_below(&a->rng, 24) == 0;
    struct chrec *r = acquire(a, slot);
    note_timeout(a, to);
    send_on(a, r, mode, to, nullelem, 0);
    rec_put(a, r);
}

static void op_recv(struct actor *a)
{
    int slot = (int)rnd_below(&a->rng, NSLOT);
    int mode = (int)rnd_below(&a->rng, NMODES);
    int64_t to = draw_timeout(a, mode);
    int nullout = rnd_below(&a->rng, 4) == 0;
    struct chrec *r = acquire(a, slot);
    note_timeout(a, to);
    recv_on(a, r, mode, to, nullout);
    rec_put(a, r);
}

static void op_select(struct actor *a)
{
    int n = 1 + (int)rnd_below(&a->rng, MAXCASES);
    int cslot[MAXCASES], csend[MAXCASES], cnull[MAXCASES], cnullbuf[MAXCASES];
    int live = 0;
    for (int i = 0; i < n; i++) {
        cslot[i] = (int)rnd_below(&a->rng, NSLOT);
        csend[i] = (int)rnd_below(&a->rng, 2);
        cnull[i] = rnd_below(&a->rng, 7) == 0;
        cnullbuf[i] = rnd_below(&a->rng, 4) == 0;
        live += !cnull[i];
    }
    int tmode = (int)rnd_below(&a->rng, 4);
    int64_t to = tmode == 0 ? 0 : draw_timeout(a, tmode == 1 ? M_TSHORT : tmode == 2 ? M_TLONG
                                                                                  : M_TNEG);
    if (live == 0 && to < 0)
        to = 0; /* a select of NULL channels only without a timeout is -EINVAL (op_select_invalid) */
    note_timeout(a, to);

    struct chrec *recs[MAXCASES];
    gmp_select_case cs[MAXCASES];
    unsigned char bufs[MAXCASES][MAXELEM];
    atomic_uint *sts[MAXCASES];
    int closed_before[MAXCASES], drained_before[MAXCASES];
    int ready_before = 0;
    for (int i = 0; i < n; i++) {
        recs[i] = cnull[i] ? NULL : acquire(a, cslot[i]);
        sts[i] = NULL;
        memset(bufs[i], 0xA5, MAXELEM);
        void *buf = bufs[i];
        if (csend[i] && recs[i] != NULL) {
            new_value(a, recs[i], bufs[i], &sts[i]);
            if (cnullbuf[i] && recs[i]->elem == 0)
                buf = NULL;
        } else if (!csend[i] && recs[i] != NULL && cnullbuf[i] && !tagged(recs[i])) {
            buf = NULL;
        }
        cs[i].chan = recs[i] != NULL ? recs[i]->c : NULL;
        cs[i].op = csend[i] ? GMP_SEND : GMP_RECV;
        cs[i].buf = buf;
        cs[i].status = 12345;
    }
    for (int i = 0; i < n; i++) {
        closed_before[i] = recs[i] != NULL && atomic_load(&recs[i]->closed);
        drained_before[i] = recs[i] != NULL && atomic_load(&recs[i]->epipe_seen);
        ready_before |= closed_before[i];
    }
    int64_t t0 = gmp_now();
    int k = gmp_select(cs, (size_t)n, to);
    int ended = scope_ended(a, M_BLOCK, k);
    if (k == -ETIMEDOUT || ended) {
        if (!ended) {
            ACHECK(a, to >= 0);
            check_waited(a, t0, to);
        }
        if (ready_before)
            fail_at(a, __FILE__, __LINE__, "select of %d cases returned %s although one "
                    "case's channel was closed before it started", n, errname(k));
    } else {
        if (k < 0 || k >= n)
            fail_at(a, __FILE__, __LINE__, "select of %d cases (timeout %lld) returned %d (%s)",
                    n, (long long)to, k, errname(k));
        ACHECK(a, cs[k].chan != NULL);
        struct chrec *r = recs[k];
        int stt = cs[k].status;
        ACHECK_ONEOF(a, stt, 0, -EPIPE);
        if (stt == -EPIPE)
            ACHECK(a, atomic_load(&r->closing));
        if (csend[k]) {
            if (stt == 0 && closed_before[k])
                fail_at(a, __FILE__, __LINE__, "select sent on chan #%u, closed before it "
                        "started", r->id);
        } else if (stt == 0) {
            if (drained_before[k])
                fail_at(a, __FILE__, __LINE__, "select received from chan #%u after a "
                        "receive had returned -EPIPE", r->id);
            on_recv(a, r, cs[k].buf);
        } else {
            if (cs[k].buf != NULL && !all_zero(bufs[k], r->elem))
                fail_at(a, __FILE__, __LINE__, "select receive on chan #%u returned -EPIPE "
                        "without zeroing its buffer", r->id);
            atomic_store(&r->epipe_seen, 1);
        }
    }
    for (int i = 0; i < n; i++) {
        if (i != k) {
            if (cs[i].status != 12345)
                fail_at(a, __FILE__, __LINE__, "select case %d of %d wrote status %d but case "
                        "%d fired", i, n, cs[i].status, k);
            if (!csend[i] && !all_byte(bufs[i], MAXELEM, 0xA5))
                fail_at(a, __FILE__, __LINE__, "select receive case %d of %d wrote its buffer "
                        "but case %d fired", i, n, k);
        }
        if (csend[i] && recs[i] != NULL)
            send_outcome(a, recs[i], sts[i], bufs[i], i == k && cs[k].status == 0,
                         i == k ? cs[k].status : k);
    }
    for (int i = 0; i < n; i++)
        if (recs[i] != NULL)
            rec_put(a, recs[i]);
}

static void op_close(struct actor *a)
{
    int slot = (int)rnd_below(&a->rng, NSLOT);
    struct chrec *r = acquire(a, slot);
    do_close(a, r, 0);
    /* Closed: a send gets -EPIPE, whatever the buffer holds. */
    send_on(a, r, M_TRY, 0, 0, 1);
    rec_put(a, r);
}

static void op_lencap(struct actor *a)
{
    int slot = (int)rnd_below(&a->rng, NSLOT);
    struct chrec *r = acquire(a, slot);
    ACHECK_EQ(a, gmp_chan_cap(r->c), (long long)r->cap);
    int64_t len = gmp_chan_len(r->c);
    if (len < 0 || (size_t)len > r->cap)
        fail_at(a, __FILE__, __LINE__, "gmp_chan_len of chan #%u (cap %zu) = %lld", r->id,
                r->cap, (long long)len);
    rec_put(a, r);
}

static void op_replace(struct actor *a)
{
    int slot = (int)rnd_below(&a->rng, NSLOT);
    int kind = (int)rnd_below(&a->rng, (uint32_t)NKINDS);
    int64_t life = (20 + (int64_t)rnd_below(&a->rng, 280)) * MS;
    int close_old = (int)rnd_below(&a->rng, 2);
    note_sub(a, close_old ? "replace, closing the old" : "replace, old left open");
    replace(a, slot, kind, life, close_old);
}

/* An extra reference held across an operation, and a retain/release pair. */
static void op_retain(struct actor *a)
{
    int slot = (int)rnd_below(&a->rng, NSLOT);
    int send = (int)rnd_below(&a->rng, 2);
    struct chrec *r = acquire(a, slot);
    rec_retain(a, r);
    spin_lock(&r->lock);
    ACHECK_EQ(a, gmp_chan_retain(r->c), 0);
    ACHECK_EQ(a, gmp_chan_release(r->c), 0);
    spin_unlock(&r->lock);
    rec_put(a, r);
    if (send)
        send_on(a, r, M_TRY, 0, 0, 0);
    else
        recv_on(a, r, M_TRY, 0, 0);
    rec_put(a, r);
}

static void op_chan_invalid(struct actor *a)
{
    int which = (int)rnd_below(&a->rng, 6);
    unsigned char small[16] = {0};
    unsigned char *buf = small;
    gmp_chan *c = (gmp_chan *)(uintptr_t)0x5a5a;
    gmp_chan *const sentinel = c;
    switch (which) {
    case 0: /* NULL channel everywhere */
        ACHECK_EQ(a, gmp_chan_send(NULL, buf), -EINVAL);
        ACHECK_EQ(a, gmp_chan_recv(NULL, buf), -EINVAL);
        ACHECK_EQ(a, gmp_chan_try_send(NULL, buf), -EINVAL);
        ACHECK_EQ(a, gmp_chan_try_recv(NULL, buf), -EINVAL);
        ACHECK_EQ(a, gmp_chan_send_timeout(NULL, buf, 0), -EINVAL);
        ACHECK_EQ(a, gmp_chan_send_timeout(NULL, buf, -1), -EINVAL);
        ACHECK_EQ(a, gmp_chan_recv_timeout(NULL, buf, 1000), -EINVAL);
        ACHECK_EQ(a, gmp_chan_recv_timeout(NULL, NULL, -1), -EINVAL);
        ACHECK_EQ(a, gmp_chan_close(NULL), -EINVAL);
        ACHECK_EQ(a, gmp_chan_len(NULL), -EINVAL);
        ACHECK_EQ(a, gmp_chan_cap(NULL), -EINVAL);
        ACHECK_EQ(a, gmp_chan_retain(NULL), -EINVAL);
        ACHECK_EQ(a, gmp_chan_release(NULL), -EINVAL);
        break;
    case 1: /* gmp_chan_make's bad arguments; *out untouched */
        ACHECK_EQ(a, gmp_chan_make(NULL, 8, 1), -EINVAL);
        ACHECK_EQ(a, gmp_chan_make(&c, GMP_CHAN_MAX_ELEM + 1, 0), -EINVAL);
        ACHECK_EQ(a, gmp_chan_make(&c, SIZE_MAX, 1), -EINVAL);
        ACHECK_EQ(a, gmp_chan_make(&c, 8, ((size_t)1 << 31) + 1), -EINVAL);
        ACHECK_EQ(a, gmp_chan_make(&c, 1, SIZE_MAX), -EINVAL);
        ACHECK(a, c == sentinel);
        break;
    case 2: /* a buffer of 2^31 elements of 64 KiB cannot be allocated */
        ACHECK_EQ(a, gmp_chan_make(&c, GMP_CHAN_MAX_ELEM, (size_t)1 << 31), -ENOMEM);
        ACHECK(a, c == sentinel);
        break;
    default: {
        /* The whole life of a private channel: of the largest element, of empty ones, of
         * one-byte ones with a buffer of one. */
        size_t elem = which == 3 ? GMP_CHAN_MAX_ELEM : which == 4 ? 0 : 1;
        size_t cap = which == 5 ? 1 : 0;
        unsigned char *big = malloc(GMP_CHAN_MAX_ELEM);
        ACHECK(a, big != NULL);
        memset(big, 0, GMP_CHAN_MAX_ELEM);
        unsigned char *buf = big;
        ACHECK_EQ(a, gmp_chan_make(&c, elem, cap), 0);
        ACHECK(a, c != sentinel && c != NULL);
        ACHECK_EQ(a, gmp_chan_cap(c), (long long)cap);
        ACHECK_EQ(a, gmp_chan_len(c), 0);
        if (elem > 0) {
            ACHECK_EQ(a, gmp_chan_try_send(c, NULL), -EINVAL);
            ACHECK_EQ(a, gmp_chan_send_timeout(c, NULL, 0), -EINVAL);
        }
        ACHECK_EQ(a, gmp_chan_try_recv(c, buf), -EAGAIN);
        ACHECK_EQ(a, gmp_chan_recv_timeout(c, buf, 0), -ETIMEDOUT);
        if (cap == 1) {
            ACHECK_EQ(a, gmp_chan_try_send(c, buf), 0);
            ACHECK_EQ(a, gmp_chan_len(c), 1);
            ACHECK_EQ(a, gmp_chan_try_send(c, buf), -EAGAIN);
            ACHECK_EQ(a, gmp_chan_send_timeout(c, buf, 0), -ETIMEDOUT);
        } else {
            ACHECK_EQ(a, gmp_chan_try_send(c, elem ? (void *)buf : NULL), -EAGAIN);
        }
        ACHECK_EQ(a, gmp_chan_retain(c), 0);
        ACHECK_EQ(a, gmp_chan_close(c), 0);
        ACHECK_EQ(a, gmp_chan_close(c), -EPIPE);
        ACHECK_EQ(a, gmp_chan_release(c), 0);
        ACHECK_EQ(a, gmp_chan_try_send(c, buf), -EPIPE);
        if (cap == 1) {
            buf[0] = 0xA5;
            ACHECK_EQ(a, gmp_chan_recv(c, buf), 0);
            ACHECK_EQ(a, buf[0], 0); /* what was sent */
        }
        memset(buf, 0xA5, elem);
        ACHECK_EQ(a, gmp_chan_recv(c, buf), -EPIPE);
        ACHECK(a, all_zero(buf, elem));
        ACHECK_EQ(a, gmp_chan_try_recv(c, NULL), -EPIPE);
        ACHECK_EQ(a, gmp_chan_recv_timeout(c, buf, -1), -EPIPE);
        ACHECK_EQ(a, gmp_chan_len(c), 0);
        ACHECK_EQ(a, gmp_chan_release(c), 0);
        free(big);
        break;
    }
    }
}

/* n > 65536 cases: a shared array of disabled cases. */
static gmp_select_case many_cases[65537];

static void op_select_invalid(struct actor *a)
{
    int which = (int)rnd_below(&a->rng, 8);
    int slot = (int)rnd_below(&a->rng, NSLOT);
    uint32_t badop = rnd_below(&a->rng, 3) == 0 ? 0u : rnd_below(&a->rng, 2) ? 3u : UINT32_MAX;
    int restricted = a->pinned && a->lockdepth > 0;
    gmp_select_case cs[3];
    unsigned char bufs[3][MAXELEM];
    memset(cs, 0, sizeof cs);
    memset(bufs, 0xA5, sizeof bufs);
    switch (which) {
    case 0:
        ACHECK_EQ(a, gmp_select(NULL, 1, 0), -EINVAL);
        ACHECK_EQ(a, gmp_select(NULL, 3, -1), -EINVAL);
        ACHECK_EQ(a, gmp_select(NULL, 0, 0), -ETIMEDOUT);
        ACHECK_EQ(a, gmp_select(NULL, 0, -1), -EINVAL);
        ACHECK_EQ(a, gmp_select(cs, 0, -1), -EINVAL);
        break;
    case 1: {
        int64_t t0 = gmp_now();
        ACHECK_EQ(a, gmp_select(NULL, 0, 20 * US), -ETIMEDOUT);
        check_waited(a, t0, 20 * US);
        break;
    }
    case 2:
        ACHECK_EQ(a, gmp_select(many_cases, 65537, 0), -EINVAL);
        ACHECK_EQ(a, gmp_select(many_cases, (size_t)1 << 40, 0), -EINVAL);
        break;
    case 3:
        ACHECK_EQ(a, gmp_select(many_cases, 65536, 0), -ETIMEDOUT);
        ACHECK_EQ(a, gmp_select(many_cases, 65536, -1), -EINVAL);
        break;
    case 4: /* disabled cases only */
        cs[0].op = GMP_RECV;
        cs[1].op = GMP_SEND; /* NULL buf, NULL chan: disabled, not invalid */
        ACHECK_EQ(a, gmp_select(cs, 2, -1), -EINVAL);
        ACHECK_EQ(a, gmp_select(cs, 2, 0), -ETIMEDOUT);
        ACHECK_EQ(a, cs[0].status, 0);
        ACHECK_EQ(a, cs[1].status, 0);
        break;
    default: {
        /* A bad case beside valid ones on a live channel: nothing is performed. */
        struct chrec *r = NULL;
        gmp_chan *priv = NULL;
        gmp_chan *c;
        atomic_uint *st = NULL;
        if (restricted) {
            ACHECK_EQ(a, gmp_chan_make(&priv, 8, 1), 0);
            ACHECK_EQ(a, gmp_chan_try_send(priv, bufs[2]), 0);
            c = priv;
        } else {
            r = acquire(a, slot);
            c = r->c;
            new_value(a, r, bufs[0], &st);
        }
        cs[0].chan = c;
        cs[0].op = GMP_SEND;
        cs[0].buf = bufs[0];
        cs[0].status = 777;
        cs[1].chan = c;
        cs[1].op = GMP_RECV;
        cs[1].buf = bufs[1];
        cs[1].status = 777;
        cs[2].chan = which == 5 ? c : NULL;
        cs[2].op = which == 7 ? GMP_SEND : badop;
        cs[2].buf = NULL;
        cs[2].status = 777;
        if (which == 7) {
            /* A send case with a NULL buffer on a channel with elements. */
            cs[2].chan = c;
            if (r != NULL && r->elem == 0) {
                cs[2].chan = NULL;
                cs[2].op = badop;
            }
        }
        ACHECK_EQ(a, gmp_select(cs, 3, which == 6 ? -1 : 0), -EINVAL);
        for (int i = 0; i < 3; i++)
            ACHECK_EQ(a, cs[i].status, 777);
        ACHECK(a, all_byte(bufs[1], MAXELEM, 0xA5));
        if (r != NULL) {
            send_outcome(a, r, st, bufs[0], 0, -EINVAL);
            rec_put(a, r);
        } else {
            ACHECK_EQ(a, gmp_chan_len(priv), 1);
            ACHECK_EQ(a, gmp_chan_release(priv), 0);
        }
        break;
    }
    }
}

/* ---- mutexes ---- */

#define NMU 3
static gmp_mutex mus[NMU] = {GMP_MUTEX_INIT, GMP_MUTEX_INIT, GMP_MUTEX_INIT};
static atomic_int mu_inside[NMU];
static atomic_long mu_counter[NMU];  /* read and written across a pause, under the mutex */
static atomic_long mu_sections[NMU];

static void pause_inside(struct actor *a, int how)
{
    (void)a;
    if (how == 1)
        ACHECK_EQ(a, gmp_yield(), 0);
    else if (how == 2)
        ACHECK_EQ(a, gmp_sleep(5 * US), 0);
}

static void mu_section(struct actor *a, int i, int pause)
{
    ACHECK_EQ(a, atomic_fetch_add(&mu_inside[i], 1), 0);
    long c = atomic_load_explicit(&mu_counter[i], memory_order_relaxed);
    pause_inside(a, pause);
    atomic_store_explicit(&mu_counter[i], c + 1, memory_order_relaxed);
    ACHECK_EQ(a, atomic_fetch_sub(&mu_inside[i], 1), 1);
    atomic_fetch_add(&mu_sections[i], 1);
}

struct unlock_arg {
    gmp_mutex *m;
    int i;
};

/* Unlocks from inside gmp_blocking: any thread may unlock a locked mutex. */
static int64_t blk_unlock(void *arg)
{
    struct unlock_arg *u = arg;
    return gmp_mutex_unlock(u->m);
}

static void mu_unlock(struct actor *a, int i, int how)
{
    if (how == 0) {
        ACHECK_EQ(a, gmp_mutex_unlock(&mus[i]), 0);
    } else if (how == 1) {
        ACHECK_EQ(a, (gmp_mutex_unlock)(&mus[i]), 0);
    } else {
        struct unlock_arg u = {&mus[i], i};
        ACHECK_EQ(a, gmp_blocking(blk_unlock, &u), 0);
    }
}

static void op_mutex(struct actor *a)
{
    int i = (int)rnd_below(&a->rng, NMU);
    int j = (int)rnd_below(&a->rng, NMU);
    int form = (int)rnd_below(&a->rng, 4);
    int pause = (int)rnd_below(&a->rng, 3);
    int how = (int)rnd_below(&a->rng, 3);
    int how2 = (int)rnd_below(&a->rng, 3);
    switch (form) {
    case 0:
        ACHECK_EQ(a, gmp_mutex_lock(&mus[i]), 0);
        break;
    case 1:
        ACHECK_EQ(a, (gmp_mutex_lock)(&mus[i]), 0);
        break;
    case 2: {
        int rc = gmp_mutex_trylock(&mus[i]);
        ACHECK_ONEOF(a, rc, 0, -EBUSY);
        if (rc != 0)
            return;
        break;
    }
    default:
        /* Two at once, always in index order. */
        if (i == j) {
            ACHECK_EQ(a, gmp_mutex_lock(&mus[i]), 0);
            break;
        }
        if (i > j) {
            int t = i;
            i = j;
            j = t;
        }
        ACHECK_EQ(a, gmp_mutex_lock(&mus[i]), 0);
        ACHECK_EQ(a, (gmp_mutex_lock)(&mus[j]), 0);
        mu_section(a, j, pause);
        ACHECK_EQ(a, gmp_mutex_trylock(&mus[j]), -EBUSY);
        mu_section(a, i, 0);
        mu_unlock(a, j, how2);
        break;
    }
    mu_section(a, i, pause);
    ACHECK_EQ(a, gmp_mutex_trylock(&mus[i]), -EBUSY);
    mu_unlock(a, i, how);
}

/* ---- rwmutexes ---- */

#define NRW 2
static gmp_rwmutex rws[NRW] = {GMP_RWMUTEX_INIT, GMP_RWMUTEX_INIT};
static atomic_int rw_readers[NRW], rw_writers[NRW];
static atomic_long rw_counter[NRW], rw_wsections[NRW];

static void op_rwmutex(struct actor *a)
{
    int i = (int)rnd_below(&a->rng, NRW);
    int form = (int)rnd_below(&a->rng, 4);
    int pause = (int)rnd_below(&a->rng, 3);
    gmp_rwmutex *rw = &rws[i];
    if (form == 0 || form == 1) {
        if (form == 0) {
            ACHECK_EQ(a, gmp_rwmutex_rlock(rw), 0);
        } else {
            int rc = gmp_rwmutex_tryrlock(rw);
            ACHECK_ONEOF(a, rc, 0, -EBUSY);
            if (rc != 0)
                return;
        }
        atomic_fetch_add(&rw_readers[i], 1);
        ACHECK_EQ(a, atomic_load(&rw_writers[i]), 0);
        ACHECK_EQ(a, gmp_rwmutex_trylock(rw), -EBUSY);
        pause_inside(a, pause);
        ACHECK_EQ(a, atomic_load(&rw_writers[i]), 0);
        atomic_fetch_sub(&rw_readers[i], 1);
        ACHECK_EQ(a, gmp_rwmutex_runlock(rw), 0);
    } else {
        if (form == 2) {
            ACHECK_EQ(a, gmp_rwmutex_lock(rw), 0);
        } else {
            int rc = gmp_rwmutex_trylock(rw);
            ACHECK_ONEOF(a, rc, 0, -EBUSY);
            if (rc != 0)
                return;
        }
        ACHECK_EQ(a, atomic_fetch_add(&rw_writers[i], 1), 0);
        ACHECK_EQ(a, atomic_load(&rw_readers[i]), 0);
        ACHECK_EQ(a, gmp_rwmutex_tryrlock(rw), -EBUSY);
        ACHECK_EQ(a, gmp_rwmutex_trylock(rw), -EBUSY);
        long c = atomic_load_explicit(&rw_counter[i], memory_order_relaxed);
        pause_inside(a, pause);
        atomic_store_explicit(&rw_counter[i], c + 1, memory_order_relaxed);
        ACHECK_EQ(a, atomic_load(&rw_readers[i]), 0);
        ACHECK_EQ(a, atomic_fetch_sub(&rw_writers[i], 1), 1);
        atomic_fetch_add(&rw_wsections[i], 1);
        ACHECK_EQ(a, gmp_rwmutex_unlock(rw), 0);
    }
}

/* ---- cond: a pool of tokens, and handshakes ---- */

#define NTOKENS 1
static gmp_mutex pool_mu = GMP_MUTEX_INIT;
static gmp_cond pool_cond = GMP_COND_INIT;
static gmp_cond idle_cond = GMP_COND_INIT;  /* nobody ever waits on it */
static int pool_tokens = NTOKENS;            /* under pool_mu */
static atomic_int tokens_out;
static atomic_long cond_waits;

/* A handshake: the waiter's only signaller is one goroutine, which sets the flag and
 * signals once, so a lost wake-up leaves the waiter stuck (the watchdog names it), and a
 * wake-up before the flag is set is a spurious one, which the header rules out. */
struct handshake {
    gmp_mutex m;
    gmp_cond c;
    int flag;            /* under m */
    int bcast, after;    /* broadcast instead of signal; after the unlock */
    int64_t delay;       /* before the signal */
    gmp_wg done;
};

static void handshake_signaller(void *arg)
{
    struct handshake *h = arg;
    int ok = gmp_sleep(h->delay) == 0;
    ok &= gmp_mutex_lock(&h->m) == 0;
    h->flag = 1;
    if (!h->after)
        ok &= (h->bcast ? gmp_cond_broadcast(&h->c) : gmp_cond_signal(&h->c)) == 0;
    ok &= gmp_mutex_unlock(&h->m) == 0;
    if (h->after)
        ok &= (h->bcast ? gmp_cond_broadcast(&h->c) : gmp_cond_signal(&h->c)) == 0;
    if (!ok)
        fail_at(NULL, __FILE__, __LINE__, "a call of the cond handshake's signaller failed");
    ok = gmp_wg_done(&h->done) == 0;
    if (!ok)
        fail_at(NULL, __FILE__, __LINE__, "gmp_wg_done of the cond handshake failed");
}

static void cond_handshake(struct actor *a, int bcast, int after, int64_t delay)
{
    struct handshake h;
    memset(&h, 0, sizeof h);
    h.bcast = bcast;
    h.after = after;
    h.delay = delay;
    ACHECK_EQ(a, gmp_wg_add(&h.done, 1), 0);
    ACHECK(a, gmp_go(handshake_signaller, &h) > 0);
    ACHECK_EQ(a, gmp_mutex_lock(&h.m), 0);
    while (!h.flag) {
        note_sub(a, "waiting for the handshake's signal");
        ACHECK_EQ(a, gmp_cond_wait(&h.c, &h.m), 0);
        if (!h.flag)
            fail_at(a, __FILE__, __LINE__, "gmp_cond_wait returned before the only signal");
        atomic_fetch_add(&cond_waits, 1);
    }
    ACHECK_EQ(a, gmp_mutex_unlock(&h.m), 0);
    note_sub(a, "waiting for the handshake's signaller to end");
    ACHECK_EQ(a, gmp_wg_wait(&h.done), 0);
}

static void op_cond(struct actor *a)
{
    int pause = 1 + (int)rnd_below(&a->rng, 2); /* a yield or a sleep: others come to wait */
    int bcast = rnd_below(&a->rng, 4) == 0;
    int after = (int)rnd_below(&a->rng, 2);
    int idle = rnd_below(&a->rng, 8) == 0;
    int handshake = rnd_below(&a->rng, 3) == 0;
    int64_t delay = rnd_below(&a->rng, 2) ? 0 : 30 * US;
    if (handshake) {
        cond_handshake(a, bcast, after, delay);
        return;
    }
    if (idle) {
        ACHECK_EQ(a, gmp_cond_signal(&idle_cond), 0);
        ACHECK_EQ(a, gmp_cond_broadcast(&idle_cond), 0);
    }
    ACHECK_EQ(a, gmp_mutex_lock(&pool_mu), 0);
    while (pool_tokens == 0) {
        ACHECK_EQ(a, gmp_cond_wait(&pool_cond, &pool_mu), 0);
        atomic_fetch_add(&cond_waits, 1);
    }
    pool_tokens--;
    ACHECK_EQ(a, gmp_mutex_unlock(&pool_mu), 0);
    ACHECK(a, atomic_fetch_add(&tokens_out, 1) < NTOKENS);
    pause_inside(a, pause);
    atomic_fetch_sub(&tokens_out, 1);
    ACHECK_EQ(a, gmp_mutex_lock(&pool_mu), 0);
    pool_tokens++;
    ACHECK(a, pool_tokens <= NTOKENS);
    if (!after)
        ACHECK_EQ(a, bcast ? gmp_cond_broadcast(&pool_cond) : gmp_cond_signal(&pool_cond), 0);
    ACHECK_EQ(a, gmp_mutex_unlock(&pool_mu), 0);
    if (after)
        ACHECK_EQ(a, bcast ? gmp_cond_broadcast(&pool_cond) : gmp_cond_signal(&pool_cond), 0);
}

/* ---- once: a moving frontier ---- */

#define NONCE 65536
static gmp_once onces[NONCE];
static atomic_int once_calls[NONCE];
static atomic_char once_used[NONCE];
static atomic_int once_front;

static void once_fn(void *arg)
{
    int i = (int)(intptr_t)arg;
    if (atomic_fetch_add(&once_calls[i], 1) != 0)
        fail_at(NULL, __FILE__, __LINE__, "once object %d ran its function twice", i);
    if (gmp_goid() != 0 && (splitmix((uint64_t)i) & 1))
        gmp_yield();
    atomic_fetch_add(&once_front, 1);
}

static void op_once(struct actor *a)
{
    uint32_t off = rnd_below(&a->rng, 4);
    uint32_t far = rnd_below(&a->rng, NONCE);
    int nullfn = rnd_below(&a->rng, 6) == 0;
    int i = atomic_load(&once_front) + (int)off;
    if (i >= NONCE)
        i = (int)far;
    atomic_store(&once_used[i], 1);
    if (nullfn) {
        ACHECK_EQ(a, gmp_once_do(&onces[i], NULL, NULL), -EINVAL);
        ACHECK_EQ(a, gmp_once_do(NULL, once_fn, (void *)(intptr_t)i), -EINVAL);
    }
    ACHECK_EQ(a, gmp_once_do(&onces[i], once_fn, (void *)(intptr_t)i), 0);
    ACHECK_EQ(a, atomic_load(&once_calls[i]), 1);
    ACHECK_EQ(a, gmp_once_do(&onces[i], once_fn, (void *)(intptr_t)i), 0);
    ACHECK_EQ(a, atomic_load(&once_calls[i]), 1);
}

/* ---- children ---- */

struct child {
    uint64_t rng;
    int depth;
    uint32_t flags;
    size_t stack;
    int nops;
    int end_locked;     /* a GMP_GO_LOCKED child that ends without unlocking */
    int goexit;         /* ends with gmp_goexit */
    int detached;
    gmp_wg *wg;
    atomic_int *checkin;
    char parent[16];
};

static gmp_wg detached_wg = GMP_WG_INIT;
static atomic_int detached_live;
static atomic_ulong children_started, children_ended;
static atomic_ulong child_serial;

static void run_op(struct actor *a);

static void child_main(void *arg)
{
    struct child *c = arg;
    struct actor a;
    memset(&a, 0, sizeof a);
    a.idx = -1;
    for (int i = NACT; i < NACT + NCHILDSLOTS && a.idx < 0; i++) {
        int expected = 0;
        if (atomic_compare_exchange_strong(&status[i].used, &expected, 1))
            a.idx = i;
    }
    a.prod = PROD_CHILD;
    a.rng = c->rng;
    a.goroutine = 1;
    a.pinned = (c->flags & GMP_GO_PINNED) != 0;
    a.lockdepth = (c->flags & GMP_GO_LOCKED) ? 1 : 0;
    a.light = c->stack == GMP_MIN_STACK;
    a.locker = 1;
    a.depth = c->depth;
    a.tid = gettid_();
    a.goid = gmp_goid();
    unsigned long serial = atomic_fetch_add(&child_serial, 1);
    snprintf(a.tag, sizeof a.tag, "c%lu", serial);
    snprintf(a.name, sizeof a.name, "child c%lu of %s (flags %#x, stack %zu)", serial,
             c->parent, c->flags, c->stack);
    if (a.idx >= 0) {
        struct status *s = &status[a.idx];
        memcpy(s->name, a.name, sizeof s->name);
        atomic_store(&s->op, -1);
        atomic_store(&s->nops, 0);
    }
    ACHECK(&a, a.goid > 0);
    atomic_fetch_add(&children_started, 1);
    for (int i = 0; i < c->nops; i++)
        run_op(&a);
    if (a.pinned || a.lockdepth > 0)
        ACHECK_EQ(&a, gettid_(), a.tid);
    if ((c->flags & GMP_GO_LOCKED) && !c->end_locked) {
        ACHECK_EQ(&a, gmp_unlock_os_thread(), 0);
        a.lockdepth = 0;
    }
    if (c->checkin != NULL)
        atomic_fetch_add(c->checkin, 1);
    gmp_wg *wg = c->wg;
    int goexit = c->goexit;
    if (c->detached)
        atomic_fetch_sub(&detached_live, 1);
    free(c);
    if (a.idx >= 0) {
        atomic_store(&status[a.idx].op, -1);
        atomic_store(&status[a.idx].used, 0);
    }
    atomic_fetch_add(&children_ended, 1);
    atomic_fetch_add(&progress, 1);
    ACHECK_EQ(&a, gmp_wg_done(wg), 0);
    if (goexit) {
        gmp_goexit();
        fail_at(&a, __FILE__, __LINE__, "gmp_goexit returned in a goroutine");
    }
}

/* Draws a child's parameters (always the same number of draws). */
static struct child *draw_child(struct actor *a, int maxops)
{
    struct child *c = calloc(1, sizeof *c);
    ACHECK(a, c != NULL);
    c->rng = splitmix(rnd(&a->rng)) | 1;
    c->depth = a->depth + 1;
    uint32_t f = rnd_below(&a->rng, 8);
    c->flags = f < 4 ? 0 : f == 4 || f == 5 ? GMP_GO_PINNED : f == 6 ? GMP_GO_LOCKED
                                                                     : GMP_GO_PINNED | GMP_GO_LOCKED;
    uint32_t s = rnd_below(&a->rng, 6);
    c->stack = s < 3 ? 0 : s < 5 ? 64 * 1024 : GMP_MIN_STACK;
    c->nops = (int)rnd_below(&a->rng, (uint32_t)maxops + 1);
    c->end_locked = rnd_below(&a->rng, 5) == 0;
    c->goexit = rnd_below(&a->rng, 4) == 0;
    memcpy(c->parent, a->tag, sizeof c->parent);
    return c;
}

static void start_child(struct actor *a, struct child *c, int use_go)
{
    int64_t id;
    if (use_go && c->flags == 0 && c->stack == 0) {
        id = gmp_go(child_main, c);
    } else {
        gmp_attr attr;
        memset(&attr, 0, sizeof attr);
        attr.flags = c->flags;
        attr.stack_size = c->stack;
        id = gmp_go_attr(child_main, c, c->flags == 0 && c->stack == 0 && use_go ? NULL : &attr);
    }
    if (id <= 0)
        fail_at(a, __FILE__, __LINE__, "gmp_go(_attr) of a child (flags %#x, stack %zu) "
                "returned %lld", c->flags, c->stack, (long long)id);
}

static void op_spawn(struct actor *a)
{
    int n = 1 + (int)rnd_below(&a->rng, 3);
    int detach = rnd_below(&a->rng, 3) == 0;
    int use_go = (int)rnd_below(&a->rng, 2);
    struct child *cs[3];
    for (int i = 0; i < n; i++)
        cs[i] = draw_child(a, 3);
    if (a->depth >= 2) {
        for (int i = 0; i < n; i++)
            free(cs[i]);
        ACHECK_EQ(a, gmp_yield(), 0);
        return;
    }
    gmp_wg wg = GMP_WG_INIT;
    atomic_int checkin = 0;
    int started = 0;
    for (int i = 0; i < n; i++) {
        if (detach) {
            if (atomic_fetch_add(&detached_live, 1) >= MAXDETACHED) {
                atomic_fetch_sub(&detached_live, 1);
                free(cs[i]);
                continue;
            }
            cs[i]->detached = 1;
            cs[i]->wg = &detached_wg;
            ACHECK_EQ(a, gmp_wg_add(&detached_wg, 1), 0);
        } else {
            cs[i]->wg = &wg;
            cs[i]->checkin = &checkin;
            ACHECK_EQ(a, gmp_wg_add(&wg, 1), 0);
            started++;
        }
        start_child(a, cs[i], use_go);
    }
    if (!detach) {
        note_sub(a, "waiting for its children");
        ACHECK_EQ(a, gmp_wg_wait(&wg), 0);
        ACHECK_EQ(a, atomic_load(&checkin), started);
    }
}

/* ---- WaitGroups ---- */

static void wg_done_child(void *arg)
{
    if (gmp_sleep(20 * US) != 0 || gmp_wg_done(arg) != 0)
        fail_at(NULL, __FILE__, __LINE__, "gmp_sleep or gmp_wg_done in a child failed");
}

static void op_wg(struct actor *a)
{
    int mode = (int)rnd_below(&a->rng, 3);
    gmp_wg wg = GMP_WG_INIT;
    void *odd = raw + 1;
    if (mode == 0) {
        /* add, done, wait; then one done by a goroutine while this one waits. */
        ACHECK_EQ(a, gmp_wg_add(&wg, 1), 0);
        ACHECK_EQ(a, gmp_wg_done(&wg), 0);
        ACHECK_EQ(a, gmp_wg_wait(&wg), 0);
        ACHECK_EQ(a, gmp_wg_add(&wg, 2), 0);
        ACHECK(a, gmp_go(wg_done_child, &wg) > 0);
        ACHECK_EQ(a, gmp_wg_done(&wg), 0);
        note_sub(a, "waiting for wg_done_child");
        ACHECK_EQ(a, gmp_wg_wait(&wg), 0);
    } else if (mode == 1) {
        ACHECK_EQ(a, gmp_wg_add(NULL, 1), -EINVAL);
        ACHECK_EQ(a, gmp_wg_add(odd, 1), -EINVAL);
        ACHECK_EQ(a, gmp_wg_done(NULL), -EINVAL);
        ACHECK_EQ(a, gmp_wg_done(odd), -EINVAL);
        ACHECK_EQ(a, gmp_wg_wait(NULL), -EINVAL);
        ACHECK_EQ(a, gmp_wg_wait(odd), -EINVAL);
        ACHECK_EQ(a, gmp_wg_add(&wg, (int64_t)INT32_MAX + 1), -EINVAL);
        ACHECK_EQ(a, gmp_wg_add(&wg, -(int64_t)INT32_MAX - 1), -EINVAL);
        ACHECK_EQ(a, gmp_wg_add(&wg, INT64_MIN), -EINVAL);
        ACHECK_EQ(a, gmp_wg_wait(&wg), 0); /* still zero */
        ACHECK_EQ(a, gmp_wg_add(&wg, INT32_MAX), 0);
        ACHECK_EQ(a, gmp_wg_add(&wg, -(int64_t)INT32_MAX), 0);
        ACHECK_EQ(a, gmp_wg_wait(&wg), 0);
    } else {
        /* Children that make ops of their own, checked in when the wait returns. */
        int n = 1 + (int)rnd_below(&a->rng, 3);
        struct child *cs[3];
        for (int i = 0; i < n; i++)
            cs[i] = draw_child(a, 2);
        atomic_int checkin = 0;
        ACHECK_EQ(a, gmp_wg_add(&wg, n), 0);
        for (int i = 0; i < n; i++) {
            cs[i]->wg = &wg;
            cs[i]->checkin = &checkin;
            if (a->depth >= 2)
                cs[i]->nops = 0;
            start_child(a, cs[i], 1);
        }
        note_sub(a, "waiting for its children");
        ACHECK_EQ(a, gmp_wg_wait(&wg), 0);
        ACHECK_EQ(a, atomic_load(&checkin), n);
    }
}

/* ---- scheduler calls ---- */

static void op_sleep(struct actor *a)
{
    uint32_t k = rnd_below(&a->rng, 8);
    int64_t ns = k == 0 ? 0 : k == 1 ? -(int64_t)rnd_below(&a->rng, 1000000) - 1
                                     : (int64_t)rnd_below(&a->rng, 300) * US + 1;
    int64_t t0 = gmp_now();
    ACHECK_EQ(a, gmp_sleep(ns), 0);
    if (ns > 0)
        check_waited(a, t0, ns);
}

/* A pthread mutex held across a CPU-bound stretch (asynchronous preemption stops the
 * holder inside) or a hooked nanosleep (the holder parks bound to its thread): the others
 * wait in pthread_mutex_lock, a futex the hooks do not see (rt/unseen.rs gives their P up,
 * or moves the wait to a helper thread when goroutines are bound to theirs). The counter,
 * updated by load + store across the section, must equal the sections. */
static pthread_mutex_t pt_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned long pt_counter;
static atomic_ulong pt_sections;

static void op_pthread(struct actor *a)
{
    int kind = (int)rnd_below(&a->rng, 2);
    int64_t us = 10 + (int64_t)rnd_below(&a->rng, 190);
    note_sub(a, "waiting for the pthread mutex");
    ACHECK_EQ(a, pthread_mutex_lock(&pt_mu), 0);
    note_sub(a, NULL);
    unsigned long x = pt_counter;
    if (kind == 0) {
        int64_t until = gmp_now() + us * US;
        unsigned long h = x;
        for (unsigned long i = 0;; i++) {
            h = h * 6364136223846793005UL + 1;
            if ((i & 1023) == 0 && gmp_now() >= until)
                break;
        }
        __asm__ volatile("" : : "r"(h));
    } else {
        struct timespec ts = {0, (long)(us * 1000)};
        ACHECK_EQ(a, nanosleep(&ts, NULL), 0);
    }
    pt_counter = x + 1;
    ACHECK_EQ(a, pthread_mutex_unlock(&pt_mu), 0);
    atomic_fetch_add(&pt_sections, 1);
}

static spin_t procs_lock;
static int procs_now;              /* under procs_lock: the last value set */
static int64_t procs_next_change;  /* under procs_lock */
static atomic_ulong procs_changes;

/* SIGUSR2 relayed to `sig_ch` (gmp_signal_notify), raised on the actor's own thread (so
 * that no other thread's call is interrupted), the channel drained without waiting: never
 * more relayed than raised, and at least one by the end when any was raised (main). */
static gmp_chan *sig_ch;
static atomic_ulong sig_raised, sig_relayed;

static void drain_signals(const struct actor *a)
{
    int v;
    while (gmp_chan_try_recv(sig_ch, &v) == 0) {
        ACHECK_EQ(a, v, SIGUSR2);
        atomic_fetch_add(&sig_relayed, 1);
    }
}

static void op_signal(struct actor *a)
{
    atomic_fetch_add(&sig_raised, 1);
    ACHECK_EQ(a, raise(SIGUSR2), 0);
    drain_signals(a);
}

/* op_sigwait: a wait for a signal the thread blocks (sigwait, sigwaitinfo, sigtimedwait),
 * which no hook sees: under the hooks a goroutine's P goes to others while it waits, and
 * the wait must end as libc's does, with the signal and never with EINTR. The signal is
 * sent with tgkill to the waiting thread by a plain thread after 0-3 ms, or by the actor
 * itself before it waits; a goroutine locks its thread from the mask to the restore.
 * A signal delivered instead of waited for (a wait that ended without it) is counted. */
static atomic_ulong sigwait_stray;

static void on_sigwait_stray(int sig)
{
    (void)sig;
    atomic_fetch_add(&sigwait_stray, 1);
}

struct sigwait_send {
    long tid;
    int64_t delay_ns;
};

static void *sigwait_sender(void *arg)
{
    struct sigwait_send *s = arg;
    struct timespec ts = {0, (long)s->delay_ns};
    nanosleep(&ts, NULL);
    if (syscall(SYS_tgkill, getpid(), s->tid, SIGRTMIN + 1) != 0)
        atomic_fetch_add(&sigwait_stray, 1000);
    free(s);
    return NULL;
}

static void op_sigwait(struct actor *a)
{
    /* 0 sigwait, 1 sigwaitinfo, 2 sigtimedwait (10 s), 3 sigtimedwait timing out after
     * 0-2 ms with nothing sent, 4 sigtimedwait(0) for a signal sent before. Inside a
     * scope (whose end may interrupt what waits) only the last two. */
    int kind = (int)rnd_below(&a->rng, 5);
    int64_t delay = (int64_t)rnd_below(&a->rng, 3000) * US;
    if (a->scoped && kind < 3)
        kind = 3 + kind % 2;
    int sig = SIGRTMIN + 1;
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, sig);
    if (a->goroutine)
        ACHECK_EQ(a, gmp_lock_os_thread(), a->lockdepth + 1);
    ACHECK_EQ(a, pthread_sigmask(SIG_BLOCK, &set, &old), 0);
    long tid = gettid_();
    if (kind < 3) {
        struct sigwait_send *s = malloc(sizeof *s);
        ACHECK(a, s != NULL);
        s->tid = tid;
        s->delay_ns = delay;
        pthread_t t;
        pthread_attr_t attr;
        ACHECK_EQ(a, pthread_attr_init(&attr), 0);
        ACHECK_EQ(a, pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED), 0);
        ACHECK_EQ(a, pthread_create(&t, &attr, sigwait_sender, s), 0);
        ACHECK_EQ(a, pthread_attr_destroy(&attr), 0);
    } else if (kind == 4) {
        ACHECK_EQ(a, syscall(SYS_tgkill, getpid(), tid, sig), 0);
    }
    siginfo_t info;
    memset(&info, 0, sizeof info);
    note_sub(a, "waiting for a signal it blocks");
    if (kind == 0) {
        int got = 0;
        ACHECK_EQ(a, sigwait(&set, &got), 0);
        ACHECK_EQ(a, got, sig);
    } else if (kind == 1) {
        ACHECK_EQ(a, sigwaitinfo(&set, &info), sig);
    } else if (kind == 2) {
        struct timespec ts = {10, 0};
        ACHECK_EQ(a, sigtimedwait(&set, &info, &ts), sig);
    } else if (kind == 3) {
        struct timespec ts = {0, (long)(delay * 2 / 3)};
        errno = 0;
        ACHECK_EQ(a, sigtimedwait(&set, &info, &ts), -1);
        ACHECK_EQ(a, errno, EAGAIN);
    } else {
        struct timespec ts = {0, 0};
        ACHECK_EQ(a, sigtimedwait(&set, &info, &ts), sig);
    }
    note_sub(a, NULL);
    if (kind == 1 || kind == 2 || kind == 4) {
        ACHECK_EQ(a, info.si_signo, sig);
        ACHECK_EQ(a, info.si_pid, getpid());
    }
    ACHECK_EQ(a, gettid_(), tid);
    ACHECK_EQ(a, pthread_sigmask(SIG_SETMASK, &old, NULL), 0);
    if (a->goroutine)
        ACHECK_EQ(a, gmp_unlock_os_thread(), a->lockdepth);
}

static void op_maxprocs(struct actor *a)
{
    int n = 1 + (int)rnd_below(&a->rng, 4);
    int kind = (int)rnd_below(&a->rng, 3);
    int neg = -1 - (int)rnd_below(&a->rng, 100);
    note_sub(a, "taking the maxprocs lock");
    spin_lock(&procs_lock);
    note_sub(a, NULL);
    int64_t now = gmp_now();
    if (kind == 0 && now < procs_next_change) {
        /* Not yet (at most one change per 5 ms): a query. */
        ACHECK_EQ(a, gmp_maxprocs(0), procs_now);
    } else if (kind == 0) {
        ACHECK_EQ(a, gmp_maxprocs(n), procs_now);
        procs_now = n;
        procs_next_change = now + 5 * MS;
        atomic_fetch_add(&procs_changes, 1);
    } else if (kind == 1) {
        ACHECK_EQ(a, gmp_maxprocs(GMP_MAX_PROCS + 1), -EINVAL);
        ACHECK_EQ(a, gmp_maxprocs(INT_MAX), -EINVAL);
        ACHECK_EQ(a, gmp_maxprocs(0), procs_now);
    } else {
        ACHECK_EQ(a, gmp_maxprocs(0), procs_now);
        ACHECK_EQ(a, gmp_maxprocs(neg), procs_now);
    }
    spin_unlock(&procs_lock);
}

static atomic_int actors_started;

static void op_info(struct actor *a)
{
    int which = (int)rnd_below(&a->rng, 6);
    int64_t now = gmp_now();
    ACHECK(a, now >= a->last_now);
    a->last_now = now;
    ACHECK_EQ(a, gmp_goid(), a->goid);
    switch (which) {
    case 0: {
        int running = !atomic_load(&stop) && atomic_load(&actors_started) == NACT;
        int64_t n = gmp_num_goroutine();
        ACHECK(a, n >= (a->goroutine ? 1 : 0));
        /* The actor goroutines live until the deadline. */
        if (running && !atomic_load(&stop))
            ACHECK(a, n >= NGOR);
        break;
    }
    case 1:
    case 2: {
        gmp_sched_stats s;
        uint32_t lens[8];
        memset(lens, 0xff, sizeof lens);
        size_t want = which == 1 ? 0 : 1 + rnd_below(&a->rng, 8);
        int rc = gmp_stats(&s, which == 1 ? NULL : lens, want);
        if (which == 1)
            ACHECK_EQ(a, rc, 0);
        else
            ACHECK(a, rc >= 1 && (size_t)rc <= want && rc <= 4);
        ACHECK(a, s.gomaxprocs >= 1 && s.gomaxprocs <= 4);
        ACHECK(a, s.threads >= 1);
        ACHECK(a, s.goroutines >= 0);
        ACHECK(a, s.spawned >= a->last_spawned);
        a->last_spawned = s.spawned;
        for (int i = rc < 0 ? 0 : rc; i < 8; i++)
            ACHECK_EQ(a, lens[i], 0xffffffffu);
        break;
    }
    case 3:
        ACHECK_EQ(a, gmp_num_cpu(), ncpu_expected);
        break;
    case 4: {
        /* A CPU profile over the rest of this op, one actor's at a time (the others are
         * refused), with a bad descriptor refused first. */
        ACHECK_EQ(a, gmp_cpuprofile_start(-1, 0), -EBADF);
        int prof = gmp_cpuprofile_start(devnull, 1000);
        ACHECK(a, prof == 0 || prof == -EBUSY);
        /* Metrics: counters and the latency histogram's count only grow; the Prometheus
         * text is written whole. */
        /* On the heap: ~9 KiB, and actors' children may have 16 KiB stacks. */
        struct gmp_metric *m = calloc(32, sizeof *m);
        ACHECK(a, m != NULL);
        int n = gmp_metrics(m, 32);
        ACHECK(a, n >= 10 && n <= 32);
        for (int i = 0; i < n; i++) {
            if (strcmp(m[i].name, "/sched/goroutines-created:goroutines") == 0) {
                ACHECK(a, m[i].value >= a->last_created);
                a->last_created = m[i].value;
            } else if (strcmp(m[i].name, "/sched/latencies:seconds") == 0) {
                uint64_t sum = 0;
                for (int b = 0; b < GMP_METRIC_BUCKETS; b++)
                    sum += m[i].buckets[b];
                ACHECK_EQ(a, sum, m[i].value);
                ACHECK(a, m[i].value >= a->last_latencies);
                a->last_latencies = m[i].value;
            } else if (strcmp(m[i].name, "/sched/gomaxprocs:threads") == 0) {
                ACHECK(a, m[i].value >= 1 && m[i].value <= 4);
            }
        }
        free(m);
        ACHECK_EQ(a, gmp_metrics(NULL, 1), -EINVAL);
        /* Stack high-water marks: whole pages within their stacks, deepest first, no
         * more goroutines than gmp_stats has measured (read after them), which only
         * grows. */
        struct gmp_stack_mark *sm = calloc(64, sizeof *sm);
        ACHECK(a, sm != NULL);
        int ns = gmp_stack_usage(sm, 64);
        ACHECK(a, ns >= 0);
        uint64_t counted = 0;
        for (int i = 0; i < ns && i < 64; i++) {
            ACHECK(a, sm[i].func != NULL && sm[i].samples >= 1);
            ACHECK(a, sm[i].high_water <= sm[i].stack_size && sm[i].high_water % 4096 == 0);
            ACHECK(a, i == 0 || sm[i - 1].high_water >= sm[i].high_water);
            counted += sm[i].samples;
        }
        free(sm);
        struct gmp_sched_stats st;
        ACHECK(a, gmp_stats(&st, NULL, 0) >= 0);
        ACHECK(a, ns > 64 || counted <= st.stack_samples);
        ACHECK(a, st.stack_samples >= a->last_stack_samples);
        a->last_stack_samples = st.stack_samples;
        ACHECK_EQ(a, gmp_stack_usage(NULL, 1), -EINVAL);
        /* Labels: what the actor sets it reads back (the dump op meanwhile reads every
         * goroutine's racily), and a removed one is gone. */
        char val[32], got[32];
        snprintf(val, sizeof val, "%s/%lu", a->tag, a->nops);
        ACHECK_EQ(a, gmp_labels_set("actor", val), 0);
        ACHECK_EQ(a, gmp_labels_get("actor", got, sizeof got), (int)strlen(val));
        ACHECK(a, strcmp(got, val) == 0);
        ACHECK_EQ(a, gmp_labels_set("gone", "x"), 0);
        ACHECK_EQ(a, gmp_labels_set("gone", NULL), 0);
        ACHECK_EQ(a, gmp_labels_get("gone", got, sizeof got), -ENOENT);
        ACHECK_EQ(a, gmp_labels_set(NULL, "x"), -EINVAL);
        ACHECK_EQ(a, gmp_metrics_write_prometheus(devnull), 0);
        if (prof == 0)
            ACHECK_EQ(a, gmp_cpuprofile_stop(), 0);
        break;
    }
    default:
        ACHECK_EQ(a, gmp_stats(NULL, NULL, 0), -EINVAL);
        ACHECK_EQ(a, gmp_maxprocs(0) >= 1, 1);
        break;
    }
}

/* ---- blocking calls ---- */

struct blk {
    struct actor *a;
    int nested;
    long ns;
};

static int64_t blk_inner(void *arg)
{
    return 40 + (int64_t)(intptr_t)arg;
}

static int64_t blk_fn(void *arg)
{
    struct blk *b = arg;
    struct actor *a = b->a;
    struct timespec ts = {0, b->ns};
    nanosleep(&ts, NULL);
    if (b->nested) {
        /* Inside a blocking call: no second one, and nothing switches. */
        ACHECK_EQ(a, gmp_blocking(blk_inner, (void *)(intptr_t)2), 42);
        ACHECK_EQ(a, gmp_entersyscall(), a->goroutine ? -EINVAL : 0);
        ACHECK_EQ(a, gmp_exitsyscall(), a->goroutine ? -EINVAL : 0);
        ACHECK_EQ(a, gmp_syscall(SYS_getpid, 0, 0, 0, 0, 0, 0), getpid());
        ACHECK_EQ(a, gmp_goid(), a->goid);
        if (a->goroutine) {
            ACHECK_EQ(a, gmp_lock_os_thread(), a->lockdepth + 1);
            ACHECK_EQ(a, gmp_unlock_os_thread(), a->lockdepth);
        } else {
            ACHECK_EQ(a, gmp_lock_os_thread(), -EPERM);
        }
    }
    return 7;
}

/* An entersyscall/exitsyscall pair, gmp_blocking, gmp_syscall. */
static void op_syscall(struct actor *a)
{
    int kind = (int)rnd_below(&a->rng, 5);
    int extra = (int)rnd_below(&a->rng, 4);
    int slot = (int)rnd_below(&a->rng, NSLOT);
    int send = (int)rnd_below(&a->rng, 2);
    long ns = (long)rnd_below(&a->rng, 200) * 1000;
    int restricted = a->pinned && a->lockdepth > 0;
    long tid;
    switch (kind) {
    case 0: {
        /* try operations on a channel, a trylock, between the two calls: nothing waits. */
        struct chrec *r = !restricted && extra == 0 ? acquire(a, slot) : NULL;
        tid = gettid_(); /* after acquire, which may switch */
        ACHECK_EQ(a, gmp_entersyscall(), 0);
        if (a->goroutine)
            ACHECK_EQ(a, gmp_entersyscall(), -EINVAL);
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
        ACHECK_EQ(a, gmp_goid(), a->goid);
        if (r != NULL) {
            if (send)
                send_on(a, r, M_TRY, 0, 0, 0);
            else
                recv_on(a, r, M_TRY, 0, 0);
        }
        if (!restricted && extra == 1) {
            int rc = gmp_mutex_trylock(&mus[0]);
            ACHECK_ONEOF(a, rc, 0, -EBUSY);
            if (rc == 0) {
                mu_section(a, 0, 0);
                ACHECK_EQ(a, gmp_mutex_unlock(&mus[0]), 0);
            }
        }
        ACHECK_EQ(a, gmp_exitsyscall(), 0);
        ACHECK_EQ(a, gettid_(), tid);
        ACHECK_EQ(a, gmp_exitsyscall(), a->goroutine ? -EINVAL : 0);
        if (r != NULL)
            rec_put(a, r);
        break;
    }
    case 1: {
        struct blk b = {a, extra != 0, ns};
        tid = gettid_();
        ACHECK_EQ(a, gmp_blocking(blk_fn, &b), 7);
        ACHECK_EQ(a, gettid_(), tid);
        break;
    }
    case 2: {
        tid = gettid_();
        ACHECK_EQ(a, gmp_syscall(SYS_getpid, 0, 0, 0, 0, 0, 0), getpid());
        long t = gmp_syscall(SYS_gettid, 0, 0, 0, 0, 0, 0);
        ACHECK_EQ(a, t, tid);
        ACHECK_EQ(a, gettid_(), tid);
        struct timespec ts = {0, ns};
        long rc;
        while ((rc = gmp_syscall(SYS_nanosleep, (long)&ts, (long)&ts, 0, 0, 0, 0)) == -EINTR)
            ;
        ACHECK_EQ(a, rc, 0);
        break;
    }
    case 3: {
        /* Calls that would break the thread under the runtime are refused, not made. */
        static const long refused[] = {
            SYS_exit, SYS_clone, SYS_rt_sigreturn, SYS_set_tid_address, SYS_sigaltstack,
#ifdef SYS_fork
            SYS_fork,
#endif
#ifdef SYS_vfork
            SYS_vfork,
#endif
#ifdef SYS_arch_prctl
            SYS_arch_prctl,
#endif
#ifdef SYS_rseq
            SYS_rseq,
#endif
#ifdef SYS_clone3
            SYS_clone3,
#endif
        };
        long nr = refused[(size_t)ns / 1000 % (sizeof refused / sizeof refused[0])];
        tid = gettid_();
        ACHECK_EQ(a, gmp_syscall(nr, 0, 0, 0, 0, 0, 0), -EINVAL);
        ACHECK_EQ(a, gettid_(), tid);
        break;
    }
    default:
        ACHECK_EQ(a, gmp_syscall(-1, 0, 0, 0, 0, 0, 0), -ENOSYS);
        ACHECK_EQ(a, gmp_syscall(100000, 0, 0, 0, 0, 0, 0), -ENOSYS);
        ACHECK_EQ(a, gmp_blocking(NULL, NULL), -EINVAL);
        break;
    }
}

/* ---- lock sections ---- */

static void op_lock(struct actor *a)
{
    int nsub = 1 + (int)rnd_below(&a->rng, 3);
    if (!a->goroutine) {
        ACHECK_EQ(a, gmp_lock_os_thread(), -EPERM);
        ACHECK_EQ(a, gmp_unlock_os_thread(), -EPERM);
        ACHECK_EQ(a, gmp_goexit(), -EPERM);
        return;
    }
    if (a->lockdepth == 0)
        ACHECK_EQ(a, gmp_unlock_os_thread(), 0); /* not locked: nothing to undo */
    long before = gettid_();
    ACHECK_EQ(a, gmp_lock_os_thread(), a->lockdepth + 1);
    long tid = gettid_();
    if (a->pinned || a->lockdepth > 0)
        ACHECK_EQ(a, tid, before);
    if (!a->locker || a->lockdepth >= 2) {
        /* A lock and unlock around a yield only. */
        ACHECK_EQ(a, gmp_yield(), 0);
        ACHECK_EQ(a, gettid_(), tid);
        ACHECK_EQ(a, gmp_unlock_os_thread(), a->lockdepth);
        return;
    }
    a->lockdepth++;
    long saved_tid = a->tid;
    a->tid = tid;
    for (int i = 0; i < nsub; i++) {
        run_op(a);
        ACHECK_EQ(a, gettid_(), tid);
    }
    ACHECK_EQ(a, gmp_unlock_os_thread(), a->lockdepth - 1);
    a->lockdepth--;
    a->tid = saved_tid;
}

/* ---- fds ---- */

static atomic_ulong addr_serial;

static socklen_t abstract_addr(struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "gmp-fuzz-%d-%lu",
                     (int)getpid(), atomic_fetch_add(&addr_serial, 1));
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* A forked child (op_fd): only the plain calls a child of a threaded process may make. */
#if defined(__SANITIZE_THREAD__)
#define FD_KINDS 8
#else
#define FD_KINDS 11
#endif

/* op_fd's kind 9: a goroutine parked in read(2) on a pipe, then closed under it. Not
 * under TSan, which takes a close concurrent with a read of the same fd for a race (the
 * runtime's wake-up that orders them is not instrumented). */
struct parked_read {
    int fd;
    atomic_llong goid;
    ssize_t got;
    int err;
    gmp_wg done;
};

static void parked_reader(void *arg)
{
    struct parked_read *r = arg;
    char c;
    atomic_store(&r->goid, (long long)gmp_goid());
    r->got = read(r->fd, &c, 1);
    r->err = errno;
    gmp_wg_done(&r->done);
}

/* Whether goroutine `goid` is parked in the poller: its line in gmp_dump's report says
 * "IO wait". Asked again every 100 us for up to 2 s: a state, where a sleep would only
 * make it likely (a reader delayed past the close would read whatever file another
 * actor was given the number for). */
static int parked_in_poller(long long goid)
{
    char want[48];
    snprintf(want, sizeof want, "goroutine %lld [IO wait", goid);
    int m = memfd_create("gmp-fuzz-dump", MFD_CLOEXEC);
    if (m < 0)
        return 0;
    int found = 0;
    for (int i = 0; i < 20000 && !found; i++) {
        if (ftruncate(m, 0) != 0 || lseek(m, 0, SEEK_SET) != 0 || gmp_dump(m) != 0)
            break;
        off_t len = lseek(m, 0, SEEK_END);
        char *text = len > 0 ? malloc((size_t)len + 1) : NULL;
        if (text == NULL || pread(m, text, (size_t)len, 0) != len) {
            free(text);
            break;
        }
        text[len] = '\0';
        found = strstr(text, want) != NULL;
        free(text);
        if (!found)
            gmp_sleep(100 * US);
    }
    close(m);
    return found;
}

/* op_fd's kind 10: a goroutine that reads a pipe to its end with read(2), checking the
 * pattern (byte i == i % 251). */
struct pipe_reader {
    int fd;
    atomic_llong goid;
    long long total;
    int bad;
    gmp_wg done;
};

static void pipe_reader(void *arg)
{
    struct pipe_reader *r = arg;
    unsigned char buf[4096];
    atomic_store(&r->goid, (long long)gmp_goid());
    for (;;) {
        ssize_t n = read(r->fd, buf, sizeof buf);
        if (n <= 0) {
            r->bad |= n < 0;
            break;
        }
        for (ssize_t i = 0; i < n; i++)
            r->bad |= buf[i] != (unsigned char)((r->total + i) % 251);
        r->total += n;
    }
    close(r->fd);
    gmp_wg_done(&r->done);
}

static int64_t close_in_blocking(void *arg)
{
    return close((int)(intptr_t)arg) == 0 ? 0 : -errno;
}

static void op_fd(struct actor *a)
{
    int kind = (int)rnd_below(&a->rng, FD_KINDS);
    if (kind == 8 && fd_fork_off)
        kind = 4;
    uint64_t pattern = rnd(&a->rng);
    unsigned char out[8], in[8];
    memcpy(out, &pattern, 8);
    memset(in, 0, sizeof in);
    switch (kind) {
    case 0: {
        int fds[2];
        ACHECK_EQ(a, gmp_pipe(fds), 0);
        ACHECK_EQ(a, gmp_write(fds[1], out, 8), 8);
        ACHECK_EQ(a, gmp_fd_wait(fds[0], GMP_POLLIN, 1000 * MS), GMP_POLLIN);
        ACHECK_EQ(a, gmp_fd_wait(fds[1], GMP_POLLOUT, -1), GMP_POLLOUT);
        ACHECK_EQ(a, gmp_read(fds[0], in, 8), 8);
        ACHECK(a, memcmp(in, out, 8) == 0);
        int64_t t0 = gmp_now();
        ACHECK_EQ(a, gmp_fd_wait(fds[0], GMP_POLLIN, 100 * US), -ETIMEDOUT);
        check_waited(a, t0, 100 * US);
        ACHECK_EQ(a, gmp_close(fds[1]), 0);
        ACHECK_EQ(a, gmp_read(fds[0], in, 8), 0); /* end of file */
        ACHECK_EQ(a, gmp_close(fds[0]), 0);
        break;
    }
    case 1: {
        int sv[2];
        ACHECK_EQ(a, socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        ACHECK_EQ(a, gmp_fd_register(sv[0]), 0);
        ACHECK_EQ(a, gmp_fd_register(sv[1]), 0);
        ACHECK_EQ(a, gmp_fd_register(sv[1]), 0); /* idempotent */
        ACHECK_EQ(a, gmp_send_timeout(sv[0], out, 8, 0, 1000 * MS), 8);
        ACHECK_EQ(a, gmp_recv_timeout(sv[1], in, 8, 0, 1000 * MS), 8);
        ACHECK(a, memcmp(in, out, 8) == 0);
        int64_t t0 = gmp_now();
        ACHECK_EQ(a, gmp_recv_timeout(sv[1], in, 8, 0, 200 * US), -ETIMEDOUT);
        check_waited(a, t0, 200 * US);
        ACHECK_EQ(a, gmp_sendto(sv[1], out, 8, 0, NULL, 0), 8);
        ACHECK_EQ(a, gmp_recvfrom(sv[0], in, 8, 0, NULL, NULL), 8);
        struct iovec iov = {out, 8};
        struct msghdr mh;
        memset(&mh, 0, sizeof mh);
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        ACHECK_EQ(a, gmp_sendmsg_timeout(sv[0], &mh, 0, 1000 * MS), 8);
        struct iovec iov2 = {in, 8};
        struct msghdr mh2;
        memset(&mh2, 0, sizeof mh2);
        mh2.msg_iov = &iov2;
        mh2.msg_iovlen = 1;
        ACHECK_EQ(a, gmp_recvmsg(sv[1], &mh2, 0), 8);
        ACHECK(a, memcmp(in, out, 8) == 0);
        ACHECK_EQ(a, gmp_send(sv[1], out, 8, 0), 8);
        ACHECK_EQ(a, gmp_recv(sv[0], in, 8, 0), 8);
        ACHECK_EQ(a, gmp_sendmsg(sv[1], &mh, 0), 8);
        ACHECK_EQ(a, gmp_recvmsg_timeout(sv[0], &mh2, 0, -1), 8);
        ACHECK_EQ(a, gmp_fd_unregister(sv[0]), 0);
        ACHECK_EQ(a, gmp_close(sv[0]), 0);
        ACHECK_EQ(a, gmp_recv(sv[1], in, 8, 0), 0); /* the peer closed */
        ACHECK_EQ(a, gmp_close(sv[1]), 0);
        break;
    }
    case 2: {
        int s = gmp_socket(AF_UNIX, SOCK_DGRAM, 0);
        ACHECK(a, s >= 0);
        struct sockaddr_un sa, from;
        socklen_t len = abstract_addr(&sa);
        ACHECK_EQ(a, bind(s, (struct sockaddr *)&sa, len), 0);
        ACHECK_EQ(a, gmp_sendto_timeout(s, out, 8, 0, (struct sockaddr *)&sa, len, 1000 * MS), 8);
        socklen_t flen = sizeof from;
        ACHECK_EQ(a, gmp_recvfrom_timeout(s, in, 8, 0, (struct sockaddr *)&from, &flen,
                                          1000 * MS), 8);
        ACHECK(a, memcmp(in, out, 8) == 0);
        ACHECK_EQ(a, flen, len);
        ACHECK_EQ(a, gmp_recvfrom_timeout(s, in, 8, 0, NULL, NULL, 50 * US), -ETIMEDOUT);
        ACHECK_EQ(a, gmp_close(s), 0);
        break;
    }
    case 3: {
        int l = gmp_socket(AF_UNIX, SOCK_STREAM, 0);
        ACHECK(a, l >= 0);
        struct sockaddr_un sa;
        socklen_t len = abstract_addr(&sa);
        ACHECK_EQ(a, bind(l, (struct sockaddr *)&sa, len), 0);
        ACHECK_EQ(a, listen(l, 4), 0);
        int64_t t0 = gmp_now();
        ACHECK_EQ(a, gmp_accept_timeout(l, NULL, NULL, SOCK_CLOEXEC, 200 * US), -ETIMEDOUT);
        check_waited(a, t0, 200 * US);
        int c = gmp_socket(AF_UNIX, SOCK_STREAM, 0);
        ACHECK(a, c >= 0);
        ACHECK_EQ(a, gmp_connect(c, (struct sockaddr *)&sa, len, 1000 * MS), 0);
        int s = gmp_accept(l, NULL, NULL, SOCK_CLOEXEC);
        ACHECK(a, s >= 0);
        ACHECK_EQ(a, gmp_write(c, out, 8), 8);
        ACHECK_EQ(a, gmp_read(s, in, 8), 8);
        ACHECK(a, memcmp(in, out, 8) == 0);
        ACHECK_EQ(a, gmp_close(s), 0);
        ACHECK_EQ(a, gmp_close(c), 0);
        ACHECK_EQ(a, gmp_close(l), 0);
        break;
    }
    case 4: {
        int m = memfd_create("gmp-fuzz", MFD_CLOEXEC);
        ACHECK(a, m >= 0);
        int64_t off = (int64_t)(pattern % 4096);
        ACHECK_EQ(a, gmp_pwrite(m, out, 8, off), 8);
        ACHECK_EQ(a, gmp_pread(m, in, 8, off), 8);
        ACHECK(a, memcmp(in, out, 8) == 0);
        /* sendfile from the file into a pipe (the hooks' hand-off in a goroutine). */
        int sp[2];
        ACHECK_EQ(a, pipe(sp), 0);
        off_t soff = (off_t)off;
        ACHECK_EQ(a, sendfile(sp[1], m, &soff, 8), 8);
        ACHECK_EQ(a, soff, (off_t)off + 8);
        memset(in, 0, sizeof in);
        ACHECK_EQ(a, read(sp[0], in, 8), 8);
        ACHECK(a, memcmp(in, out, 8) == 0);
        ACHECK_EQ(a, close(sp[0]), 0);
        ACHECK_EQ(a, close(sp[1]), 0);
        ACHECK_EQ(a, gmp_fsync(m), 0);
        ACHECK_EQ(a, gmp_fd_register(m), 0); /* a regular file stays as it is */
        ACHECK_EQ(a, gmp_write(m, out, 8), 8);
        ACHECK_EQ(a, gmp_close(m), 0);
        int n = gmp_open("/dev/null", O_RDWR | O_CLOEXEC, 0);
        ACHECK(a, n >= 0);
        ACHECK_EQ(a, gmp_read(n, in, 8), 0);
        ACHECK_EQ(a, gmp_write(n, out, 8), 8);
        ACHECK_EQ(a, gmp_close(n), 0);
        break;
    }
    case 6: {
        /* stdio on a pipe, closed by fclose (a close the runtime does not see): the line
         * arrives whole, then end of file. */
        int fds[2];
        ACHECK_EQ(a, gmp_pipe(fds), 0);
        FILE *f = fdopen(fds[1], "w");
        ACHECK(a, f != NULL);
        ACHECK(a, fprintf(f, "%016llx\n", (unsigned long long)pattern) == 17);
        ACHECK_EQ(a, fclose(f), 0);
        char line[17];
        size_t got = 0;
        while (got < sizeof line) {
            long n = gmp_read(fds[0], line + got, sizeof line - got);
            ACHECK(a, n > 0);
            got += (size_t)n;
        }
        char want[18];
        snprintf(want, sizeof want, "%016llx\n", (unsigned long long)pattern);
        ACHECK(a, memcmp(line, want, 17) == 0);
        ACHECK_EQ(a, gmp_read(fds[0], line, 1), 0);
        ACHECK_EQ(a, gmp_close(fds[0]), 0);
        break;
    }
    case 7: {
        /* An fd number reused after a close the runtime did not see: an eventfd that
         * may get the number of a pipe end fclose closed works as an eventfd. */
        int fds[2];
        ACHECK_EQ(a, gmp_pipe(fds), 0);
        FILE *f = fdopen(fds[0], "r");
        ACHECK(a, f != NULL);
        ACHECK_EQ(a, fclose(f), 0);
        int e = eventfd(0, EFD_CLOEXEC);
        ACHECK(a, e >= 0);
        uint64_t v = (pattern & 0xffff) + 1, w = 0;
        ACHECK_EQ(a, gmp_write(e, &v, 8), 8);
        ACHECK_EQ(a, gmp_fd_wait(e, GMP_POLLIN, 1000 * MS), GMP_POLLIN);
        ACHECK_EQ(a, gmp_read(e, &w, 8), 8);
        ACHECK_EQ(a, w, v);
        /* close(2), not gmp_close: the same close under the hooks, and one that
         * ThreadSanitizer sees. It saw the eventfd made (its interceptor); after a close
         * it did not see (gmp_close calls libc past its interceptors), it reports the next
         * eventfd given this number, on another thread, as a race on its own fd table. */
        ACHECK_EQ(a, close(e), 0);
        ACHECK_EQ(a, gmp_close(fds[1]), 0);
        break;
    }
    case 8: {
        /* A forked child writes into a goroutine's pipe with write(2) and exits; every
         * byte arrives, and the child exits 0. */
        int fds[2];
        ACHECK_EQ(a, gmp_pipe(fds), 0);
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
            for (int i = 0; i < 64; i++)
                if (write(fds[1], out, 8) != 8)
                    _exit(1);
            _exit(0);
        }
        ACHECK(a, pid > 0);
        ACHECK_EQ(a, gmp_close(fds[1]), 0);
        long total = 0;
        for (;;) {
            long n = gmp_read(fds[0], in, 8);
            ACHECK(a, n >= 0);
            if (n == 0)
                break;
            total += n;
        }
        ACHECK_EQ(a, total, 64 * 8);
        int st = -1;
        ACHECK_EQ(a, waitpid(pid, &st, 0), pid);
        ACHECK(a, WIFEXITED(st) && WEXITSTATUS(st) == 0);
        ACHECK_EQ(a, gmp_close(fds[0]), 0);
        break;
    }
    case 9: {
        /* close(2) of a pipe a goroutine is parked reading (hooked calls), from inside
         * gmp_blocking or not: the reader gets EBADF. A closer inside gmp_blocking on the
         * reader's own thread cannot wait for it to leave: the reader makes the close. */
        int fds[2];
        ACHECK_EQ(a, pipe2(fds, O_CLOEXEC), 0);
        struct parked_read r = {.fd = fds[0], .done = GMP_WG_INIT};
        ACHECK_EQ(a, gmp_wg_add(&r.done, 1), 0);
        ACHECK(a, gmp_go(parked_reader, &r) > 0);
        while (atomic_load(&r.goid) == 0)
            ACHECK_EQ(a, gmp_yield(), 0);
        ACHECK(a, parked_in_poller(atomic_load(&r.goid)));
        ACHECK_EQ(a, gmp_sleep((int64_t)rnd_below(&a->rng, 200) * US), 0);
        if (rnd_below(&a->rng, 2))
            ACHECK_EQ(a, gmp_blocking(close_in_blocking, (void *)(intptr_t)fds[0]), 0);
        else
            ACHECK_EQ(a, close(fds[0]), 0);
        ACHECK_EQ(a, gmp_wg_wait(&r.done), 0);
        ACHECK_EQ(a, r.got, -1);
        ACHECK_EQ(a, r.err, EBADF);
        ACHECK_EQ(a, close(fds[1]), 0);
        break;
    }
    case 10: {
        /* write(2) of four times a pipe's capacity to a blocking pipe whose reader
         * goroutine waits parked in read(2), on the writer's own thread when it ran there
         * (where the kernel refuses RWF_NOWAIT the write goes through the hand-off, which
         * must leave that thread to the reader): one call writes it all. */
        int fds[2];
        ACHECK_EQ(a, pipe2(fds, O_CLOEXEC), 0);
        struct pipe_reader r = {.fd = fds[0], .done = GMP_WG_INIT};
        ACHECK_EQ(a, gmp_wg_add(&r.done, 1), 0);
        ACHECK(a, gmp_go(pipe_reader, &r) > 0);
        while (atomic_load(&r.goid) == 0)
            ACHECK_EQ(a, gmp_yield(), 0);
        ACHECK(a, parked_in_poller(atomic_load(&r.goid)));
        size_t n = 256 * 1024;
        unsigned char *buf = malloc(n);
        ACHECK(a, buf != NULL);
        for (size_t i = 0; i < n; i++)
            buf[i] = (unsigned char)(i % 251);
        ACHECK_EQ(a, write(fds[1], buf, n), (long long)n);
        free(buf);
        ACHECK_EQ(a, close(fds[1]), 0);
        ACHECK_EQ(a, gmp_wg_wait(&r.done), 0);
        ACHECK_EQ(a, r.bad, 0);
        ACHECK_EQ(a, r.total, (long long)n);
        break;
    }
    default: {
        /* getaddrinfo with hints from the pattern's bits (any AI_* combination, now and then
         * an unknown flag, family or socket type) over a numeric host or localhost: on a
         * goroutine the runtime's resolver, on a thread libc's; 0 and a list libc's
         * freeaddrinfo frees, or an EAI code. localhost only where /etc/hosts answers
         * without the network (AF_UNSPEC, AF_INET). */
        static const char *const hosts[] = {"127.0.0.1", "::1", "10.1.2.3", "localhost"};
        static const int fams[] = {AF_UNSPEC, AF_INET, AF_INET6, AF_UNIX};
        static const int types[] = {0, SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, 0, SOCK_STREAM, 0, 99};
        unsigned host = (unsigned)(pattern >> 48) & 3;
        struct addrinfo gh = {
            .ai_flags = (int)(pattern & 0x43f) | ((pattern >> 47) & 1 ? 0x800 : 0),
            .ai_family = fams[(pattern >> 52) & 3],
            .ai_socktype = types[(pattern >> 54) & 7],
        };
        if (host == 3 && gh.ai_family != AF_INET)
            gh.ai_family = AF_UNSPEC;
        struct addrinfo *gres = NULL;
        int gr = getaddrinfo(hosts[host], (pattern >> 57) & 1 ? "80" : NULL, &gh, &gres);
        ACHECK(a, gr <= 0 && gr >= EAI_SYSTEM);
        if (gr == 0) {
            ACHECK(a, gres != NULL);
            for (struct addrinfo *p = gres; p; p = p->ai_next)
                ACHECK_EQ(a, p->ai_addr->sa_family, p->ai_family);
            freeaddrinfo(gres);
        }
        /* Bad fds and arguments. */
        int fd = spare_fds[0];
        ACHECK_EQ(a, gmp_read(-1, in, 1), -EBADF);
        ACHECK_EQ(a, gmp_read(fd, NULL, 1), -EINVAL);
        ACHECK_EQ(a, gmp_write(spare_fds[1], NULL, 1), -EINVAL);
        ACHECK_EQ(a, gmp_pread(fd, NULL, 1, 0), -EINVAL);
        ACHECK_EQ(a, gmp_pwrite(fd, NULL, 1, 0), -EINVAL);
        ACHECK_EQ(a, gmp_open(NULL, O_RDONLY, 0), -EINVAL);
        ACHECK_EQ(a, gmp_close(-1), -EBADF);
        ACHECK_EQ(a, gmp_fsync(-1), -EBADF);
        ACHECK_EQ(a, gmp_pipe(NULL), -EINVAL);
        ACHECK_EQ(a, gmp_fd_register(-1), -EBADF);
        ACHECK_EQ(a, gmp_fd_register(2000000), -EBADF);
        ACHECK_EQ(a, gmp_fd_unregister(-1), -EBADF);
        ACHECK_EQ(a, gmp_fd_wait(fd, 0, 0), -EINVAL);
        ACHECK_EQ(a, gmp_fd_wait(fd, 0x10, 0), -EINVAL);
        ACHECK_EQ(a, gmp_fd_wait(-1, GMP_POLLIN, 0), -EBADF);
        ACHECK_EQ(a, gmp_fd_wait(fd, GMP_POLLIN, 0), -ETIMEDOUT);
        ACHECK_EQ(a, gmp_recv_timeout(fd, NULL, 1, 0, 0), -EINVAL);
        ACHECK_EQ(a, gmp_recvmsg(fd, NULL, 0), -EINVAL);
        ACHECK_EQ(a, gmp_sendmsg(fd, NULL, 0), -EINVAL);
        ACHECK_EQ(a, gmp_recvmsg_timeout(fd, NULL, 0, 0), -EINVAL);
        ACHECK_EQ(a, gmp_sendmsg_timeout(fd, NULL, 0, 0), -EINVAL);
        ACHECK_EQ(a, gmp_dump(-1), -EBADF);
        break;
    }
    }
}

/* ---- invalid arguments elsewhere ---- */

static void noop(void *arg)
{
    (void)arg;
}

static void op_invalid(struct actor *a)
{
    int which = (int)rnd_below(&a->rng, 8);
    int flip = (int)rnd_below(&a->rng, 2);
    void *odd = raw + 1;
    gmp_attr attr;
    memset(&attr, 0, sizeof attr);
    switch (which) {
    case 0:
        ACHECK_EQ(a, gmp_go(NULL, NULL), -EINVAL);
        ACHECK_EQ(a, gmp_go_attr(NULL, NULL, NULL), -EINVAL);
        ACHECK_EQ(a, gmp_go_attr(NULL, NULL, &attr), -EINVAL);
        attr.flags = 4;
        ACHECK_EQ(a, gmp_go_attr(noop, NULL, &attr), -EINVAL);
        attr.flags = GMP_GO_PINNED | 0x80000000u;
        ACHECK_EQ(a, gmp_go_attr(noop, NULL, &attr), -EINVAL);
        attr.flags = 0;
        attr.stack_size = GMP_MIN_STACK - 1;
        ACHECK_EQ(a, gmp_go_attr(noop, NULL, &attr), -EINVAL);
        attr.stack_size = (size_t)GMP_MAX_STACK + 1;
        ACHECK_EQ(a, gmp_go_attr(noop, NULL, &attr), -EINVAL);
        break;
    case 1:
        ACHECK_EQ(a, gmp_set_default_stack_size(1), -EINVAL);
        ACHECK_EQ(a, gmp_set_default_stack_size((size_t)GMP_MAX_STACK + 1), -EINVAL);
        ACHECK_EQ(a, gmp_set_default_stack_size(flip ? 128 * 1024 : 256 * 1024), 0);
        ACHECK_EQ(a, gmp_set_max_threads(0), -EINVAL);
        ACHECK_EQ(a, gmp_set_max_threads(-1), -EINVAL);
        ACHECK_EQ(a, gmp_set_max_threads(10000), 10000);
        break;
    case 2:
        ACHECK_EQ(a, gmp_mutex_lock(NULL), -EINVAL);
        ACHECK_EQ(a, (gmp_mutex_lock)(NULL), -EINVAL);
        ACHECK_EQ(a, gmp_mutex_lock(odd), -EINVAL);
        ACHECK_EQ(a, gmp_mutex_trylock(NULL), -EINVAL);
        ACHECK_EQ(a, gmp_mutex_trylock(odd), -EINVAL);
        ACHECK_EQ(a, gmp_mutex_unlock(NULL), -EINVAL);
        ACHECK_EQ(a, (gmp_mutex_unlock)(odd), -EINVAL);
        break;
    case 3:
        ACHECK_EQ(a, gmp_rwmutex_rlock(NULL), -EINVAL);
        ACHECK_EQ(a, gmp_rwmutex_runlock(odd), -EINVAL);
        ACHECK_EQ(a, gmp_rwmutex_lock(odd), -EINVAL);
        ACHECK_EQ(a, gmp_rwmutex_unlock(NULL), -EINVAL);
        ACHECK_EQ(a, gmp_rwmutex_tryrlock(NULL), -EINVAL);
        ACHECK_EQ(a, gmp_rwmutex_trylock(odd), -EINVAL);
        break;
    case 4: {
        gmp_mutex m = GMP_MUTEX_INIT;
        gmp_cond c = GMP_COND_INIT;
        ACHECK_EQ(a, gmp_cond_signal(NULL), -EINVAL);
        ACHECK_EQ(a, gmp_cond_broadcast(odd), -EINVAL);
        ACHECK_EQ(a, gmp_mutex_lock(&m), 0);
        ACHECK_EQ(a, gmp_cond_wait(NULL, &m), -EINVAL);
        ACHECK_EQ(a, gmp_cond_wait(&c, NULL), -EINVAL);
        ACHECK_EQ(a, gmp_cond_wait(odd, &m), -EINVAL);
        ACHECK_EQ(a, gmp_cond_wait(&c, odd), -EINVAL);
        ACHECK_EQ(a, gmp_mutex_trylock(&m), -EBUSY); /* the failed waits left it held */
        ACHECK_EQ(a, gmp_mutex_unlock(&m), 0);
        ACHECK_EQ(a, gmp_once_do(NULL, noop, NULL), -EINVAL);
        ACHECK_EQ(a, gmp_once_do(odd, noop, NULL), -EINVAL);
        break;
    }
    case 5:
        ACHECK_EQ(a, gmp_trace_start(NULL), -EINVAL);
        ACHECK_EQ(a, gmp_trace_stop(), -EINVAL); /* no trace is running */
        ACHECK_EQ(a, gmp_dump(-1), -EBADF);
        ACHECK_EQ(a, gmp_dump(-100), -EBADF);
        if (flip && !a->light)
            ACHECK_EQ(a, gmp_dump(devnull), 0);
        ACHECK_EQ(a, gmp_trace_flight_write(-1), -EBADF);
        if (!flip && !a->light) {
            /* A flight recorder for a moment: one actor at a time gets it (or a traced
             * run's trace holds the place); its window goes to /dev/null. */
            int r = gmp_trace_flight_start(1, 1);
            ACHECK(a, r == 0 || r == -EBUSY);
            if (r == 0) {
                ACHECK_EQ(a, gmp_trace_flight_write(devnull), 0);
                ACHECK_EQ(a, gmp_trace_flight_stop(), 0);
            }
        }
        break;
    case 6:
        if (a->goroutine) {
            ACHECK_EQ(a, gmp_exitsyscall(), -EINVAL);
        } else {
            ACHECK_EQ(a, gmp_goexit(), -EPERM);
            ACHECK_EQ(a, gmp_goid(), 0);
            ACHECK_EQ(a, gmp_yield(), 0);
            ACHECK_EQ(a, gmp_entersyscall(), 0);
            ACHECK_EQ(a, gmp_exitsyscall(), 0);
            ACHECK_EQ(a, gmp_lock_os_thread(), -EPERM);
            ACHECK_EQ(a, gmp_unlock_os_thread(), -EPERM);
        }
        break;
    default:
        ACHECK_EQ(a, gmp_stats(NULL, NULL, 0), -EINVAL);
        {
            uint32_t lens[2];
            ACHECK_EQ(a, gmp_stats(NULL, lens, 2), -EINVAL);
        }
        ACHECK_EQ(a, gmp_blocking(NULL, NULL), -EINVAL);
        break;
    }
}

/* ---- scopes ---- */

/* A scope another actor may cancel (op_scope's third kind publishes its own here; the
 * owner takes it away before ending it, under the lock a canceller holds). */
static spin_t scope_lock;
static gmp_scope *shared_scope;
static atomic_ulong scopes_cancelled_by_others;
/* Scoped locks (op_scope) taken, and ended by their scope. */
static atomic_ulong scoped_locks_taken, scoped_locks_ended;

static int count_scoped_lock(int r)
{
    atomic_fetch_add(r == 0 ? &scoped_locks_taken : &scoped_locks_ended, 1);
    return r;
}

/* A mutex lock in a scope (op_scope): taken (the usual section and unlock) or ended by
 * the scope without the lock; returns what the lock returned. No sleep inside: the scope
 * would end it. */
static int scoped_mutex(struct actor *a)
{
    int i = (int)rnd_below(&a->rng, NMU);
    int r = rnd_below(&a->rng, 2) ? gmp_mutex_lock(&mus[i]) : (gmp_mutex_lock)(&mus[i]);
    ACHECK_ONEOF(a, r, 0, -ECANCELED, -ETIMEDOUT);
    if (r == 0) {
        mu_section(a, i, (int)rnd_below(&a->rng, 2));
        ACHECK_EQ(a, gmp_mutex_trylock(&mus[i]), -EBUSY);
        mu_unlock(a, i, (int)rnd_below(&a->rng, 3));
    }
    return r;
}

/* A read or write lock in a scope, as scoped_mutex. */
static int scoped_rwmutex(struct actor *a)
{
    int i = (int)rnd_below(&a->rng, NRW);
    gmp_rwmutex *rw = &rws[i];
    int pause = (int)rnd_below(&a->rng, 2);
    if (rnd_below(&a->rng, 2)) {
        int r = gmp_rwmutex_rlock(rw);
        ACHECK_ONEOF(a, r, 0, -ECANCELED, -ETIMEDOUT);
        if (r != 0)
            return r;
        atomic_fetch_add(&rw_readers[i], 1);
        ACHECK_EQ(a, atomic_load(&rw_writers[i]), 0);
        pause_inside(a, pause);
        ACHECK_EQ(a, atomic_load(&rw_writers[i]), 0);
        atomic_fetch_sub(&rw_readers[i], 1);
        ACHECK_EQ(a, gmp_rwmutex_runlock(rw), 0);
        return 0;
    }
    int r = gmp_rwmutex_lock(rw);
    ACHECK_ONEOF(a, r, 0, -ECANCELED, -ETIMEDOUT);
    if (r != 0)
        return r;
    ACHECK_EQ(a, atomic_fetch_add(&rw_writers[i], 1), 0);
    ACHECK_EQ(a, atomic_load(&rw_readers[i]), 0);
    long c = atomic_load_explicit(&rw_counter[i], memory_order_relaxed);
    pause_inside(a, pause);
    atomic_store_explicit(&rw_counter[i], c + 1, memory_order_relaxed);
    ACHECK_EQ(a, atomic_fetch_sub(&rw_writers[i], 1), 1);
    atomic_fetch_add(&rw_wsections[i], 1);
    ACHECK_EQ(a, gmp_rwmutex_unlock(rw), 0);
    return 0;
}

/* A scope around a few channel operations, mutex and rwmutex locks and sleeps: with a
 * deadline of up to 500 us, cancelled by the actor itself half-way, or published for
 * other actors to cancel (kind 3 cancels the one published, if any). The channel and
 * lock checks hold as everywhere, except that a wait may end with the scope's -ECANCELED
 * or -ETIMEDOUT (a send that did not happen, a receive that wrote nothing, a lock not
 * taken: the locks' own actors, outside scopes, then still get them); the scope reports
 * why it ended; ending it makes the enclosing (none) current again. */
static void op_scope(struct actor *a)
{
    int kind = (int)rnd_below(&a->rng, 4);
    if (kind == 3) {
        spin_lock(&scope_lock);
        if (shared_scope != NULL) {
            ACHECK_EQ(a, gmp_scope_cancel(shared_scope), 0);
            atomic_fetch_add(&scopes_cancelled_by_others, 1);
        }
        spin_unlock(&scope_lock);
        return;
    }
    ACHECK(a, gmp_scope_current() == NULL);
    int64_t to = kind == 0 ? (int64_t)rnd_below(&a->rng, 500) * US : -1;
    gmp_scope *s = NULL;
    ACHECK_EQ(a, gmp_scope_begin(&s, to), 0);
    ACHECK(a, gmp_scope_current() == s);
    int published = 0;
    if (kind == 2) {
        spin_lock(&scope_lock);
        if (shared_scope == NULL) {
            shared_scope = s;
            published = 1;
        }
        spin_unlock(&scope_lock);
    }
    a->scoped = 1;
    int n = 1 + (int)rnd_below(&a->rng, 4);
    for (int i = 0; i < n; i++) {
        if (kind == 1 && i == n / 2)
            ACHECK_EQ(a, gmp_scope_cancel(s), 0);
        int r = 0;
        switch (rnd_below(&a->rng, 6)) {
        case 0: op_send(a); break;
        case 1: op_recv(a); break;
        case 2: op_select(a); break;
        case 3: r = count_scoped_lock(scoped_mutex(a)); break;
        case 4: r = count_scoped_lock(scoped_rwmutex(a)); break;
        default:
            r = gmp_sleep((int64_t)rnd_below(&a->rng, 300) * US + 1);
            ACHECK_ONEOF(a, r, 0, -ECANCELED, -ETIMEDOUT);
            break;
        }
        if (r == -ETIMEDOUT)
            ACHECK(a, kind == 0 && gmp_now() >= gmp_scope_deadline(s));
    }
    a->scoped = 0;
    if (published) {
        spin_lock(&scope_lock);
        shared_scope = NULL;
        spin_unlock(&scope_lock);
    }
    int e = gmp_scope_err(s);
    ACHECK_ONEOF(a, e, 0, -ECANCELED, -ETIMEDOUT);
    if (kind == 1)
        ACHECK_EQ(a, e, -ECANCELED);
    if (e == -ETIMEDOUT)
        ACHECK(a, kind == 0);
    ACHECK_EQ(a, gmp_scope_end(s), 0);
    ACHECK(a, gmp_scope_current() == NULL);
}

/* ---- the op loop ---- */

static unsigned actor_ctx(const struct actor *a)
{
    if (a->light)
        return CTX_LIGHT;
    if (a->pinned && a->lockdepth > 0)
        return CTX_PINLOCK;
    return CTX_FULL;
}

static int draw_op(struct actor *a)
{
    unsigned ctx = actor_ctx(a);
    int total = 0;
    for (int i = 0; i < NOPS; i++)
        if (opdefs[i].ctx & ctx)
            total += op_weight[i];
    int x = (int)rnd_below(&a->rng, (uint32_t)total);
    for (int i = 0; i < NOPS; i++) {
        if (!(opdefs[i].ctx & ctx))
            continue;
        if (x < op_weight[i])
            return i;
        x -= op_weight[i];
    }
    return OP_YIELD;
}

static void run_op(struct actor *a)
{
    int op = draw_op(a);
    note(a, op);
    switch (op) {
    case OP_SEND: op_send(a); break;
    case OP_RECV: op_recv(a); break;
    case OP_SELECT: op_select(a); break;
    case OP_CLOSE: op_close(a); break;
    case OP_LENCAP: op_lencap(a); break;
    case OP_REPLACE: op_replace(a); break;
    case OP_RETAIN: op_retain(a); break;
    case OP_CHAN_INVALID: op_chan_invalid(a); break;
    case OP_SELECT_INVALID: op_select_invalid(a); break;
    case OP_MUTEX: op_mutex(a); break;
    case OP_RWMUTEX: op_rwmutex(a); break;
    case OP_COND: op_cond(a); break;
    case OP_WG: op_wg(a); break;
    case OP_ONCE: op_once(a); break;
    case OP_YIELD: ACHECK_EQ(a, gmp_yield(), 0); break;
    case OP_SLEEP: op_sleep(a); break;
    case OP_SPAWN: op_spawn(a); break;
    case OP_MAXPROCS: op_maxprocs(a); break;
    case OP_INFO: op_info(a); break;
    case OP_SYSCALL: op_syscall(a); break;
    case OP_LOCK: op_lock(a); break;
    case OP_FD: op_fd(a); break;
    case OP_INVALID: op_invalid(a); break;
    case OP_PTHREAD: op_pthread(a); break;
    case OP_SIGNAL: op_signal(a); break;
    case OP_SCOPE: op_scope(a); break;
    case OP_SIGWAIT: op_sigwait(a); break;
    default: ACHECK(a, 0);
    }
    if (a->pinned || a->lockdepth > 0)
        ACHECK_EQ(a, gettid_(), a->tid);
    a->nops++;
    if (a->nops == DIGEST_OP)
        a->digest = a->rng;
    /* note() of a nested op overwrote the section's own entry: the section goes on. */
    if (a->idx >= 0 && a->lockdepth > 0 && op != OP_LOCK)
        atomic_store(&status[a->idx].lockdepth, a->lockdepth);
    note_done(a);
    atomic_fetch_add(&op_count[op], 1);
    atomic_fetch_add(&progress, 1);
}

/* ---- actors ---- */

static gmp_wg actors_wg = GMP_WG_INIT;
static atomic_int actors_done;

static const char *const gor_names[NGOR] = {
    "g0 (plain)", "g1 (plain, lock sections)", "g2 (pinned)", "g3 (GMP_GO_LOCKED)",
    "g4 (plain, lock sections)", "g5 (pinned, lock sections)",
};

static void actor_init(struct actor *a, int i)
{
    memset(a, 0, sizeof *a);
    a->idx = i;
    a->prod = i;
    a->rng = rng_seed((uint64_t)i);
    a->goroutine = i < NGOR;
    a->pinned = i == 2 || i == 5;
    a->locker = i == 1 || i == 4 || i == 5;
    a->lockdepth = i == 3 ? 1 : 0;
    a->tid = gettid_();
    a->goid = gmp_goid();
    if (i < NGOR) {
        snprintf(a->tag, sizeof a->tag, "g%d", i);
        snprintf(a->name, sizeof a->name, "%s", gor_names[i]);
    } else {
        snprintf(a->tag, sizeof a->tag, "t%d", i - NGOR);
        snprintf(a->name, sizeof a->name, "t%d (foreign thread)", i - NGOR);
    }
    memcpy(status[i].name, a->name, sizeof status[i].name);
    atomic_store(&status[i].used, 1);
    actors[i] = a;
}

static void actor_loop(struct actor *a)
{
    if (a->goroutine)
        ACHECK(a, a->goid > 0);
    else
        ACHECK_EQ(a, a->goid, 0);
    atomic_fetch_add(&actors_started, 1);
    while (!atomic_load(&stop))
        run_op(a);
    if (a->pinned || a->lockdepth > 0)
        ACHECK_EQ(a, gettid_(), a->tid);
    atomic_store(&status[a->idx].op, -2);
}

static void gor_main(void *arg)
{
    int i = (int)(intptr_t)arg;
    struct actor *a = calloc(1, sizeof *a);
    ACHECK(NULL, a != NULL);
    actor_init(a, i);
    actor_loop(a);
    /* The GMP_GO_LOCKED actor ends locked (taking its thread) or unlocked, by the seed. */
    if (i == 3 && (seed & 1))
        ACHECK_EQ(a, gmp_unlock_os_thread(), 0);
    atomic_fetch_add(&actors_done, 1);
    ACHECK_EQ(a, gmp_wg_done(&actors_wg), 0);
}

static void *thread_main(void *arg)
{
    int i = (int)(intptr_t)arg;
    struct actor *a = calloc(1, sizeof *a);
    ACHECK(NULL, a != NULL);
    actor_init(a, i);
    actor_loop(a);
    atomic_fetch_add(&actors_done, 1);
    return NULL;
}

/* ---- the watchdog ---- */

static void report(const char *why)
{
    gmp_sched_stats st;
    uint32_t lens[8] = {0};
    int nl = gmp_stats(&st, lens, 8);
    long long now = gmp_now();
    fprintf(stderr, "fuzz: %s (seed %llu, procs %d, %.3f s into the run; main: %s)\n", why,
            seed, start_procs, (double)(now - t_start) / 1e9, atomic_load(&main_phase));
    fprintf(stderr,
            "fuzz: gmp_stats gomaxprocs=%d idleprocs=%d threads=%d spinningthreads=%d "
            "idlethreads=%d runqueue=%lld goroutines=%lld spawned=%llu schedticks=%llu; "
            "runq lens:", st.gomaxprocs, st.idleprocs, st.threads, st.spinningthreads,
            st.idlethreads, (long long)st.runqueue, (long long)st.goroutines,
            (unsigned long long)st.spawned, (unsigned long long)st.schedticks);
    for (int i = 0; i < nl; i++)
        fprintf(stderr, " %u", lens[i]);
    fprintf(stderr, "\nfuzz: progress=%lu children %lu/%lu detached alive %d\n",
            atomic_load(&progress), atomic_load(&children_ended),
            atomic_load(&children_started), atomic_load(&detached_live));
    for (int i = 0; i < NACT + NCHILDSLOTS; i++) {
        struct status *s = &status[i];
        if (!atomic_load(&s->used))
            continue;
        int op = atomic_load(&s->op);
        if (op == -1) {
            if (i < NACT)
                fprintf(stderr, "fuzz:   %s: not started\n", s->name);
            continue;
        }
        if (op == -2) {
            fprintf(stderr, "fuzz:   %s: ended after %lu ops\n", s->name, atomic_load(&s->nops));
            continue;
        }
        const char *sub = atomic_load(&s->sub);
        long long to = atomic_load(&s->timeout);
        int slot = atomic_load(&s->slot);
        char where[96] = "";
        if (slot >= 0)
            snprintf(where, sizeof where, " slot %d chan #%u", slot, atomic_load(&s->chan));
        char tos[48] = "";
        if (to != INT64_MIN)
            snprintf(tos, sizeof tos, " timeout %lld ns", to);
        fprintf(stderr, "fuzz:   %s: %s %s%s%s%s%s%s for %lld ms (%lu ops done)%s\n", s->name,
                atomic_load(&s->inside) ? "in" : "after", opdefs[op].name, where, tos,
                sub ? " (" : "", sub ? sub : "", sub ? ")" : "",
                (now - atomic_load(&s->since)) / MS, atomic_load(&s->nops),
                atomic_load(&s->lockdepth) > 0 ? " [locked to its thread]" : "");
    }
    /* The live channels, from the fuzzer's records (no call on them: one may be the
     * reason of the stall). */
    int tries = 0;
    while (!spin_trylock(&reg_lock) && tries++ < 100)
        sleep_ms(1);
    if (tries <= 100) {
        int shown = 0;
        for (struct chrec *r = reg_head; r != NULL; r = r->next) {
            if (shown++ < 40)
                fprintf(stderr, "fuzz:   chan #%u elem %zu cap %zu refs %d%s%s sent %llu "
                        "received %llu, %lld ms old\n", r->id, r->elem, r->cap,
                        atomic_load(&r->refs), atomic_load(&r->closing) ? " closing" : "",
                        atomic_load(&r->closed) ? " closed" : "", atomic_load(&r->sent_ok),
                        atomic_load(&r->received), (now - r->born) / MS);
        }
        fprintf(stderr, "fuzz:   %d live channels\n", shown);
        spin_unlock(&reg_lock);
    } else {
        fprintf(stderr, "fuzz:   (the channel registry's lock is held)\n");
    }
    fflush(stderr);
}

/* An actor (or a child with a status slot) inside one op for the stall limit: every op
 * ends in bounded time (a wait without a timeout ends when the janitor closes its
 * channel, at most its lifetime of 300 ms later), so one that does not is stuck even
 * while the others progress, e.g. a waiter whose wake-up was lost. */
static int stuck_actor(char *why, size_t n)
{
    long long now = gmp_now();
    for (int i = 0; i < NACT + NCHILDSLOTS; i++) {
        struct status *s = &status[i];
        if (!atomic_load(&s->used) || !atomic_load(&s->inside))
            continue;
        int op = atomic_load(&s->op);
        long long since = atomic_load(&s->since);
        if (op < 0 || (now - since) / MS < stall_ms)
            continue;
        snprintf(why, n, "%s stuck in op %s for %.1f s", i < NACT ? s->name : "a child",
                 opdefs[op].name, (double)(now - since) / 1e9);
        return 1;
    }
    return 0;
}

/* With GMP_FUZZ_GDB set (scripts/fuzz.sh sets it where gdb is installed): every thread's
 * backtrace, from gdb attached to this process. A hang's goroutine dump shows where the
 * goroutines wait; this shows where the runtime's own threads do. */
static void thread_backtraces(void)
{
    const char *want = getenv("GMP_FUZZ_GDB");
    if (want == NULL || *want == '\0' || strcmp(want, "0") == 0)
        return;
    char pid[24];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    fprintf(stderr, "fuzz: every thread's backtrace follows (gdb)\n");
    fflush(stderr);
    pid_t c = fork();
    if (c == 0) {
        dup2(2, 1);
        execlp("gdb", "gdb", "-p", pid, "-batch", "-nx", "-ex", "thread apply all bt",
               (char *)NULL);
        _exit(127);
    }
    if (c > 0)
        (void)waitpid(c, NULL, 0);
}

static void *watchdog_main(void *arg)
{
    (void)arg;
    unsigned long last = atomic_load(&progress);
    double last_move = now_sec();
    char why[160];
    while (!atomic_load(&finished)) {
        sleep_ms(50);
        unsigned long p = atomic_load(&progress);
        double t = now_sec();
        if (p != last) {
            last = p;
            last_move = t;
        }
        if ((t - last_move) * 1000 >= (double)stall_ms)
            snprintf(why, sizeof why, "no progress for %.1f s", (double)stall_ms / 1000);
        else if (!stuck_actor(why, sizeof why))
            continue;
        if (atomic_exchange(&failing, 1)) {
            for (;;)
                sleep(1);
        }
        /* The dump could hang in a broken runtime: SIGALRM's default action ends the
         * process if it does. */
        alarm(30);
        report(why);
        fputs(failed_text, stderr);
        fprintf(stderr, "fuzz: goroutine dump follows\n");
        fflush(stderr);
        gmp_dump(2);
        alarm(90);
        thread_backtraces();
        die();
    }
    return NULL;
}

/* ---- main ---- */

static int count_cpus(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return -1;
    return CPU_COUNT(&set);
}

static void set_phase(const char *phase)
{
    atomic_store(&main_phase, phase);
    atomic_fetch_add(&progress, 1);
}

/* Every goroutine the fuzzer starts finishes and every channel it releases is released by
 * its last user: a leak report (gmp_set_leak_handler) is a false one, or a goroutine the
 * run lost. */
static void on_leak(int64_t goid, const char *reason, void *arg)
{
    (void)arg;
    fail_at(NULL, __FILE__, __LINE__, "leak reported: goroutine %lld [%s]", (long long)goid,
            reason);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 4) {
        fprintf(stderr, "usage: fuzz SEED SECONDS PROCS\n");
        return 2;
    }
    char *end;
    seed = strtoull(argv[1], &end, 0);
    if (*end != 0) {
        fprintf(stderr, "fuzz: bad seed \"%s\"\n", argv[1]);
        return 2;
    }
    run_secs = strtol(argv[2], &end, 0);
    if (*end != 0 || run_secs < 0) {
        fprintf(stderr, "fuzz: bad SECONDS \"%s\"\n", argv[2]);
        return 2;
    }
    start_procs = (int)strtol(argv[3], &end, 0);
    if (*end != 0 || start_procs < 1 || start_procs > 4) {
        fprintf(stderr, "fuzz: PROCS must be 1..4, not \"%s\"\n", argv[3]);
        return 2;
    }
    set_op_weights();
    const char *s = getenv("FUZZ_STALL_MS");
    if (s != NULL)
        stall_ms = strtol(s, NULL, 0);
    abort_on_fail = getenv("FUZZ_ABORT") != NULL && strcmp(getenv("FUZZ_ABORT"), "1") == 0;
    if (stall_ms <= 0) {
        fprintf(stderr, "fuzz: bad FUZZ_STALL_MS\n");
        return 2;
    }

    /* The replay line: the environment that shapes the run, and the absolute path. */
    char exe[512];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        snprintf(exe, sizeof exe, "%s", argv[0]);
    else
        exe[n] = 0;
    size_t len = 0;
    static const char *const envs[] = {"GMP_DEBUG", "GMP_MAXPROCS", "GMP_STACK_SIZE",
                                       "GMP_MAX_THREADS", "FUZZ_STALL_MS", "FUZZ_OPS_OFF"};
    for (size_t i = 0; i < sizeof envs / sizeof envs[0]; i++) {
        const char *v = getenv(envs[i]);
        if (v != NULL && len < sizeof replay_cmd - 100)
            len += (size_t)snprintf(replay_cmd + len, sizeof replay_cmd - len, "%s='%s' ",
                                    envs[i], v);
    }
    snprintf(replay_cmd + len, sizeof replay_cmd - len, "%s %llu %ld %d", exe, seed, run_secs,
             start_procs);
    snprintf(failed_text, sizeof failed_text, "fuzz: FAILED seed=%llu procs=%d\n"
             "fuzz: replay: %s\n", seed, start_procs, replay_cmd);
    failed_len = strlen(failed_text);

    /* Before the runtime starts (see on_fatal). */
    signal(SIGABRT, on_fatal);
    signal(SIGSEGV, on_fatal);
    signal(SIGBUS, on_fatal);
    signal(SIGILL, on_fatal);
    signal(SIGFPE, on_fatal);
    /* op_sigwait's signal, should one be delivered instead of waited for. */
    signal(SIGRTMIN + 1, on_sigwait_stray);

    ncpu_expected = count_cpus();
    struct actor *m = &main_actor;
    m->idx = -1;
    m->prod = PROD_MAIN;
    m->rng = rng_seed(1000);
    snprintf(m->tag, sizeof m->tag, "main");
    snprintf(m->name, sizeof m->name, "main (janitor)");

    ACHECK_EQ(m, gmp_set_max_threads(10000), 10000);
    ACHECK_EQ(m, gmp_set_leak_handler(on_leak, NULL), 0);
    /* Kept until the process exits: a stop would give SIGUSR2 its default action. */
    int usr2 = SIGUSR2;
    ACHECK_EQ(m, gmp_chan_make(&sig_ch, sizeof(int), 64), 0);
    ACHECK_EQ(m, gmp_signal_notify(sig_ch, &usr2, 1), 0);
    ACHECK(m, gmp_maxprocs(start_procs) >= 1);
    procs_now = start_procs;
    printf("fuzz: seed=%llu seconds=%ld procs=%d\n", seed, run_secs, start_procs);
    t_start = gmp_now();
    devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    ACHECK(m, devnull >= 0);
    ACHECK_EQ(m, gmp_pipe(spare_fds), 0);
    for (size_t i = 0; i < sizeof many_cases / sizeof many_cases[0]; i++)
        many_cases[i].op = GMP_RECV;
    for (int i = 0; i < NACT + NCHILDSLOTS; i++)
        atomic_store(&status[i].op, -1);
    for (int i = 0; i < NSLOT; i++) {
        int kind = (int)rnd_below(&m->rng, (uint32_t)NKINDS);
        int64_t life = (20 + (int64_t)rnd_below(&m->rng, 280)) * MS;
        replace(m, i, kind, life, 0);
    }

    pthread_t watchdog;
    ACHECK_EQ(m, pthread_create(&watchdog, NULL, watchdog_main, NULL), 0);

    ACHECK_EQ(m, gmp_wg_add(&actors_wg, NGOR), 0);
    for (int i = 0; i < NGOR; i++) {
        gmp_attr attr;
        memset(&attr, 0, sizeof attr);
        attr.flags = (i == 2 || i == 5) ? GMP_GO_PINNED : i == 3 ? GMP_GO_LOCKED : 0;
        ACHECK(m, gmp_go_attr(gor_main, (void *)(intptr_t)i, &attr) > 0);
    }
    pthread_t threads[NFOR];
    for (int i = 0; i < NFOR; i++)
        ACHECK_EQ(m, pthread_create(&threads[i], NULL, thread_main, (void *)(intptr_t)(NGOR + i)),
                  0);
    set_phase("waiting for the actors to start");
    double deadline = now_sec() + 10;
    while (atomic_load(&actors_started) < NACT) {
        ACHECK(m, now_sec() < deadline);
        sleep_ms(1);
    }

    /* The run: the janitor closes channels past their lifetime and replaces closed ones. */
    set_phase("janitor");
    double t_end = now_sec() + (double)run_secs;
    while (now_sec() < t_end) {
        sleep_ms(5);
        sweep(m, 0);
        for (int i = 0; i < NSLOT; i++) {
            spin_lock(&slots[i].lock);
            struct chrec *r = slots[i].rec;
            int dead = atomic_load(&r->closed);
            uint32_t id = r->id;
            spin_unlock(&slots[i].lock);
            if (dead) {
                /* The new channel's kind and life follow from the old one's number. */
                uint64_t h = splitmix(seed ^ (id * 7919ULL));
                replace(m, i, (int)(h % (uint64_t)NKINDS), (20 + (int64_t)(h >> 32) % 280) * MS, 0);
            }
        }
    }

    /* Stop: every op without a timeout is unblocked by closing every channel, again and
     * again, until the actors and children are done. */
    set_phase("stopping: closing every channel until the actors end");
    atomic_store(&stop, 1);
    deadline = now_sec() + 20;
    while (atomic_load(&actors_done) < NACT || atomic_load(&detached_live) > 0) {
        sweep(m, 1);
        if (now_sec() > deadline) {
            report("the actors did not end within 20 s of the deadline");
            die();
        }
        sleep_ms(2);
    }
    set_phase("joining the threads");
    for (int i = 0; i < NFOR; i++)
        ACHECK_EQ(m, pthread_join(threads[i], NULL), 0);
    set_phase("waiting for the actor goroutines");
    ACHECK_EQ(m, gmp_wg_wait(&actors_wg), 0);
    set_phase("waiting for the detached children");
    ACHECK_EQ(m, gmp_wg_wait(&detached_wg), 0);

    /* The pool's references: the last holder of each channel drains and checks it. */
    set_phase("releasing the pool");
    for (int i = 0; i < NSLOT; i++) {
        struct chrec *r = slots[i].rec;
        slots[i].rec = NULL;
        rec_put(m, r);
    }
    if (atomic_load(&reg_count) != 0) {
        for (struct chrec *r = reg_head; r != NULL; r = r->next)
            fprintf(stderr, "fuzz: chan #%u still has %d references\n", r->id,
                    atomic_load(&r->refs));
        fail_at(m, __FILE__, __LINE__, "%d channels were not released",
                atomic_load(&reg_count));
    }
    set_phase("checking every value");
    int bad = list_bad_values(0, 1);
    if (bad != 0)
        fail_at(m, __FILE__, __LINE__, "%d values were lost, duplicated or received after a "
                "failed send", bad);
    unsigned long long values = 0;
    for (int p = 0; p < NPROD; p++)
        values += atomic_load(&pseq[p]);

    for (int i = 0; i < NMU; i++) {
        ACHECK_EQ(m, atomic_load(&mu_counter[i]), atomic_load(&mu_sections[i]));
        ACHECK_EQ(m, gmp_mutex_trylock(&mus[i]), 0);
        ACHECK_EQ(m, gmp_mutex_unlock(&mus[i]), 0);
    }
    for (int i = 0; i < NRW; i++) {
        ACHECK_EQ(m, atomic_load(&rw_counter[i]), atomic_load(&rw_wsections[i]));
        ACHECK_EQ(m, gmp_rwmutex_trylock(&rws[i]), 0);
        ACHECK_EQ(m, gmp_rwmutex_unlock(&rws[i]), 0);
    }
    ACHECK_EQ(m, pool_tokens, NTOKENS);
    ACHECK_EQ(m, pt_counter, atomic_load(&pt_sections));
    int onces_run = 0;
    for (int i = 0; i < NONCE; i++) {
        ACHECK_EQ(m, atomic_load(&once_calls[i]), atomic_load(&once_used[i]) ? 1 : 0);
        onces_run += atomic_load(&once_calls[i]);
    }
    ACHECK_EQ(m, atomic_load(&children_started), atomic_load(&children_ended));

    set_phase("waiting for gmp_num_goroutine() == 0");
    deadline = now_sec() + 10;
    while (gmp_num_goroutine() != 0 && now_sec() < deadline)
        sleep_ms(1);
    ACHECK_EQ(m, gmp_num_goroutine(), 0);

    printf("fuzz: ops");
    unsigned long total = 0;
    for (int i = 0; i < NOPS; i++) {
        printf(" %s=%lu", opdefs[i].name, atomic_load(&op_count[i]));
        total += atomic_load(&op_count[i]);
    }
    printf("\nfuzz: %lu ops, %llu values, %lu channels made (%lu closed by the janitor, %lu "
           "addresses reused), %lu children, %lu GOMAXPROCS changes, %ld cond waits, %d onces\n",
           total, values, atomic_load(&chans_made), atomic_load(&chans_closed_by_janitor),
           atomic_load(&addr_reused), atomic_load(&children_started),
           atomic_load(&procs_changes), atomic_load(&cond_waits), onces_run);
    printf("fuzz: scopes: %lu cancelled by other actors; scoped locks: %lu taken, %lu ended\n",
           atomic_load(&scopes_cancelled_by_others), atomic_load(&scoped_locks_taken),
           atomic_load(&scoped_locks_ended));
    printf("fuzz: digests (generator after op %d):", DIGEST_OP);
    for (int i = 0; i < NACT; i++) {
        if (actors[i]->nops >= DIGEST_OP)
            printf(" a%d=%016llx", i, (unsigned long long)actors[i]->digest);
        else
            printf(" a%d=-", i);
    }
    printf("\n");
    if (run_secs >= 2) {
        for (int i = 0; i < NOPS; i++)
            if (op_weight[i] != 0 && atomic_load(&op_count[i]) == 0)
                fail_at(m, __FILE__, __LINE__, "op %s never ran in %ld s", opdefs[i].name,
                        run_secs);
        if (atomic_load(&addr_reused) == 0)
            fail_at(m, __FILE__, __LINE__, "no new channel reused a released one's address");
    }
    ACHECK_EQ(m, atomic_load(&chans_made), atomic_load(&chans_finalized));
    drain_signals(m);
    for (int i = 0; i < 500 && atomic_load(&sig_raised) > 0 && atomic_load(&sig_relayed) == 0;
         i++) {
        int v;
        if (gmp_chan_recv_timeout(sig_ch, &v, 10000000LL) == 0) {
            ACHECK_EQ(m, v, SIGUSR2);
            atomic_fetch_add(&sig_relayed, 1);
        }
    }
    ACHECK(m, atomic_load(&sig_raised) == 0 || atomic_load(&sig_relayed) > 0);
    ACHECK(m, atomic_load(&sig_relayed) <= atomic_load(&sig_raised));
    ACHECK_EQ(m, atomic_load(&sigwait_stray), 0);

    atomic_store(&finished, 1);
    ACHECK_EQ(m, pthread_join(watchdog, NULL), 0);
    for (int i = 0; i < NACT; i++)
        free(actors[i]);
    printf("fuzz: ok seed=%llu procs=%d\n", seed, start_procs);
    return 0;
}
