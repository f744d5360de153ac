/*
 * interpose_scope.c -- unmodified hiredis, libpq and libcurl blocked in goroutines, freed
 * by cancelling their scope (gmp_scope_cancel) or by its deadline.
 *
 * A server in a child process (forked before the runtime starts, so that its sockets
 * are not the parent's descriptors) listens on 127.0.0.1, accepts every connection and
 * reads what comes, and never answers; it reports each connection's first bytes on a
 * pipe. Then, in one scope, CLIENTS goroutines each make one blocking library call
 * against it:
 *   hiredis    redisCommand(GET) on a connected redisContext: waits in read
 *   pq         PQconnectdb: the startup packet is sent, the server's answer never comes
 *   curl       curl_easy_perform of an http:// URL: the request is sent, no response
 * Once the server has seen every client's request, the main thread cancels the scope
 * and gmp_scope_wait must return within 10 ms of the cancel; each call must fail with
 * the library's own error (printed: the redisContext's errstr, PQerrorMessage with
 * PQstatus CONNECTION_BAD, curl's error code and message), and where the library says
 * why, the reason is the scope's (ECANCELED). "<library>_deadline": the scope has a
 * 100 ms deadline and no cancel; the calls end between 100 and 110 ms after the scope
 * began, the reason ETIMEDOUT.
 * Afterwards the process holds as many descriptors (/proc/self/fd below the high numbers
 * where the runtime keeps its own, sys::dup_high) and sockets, and as many goroutines
 * (gmp_num_goroutine), as before the scope; and, traced by mtrace (MALLOC_TRACE, with
 * glibc's libc_malloc_debug preloaded by the driver), 20 more cancelled rounds of
 * CLIENTS after 20 that warm up leave at most 4 KiB unfreed. A first round of one
 * goroutine warms the libraries and the poller up, so that lazily opened descriptors are
 * counted before.
 *
 * argv[1]: hiredis, pq, curl, hiredis_deadline or pq_deadline.
 */
#define _GNU_SOURCE
#include "check.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <malloc.h>
#include <mcheck.h>

#include <gmp-sched/gmp.h>

#define CLIENTS 50
#define MS 1000000LL

static int port;
static pid_t server_pid;
/* The server writes one byte here per connection that sent something. */
static int seen_fd;

/* ---- the silent server (child process, plain blocking calls, no runtime) ---- */

