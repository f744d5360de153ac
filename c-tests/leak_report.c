/*
 * leak_report.c -- goroutines reported when the last handle of the channel they wait on
 * forever is released (gmp_set_leak_handler, GMP_DEBUG=leaks; docs/debugging.md).
 *
 * Cases (argv[1]):
 *   handler (none)  with a handler that records (goroutine id, reason), each step on fresh
 *            channels, the goroutines parked ("blocked" is a state: WAIT_BLOCKED) before
 *            the release:
 *              recv      one goroutine in gmp_chan_recv on an unbuffered channel:
 *                        reported once, with its id and "chan receive", during the
 *                        release call;
 *              send      one in gmp_chan_send on a full buffered channel: "chan send";
 *              three     three receivers on one channel: three reports, their three ids;
 *            and the near-misses, never reported:
 *              timed     a receive with a 300 ms deadline: it ends with -ETIMEDOUT;
 *              select    gmp_select over two channels without a deadline, one released:
 *                        a send on the other completes it;
 *              held      a plain thread holds a second handle: after the first release
 *                        it sends 5, which the goroutine receives;
 *              released  a receiver completed before the last release.
 *   stderr   no handler: one leaked receiver; prints "leaked <id>" for the driver, which
 *            checks the record on stderr (header, "goroutine <id> [chan receive", creator),
 *            then gmp_leaks(1): the driver checks the profile on stdout ("total 1", the
 *            same record); gmp_leaks(-1) is -EBADF.
 *   off      the same under GMP_DEBUG=leaks=off: stderr says nothing, the profile "total 0".
 *   abort    the same under GMP_DEBUG=leaks=abort: the release aborts after the report.
 * Leaked goroutines stay parked until the process exits.
 */
#include "check.h"

#include <errno.h>
#include <gmp-sched/gmp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define MAX_REPORTS 16

static atomic_int nreports;
static int64_t report_ids[MAX_REPORTS];
static char report_reasons[MAX_REPORTS][32];
static atomic_int in_release; /* reports must come from inside gmp_chan_release */

static void on_leak(int64_t goid, const char *reason, void *arg)
{
    CHECK_EQ((long)(intptr_t)arg, 77L);
    CHECK(atomic_load(&in_release));
    int i = atomic_fetch_add(&nreports, 1);
    CHECK(i < MAX_REPORTS);
    report_ids[i] = goid;
    snprintf(report_reasons[i], sizeof report_reasons[i], "%s", reason);
}

static int live; /* goroutines alive: the leaked ones stay */

static void release(gmp_chan *c)
{
    atomic_store(&in_release, 1);
    CHECK_OK(gmp_chan_release(c));
    atomic_store(&in_release, 0);
}

static void receiver(void *arg)
{
    int v = 0;
    (void)gmp_chan_recv((gmp_chan *)arg, &v);
    CHECK(!"a leaked receiver returned");
}

static void sender(void *arg)
{
    int v = 1;
    (void)gmp_chan_send((gmp_chan *)arg, &v);
    CHECK(!"a leaked sender returned");
}

static int64_t start(gmp_func f, void *arg)
{
    int64_t id = gmp_go(f, arg);
    CHECK(id > 0);
    live++;
    return id;
}

static gmp_chan *make(size_t cap)
{
    gmp_chan *c = NULL;
    CHECK_OK(gmp_chan_make(&c, sizeof(int), cap));
    return c;
}

static void expect_reports(int n)
{
    CHECK_EQ(atomic_load(&nreports), n);
}

/* Releases `c` once goroutine `id` is parked on it: one report, for `id`, with `reason`. */
static void release_reporting(gmp_chan *c, int64_t id, const char *reason)
{
    WAIT_BLOCKED(live);
    int before = atomic_load(&nreports);
    release(c);
    expect_reports(before + 1);
    CHECK_EQ(report_ids[before], id);
    CHECK(strcmp(report_reasons[before], reason) == 0);
}

static void leak_recv(void)
{
    gmp_chan *c = make(0);
    release_reporting(c, start(receiver, c), "chan receive");
}

static void leak_send(void)
{
    gmp_chan *c = make(1);
    int one = 1;
    CHECK_OK(gmp_chan_send(c, &one));
    release_reporting(c, start(sender, c), "chan send");
}

