/*
 * lockosthread.c -- gmp_lock_os_thread / gmp_unlock_os_thread.
 *
 * At GOMAXPROCS=2, with 6 goroutines yielding in a loop as background load:
 * 1. Nesting: lock returns 1, 2; unlock returns 1, 0; a further unlock returns 0; from
 *    main (not a goroutine) both return -EPERM.
 * 2. A locked goroutine's gettid() stays the same across 200 rounds of: a gmp_read that
 *    blocks until a helper goroutine writes, a channel receive that waits for a helper's
 *    send, a gmp_sleep and a gmp_yield. No other goroutine (the helper, the background
 *    yielders: each compares its gettid() with the locked one's after every switch point)
 *    ever runs on the locked thread while it is locked.
 * 3. Unlocked goroutines under the same load do change threads (at least one of the
 *    background yielders is seen on two or more threads).
 * 4. (Run first, while few threads exist.) Template thread: a locked goroutine lowers
 *    its thread's priority (nice 19, a per-thread value on Linux that pthread_create
 *    copies and the runtime's new threads do not reset, unlike their name, signal mask
 *    and affinity), then makes the runtime create threads (it starts 16 goroutines that
 *    block in syscalls, and waits); no other thread in /proc/self/task has nice 19 (new
 *    threads are not cloned from a locked one).
 * 5. A goroutine that ends while locked takes its thread with it: gmp_stats threads and
 *    the number of entries in /proc/self/task both drop by one.
 * 6. ... unless another goroutine is pinned to that thread (GMP_GO_PINNED): at
 *    GOMAXPROCS=1 goroutine A, itself pinned (so that its lock cannot move it, see 8),
 *    starts pinned B (which runs first on A's thread and parks), then locks (on the same
 *    thread) and ends. The thread stays; B, woken, runs on it and ends.
 * 7. ... and goes once the pinned goroutines have ended: at GOMAXPROCS=1 goroutine A
 *    starts pinned B, which runs on A's thread and ends; then A locks and ends. A's
 *    thread must leave /proc/self/task (the count of goroutines pinned to it is back to
 *    zero).
 * 8. Locking a thread another goroutine is pinned to moves the locker: at GOMAXPROCS=1
 *    goroutine C starts pinned D (which runs first on C's thread and parks), then locks:
 *    count 1, on another thread, where it stays across yields and a sleep while D, woken
 *    meanwhile, runs on C's first thread. C unlocks (0). Inside a gmp_blocking call
 *    (which cannot switch) the same lock stays on the thread instead.
 * 9. GMP_GO_LOCKED: a goroutine started with it is locked from its first instruction
 *    (gmp_lock_os_thread returns 2, unlocks return 1 then 0). Started by C from the thread
 *    D is pinned to, it runs on another thread; ending locked, it takes that thread
 *    with it (gone from /proc/self/task). With GMP_GO_PINNED | GMP_GO_LOCKED it keeps
 *    its thread across yields after unlocking too. Unknown flag bits are -EINVAL.
 */
#include "check.h"

#include <errno.h>
#include <gmp-sched/gmp.h>
#include <stdatomic.h>
#include <string.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>

static long tid(void)
{
    return (long)syscall(SYS_gettid);
}

static atomic_int stop_bg;
static atomic_int migrated;
/* The thread the `locked` goroutine is locked to while it is, else 0; and how often
 * another goroutine was seen running on that thread meanwhile (must stay 0). */
static atomic_long locked_tid;
static atomic_long intruders;

/* Called by every goroutine other than `locked`, after each switch point. */
static void check_not_on_locked_thread(void)
{
    long t = atomic_load(&locked_tid);
    if (t != 0 && t == tid())
        atomic_fetch_add(&intruders, 1);
}

static void background(void *arg)
{
    gmp_wg *wg = arg;
    long first = tid();
    int moved = 0;
    while (!atomic_load(&stop_bg)) {
        volatile int x = 0;
        for (int i = 0; i < 2000; i++)
            x += i;
        CHECK_OK(gmp_yield());
        if (tid() != first)
            moved = 1;
    }
    if (moved)
        atomic_fetch_add(&migrated, 1);
    CHECK_OK(gmp_wg_done(wg));
}

/* ---- 1 + 2 ---- */

