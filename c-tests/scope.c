/*
 * scope.c -- scopes: cancellation and deadlines that reach every wait of the goroutines
 * started in them (gmp_scope_begin, _cancel, _err, _deadline, _wait, _end, _current).
 *
 * Steps, in order:
 *   args       -EINVAL for NULL handles and out-pointers; ending a scope that is not the
 *              caller's current one is refused and leaves it current.
 *   cancel     goroutines of one scope blocked in each kind of wait (receive, send,
 *              select, gmp_sleep, gmp_fd_wait on a pipe, gmp_recv_timeout with a long
 *              timeout) all return -ECANCELED within 10 ms of gmp_scope_cancel; the scope's
 *              goroutines are then all done (gmp_scope_wait returns) and the scope
 *              reports -ECANCELED.
 *   after      in a cancelled scope, a wait fails at once with -ECANCELED, while an
 *              operation that need not wait (a send into a buffer with room, a receive of
 *              a buffered value) still succeeds.
 *   deadline   a scope with a 50 ms deadline: a receive with no timeout of its own returns
 *              -ETIMEDOUT after 40..1000 ms, gmp_scope_err says -ETIMEDOUT; a nested scope
 *              asking for a later deadline gets the enclosing one.
 *   nested     cancelling the outer scope cancels the inner one (a goroutine waiting in
 *              the inner scope sees -ECANCELED); ending the inner scope does not cancel
 *              the outer one.
 *   thread     the main thread (not a goroutine) in a scope: its receive is cancelled by a
 *              goroutine calling gmp_scope_cancel on gmp_scope_current's handle.
 *   goexit     a goroutine that returns inside a scope it began without ending it: the
 *              scope is ended for it (a goroutine it started there sees -ECANCELED).
 *   unscoped   a goroutine outside any scope keeps waiting across another scope's cancel.
 *   wg         a gmp_wg_wait ends with -ECANCELED; the WaitGroup stays usable. Raced 2000
 *              times against the gmp_wg_done that ends the wait, a cancel gives 0 or
 *              -ECANCELED, and the WaitGroup is reused each time (a waiter left counted
 *              would abort the next round's reuse).
 *   cond       three goroutines wait on a gmp_cond; the first is in a scope that is cancelled:
 *              it returns -ECANCELED holding the mutex; then two signals wake the other
 *              two (the ticket it left passes its signal on). A cancel that claims a
 *              waiter whose goroutine cannot run yet (one P, held by a spinning goroutine),
 *              then a signal: the signal passes on to the next waiter. Raced 2000 times, a signal
 *              against the cancel: the signal is never lost (one of the two waiters it
 *              could reach returns 0, or both when the cancel lost).
 *   handoff    a waitpid for a child that never exits (a call the interposer makes through
 *              the blocking-call hand-off, on the goroutine's thread or, for a pinned
 *              goroutine with another bound to its thread, on a helper thread) fails with ECANCELED within 50 ms of the
 *              cancel, and with ETIMEDOUT at a 30 ms deadline; the child is still there.
 * Waits are for states (values on channels, gmp_scope_wait), never sleeps.
 */
#include "check.h"

#include <errno.h>
#include <gmp-sched/gmp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <signal.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MS 1000000LL
#define SEC 1000000000LL

static gmp_chan *make_int(size_t cap)
{
    gmp_chan *c = NULL;
    CHECK_OK(gmp_chan_make(&c, sizeof(int), cap));
    return c;
}

/* Every waiter reports here: its kind and what its wait returned. */
static gmp_chan *results;
/* Each waiter sends on `parked` just before it waits (the wait may begin a moment later;
 * the cancel tests below hold for a wait at any point). */
static gmp_chan *parked;
static int pipe_fds[2];
static int sock_fds[2];

static void report(int kind, int r)
{
    int v[1] = {kind * 1000 + (-r)};
    CHECK_OK(gmp_chan_send(results, v));
}

static void announce(void)
{
    int one = 1;
    CHECK_OK(gmp_chan_send(parked, &one));
}

enum { K_RECV = 1, K_SEND, K_SELECT, K_SLEEP, K_FDWAIT, K_RECVSOCK, K_COUNT };