static void leak_three(void)
{
    gmp_chan *c = make(0);
    int64_t ids[3];
    for (int i = 0; i < 3; i++)
        ids[i] = start(receiver, c);
    WAIT_BLOCKED(live);
    int before = atomic_load(&nreports);
    release(c);
    expect_reports(before + 3);
    for (int i = 0; i < 3; i++) {
        int found = 0;
        for (int j = before; j < before + 3; j++)
            found += report_ids[j] == ids[i];
        CHECK_EQ(found, 1);
    }
}

static gmp_chan *results; /* int: the near-misses' outcomes */

static void timed_receiver(void *arg)
{
    int v = 0;
    int r = gmp_chan_recv_timeout((gmp_chan *)arg, &v, 300000000LL);
    CHECK_OK(gmp_chan_send(results, &r));
}

static gmp_chan *sel_a, *sel_b;

static void select_receiver(void *arg)
{
    (void)arg;
    int a = 0, b = 0;
    gmp_select_case cases[2] = {{sel_a, GMP_RECV, &a, 0}, {sel_b, GMP_RECV, &b, 0}};
    int r = gmp_select(cases, 2, -1);
    CHECK_EQ(r, 1);
    CHECK_EQ(b, 9);
    CHECK_OK(gmp_chan_send(results, &b));
}

static void plain_receiver(void *arg)
{
    int v = 0;
    CHECK_OK(gmp_chan_recv((gmp_chan *)arg, &v));
    CHECK_OK(gmp_chan_send(results, &v));
}

static void *holder(void *arg)
{
    gmp_chan *c = arg;
    int v = 5;
    CHECK_OK(gmp_chan_send(c, &v));
    CHECK_OK(gmp_chan_release(c));
    return NULL;
}

static int next_result(void)
{
    int r = 0;
    CHECK_OK(gmp_chan_recv_timeout(results, &r, 5000000000LL));
    return r;
}

static void near_misses(void)
{
    int before = atomic_load(&nreports);

    gmp_chan *timed = make(0);
    start(timed_receiver, timed);
    WAIT_BLOCKED(live);
    release(timed);
    CHECK_EQ(next_result(), -ETIMEDOUT);
    live--;

    sel_a = make(0);
    sel_b = make(0);
    start(select_receiver, NULL);
    WAIT_BLOCKED(live);
    release(sel_a);
    int nine = 9;
    CHECK_OK(gmp_chan_send(sel_b, &nine));
    CHECK_EQ(next_result(), 9);
    live--;
    release(sel_b);

    gmp_chan *held = make(0);
    CHECK_OK(gmp_chan_retain(held));
    start(plain_receiver, held);
    WAIT_BLOCKED(live);
    release(held);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, holder, held), 0);
    CHECK_EQ(next_result(), 5);
    live--;
    CHECK_EQ(pthread_join(t, NULL), 0);

    gmp_chan *done = make(1);
    start(plain_receiver, done);
    int six = 6;
    CHECK_OK(gmp_chan_send(done, &six));
    CHECK_EQ(next_result(), 6);
    live--;
    release(done);

    expect_reports(before);
}

static void leak_one_to_stderr(void)
{
    gmp_chan *c = make(0);
    int64_t id = start(receiver, c);
    printf("leaked %lld\n", (long long)id);
    fflush(stdout);
    WAIT_BLOCKED(live);
    CHECK_OK(gmp_chan_release(c));
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "handler";
    results = make(4);
    if (strcmp(mode, "handler") == 0) {
        CHECK_OK(gmp_set_leak_handler(on_leak, (void *)(intptr_t)77));
        leak_recv();
        leak_send();
        leak_three();
        near_misses();
        /* The handler reset: reports go back to stderr, not to on_leak. */
        CHECK_OK(gmp_set_leak_handler(NULL, NULL));
        int before = atomic_load(&nreports);
        leak_one_to_stderr();
        expect_reports(before);
        printf("leak_report: %d reports, near-misses silent\n", atomic_load(&nreports));
        return 0;
    }
    if (strcmp(mode, "stderr") == 0 || strcmp(mode, "off") == 0 ||
        strcmp(mode, "abort") == 0) {
        leak_one_to_stderr();
        CHECK_EQ(gmp_leaks(-1), -EBADF);
        CHECK_OK(gmp_leaks(1));
        return 0;
    }
    fprintf(stderr, "unknown case %s\n", mode);
    return 2;
}