static _Noreturn void serve(int lfd, int report)
{
    enum { MAXFD = 1024 };
    static struct pollfd pfd[MAXFD];
    static char reported[MAXFD];
    int n = 1;
    pfd[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
    for (;;) {
        if (poll(pfd, (nfds_t)n, -1) < 0) {
            if (errno == EINTR)
                continue;
            _exit(2);
        }
        for (int i = n - 1; i >= 1; i--) {
            if (!pfd[i].revents)
                continue;
            char buf[4096];
            ssize_t r = read(pfd[i].fd, buf, sizeof buf);
            if (r > 0) {
                if (!reported[i]) {
                    reported[i] = 1;
                    char one = 1;
                    if (write(report, &one, 1) != 1)
                        _exit(3);
                }
                continue;
            }
            close(pfd[i].fd);
            pfd[i] = pfd[n - 1];
            reported[i] = reported[n - 1];
            n--;
        }
        if (pfd[0].revents & POLLIN) {
            int c = accept(lfd, NULL, NULL);
            if (c >= 0 && n < MAXFD) {
                pfd[n] = (struct pollfd){.fd = c, .events = POLLIN};
                reported[n] = 0;
                n++;
            } else if (c >= 0) {
                close(c);
            }
        }
    }
}

static void start_server(void)
{
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(lfd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(bind(lfd, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(listen(lfd, 1024) == 0);
    socklen_t len = sizeof a;
    CHECK(getsockname(lfd, (struct sockaddr *)&a, &len) == 0);
    port = ntohs(a.sin_port);
    int p[2];
    CHECK(pipe2(p, O_CLOEXEC) == 0);
    server_pid = fork();
    CHECK(server_pid >= 0);
    if (server_pid == 0) {
        /* Dies with the test, and keeps none of its output open. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int null = open("/dev/null", O_WRONLY);
        if (null < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
            _exit(4);
        close(p[0]);
        serve(lfd, p[1]);
    }
    close(lfd);
    close(p[1]);
    seen_fd = p[0];
}

static void stop_server(void)
{
    kill(server_pid, SIGKILL);
    int st;
    CHECK(waitpid(server_pid, &st, 0) == server_pid);
}

/* Waits (the main thread: a plain blocking poll, which the hooks pass through) until the
 * server has seen `n` more clients' requests. */
static void await_requests(int n)
{
    while (n > 0) {
        struct pollfd p = {.fd = seen_fd, .events = POLLIN};
        int r = poll(&p, 1, 20000);
        if (r == 0) {
            fprintf(stderr, "interpose_scope: %d requests never reached the server\n", n);
            CHECK(0);
        }
        char buf[64];
        ssize_t got = read(seen_fd, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf);
        CHECK(got > 0);
        n -= (int)got;
    }
}

/* ---- the clients (goroutines) ---- */

enum lib { LIB_HIREDIS, LIB_PQ, LIB_CURL };
static enum lib which;

/* What one client's call reported: the errno the library saw (where it says), and its
 * message. */
struct outcome {
    int failed;
    int err;
    char msg[256];
};
static struct outcome outcomes[CLIENTS];

static void hiredis_client(struct outcome *o)
{
    redisContext *c = redisConnect("127.0.0.1", port);
    CHECK(c != NULL);
    if (c->err) {
        fprintf(stderr, "redisConnect: %s\n", c->errstr);
        CHECK_EQ(c->err, 0);
    }
    redisReply *r = redisCommand(c, "GET key");
    o->err = errno;
    o->failed = r == NULL && c->err == REDIS_ERR_IO && strcmp(c->errstr, strerror(o->err)) == 0;
    if (r)
        freeReplyObject(r);
    snprintf(o->msg, sizeof o->msg, "redisCommand: %s, err %d, errstr \"%s\"", r ? "a reply" : "NULL",
             c->err, c->errstr);
    redisFree(c);
}

static void pq_client(struct outcome *o)
{
    char conninfo[256];
    snprintf(conninfo, sizeof conninfo,
             "hostaddr=127.0.0.1 port=%d user=nobody dbname=nobody sslmode=disable "
             "gssencmode=disable connect_timeout=0",
             port);
    PGconn *conn = PQconnectdb(conninfo);
    CHECK(conn != NULL);
    o->err = errno;
    o->failed = PQstatus(conn) == CONNECTION_BAD && strstr(PQerrorMessage(conn), strerror(o->err));
    snprintf(o->msg, sizeof o->msg, "PQconnectdb: status %s, PQerrorMessage \"%s\"",
             PQstatus(conn) == CONNECTION_BAD ? "CONNECTION_BAD" : "not bad", PQerrorMessage(conn));
    /* Strip libpq's trailing newline from the copy. */
    size_t len = strlen(o->msg);
    while (len > 0 && (o->msg[len - 1] == '\n' || o->msg[len - 1] == '"'))
        o->msg[--len] = '\0';
    strncat(o->msg, "\"", sizeof o->msg - strlen(o->msg) - 1);
    PQfinish(conn);
}

static void curl_client(struct outcome *o)
{
    CURL *h = curl_easy_init();
    CHECK(h != NULL);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    CURLcode rc = curl_easy_perform(h);
    o->err = errno;
    /* curl says only that its poll failed (CURLM_UNRECOVERABLE_POLL): the errno tells. */
    o->failed = rc != CURLE_OK;
    snprintf(o->msg, sizeof o->msg, "curl_easy_perform: %d (%s), error buffer \"%s\"", (int)rc,
             curl_easy_strerror(rc), errbuf);
    curl_easy_cleanup(h);
}

static gmp_chan *started;

static void client(void *arg)
{
    struct outcome *o = arg;
    int one = 1;
    CHECK_OK(gmp_chan_send(started, &one));
    switch (which) {
    case LIB_HIREDIS:
        hiredis_client(o);
        break;
    case LIB_PQ:
        pq_client(o);
        break;
    case LIB_CURL:
        curl_client(o);
        break;
    }
}

/* ---- counting ---- */

/* The lowest number the runtime gives its own descriptors (sys::dup_high: three
 * quarters of RLIMIT_NOFILE up, at most 2^20), such as each M's /proc task files,
 * which it opens as it needs them. */
static long runtime_fds_from(void)
{
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    rlim_t cur = rl.rlim_cur < (1 << 20) ? rl.rlim_cur : (1 << 20);
    return (long)(cur / 4 * 3);
}

/* Open descriptors below the runtime's own (the program's and its libraries'); with
 * `sockets_only`, sockets alone. */
static int count_fds_of(int sockets_only)
{
    long high = runtime_fds_from();
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d) || atol(e->d_name) >= high)
            continue;
        char path[300], target[256];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, target, sizeof target - 1);
        target[len < 0 ? 0 : len] = '\0';
        if (sockets_only && strncmp(target, "socket:", 7) != 0)
            continue;
        n++;
    }
    closedir(d);
    return n;
}

static int count_fds(void) { return count_fds_of(0); }

/* Waits until `now()` equals `want` (a state the runtime reaches a moment after the
 * goroutines returned), for at most 10 s; returns the last value. */
static long settle(long (*now)(void), long want)
{
    long v = now();
    for (int i = 0; i < 10000 && v != want; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        v = now();
    }
    return v;
}

static long fds_now(void) { return count_fds(); }
static long sockets_now(void) { return count_fds_of(1); }

/* Prints each open descriptor and what it is (when the counts differ after). */
static void list_fds(const char *when)
{
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], target[256];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, target, sizeof target - 1);
        target[n < 0 ? 0 : n] = '\0';
        fprintf(stderr, "  %s: fd %s -> %s\n", when, e->d_name, target);
    }
    closedir(d);
}
static long goroutines_now(void) { return (long)gmp_num_goroutine(); }