static int pipefd[2];
static gmp_chan *ch;

static void helper(void *arg)
{
    gmp_wg *wg = arg;
    for (int i = 0; i < 200; i++) {
        CHECK_OK(gmp_sleep(20000));
        check_not_on_locked_thread();
        CHECK_EQ(gmp_write(pipefd[1], "x", 1), 1);
        check_not_on_locked_thread();
        CHECK_OK(gmp_sleep(20000));
        check_not_on_locked_thread();
        int v = i;
        CHECK_OK(gmp_chan_send(ch, &v));
        check_not_on_locked_thread();
    }
    CHECK_OK(gmp_wg_done(wg));
}

static void locked(void *arg)
{
    gmp_wg *wg = arg;
    CHECK_EQ(gmp_lock_os_thread(), 1);
    CHECK_EQ(gmp_lock_os_thread(), 2);
    CHECK_EQ(gmp_unlock_os_thread(), 1);
    long t0 = tid();
    atomic_store(&locked_tid, t0);
    for (int i = 0; i < 200; i++) {
        char c;
        CHECK_EQ(gmp_read(pipefd[0], &c, 1), 1);
        CHECK_EQ(tid(), t0);
        int v;
        CHECK_OK(gmp_chan_recv(ch, &v));
        CHECK_EQ(v, i);
        CHECK_EQ(tid(), t0);
        CHECK_OK(gmp_sleep(10000));
        CHECK_EQ(tid(), t0);
        CHECK_OK(gmp_yield());
        CHECK_EQ(tid(), t0);
    }
    /* Still locked (this thread runs nobody else) until the unlock below. */
    atomic_store(&locked_tid, 0);
    CHECK_EQ(gmp_unlock_os_thread(), 0);
    CHECK_EQ(gmp_unlock_os_thread(), 0);
    CHECK_OK(gmp_wg_done(wg));
}

/* ---- 4 ---- */

#define LOCKED_NICE 19

struct nice_count {
    int nice, n;
};

static void count_if_nice(const char *stat, void *ctx)
{
    struct nice_count *c = ctx;
    /* After "pid (comm) ": state is field 3; skip 16 fields to reach nice. */
    const char *p = strrchr(stat, ')');
    CHECK(p != NULL);
    p += 2;
    for (int field = 3; field < 19; field++) {
        p = strchr(p, ' ');
        CHECK(p != NULL);
        p++;
    }
    if (atoi(p) == c->nice)
        c->n++;
}

/* Threads of this process whose nice value (field 19 of /proc/self/task/T/stat) is `nice`. */
static int count_nice(int nice)
{
    struct nice_count c = {nice, 0};
    each_thread_file("stat", count_if_nice, &c);
    return c.n;
}

static int count_tasks(void)
{
    return each_thread_file("stat", NULL, NULL);
}

static int block_pipe[2];
static atomic_int blockers_in;

static void blocker(void *arg)
{
    gmp_wg *wg = arg;
    char c;
    atomic_fetch_add(&blockers_in, 1);
    CHECK_EQ(gmp_read(block_pipe[0], &c, 1), 1);
    CHECK_OK(gmp_wg_done(wg));
}

static void renicer(void *arg)
{
    gmp_wg *outer = arg;
    CHECK_EQ(gmp_lock_os_thread(), 1);
    CHECK_EQ(count_nice(LOCKED_NICE), 0);
    /* This thread only (Linux: PRIO_PROCESS with 0 is the calling thread). */
    CHECK_EQ(setpriority(PRIO_PROCESS, 0, LOCKED_NICE), 0);
    CHECK_EQ(count_nice(LOCKED_NICE), 1);
    /* Make the runtime create threads while we hold a processor on a locked thread:
     * goroutines that block in syscalls, and we block too (hand-off from this thread). */
    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&wg, 16));
    for (int i = 0; i < 16; i++)
        CHECK_OK(gmp_go(blocker, &wg));
    /* Wait until all 16 are inside read at once: 16 threads in the kernel plus ours. */
    double deadline = now_sec() + 10.0;
    while (atomic_load(&blockers_in) < 16 || sched_stats().threads < 17) {
        CHECK(now_sec() < deadline);
        CHECK_OK(gmp_sleep(1000 * 1000));
    }
    CHECK_EQ(count_nice(LOCKED_NICE), 1);
    static char bytes[16];
    CHECK_EQ(gmp_write(block_pipe[1], bytes, 16), 16);
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_EQ(count_nice(LOCKED_NICE), 1);
    /* Ends locked: the thread goes away with it. */
    CHECK_OK(gmp_wg_done(outer));
}

