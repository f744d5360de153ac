/*
 * poll and select in goroutines report what libc reports (c-tests/contract_poll.c).
 *
 * Each case prints what a goroutine's poll or select observed: the count, errno, and each
 * entry's revents (or the sets select leaves). tests/c_interpose.rs runs every case with
 * the hooks and as the reference, plain libc in the goroutines (GMP_INTERPOSE=0), and
 * requires the two outputs to be the same. The cases are built so that the outcome does
 * not depend on timing: whether the other goroutine's act comes before the wait or
 * during it, libc reports the same.
 *
 *   closed_poll    poll(-1) on a pipe another goroutine closes (then writes the pipe)
 *   closed_select  select(NULL) on the same
 *   closed_many    poll(-1) on two pipes, one closed by another goroutine
 *   pri_poll       POLLPRI on a TCP socket whose peer sends urgent data
 *   pri_select     select's exceptfds on the same
 *   norm_many      POLLRDNORM and POLLWRNORM in a multi-fd poll
 *   dup_fds        one fd listed twice with different events; only the second's comes
 *   timeout_behind a 100 ms poll, gmp_fd_wait and gmp_recv_timeout on fds another
 *                  goroutine is parked reading without a timeout: each times out in time
 */
#define _GNU_SOURCE
#include "check.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gmp-sched/gmp.h>

static gmp_wg wg = GMP_WG_INIT;

static void watchdog(int sig)
{
    (void)sig;
    static const char msg[] = "contract_poll: hung (watchdog)\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(3);
}

/* The bits of revents, by name, in one fixed order. */
static void print_revents(const char *what, short r)
{
    static const struct {
        short bit;
        const char *name;
    } names[] = {
        {POLLIN, "IN"},         {POLLPRI, "PRI"},       {POLLOUT, "OUT"},
        {POLLERR, "ERR"},       {POLLHUP, "HUP"},       {POLLNVAL, "NVAL"},
        {POLLRDNORM, "RDNORM"}, {POLLRDBAND, "RDBAND"}, {POLLWRNORM, "WRNORM"},
        {POLLWRBAND, "WRBAND"}, {POLLRDHUP, "RDHUP"},
    };
    printf("%s:", what);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (r & names[i].bit)
            printf(" %s", names[i].name);
    printf("\n");
}

static void print_result(const char *call, int r, int err)
{
    if (r < 0)
        printf("%s = -1 (%s)\n", call, strerrorname_np(err));
    else
        printf("%s = %d\n", call, r);
}

static void park_ms(int ms)
{
    gmp_sleep((int64_t)ms * 1000000);
}

/* ---- a goroutine that acts on an fd after a while ---- */

enum act { CLOSE_THEN_WRITE, WRITE, SEND_OOB, DRAIN };

struct actor {
    enum act act;
    int fd;  /* the fd acted on */
    int fd2; /* CLOSE_THEN_WRITE: the write end written after the close */
};

static void actor_go(void *arg)
{
    struct actor *a = arg;
    park_ms(20);
    switch (a->act) {
    case CLOSE_THEN_WRITE:
        CHECK_EQ(close(a->fd), 0);
        park_ms(20);
        /* Wakes a libc poll still holding the closed file; may fail with EPIPE when
         * nothing holds it any more. Not part of the observation. */
        (void)!write(a->fd2, "x", 1);
        break;
    case WRITE:
        CHECK_EQ(write(a->fd, "x", 1), 1);
        break;
    case SEND_OOB:
        CHECK_EQ(send(a->fd, "!", 1, MSG_OOB), 1);
        break;
    case DRAIN: {
        static char buf[1 << 16];
        ssize_t n;
        do
            n = recv(a->fd, buf, sizeof buf, MSG_DONTWAIT);
        while (n > 0);
        break;
    }
    }
    gmp_wg_done(&wg);
}

static void act_later(struct actor *a)
{
    gmp_wg_add(&wg, 1);
    CHECK(gmp_go(actor_go, a) >= 0);
}