static void waiter(void *arg)
{
    int kind = (int)(intptr_t)arg;
    gmp_chan *c = make_int(0);
    int v = 0;
    int r = 0;
    announce();
    switch (kind) {
    case K_RECV:
        r = gmp_chan_recv(c, &v);
        break;
    case K_SEND:
        r = gmp_chan_send(c, &v);
        break;
    case K_SELECT: {
        gmp_chan *d = make_int(0);
        gmp_select_case cases[2] = {
            {.chan = c, .op = GMP_RECV, .buf = &v},
            {.chan = d, .op = GMP_SEND, .buf = &v},
        };
        r = gmp_select(cases, 2, -1);
        CHECK_OK(gmp_chan_release(d));
        break;
    }
    case K_SLEEP:
        r = gmp_sleep(3600 * SEC);
        break;
    case K_FDWAIT:
        r = gmp_fd_wait(pipe_fds[0], GMP_POLLIN, -1);
        break;
    case K_RECVSOCK: {
        char buf[8];
        r = (int)gmp_recv_timeout(sock_fds[0], buf, sizeof buf, 0, 3600 * SEC);
        break;
    }
    }
    CHECK_OK(gmp_chan_release(c));
    report(kind, r);
}

static void wait_announced(int n)
{
    for (int i = 0; i < n; i++) {
        int v;
        CHECK_OK(gmp_chan_recv_timeout(parked, &v, 5 * SEC));
    }
}

static void step_args(void)
{
    gmp_scope *s = NULL;
    CHECK_EQ(gmp_scope_begin(NULL, -1), -EINVAL);
    CHECK_EQ(gmp_scope_cancel(NULL), -EINVAL);
    CHECK_EQ(gmp_scope_err(NULL), -EINVAL);
    CHECK_EQ(gmp_scope_deadline(NULL), -EINVAL);
    CHECK_EQ(gmp_scope_wait(NULL), -EINVAL);
    CHECK_EQ(gmp_scope_end(NULL), -EINVAL);
    CHECK(gmp_scope_current() == NULL);
    CHECK_OK(gmp_scope_begin(&s, -1));
    CHECK(gmp_scope_current() == s);
    CHECK_EQ(gmp_scope_deadline(s), INT64_MAX);
    CHECK_EQ(gmp_scope_err(s), 0);
    gmp_scope *inner = NULL;
    CHECK_OK(gmp_scope_begin(&inner, -1));
    /* Scopes nest: the outer one cannot end while the inner one is current. */
    CHECK_EQ(gmp_scope_end(s), -EINVAL);
    CHECK(gmp_scope_current() == inner);
    CHECK_OK(gmp_scope_end(inner));
    CHECK(gmp_scope_current() == s);
    CHECK_EQ(gmp_scope_err(s), 0);
    CHECK_OK(gmp_scope_end(s));
    CHECK(gmp_scope_current() == NULL);
}

static void step_cancel(void)
{
    gmp_scope *s = NULL;
    CHECK_OK(gmp_scope_begin(&s, -1));
    for (int k = K_RECV; k < K_COUNT; k++)
        CHECK_OK(gmp_go(waiter, (void *)(intptr_t)k));
    /* This thread is in the scope too, which nothing has cancelled yet. */
    wait_announced(K_COUNT - K_RECV);
    /* Give each waiter the time to park: the cancel must work either way, but this makes
     * the common case (a parked waiter) the one measured. */
    for (int spin = 0; spin < 1000; spin++)
        gmp_sleep(10000);
    int64_t t0 = gmp_now();
    CHECK_OK(gmp_scope_cancel(s));
    /* gmp_scope_wait is not ended by the scope: it returns once every waiter returned. */
    CHECK_OK(gmp_scope_wait(s));
    int64_t took = gmp_now() - t0;
    if (took > 10 * MS)
        fprintf(stderr, "scope: cancel took %lld ns\n", (long long)took);
    CHECK(took <= 10 * MS);
    CHECK_EQ(gmp_scope_err(s), -ECANCELED);
    /* This thread's waits are cancelled too: collect the results outside the scope. */
    int v;
    CHECK_EQ(gmp_chan_recv(parked, &v), -ECANCELED);
    CHECK_OK(gmp_scope_end(s));
    int seen = 0;
    for (int i = 0; i < K_COUNT - K_RECV; i++) {
        CHECK_OK(gmp_chan_recv_timeout(results, &v, 0));
        int kind = v / 1000, err = v % 1000;
        if (err != ECANCELED)
            fprintf(stderr, "scope: waiter kind %d returned -%d\n", kind, err);
        CHECK_EQ(err, ECANCELED);
        seen |= 1 << kind;
    }
    CHECK_EQ(seen, ((1 << K_COUNT) - 1) & ~1);
}