/* ---- 5 ---- */

static gmp_chan *go_ahead;

static atomic_int exits_locked_ready;

static void exits_locked(void *arg)
{
    gmp_wg *wg = arg;
    CHECK_EQ(gmp_lock_os_thread(), 1);
    atomic_store(&exits_locked_ready, 1);
    int v;
    CHECK_OK(gmp_chan_recv(go_ahead, &v));
    CHECK_OK(gmp_wg_done(wg));
}


/* ---- 6 ---- */

static gmp_chan *pin_go;
static atomic_long pin_tid_a, pin_tid_b, pin_tid_b_after;

static void pinned_b(void *arg)
{
    atomic_store(&pin_tid_b, tid());
    int v;
    CHECK_OK(gmp_chan_recv(pin_go, &v)); /* parks, bound to its thread */
    atomic_store(&pin_tid_b_after, tid());
    CHECK_OK(gmp_wg_done(arg));
}

static void pinned_a(void *arg)
{
    gmp_wg *wg = arg;
    atomic_store(&pin_tid_a, tid());
    gmp_attr attr = {0};
    attr.flags = GMP_GO_PINNED;
    CHECK(gmp_go_attr(pinned_b, wg, &attr) > 0);
    /* GOMAXPROCS 1: B is next on this processor, so it first runs (and binds) here. */
    while (atomic_load(&pin_tid_b) == 0)
        CHECK_OK(gmp_yield());
    CHECK_EQ(gmp_lock_os_thread(), 1);
    CHECK_EQ(tid(), atomic_load(&pin_tid_a)); /* pinned: locked where it is */
    CHECK_OK(gmp_wg_done(wg)); /* ends locked, while B is pinned to this thread */
}

/* ---- 7 ---- */

static atomic_long quick_tid, locker_tid;

static void pinned_quick(void *arg)
{
    (void)arg;
    atomic_store(&quick_tid, tid());
}

static void locker_after_pinned(void *arg)
{
    atomic_store(&locker_tid, tid());
    gmp_attr attr = {0};
    attr.flags = GMP_GO_PINNED;
    CHECK(gmp_go_attr(pinned_quick, NULL, &attr) > 0);
    /* GOMAXPROCS 1: B runs next on this processor, and ends; wait until it is gone. */
    while (gmp_num_goroutine() > 1)
        CHECK_OK(gmp_yield());
    CHECK_EQ(atomic_load(&quick_tid), atomic_load(&locker_tid));
    CHECK_EQ(gmp_lock_os_thread(), 1);
    CHECK_OK(gmp_wg_done(arg)); /* ends locked; nothing is pinned to this thread now */
}

/* ---- 8 and 9 ---- */

static gmp_chan *pin_d;
static atomic_long tid_c, tid_d, tid_d_after, tid_moved, tid_e, tid_f;

static void pinned_d(void *arg)
{
    atomic_store(&tid_d, tid());
    int v;
    CHECK_OK(gmp_chan_recv(pin_d, &v)); /* parks, bound to its thread */
    atomic_store(&tid_d_after, tid());
    CHECK_OK(gmp_wg_done(arg));
}

static void born_locked(void *arg)
{
    long t = tid();
    atomic_store(&tid_e, t);
    CHECK_EQ(gmp_lock_os_thread(), 2);
    CHECK_OK(gmp_yield());
    CHECK_EQ(tid(), t);
    CHECK_EQ(gmp_unlock_os_thread(), 1);
    CHECK_OK(gmp_sleep(1000 * 1000));
    CHECK_EQ(tid(), t);
    CHECK_OK(gmp_wg_done(arg)); /* ends locked: the thread goes */
}

static void born_locked_pinned(void *arg)
{
    long t = tid();
    atomic_store(&tid_f, t);
    CHECK_EQ(gmp_lock_os_thread(), 2);
    CHECK_EQ(gmp_unlock_os_thread(), 1);
    CHECK_EQ(gmp_unlock_os_thread(), 0);
    for (int i = 0; i < 20; i++) {
        CHECK_OK(gmp_yield());
        CHECK_EQ(tid(), t);
    }
    CHECK_OK(gmp_wg_done(arg));
}