/* A connected TCP pair on 127.0.0.1. */
static void tcp_pair(int *a, int *b)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(l >= 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sin;
    CHECK_EQ(bind(l, (struct sockaddr *)&sin, sizeof sin), 0);
    CHECK_EQ(listen(l, 1), 0);
    CHECK_EQ(getsockname(l, (struct sockaddr *)&sin, &len), 0);
    *a = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(*a >= 0);
    CHECK_EQ(connect(*a, (struct sockaddr *)&sin, sizeof sin), 0);
    *b = accept(l, NULL, NULL);
    CHECK(*b >= 0);
    close(l);
}

/* ---- the cases ---- */

static void closed_poll(void)
{
    int p[2];
    CHECK_EQ(pipe(p), 0);
    struct actor a = {CLOSE_THEN_WRITE, p[0], p[1]};
    act_later(&a);
    struct pollfd f = {p[0], POLLIN, 0};
    int r = poll(&f, 1, -1);
    print_result("poll", r, errno);
    print_revents("revents", f.revents);
    gmp_wg_wait(&wg);
    close(p[1]);
}

static void closed_select(void)
{
    int p[2];
    CHECK_EQ(pipe(p), 0);
    struct actor a = {CLOSE_THEN_WRITE, p[0], p[1]};
    act_later(&a);
    fd_set rd;
    FD_ZERO(&rd);
    FD_SET(p[0], &rd);
    int r = select(p[0] + 1, &rd, NULL, NULL, NULL);
    print_result("select", r, errno);
    gmp_wg_wait(&wg);
    close(p[1]);
}

static void closed_many(void)
{
    int p[2], q[2];
    CHECK_EQ(pipe(p), 0);
    CHECK_EQ(pipe(q), 0);
    struct actor a = {CLOSE_THEN_WRITE, p[0], p[1]};
    act_later(&a);
    struct pollfd f[2] = {{q[0], POLLIN, 0}, {p[0], POLLIN, 0}};
    int r = poll(f, 2, -1);
    print_result("poll", r, errno);
    print_revents("revents[0]", f[0].revents);
    print_revents("revents[1]", f[1].revents);
    gmp_wg_wait(&wg);
    close(p[1]);
    close(q[0]);
    close(q[1]);
}

static void pri_poll(void)
{
    int s, c;
    tcp_pair(&s, &c);
    struct actor a = {SEND_OOB, c, -1};
    act_later(&a);
    struct pollfd f = {s, POLLPRI, 0};
    int r = poll(&f, 1, -1);
    print_result("poll", r, errno);
    print_revents("revents", f.revents);
    gmp_wg_wait(&wg);
    close(s);
    close(c);
}

static void pri_select(void)
{
    int s, c;
    tcp_pair(&s, &c);
    struct actor a = {SEND_OOB, c, -1};
    act_later(&a);
    fd_set ex;
    FD_ZERO(&ex);
    FD_SET(s, &ex);
    int r = select(s + 1, NULL, NULL, &ex, NULL);
    print_result("select", r, errno);
    printf("exceptfds has it: %d\n", FD_ISSET(s, &ex) != 0);
    gmp_wg_wait(&wg);
    close(s);
    close(c);
}

/* Fills a socket's send buffer (and its peer's receive buffer) until a send would block. */
static void fill(int fd)
{
    static char buf[1 << 16];
    while (send(fd, buf, sizeof buf, MSG_DONTWAIT) > 0)
        ;
    CHECK(errno == EAGAIN || errno == EWOULDBLOCK);
}

static void norm_many(void)
{
    int p[2];
    CHECK_EQ(pipe(p), 0);
    int s[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, s), 0);
    fill(s[0]);
    /* First the read side: RDNORM on a pipe another goroutine writes. */
    struct actor a = {WRITE, p[1], -1};
    act_later(&a);
    struct pollfd f[2] = {{s[0], POLLWRNORM, 0}, {p[0], POLLRDNORM, 0}};
    int r = poll(f, 2, -1);
    print_result("poll (read)", r, errno);
    print_revents("revents[0]", f[0].revents);
    print_revents("revents[1]", f[1].revents);
    gmp_wg_wait(&wg);
    char x;
    CHECK_EQ(read(p[0], &x, 1), 1);
    /* Then the write side: WRNORM on a full socket whose peer drains it. */
    struct actor b = {DRAIN, s[1], -1};
    act_later(&b);
    f[0].revents = f[1].revents = 0;
    r = poll(f, 2, -1);
    print_result("poll (write)", r, errno);
    print_revents("revents[0]", f[0].revents);
    print_revents("revents[1]", f[1].revents);
    gmp_wg_wait(&wg);
    close(p[0]);
    close(p[1]);
    close(s[0]);
    close(s[1]);
}