static void step_after(void)
{
    gmp_scope *s = NULL;
    CHECK_OK(gmp_scope_begin(&s, -1));
    CHECK_OK(gmp_scope_cancel(s));
    CHECK_OK(gmp_scope_cancel(s));
    gmp_chan *b = make_int(1);
    gmp_chan *u = make_int(0);
    int v = 7, out = 0;
    CHECK_OK(gmp_chan_send(b, &v));
    CHECK_EQ(gmp_chan_send(b, &v), -ECANCELED);
    CHECK_OK(gmp_chan_recv(b, &out));
    CHECK_EQ(out, 7);
    CHECK_EQ(gmp_chan_recv(u, &out), -ECANCELED);
    CHECK_EQ(gmp_chan_recv_timeout(u, &out, SEC), -ECANCELED);
    /* A try is not a wait: it says it would block, as outside a scope. */
    CHECK_EQ(gmp_chan_recv_timeout(u, &out, 0), -ETIMEDOUT);
    CHECK_EQ(gmp_sleep(SEC), -ECANCELED);
    CHECK_OK(gmp_chan_release(b));
    CHECK_OK(gmp_chan_release(u));
    CHECK_OK(gmp_scope_end(s));
}

static void deadline_waiter(void *arg)
{
    (void)arg;
    gmp_chan *c = make_int(0);
    int v;
    int64_t t0 = gmp_now();
    int r = gmp_chan_recv(c, &v);
    int64_t took = gmp_now() - t0;
    CHECK(took >= 40 * MS && took <= SEC);
    CHECK_EQ(gmp_scope_err(gmp_scope_current()), -ETIMEDOUT);
    CHECK_OK(gmp_chan_release(c));
    report(K_RECV, r);
}

static void step_deadline(void)
{
    gmp_scope *s = NULL;
    int64_t before = gmp_now();
    CHECK_OK(gmp_scope_begin(&s, 50 * MS));
    int64_t d = gmp_scope_deadline(s);
    CHECK(d >= before + 50 * MS && d <= gmp_now() + 50 * MS);
    gmp_scope *inner = NULL;
    CHECK_OK(gmp_scope_begin(&inner, 10 * SEC));
    CHECK_EQ(gmp_scope_deadline(inner), d);
    CHECK_OK(gmp_scope_end(inner));
    CHECK_OK(gmp_go(deadline_waiter, NULL));
    CHECK_OK(gmp_scope_wait(s));
    int v;
    CHECK_OK(gmp_chan_recv_timeout(results, &v, 0));
    CHECK_EQ(v, K_RECV * 1000 + ETIMEDOUT);
    CHECK_EQ(gmp_scope_err(s), -ETIMEDOUT);
    CHECK_OK(gmp_scope_end(s));
}

static gmp_scope *inner_handle;
static gmp_chan *inner_ready;

static void nested_owner(void *arg)
{
    (void)arg;
    /* This goroutine belongs to the outer scope and begins an inner one. */
    CHECK_OK(gmp_scope_begin(&inner_handle, -1));
    CHECK_OK(gmp_go(waiter, (void *)(intptr_t)K_RECV));
    int one = 1;
    CHECK_OK(gmp_chan_send(inner_ready, &one));
    CHECK_OK(gmp_scope_wait(inner_handle));
    CHECK_EQ(gmp_scope_err(inner_handle), -ECANCELED);
    CHECK_OK(gmp_scope_end(inner_handle));
}

static void step_nested_cancel(void)
{
    gmp_scope *outer = NULL;
    inner_ready = make_int(1);
    CHECK_OK(gmp_scope_begin(&outer, -1));
    CHECK_OK(gmp_go(nested_owner, NULL));
    int v;
    CHECK_OK(gmp_chan_recv_timeout(inner_ready, &v, 5 * SEC));
    wait_announced(1);
    CHECK_OK(gmp_scope_cancel(outer));
    CHECK_OK(gmp_scope_wait(outer));
    CHECK_OK(gmp_scope_end(outer));
    CHECK_OK(gmp_chan_recv_timeout(results, &v, 0));
    CHECK_EQ(v, K_RECV * 1000 + ECANCELED);
    CHECK_OK(gmp_chan_release(inner_ready));
}

static gmp_chan *thread_scope;

