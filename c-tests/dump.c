/*
 * dump.c -- the goroutine dump (gmp_dump and SIGQUIT).
 *
 * Goroutines are parked in a channel receive, a select, a sleep, a mutex, a WaitGroup
 * (one of them locked to its thread, one pinned, one started by another goroutine); then
 *   (no argument)  gmp_dump into a pipe, from C main and from a goroutine, and check every
 *                  goroutine's header, its frames (function names: built with -rdynamic
 *                  -fno-omit-frame-pointer) and who started it;
 *   sigquit        raise SIGQUIT: the runtime dumps to stderr and exits with status 2
 *                  (tests/c_debug.rs checks the output);
 *   sigquit_own    the program installed its own SIGQUIT handler before the runtime
 *                  started: that handler runs, the process goes on;
 *   sigquit_off    GMP_DEBUG=sigquit=0: SIGQUIT keeps its default action;
 *   sigquit_ign    SIGQUIT was ignored before the runtime started: it stays ignored (no
 *                  dump, the process goes on);
 *   gdb            print the goroutine ids, then stop with SIGTRAP for gdb, which runs
 *                  `info goroutines` and `goroutine N bt` (scripts/gmp-gdb.py).
 */
#include "check.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

static struct gmp_chan *recv_ch, *sel_a, *sel_b, *locked_ch, *pinned_ch, *release_ch;
static gmp_mutex mu = GMP_MUTEX_INIT;
static gmp_wg wg_never = GMP_WG_INIT;
static gmp_wg done = GMP_WG_INIT;
static int64_t child_goid;

/* Each parks in a function of its own, whose name the backtrace must show. */
__attribute__((noinline)) void dump_park_recv(void *arg)
{
    (void)arg;
    long v;
    CHECK_EQ(gmp_chan_recv(recv_ch, &v), 0);
    gmp_wg_done(&done);
}

__attribute__((noinline)) void dump_park_select(void *arg)
{
    (void)arg;
    long a, b;
    gmp_select_case cases[2] = {{sel_a, GMP_RECV, &a, 0}, {sel_b, GMP_RECV, &b, 0}};
    CHECK_OK(gmp_select(cases, 2, -1));
    gmp_wg_done(&done);
}

__attribute__((noinline)) void dump_park_sleep(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_sleep(3600LL * 1000000000LL));
}

__attribute__((noinline)) void dump_park_mutex(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_mutex_lock(&mu));
    CHECK_OK(gmp_mutex_unlock(&mu));
    gmp_wg_done(&done);
}

__attribute__((noinline)) void dump_park_wg(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_wg_wait(&wg_never));
}

__attribute__((noinline)) void dump_park_locked(void *arg)
{
    (void)arg;
    long v;
    CHECK_OK(gmp_lock_os_thread());
    CHECK_EQ(gmp_chan_recv(locked_ch, &v), 0);
    gmp_wg_done(&done);
}

__attribute__((noinline)) void dump_park_pinned(void *arg)
{
    (void)arg;
    long v;
    CHECK_EQ(gmp_chan_recv(pinned_ch, &v), 0);
    gmp_wg_done(&done);
}

__attribute__((noinline)) void dump_child(void *arg)
{
    (void)arg;
    long v;
    CHECK_EQ(gmp_chan_recv(release_ch, &v), 0);
    gmp_wg_done(&done);
}

__attribute__((noinline)) void dump_parent(void *arg)
{
    (void)arg;
    child_goid = gmp_go(dump_child, NULL);
    CHECK_OK(child_goid);
}

static int64_t g_recv, g_select, g_sleep, g_mutex, g_wg, g_locked, g_pinned, g_parent;