static void dup_fds(void)
{
    int p[2];
    CHECK_EQ(pipe(p), 0);
    int s[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, s), 0);
    fill(s[0]);
    struct actor a = {DRAIN, s[1], -1};
    act_later(&a);
    /* s[0] twice: urgent data never comes; writability comes when the peer drains. */
    struct pollfd f[3] = {{s[0], POLLPRI, 0}, {p[0], POLLIN, 0}, {s[0], POLLOUT, 0}};
    int r = poll(f, 3, -1);
    print_result("poll", r, errno);
    print_revents("revents[0]", f[0].revents);
    print_revents("revents[1]", f[1].revents);
    print_revents("revents[2]", f[2].revents);
    gmp_wg_wait(&wg);
    close(p[0]);
    close(p[1]);
    close(s[0]);
    close(s[1]);
}

/* A goroutine parked reading `fd` with no timeout until one byte comes. */
static void blocked_reader(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char c;
    CHECK_EQ(read(fd, &c, 1), 1);
    gmp_wg_done(&wg);
}

static void print_timed(const char *what, int r, double t0)
{
    double ms = (now_sec() - t0) * 1e3;
    printf("%s = %d, after 90..1000 ms: %d\n", what, r, ms >= 90 && ms <= 1000);
}

static void timeout_behind(void)
{
    int p[2];
    CHECK_EQ(pipe(p), 0);
    int s[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, s), 0);
    gmp_wg_add(&wg, 2);
    CHECK(gmp_go(blocked_reader, (void *)(intptr_t)p[0]) >= 0);
    CHECK(gmp_go(blocked_reader, (void *)(intptr_t)s[0]) >= 0);
    park_ms(20);

    struct pollfd f = {p[0], POLLIN, 0};
    double t0 = now_sec();
    int r = poll(&f, 1, 100);
    print_timed("poll", r, t0);
    /* The C API's timed waits, on the fd the hooks registered (not differential: with
     * the hooks off the socket is not the poller's). */
    const char *hooks = getenv("GMP_INTERPOSE");
    if (hooks == NULL || strcmp(hooks, "0") != 0) {
        t0 = now_sec();
        CHECK_EQ(gmp_fd_wait(s[0], GMP_POLLIN, 100 * 1000000LL), -ETIMEDOUT);
        double ms = (now_sec() - t0) * 1e3;
        CHECK(ms >= 90 && ms <= 1000);
        char c;
        t0 = now_sec();
        CHECK_EQ(gmp_recv_timeout(s[0], &c, 1, 0, 100 * 1000000LL), -ETIMEDOUT);
        ms = (now_sec() - t0) * 1e3;
        CHECK(ms >= 90 && ms <= 1000);
    }

    CHECK_EQ(write(p[1], "x", 1), 1);
    CHECK_EQ(write(s[1], "x", 1), 1);
    gmp_wg_wait(&wg);
    close(p[0]);
    close(p[1]);
    close(s[0]);
    close(s[1]);
}

static void (*case_fn)(void);
static gmp_wg done = GMP_WG_INIT;

static void run_case(void *arg)
{
    (void)arg;
    case_fn();
    gmp_wg_done(&done);
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    signal(SIGALRM, watchdog);
    signal(SIGPIPE, SIG_IGN);
    alarm(30);
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {
        {"closed_poll", closed_poll}, {"closed_select", closed_select},
        {"closed_many", closed_many}, {"pri_poll", pri_poll},
        {"pri_select", pri_select},   {"norm_many", norm_many},
        {"dup_fds", dup_fds},         {"timeout_behind", timeout_behind},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[1], cases[i].name) == 0)
            case_fn = cases[i].fn;
    if (case_fn == NULL) {
        fprintf(stderr, "unknown case %s\n", argv[1]);
        return 2;
    }
    gmp_wg_add(&done, 1);
    CHECK(gmp_go(run_case, NULL) >= 0);
    gmp_wg_wait(&done);
    return 0;
}