static void canceller(void *arg)
{
    (void)arg;
    gmp_scope *s = NULL;
    CHECK_OK(gmp_chan_recv_timeout(thread_scope, &s, 5 * SEC));
    /* Until the main thread's receive parks, a cancel may come first: either way its
     * receive ends with -ECANCELED. */
    CHECK_OK(gmp_scope_cancel(s));
}

static void step_thread(void)
{
    gmp_scope *s = NULL;
    CHECK_OK(gmp_chan_make(&thread_scope, sizeof(gmp_scope *), 1));
    CHECK_OK(gmp_scope_begin(&s, -1));
    /* The canceller belongs to the scope too: its receive completes without waiting. */
    gmp_scope *cur = gmp_scope_current();
    CHECK(cur == s);
    CHECK_OK(gmp_chan_send(thread_scope, &cur));
    gmp_chan *c = make_int(0);
    int v;
    CHECK_OK(gmp_go(canceller, NULL));
    CHECK_EQ(gmp_chan_recv(c, &v), -ECANCELED);
    CHECK_OK(gmp_scope_wait(s));
    CHECK_OK(gmp_scope_end(s));
    CHECK_OK(gmp_chan_release(c));
    CHECK_OK(gmp_chan_release(thread_scope));
}

static void leaves_scope_open(void *arg)
{
    (void)arg;
    gmp_scope *s = NULL;
    CHECK_OK(gmp_scope_begin(&s, -1));
    CHECK_OK(gmp_go(waiter, (void *)(intptr_t)K_SLEEP));
    /* Returns without gmp_scope_end: the runtime ends it. */
}

static void step_goexit(void)
{
    CHECK_OK(gmp_go(leaves_scope_open, NULL));
    wait_announced(1);
    int v;
    CHECK_OK(gmp_chan_recv_timeout(results, &v, 5 * SEC));
    CHECK_EQ(v, K_SLEEP * 1000 + ECANCELED);
}

static void step_unscoped(void)
{
    /* A goroutine outside the scope waits through the scope's cancel. */
    CHECK_OK(gmp_go(waiter, (void *)(intptr_t)K_FDWAIT));
    wait_announced(1);
    gmp_scope *s = NULL;
    CHECK_OK(gmp_scope_begin(&s, -1));
    CHECK_OK(gmp_go(waiter, (void *)(intptr_t)K_RECV));
    wait_announced(1);
    CHECK_OK(gmp_scope_cancel(s));
    CHECK_OK(gmp_scope_wait(s));
    CHECK_OK(gmp_scope_end(s));
    int v;
    CHECK_OK(gmp_chan_recv_timeout(results, &v, 0));
    CHECK_EQ(v, K_RECV * 1000 + ECANCELED);
    /* The unscoped waiter still waits: make the pipe readable and it returns ready. */
    CHECK_EQ(gmp_chan_recv_timeout(results, &v, 20 * MS), -ETIMEDOUT);
    CHECK_EQ(write(pipe_fds[1], "x", 1), 1);
    CHECK_OK(gmp_chan_recv_timeout(results, &v, 5 * SEC));
    CHECK_EQ(v, K_FDWAIT * 1000 - (int)GMP_POLLIN); /* ready: r is GMP_POLLIN */
}

static gmp_wg race_wg = GMP_WG_INIT;

static void wg_waiter(void *arg)
{
    gmp_wg *wg = arg;
    announce();
    report(K_RECV, gmp_wg_wait(wg));
}

static void wg_doner(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_wg_done(&race_wg));
}