static void start_all(void)
{
    CHECK_OK(gmp_chan_make(&recv_ch, sizeof(long), 0));
    CHECK_OK(gmp_chan_make(&sel_a, sizeof(long), 0));
    CHECK_OK(gmp_chan_make(&sel_b, sizeof(long), 0));
    CHECK_OK(gmp_chan_make(&locked_ch, sizeof(long), 0));
    CHECK_OK(gmp_chan_make(&pinned_ch, sizeof(long), 0));
    CHECK_OK(gmp_chan_make(&release_ch, sizeof(long), 0));
    CHECK_OK(gmp_wg_add(&wg_never, 1));
    CHECK_OK(gmp_wg_add(&done, 6));
    CHECK_OK(gmp_mutex_lock(&mu));
    gmp_attr pinned = {0, GMP_GO_PINNED};
    CHECK_OK(g_recv = gmp_go(dump_park_recv, NULL));
    CHECK_OK(g_select = gmp_go(dump_park_select, NULL));
    CHECK_OK(g_sleep = gmp_go(dump_park_sleep, NULL));
    CHECK_OK(g_mutex = gmp_go(dump_park_mutex, NULL));
    CHECK_OK(g_wg = gmp_go(dump_park_wg, NULL));
    CHECK_OK(g_locked = gmp_go(dump_park_locked, NULL));
    CHECK_OK(g_pinned = gmp_go_attr(dump_park_pinned, NULL, &pinned));
    CHECK_OK(g_parent = gmp_go(dump_parent, NULL));
    WAIT_UNTIL(child_goid > 0 && gmp_num_goroutine() == 8 && all_goroutines_blocked(), 10);
}

static char text[1 << 16];

/* gmp_dump(fd) into a pipe; returns the text. */
static const char *dump_to_string(void)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    CHECK_EQ(gmp_dump(fds[1]), 0);
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    while ((r = read(fds[0], text + n, sizeof text - 1 - n)) > 0)
        n += (size_t)r;
    close(fds[0]);
    text[n] = 0;
    return text;
}

/* The record of goroutine `id`: from its header to the blank line after it. */
static const char *record(const char *dump, int64_t id, char *out, size_t cap)
{
    char head[64];
    snprintf(head, sizeof head, "goroutine %lld [", (long long)id);
    const char *p = strstr(dump, head);
    if (!p) {
        fprintf(stderr, "no record for goroutine %lld in:\n%s\n", (long long)id, dump);
        CHECK(p != NULL);
    }
    const char *end = strstr(p, "\n\n");
    CHECK(end != NULL);
    size_t n = (size_t)(end - p);
    CHECK(n < cap);
    memcpy(out, p, n);
    out[n] = 0;
    return out;
}

static void expect(int64_t id, const char *header, const char *frame)
{
    char rec[4096];
    record(text, id, rec, sizeof rec);
    char head[128];
    snprintf(head, sizeof head, "goroutine %lld [%s", (long long)id, header);
    if (strncmp(rec, head, strlen(head)) != 0 || !strstr(rec, frame)) {
        fprintf(stderr, "goroutine %lld: want header %s... and frame %s; got:\n%s\n",
                (long long)id, head, frame, rec);
        CHECK(0);
    }
}

static int self_dump_ok;

__attribute__((noinline)) void dump_from_goroutine(void *arg)
{
    (void)arg;
    dump_to_string();
    char rec[4096];
    record(text, gmp_goid(), rec, sizeof rec);
    /* The caller's own stack: running, and its frames through gmp_dump. */
    self_dump_ok = strstr(rec, "[running") != NULL && strstr(rec, "dump_from_goroutine+") != NULL &&
                   strstr(rec, "gmp_dump+") != NULL;
    if (!self_dump_ok)
        fprintf(stderr, "self dump:\n%s\n", rec);
    gmp_wg_done(&done);
}

static volatile sig_atomic_t own_handler_ran;
static void own_handler(int sig)
{
    (void)sig;
    own_handler_ran = 1;
}