/* Inside gmp_blocking (no processor, cannot switch) a lock stays on the thread. */
static int64_t lock_in_blocking(void *arg)
{
    long t = tid();
    int a = gmp_lock_os_thread(), b = gmp_unlock_os_thread();
    *(int *)arg = a == 1 && b == 0 && tid() == t;
    return 0;
}

static void locker_c(void *arg)
{
    gmp_wg *wg = arg;
    long tc = tid();
    atomic_store(&tid_c, tc);
    gmp_attr attr = {0};
    attr.flags = GMP_GO_PINNED;
    CHECK(gmp_go_attr(pinned_d, wg, &attr) > 0);
    /* GOMAXPROCS 1: D is next on this processor, so it first runs (and binds) here. */
    while (atomic_load(&tid_d) == 0)
        CHECK_OK(gmp_yield());
    CHECK_EQ(atomic_load(&tid_d), tc);

    int ok = 0;
    CHECK_EQ(gmp_blocking(lock_in_blocking, &ok), 0);
    CHECK(ok);

    /* 8 */
    CHECK_EQ(gmp_lock_os_thread(), 1);
    long t = tid();
    atomic_store(&tid_moved, t);
    CHECK(t != tc);
    int v = 1;
    CHECK_OK(gmp_chan_send(pin_d, &v)); /* D runs on tc meanwhile */
    for (int i = 0; i < 10; i++) {
        CHECK_OK(gmp_yield());
        CHECK_EQ(tid(), t);
    }
    CHECK_OK(gmp_sleep(2 * 1000 * 1000));
    CHECK_EQ(tid(), t);
    CHECK_EQ(gmp_unlock_os_thread(), 0);

    /* 9: from a thread something is pinned to again (D has ended; pin another). */
    atomic_store(&tid_d, 0);
    atomic_store(&tid_d_after, 0);
    CHECK(gmp_go_attr(pinned_d, wg, &attr) > 0);
    while (atomic_load(&tid_d) == 0)
        CHECK_OK(gmp_yield());
    long here = tid();
    CHECK_EQ(atomic_load(&tid_d), here);
    attr.flags = GMP_GO_LOCKED;
    CHECK(gmp_go_attr(born_locked, wg, &attr) > 0);
    while (atomic_load(&tid_e) == 0)
        CHECK_OK(gmp_yield());
    CHECK(atomic_load(&tid_e) != here);
    attr.flags = GMP_GO_LOCKED | GMP_GO_PINNED;
    CHECK(gmp_go_attr(born_locked_pinned, wg, &attr) > 0);
    attr.flags = 4;
    CHECK_EQ(gmp_go_attr(born_locked, wg, &attr), -EINVAL);
    CHECK_OK(gmp_chan_send(pin_d, &v));
    CHECK_OK(gmp_wg_done(wg));
}

static int task_exists(long t)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%ld", t);
    DIR *d = opendir(path);
    if (d)
        closedir(d);
    return d != NULL;
}