static void step_wg(void)
{
    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&wg, 1));
    gmp_scope *s = NULL;
    CHECK_OK(gmp_scope_begin(&s, -1));
    CHECK_OK(gmp_go(wg_waiter, &wg));
    wait_announced(1);
    for (int i = 0; i < 5; i++)
        gmp_sleep(1000000);
    CHECK_OK(gmp_scope_cancel(s));
    CHECK_OK(gmp_scope_wait(s));
    CHECK_OK(gmp_scope_end(s));
    int v;
    CHECK_OK(gmp_chan_recv_timeout(results, &v, 0));
    CHECK_EQ(v, K_RECV * 1000 + ECANCELED);
    /* Still usable: the counter is 1, and a wait outside the scope sees it reach 0. */
    CHECK_OK(gmp_go(wg_waiter, &wg));
    wait_announced(1);
    CHECK_OK(gmp_wg_done(&wg));
    CHECK_OK(gmp_chan_recv_timeout(results, &v, 5 * SEC));
    CHECK_EQ(v, K_RECV * 1000);

    int cancelled = 0, done = 0;
    for (int i = 0; i < 2000; i++) {
        CHECK_OK(gmp_wg_add(&race_wg, 1));
        CHECK_OK(gmp_scope_begin(&s, -1));
        CHECK_OK(gmp_go(wg_waiter, &race_wg));
        CHECK_OK(gmp_chan_recv_timeout(parked, &v, 5 * SEC));
        /* The done (a goroutine of the scope: a done is not a wait) races with the
         * cancel of the scope's end. */
        CHECK_OK(gmp_go(wg_doner, NULL));
        CHECK_OK(gmp_scope_end(s));
        CHECK_OK(gmp_chan_recv_timeout(results, &v, 5 * SEC));
        int err = v % 1000;
        CHECK(err == 0 || err == ECANCELED);
        err == 0 ? done++ : cancelled++;
        /* The next round reuses it: wait for the counter to reach 0 outside a scope. */
        CHECK_OK(gmp_wg_wait(&race_wg));
    }
    printf("scope: wg race: %d done, %d cancelled\n", done, cancelled);
}

static gmp_mutex cmu = GMP_MUTEX_INIT;
static gmp_cond cv = GMP_COND_INIT;
static atomic_int cond_waiting;

static void cond_waiter(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_mutex_lock(&cmu));
    atomic_fetch_add(&cond_waiting, 1);
    int r = gmp_cond_wait(&cv, &cmu);
    /* Locked again, whatever the result. */
    CHECK_EQ(gmp_mutex_trylock(&cmu), -EBUSY);
    CHECK_OK(gmp_mutex_unlock(&cmu));
    report(K_RECV, r);
}

/* Waits (yielding) until n waiters are inside gmp_cond_wait (their ticket taken: they
 * counted themselves under the mutex, which gmp_cond_wait releases). */
static void wait_cond_waiters(int n)
{
    for (;;) {
        CHECK_OK(gmp_mutex_lock(&cmu));
        int k = atomic_load(&cond_waiting);
        CHECK_OK(gmp_mutex_unlock(&cmu));
        if (k >= n)
            return;
        gmp_sleep(100000);
    }
}

static gmp_scope *_Atomic cond_scope;
static atomic_int canceller_done;
static gmp_chan *cancel_done;

static void scoped_cond_waiter(void *arg)
{
    gmp_scope *s = NULL;
    CHECK_OK(gmp_scope_begin(&s, -1));
    atomic_store(&cond_scope, s);
    cond_waiter(arg);
    /* The canceller may still hold the handle: end the scope once it is done with it. */
    while (!atomic_load(&canceller_done))
        gmp_yield();
    atomic_store(&cond_scope, NULL);
    CHECK_OK(gmp_scope_end(s));
    int one = 1;
    CHECK_OK(gmp_chan_send(cancel_done, &one));
}

static void cond_canceller(void *arg)
{
    (void)arg;
    /* The scope ends after its waiter returned, which needs this cancel or a signal;
     * canceller_done tells the waiter this one is done with the handle. */
    gmp_scope *s = atomic_load(&cond_scope);
    CHECK(s != NULL);
    CHECK_OK(gmp_scope_cancel(s));
    atomic_store(&canceller_done, 1);
}

static atomic_int hog_stop, hog_running;

static void hog(void *arg)
{
    (void)arg;
    atomic_store(&hog_running, 1);
    while (!atomic_load(&hog_stop))
        ;
}