static void release_all(void)
{
    long v = 1;
    CHECK_OK(gmp_chan_send(recv_ch, &v));
    CHECK_OK(gmp_chan_send(sel_b, &v));
    CHECK_OK(gmp_mutex_unlock(&mu));
    CHECK_OK(gmp_chan_send(locked_ch, &v));
    CHECK_OK(gmp_chan_send(pinned_ch, &v));
    CHECK_OK(gmp_chan_send(release_ch, &v));
    CHECK_OK(gmp_wg_wait(&done));
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    /* Every mode starts from a known SIGQUIT disposition: a shell's background job (and
     * so `cargo test &`) starts with SIGQUIT ignored, and the runtime keeps an inherited
     * SIG_IGN. */
    CHECK(signal(SIGQUIT, strcmp(mode, "sigquit_ign") == 0 ? SIG_IGN : SIG_DFL) != SIG_ERR);
    if (strcmp(mode, "sigquit_own") == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = own_handler;
        sigemptyset(&sa.sa_mask);
        CHECK(sigaction(SIGQUIT, &sa, NULL) == 0);
    }
    start_all();
    if (strcmp(mode, "sigquit") == 0 || strcmp(mode, "gdb") == 0) {
        printf("goids recv=%lld select=%lld sleep=%lld mutex=%lld wg=%lld locked=%lld pinned=%lld child=%lld\n",
               (long long)g_recv, (long long)g_select, (long long)g_sleep, (long long)g_mutex,
               (long long)g_wg, (long long)g_locked, (long long)g_pinned, (long long)child_goid);
        fflush(stdout);
        if (strcmp(mode, "gdb") == 0) {
            raise(SIGTRAP); /* gdb stops here and inspects; it kills the program after */
            return 0;
        }
        raise(SIGQUIT);
        sleep_ms(5000);
        fprintf(stderr, "SIGQUIT did not end the process\n");
        return 1;
    }
    if (strcmp(mode, "sigquit_off") == 0) {
        raise(SIGQUIT); /* default action: the process dies by SIGQUIT */
        sleep_ms(5000);
        fprintf(stderr, "SIGQUIT did not end the process\n");
        return 1;
    }
    if (strcmp(mode, "sigquit_ign") == 0) {
        raise(SIGQUIT);
        struct sigaction now;
        CHECK(sigaction(SIGQUIT, NULL, &now) == 0);
        CHECK(now.sa_handler == SIG_IGN);
        release_all();
        printf("SIGQUIT stayed ignored\n");
        return 0;
    }
    if (strcmp(mode, "sigquit_own") == 0) {
        raise(SIGQUIT);
        WAIT_UNTIL(own_handler_ran, 5);
        release_all();
        printf("own SIGQUIT handler ran; the runtime left it alone\n");
        return 0;
    }

    /* Wait a little over a second so that the waits show their length. */
    sleep_ms(1100);
    dump_to_string();
    expect(g_recv, "chan receive, 1 seconds]:", "dump_park_recv+");
    expect(g_select, "select, 1 seconds]:", "dump_park_select+");
    expect(g_sleep, "sleep, 1 seconds]:", "dump_park_sleep+");
    expect(g_mutex, "semacquire, 1 seconds]:", "dump_park_mutex+");
    expect(g_wg, "sync.WaitGroup.Wait, 1 seconds]:", "dump_park_wg+");
    expect(g_locked, "chan receive, 1 seconds, locked to thread]:", "dump_park_locked+");
    expect(g_pinned, "chan receive, 1 seconds, pinned to thread]:", "dump_park_pinned+");
    expect(child_goid, "chan receive", "dump_child+");
    /* Who started them: C main (outside the runtime), or the parent goroutine. */
    char rec[4096], want[128];
    record(text, g_recv, rec, sizeof rec);
    CHECK(strstr(rec, "created by a thread outside the runtime, entry dump_park_recv+0x0") != NULL);
    record(text, child_goid, rec, sizeof rec);
    snprintf(want, sizeof want, "created by goroutine %lld, entry dump_child+0x0", (long long)g_parent);
    if (!strstr(rec, want)) {
        fprintf(stderr, "want %s in:\n%s\n", want, rec);
        CHECK(0);
    }
    /* The frames go through the runtime's gmp_* entry points down to the trampoline: the
     * chain is complete (no "frames ... are missing" note) for a frame-pointer build.
     * (gmp_chan_recv itself only jumps to its quick or its slow half; a parked receive is
     * in the slow one, exported as "gmp_chan_recv.slow" to be named here.) */
    record(text, g_recv, rec, sizeof rec);
    CHECK(strstr(rec, "gmp_chan_recv.slow+") != NULL);
    CHECK(strstr(rec, "chain ends") == NULL);
    /* The dead parent is not listed. */
    snprintf(want, sizeof want, "goroutine %lld [", (long long)g_parent);
    CHECK(strstr(text, want) == NULL);

    /* From a goroutine: its own record shows it running, with its frames. */
    CHECK_OK(gmp_wg_add(&done, 1));
    CHECK_OK(gmp_go(dump_from_goroutine, NULL));
    release_all();
    CHECK(self_dump_ok);
    CHECK_EQ(gmp_dump(-1), -EBADF);
    printf("dump: %zu bytes, every goroutine's header, frames and creator as expected\n", strlen(text));
    return 0;
}