int main(void)
{
    CHECK_OK(gmp_maxprocs(2));
    CHECK_EQ(gmp_lock_os_thread(), -EPERM);
    CHECK_EQ(gmp_unlock_os_thread(), -EPERM);
    CHECK_EQ(pipe(pipefd), 0);
    CHECK_EQ(pipe(block_pipe), 0);
    CHECK_OK(gmp_chan_make(&ch, sizeof(int), 0));
    CHECK_OK(gmp_chan_make(&go_ahead, sizeof(int), 0));

    /* First, while the runtime has few threads: new ones must be created for the
     * renicer's blockers, and the renicer's locked thread is the one asking for them. */
    gmp_wg rn = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&rn, 1));
    CHECK_OK(gmp_go(renicer, &rn));
    CHECK_OK(gmp_wg_wait(&rn));
    /* The renicer ended locked: its thread exits, and no other thread has its nice. */
    WAIT_UNTIL(count_nice(LOCKED_NICE) == 0, 10.0);
    printf("template thread: no thread cloned from the reniced locked one\n");

    gmp_wg bg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&bg, 6));
    for (int i = 0; i < 6; i++)
        CHECK_OK(gmp_go(background, &bg));

    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&wg, 2));
    CHECK_OK(gmp_go(locked, &wg));
    CHECK_OK(gmp_go(helper, &wg));
    CHECK_OK(gmp_wg_wait(&wg));
    printf("locked goroutine kept its thread across 200 read/recv/sleep/yield rounds; "
           "other goroutines seen on it: %ld\n", atomic_load(&intruders));
    CHECK_EQ(atomic_load(&intruders), 0);

    atomic_store(&stop_bg, 1);
    CHECK_OK(gmp_wg_wait(&bg));
    printf("background yielders that changed threads: %d of 6\n", atomic_load(&migrated));
    CHECK(atomic_load(&migrated) >= 1);

    gmp_wg ex = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&ex, 1));
    CHECK_OK(gmp_go(exits_locked, &ex));
    /* Locked and parked on go_ahead (its thread asleep, its processor handed off): the
     * thread count is settled. */
    WAIT_UNTIL(atomic_load(&exits_locked_ready), 10.0);
    WAIT_BLOCKED(1);
    int t0 = sched_stats().threads, k0 = count_tasks();
    int v = 1;
    CHECK_OK(gmp_chan_send(go_ahead, &v));
    CHECK_OK(gmp_wg_wait(&ex));
    WAIT_UNTIL(sched_stats().threads <= t0 - 1 && count_tasks() <= k0 - 1, 10.0);
    int t1 = sched_stats().threads, k1 = count_tasks();
    printf("goroutine exiting locked: threads %d -> %d, tasks %d -> %d\n", t0, t1, k0, k1);
    CHECK_EQ(t1, t0 - 1);
    CHECK_EQ(k1, k0 - 1);

    /* 6: a goroutine ends locked while another is pinned to its thread. */
    CHECK_OK(gmp_maxprocs(1));
    CHECK_OK(gmp_chan_make(&pin_go, sizeof(int), 0));
    gmp_wg pw = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&pw, 2));
    gmp_attr pa = {0};
    pa.flags = GMP_GO_PINNED;
    CHECK(gmp_go_attr(pinned_a, &pw, &pa) > 0);
    WAIT_BLOCKED(1); /* A gone, B parked */
    long ta = atomic_load(&pin_tid_a);
    CHECK_EQ(atomic_load(&pin_tid_b), ta);
    CHECK(task_exists(ta)); /* the thread stays for B */
    CHECK_OK(gmp_chan_send(pin_go, &v));
    WAIT_UNTIL(atomic_load(&pin_tid_b_after) != 0, 10.0);
    CHECK_EQ(atomic_load(&pin_tid_b_after), ta);
    CHECK_OK(gmp_wg_wait(&pw));
    printf("goroutine ending locked with another pinned to its thread: the thread stayed\n");

    /* 7 */
    gmp_wg lw = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&lw, 1));
    CHECK(gmp_go(locker_after_pinned, &lw) > 0);
    CHECK_OK(gmp_wg_wait(&lw));
    WAIT_UNTIL(!task_exists(atomic_load(&locker_tid)), 5.0);
    printf("goroutine ending locked after its pinned one ended: the thread went\n");

    /* 8, 9 */
    CHECK_OK(gmp_chan_make(&pin_d, sizeof(int), 0));
    gmp_wg cw = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&cw, 5)); /* C, D twice, E, F */
    CHECK(gmp_go(locker_c, &cw) > 0);
    CHECK_OK(gmp_wg_wait(&cw));
    CHECK_EQ(atomic_load(&tid_d_after), atomic_load(&tid_d));
    CHECK(atomic_load(&tid_f) != 0);
    WAIT_UNTIL(!task_exists(atomic_load(&tid_e)), 5.0);
    printf("lock on a thread with a pinned goroutine moved the locker (%ld -> %ld); "
           "GMP_GO_LOCKED started on another thread, which went with it\n",
           atomic_load(&tid_c), atomic_load(&tid_moved));
    CHECK_OK(gmp_chan_release(pin_d));
    CHECK_OK(gmp_chan_release(pin_go));
    CHECK_OK(gmp_chan_release(ch));
    CHECK_OK(gmp_chan_release(go_ahead));
    return 0;
}