static void step_cond(void)
{
    CHECK_OK(gmp_chan_make(&cancel_done, sizeof(int), 1));
    atomic_store(&cond_waiting, 0);
    gmp_scope *s = NULL;
    CHECK_OK(gmp_scope_begin(&s, -1));
    CHECK_OK(gmp_go(cond_waiter, NULL));
    wait_cond_waiters(1);
    CHECK_OK(gmp_scope_end(s)); /* cancels it */
    int v;
    CHECK_OK(gmp_chan_recv_timeout(results, &v, 5 * SEC));
    CHECK_EQ(v, K_RECV * 1000 + ECANCELED);
    /* Two more waiters; the first left a ticket that notify must pass over. */
    CHECK_OK(gmp_go(cond_waiter, NULL));
    CHECK_OK(gmp_go(cond_waiter, NULL));
    wait_cond_waiters(3);
    CHECK_OK(gmp_cond_signal(&cv));
    CHECK_OK(gmp_chan_recv_timeout(results, &v, 5 * SEC));
    CHECK_EQ(v, K_RECV * 1000);
    CHECK_OK(gmp_cond_signal(&cv));
    CHECK_OK(gmp_chan_recv_timeout(results, &v, 5 * SEC));
    CHECK_EQ(v, K_RECV * 1000);

    /* The cancel claims a record the notify then finds still on the list (its owner
     * has not run yet: the one P is busy with a spinning goroutine): the signal must
     * pass on to the next ticket. */
    int procs = gmp_maxprocs(1);
    atomic_store(&cond_waiting, 0);
    atomic_store(&canceller_done, 0);
    CHECK_OK(gmp_go(scoped_cond_waiter, NULL));
    wait_cond_waiters(1);
    CHECK_OK(gmp_go(cond_waiter, NULL));
    wait_cond_waiters(2);
    atomic_store(&hog_stop, 0);
    atomic_store(&hog_running, 0);
    CHECK_OK(gmp_go(hog, NULL));
    while (!atomic_load(&hog_running))
        sched_yield();
    CHECK_OK(gmp_scope_cancel(atomic_load(&cond_scope)));
    atomic_store(&canceller_done, 1);
    CHECK_OK(gmp_cond_signal(&cv));
    atomic_store(&hog_stop, 1);
    int got[2];
    CHECK_OK(gmp_chan_recv_timeout(results, &got[0], 5 * SEC));
    CHECK_OK(gmp_chan_recv_timeout(results, &got[1], 5 * SEC));
    CHECK_EQ(got[0] % 1000 + got[1] % 1000, ECANCELED);
    CHECK_OK(gmp_chan_recv_timeout(cancel_done, &v, 5 * SEC));
    CHECK(gmp_maxprocs(procs) == 1);

    /* The race: a waiter in a scope of its own takes the first ticket, an unscoped one
     * the second; a goroutine cancels the scope while this thread signals. The signal is
     * never lost: it reaches the scoped waiter (the cancel lost), or passes on to the
     * other. A broadcast then frees whoever still waits. */
    int lost_by_cancel = 0;
    for (int i = 0; i < 2000; i++) {
        atomic_store(&cond_waiting, 0);
        atomic_store(&canceller_done, 0);
        CHECK_OK(gmp_go(scoped_cond_waiter, NULL));
        wait_cond_waiters(1);
        CHECK_OK(gmp_go(cond_waiter, NULL));
        wait_cond_waiters(2);
        CHECK_OK(gmp_go(cond_canceller, NULL));
        CHECK_OK(gmp_cond_signal(&cv));
        int a, b;
        CHECK_OK(gmp_chan_recv_timeout(results, &a, 5 * SEC));
        if (a % 1000 != 0) {
            /* The scoped one was cancelled: the signal must reach the other. */
            CHECK_OK(gmp_chan_recv_timeout(results, &b, 5 * SEC));
            CHECK_EQ(b % 1000, 0);
            lost_by_cancel++;
        } else {
            CHECK_OK(gmp_cond_broadcast(&cv));
            CHECK_OK(gmp_chan_recv_timeout(results, &b, 5 * SEC));
            CHECK(b % 1000 == 0 || b % 1000 == ECANCELED);
            lost_by_cancel += b % 1000 != 0;
        }
        CHECK_OK(gmp_chan_recv_timeout(cancel_done, &a, 5 * SEC));
    }
    printf("scope: cond race: %d waits cancelled\n", lost_by_cancel);
    CHECK_OK(gmp_chan_release(cancel_done));
}

static pid_t sleeper;

static gmp_chan *anchor_tid, *anchor_release;

/* A pinned goroutine that reports its thread and stays bound to it until released. */
static void anchor(void *arg)
{
    (void)arg;
    long tid = (long)gettid();
    CHECK_OK(gmp_chan_send(anchor_tid, &tid));
    int v;
    /* It belongs to the waiter's scope: the cancel ends its wait too. */
    int r = gmp_chan_recv(anchor_release, &v);
    CHECK(r == 0 || r == -ECANCELED);
}

static atomic_int offloaded;