/* The bytes an mtrace file's allocations left unfreed ("@ caller + addr size" and
 * "- addr" lines; a realloc is "< old" then "> new size"), or -1 if it cannot be read. */
static long long trace_unfreed(const char *path)
{
    enum { SLOTS = 1 << 20 };
    static unsigned long long addrs[SLOTS];
    static unsigned long long sizes[SLOTS];
    memset(addrs, 0, sizeof addrs);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char line[512];
    long long live = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        char *p = strstr(line, " + 0x");
        char op = '+';
        if (p == NULL && (p = strstr(line, " > 0x")) != NULL)
            op = '+';
        else if (p == NULL && ((p = strstr(line, " - 0x")) != NULL ||
                               (p = strstr(line, " < 0x")) != NULL))
            op = '-';
        if (p == NULL)
            continue;
        char *end;
        unsigned long long a = strtoull(p + 3, &end, 16);
        unsigned long long size = op == '+' ? strtoull(end, NULL, 16) : 0;
        size_t i = (size_t)((a >> 4) * 0x9E3779B97F4A7C15ull >> 44) & (SLOTS - 1);
        while (addrs[i] != 0 && addrs[i] != a)
            i = (i + 1) & (SLOTS - 1);
        if (op == '+') {
            if (addrs[i] != a) {
                addrs[i] = a;
                sizes[i] = size;
                live += (long long)size;
            }
        } else if (addrs[i] == a) {
            live -= (long long)sizes[i];
            /* Deleting from linear probing: re-insert the run after it. */
            addrs[i] = 0;
            for (size_t j = (i + 1) & (SLOTS - 1); addrs[j] != 0; j = (j + 1) & (SLOTS - 1)) {
                unsigned long long ka = addrs[j], ks = sizes[j];
                addrs[j] = 0;
                size_t k = (size_t)((ka >> 4) * 0x9E3779B97F4A7C15ull >> 44) & (SLOTS - 1);
                while (addrs[k] != 0)
                    k = (k + 1) & (SLOTS - 1);
                addrs[k] = ka;
                sizes[k] = ks;
            }
        }
    }
    fclose(f);
    return live;
}

/* One round: `n` clients in a scope with `timeout_ns` (< 0: none, then cancelled once
 * every request reached the server). Returns the ns from the cancel (or the scope's
 * beginning, with a deadline) to gmp_scope_wait's return. */