static void handoff_waiter(void *arg)
{
    int anchored = 0;
    if (arg != NULL) {
        /* With another goroutine bound to this thread, the interposer makes the call on
         * a helper thread (rt/offload.rs): find such an anchor (a pinned goroutine is
         * bound to the first thread that runs it, usually ours). */
        for (int i = 0; i < 50; i++) {
            gmp_attr pin = {0};
            pin.flags = GMP_GO_PINNED;
            CHECK(gmp_go_attr(anchor, NULL, &pin) > 0);
            long tid;
            CHECK_OK(gmp_chan_recv(anchor_tid, &tid));
            if (tid == (long)gettid()) {
                atomic_store(&offloaded, 1);
                anchored = 1;
                break;
            }
            int one = 1;
            CHECK_OK(gmp_chan_send(anchor_release, &one));
        }
    }
    announce();
    errno = 0;
    int r = (int)waitpid(sleeper, NULL, 0);
    int e = errno;
    if (anchored) {
        int one = 1;
        CHECK_OK(gmp_chan_send(anchor_release, &one));
    }
    report(K_RECV, r == -1 ? -e : 1000);
}

static void handoff_case(int pinned, int64_t timeout, int want)
{
    gmp_scope *s = NULL;
    CHECK_OK(gmp_scope_begin(&s, timeout));
    gmp_attr attr = {0};
    attr.flags = pinned ? GMP_GO_PINNED : 0;
    CHECK(gmp_go_attr(handoff_waiter, pinned ? &attr : NULL, &attr) > 0);
    wait_announced(1);
    int64_t t0 = gmp_now();
    if (timeout < 0) {
        /* Let the call reach the kernel most of the time (either way it must end). */
        for (int i = 0; i < 20; i++)
            gmp_sleep(1000000);
        t0 = gmp_now();
        CHECK_OK(gmp_scope_cancel(s));
    }
    CHECK_OK(gmp_scope_wait(s));
    int64_t took = gmp_now() - t0;
    CHECK_OK(gmp_scope_end(s));
    int v;
    CHECK_OK(gmp_chan_recv_timeout(results, &v, 0));
    CHECK_EQ(v, K_RECV * 1000 + want);
    if (took > 50 * MS)
        fprintf(stderr, "scope: the hand-off call ended %lld ns after the %s\n",
                (long long)took, timeout < 0 ? "cancel" : "scope began");
    CHECK(took <= (timeout < 0 ? 50 * MS : timeout + 50 * MS));
}

static void step_handoff(void)
{
    sleeper = fork();
    CHECK(sleeper >= 0);
    if (sleeper == 0) {
        /* Gone with the test, whatever way it ends. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (;;)
            pause();
    }
    handoff_case(0, -1, ECANCELED);
    /* One P: the anchor runs on the waiter's thread when the waiter parks for it. */
    CHECK_OK(gmp_chan_make(&anchor_tid, sizeof(long), 1));
    CHECK_OK(gmp_chan_make(&anchor_release, sizeof(int), 1));
    int procs = gmp_maxprocs(1);
    handoff_case(1, -1, ECANCELED);
    CHECK(gmp_maxprocs(procs) == 1);
    if (!atomic_load(&offloaded))
        fprintf(stderr, "scope: no anchor ran on the waiter's thread: the call was not offloaded\n");
    CHECK(atomic_load(&offloaded));
    CHECK_OK(gmp_chan_release(anchor_tid));
    CHECK_OK(gmp_chan_release(anchor_release));
    handoff_case(0, 30 * MS, ETIMEDOUT);
    /* The child is still there: nothing reaped it. */
    CHECK_EQ(waitpid(sleeper, NULL, WNOHANG), 0);
    CHECK_OK(kill(sleeper, SIGKILL));
    CHECK_EQ(waitpid(sleeper, NULL, 0), sleeper);
}

int main(void)
{
    CHECK_OK(pipe(pipe_fds));
    CHECK_OK(socketpair(AF_UNIX, SOCK_STREAM, 0, sock_fds));
    CHECK_OK(gmp_fd_register(pipe_fds[0]));
    CHECK_OK(gmp_fd_register(sock_fds[0]));
    results = make_int(64);
    parked = make_int(64);
    step_args();
    step_cancel();
    step_after();
    step_deadline();
    step_nested_cancel();
    step_thread();
    step_goexit();
    step_unscoped();
    step_wg();
    step_cond();
    step_handoff();
    CHECK_OK(gmp_chan_release(results));
    CHECK_OK(gmp_chan_release(parked));
    printf("scope: every kind of wait cancelled, deadlines, nesting, threads\n");
    return 0;
}