static int64_t round_of(int n, int64_t timeout_ns)
{
    memset(outcomes, 0, sizeof outcomes);
    gmp_scope *s = NULL;
    int64_t began = gmp_now();
    CHECK_OK(gmp_scope_begin(&s, timeout_ns));
    for (int i = 0; i < n; i++)
        CHECK(gmp_go(client, &outcomes[i]) > 0);
    int v;
    for (int i = 0; i < n; i++)
        CHECK_OK(gmp_chan_recv(started, &v));
    await_requests(n);
    int64_t t0 = began;
    if (timeout_ns < 0) {
        /* Let the last request's goroutine reach its wait: the cancel ends a wait at any
         * point, this makes the measured case the parked one. */
        struct timespec ts = {0, 20 * MS};
        nanosleep(&ts, NULL);
        t0 = gmp_now();
        CHECK_OK(gmp_scope_cancel(s));
    }
    CHECK_OK(gmp_scope_wait(s));
    int64_t took = gmp_now() - t0;
    CHECK_EQ(gmp_scope_err(s), timeout_ns < 0 ? -ECANCELED : -ETIMEDOUT);
    CHECK_OK(gmp_scope_end(s));
    return took;
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    /* Before anything starts the runtime: the server is a plain process. */
    start_server();
    signal(SIGPIPE, SIG_IGN);
    const char *mode = argv[1];
    int deadline = strstr(mode, "_deadline") != NULL;
    if (strncmp(mode, "hiredis", 7) == 0)
        which = LIB_HIREDIS;
    else if (strncmp(mode, "pq", 2) == 0)
        which = LIB_PQ;
    else if (strcmp(mode, "curl") == 0)
        which = LIB_CURL;
    else
        CHECK(!"unknown mode");
    int want = deadline ? ETIMEDOUT : ECANCELED;
    CHECK_EQ(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
    CHECK_OK(gmp_chan_make(&started, sizeof(int), CLIENTS));

    /* Warm-up: one client, cancelled. */
    (void)round_of(1, -1);
    CHECK(outcomes[0].failed && outcomes[0].err == ECANCELED);

    long fds_before = count_fds();
    long sockets_before = sockets_now();
    long gs_before = (long)gmp_num_goroutine();
    int64_t took = round_of(CLIENTS, deadline ? 100 * MS : -1);
    long gs_after = settle(goroutines_now, gs_before);
    long fds_after = settle(fds_now, fds_before);
    long sockets_after = settle(sockets_now, sockets_before);

    int failed = 0;
    for (int i = 0; i < CLIENTS; i++) {
        if (outcomes[i].failed && outcomes[i].err == want)
            failed++;
        else
            fprintf(stderr, "client %d: the call did not fail with %s: %s (errno %d)\n", i,
                    strerror(want), outcomes[i].msg, outcomes[i].err);
    }
    printf("%s: %d clients, %d failed with the library's error for %s; first: %s (errno %d: %s)\n", mode,
           CLIENTS, failed, strerror(want), outcomes[0].msg, outcomes[0].err, strerror(outcomes[0].err));
    printf("%s: %s to gmp_scope_wait's return: %.3f ms\n", mode,
           deadline ? "scope begin" : "cancel", (double)took / 1e6);
    printf("%s: fds %ld before, %ld after; sockets %ld before, %ld after; goroutines %ld before, "
           "%ld after\n",
           mode, fds_before, fds_after, sockets_before, sockets_after, gs_before, gs_after);
    if (fds_after != fds_before)
        list_fds("after");
    CHECK_EQ(failed, CLIENTS);
    if (deadline) {
        CHECK(took >= 100 * MS);
        CHECK(took <= 110 * MS);
    } else {
        CHECK(took <= 10 * MS);
    }
    CHECK_EQ(fds_after, fds_before);
    CHECK_EQ(sockets_after, sockets_before);
    CHECK_EQ(gs_after, gs_before);

    /* Memory: 20 more cancelled rounds (1,000 calls) after 20 that warm the libraries'
     * caches up, traced by glibc's mtrace when the driver preloads its malloc debugger:
     * what those calls allocate and leave unfreed must stay under 4 KiB (a leak of 4
     * bytes per call would exceed it). The heap's size is printed too, but not judged:
     * it counts the chunks each thread's cache keeps. */
    for (int r = 0; r < 20; r++)
        (void)round_of(CLIENTS, -1);
    (void)settle(goroutines_now, gs_before);
    size_t heap_before = mallinfo2().uordblks;
    const char *trace = getenv("MALLOC_TRACE");
    if (trace != NULL)
        mtrace();
    for (int r = 0; r < 20; r++)
        (void)round_of(CLIENTS, -1);
    (void)settle(goroutines_now, gs_before);
    if (trace != NULL) {
        muntrace();
        long long unfreed = trace_unfreed(trace);
        printf("%s: 1,000 cancelled calls left %lld bytes unfreed (mtrace)\n", mode, unfreed);
        CHECK(unfreed >= 0 && unfreed <= 4096);
    }
    printf("%s: heap in use %zu bytes before, %zu after\n", mode, heap_before,
           mallinfo2().uordblks);

    CHECK_OK(gmp_chan_release(started));
    stop_server();
    curl_global_cleanup();
    printf("interpose_scope %s: ok\n", mode);
    return 0;
}
