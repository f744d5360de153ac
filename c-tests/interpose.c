/*
 * interpose.c -- the interposer (src/interpose/): this program calls plain libc
 * (read, write, accept, poll, nanosleep, fcntl ...) from goroutines, and libgmp.so, which
 * it links, exports those names, so the calls park goroutines instead of threads.
 *
 * One case per run (argv[1]):
 *   errno     10,000 parks inside read() that end in an error, in the classic
 *             `while ((n = read(..)) < 0 && errno == EINTR)` form, errno address hoisted
 *             (at -O2 the compiler keeps &errno in a register: glibc declares
 *             __errno_location const), GOMAXPROCS=2: the errno seen is always the
 *             call's, and the goroutine is on the thread it called from.
 *   nonblock  O_NONBLOCK is the user's: a blocking socket shows no O_NONBLOCK and parks;
 *             one the user made non-blocking (fcntl, SOCK_NONBLOCK, FIONBIO) returns
 *             EAGAIN; a foreign thread reading a goroutine's blocking socket blocks.
 *   close     goroutines parked in read() and accept() wake with EBADF when another
 *             goroutine closes the fd (or dup2s onto it).
 *   dup       dup'ed fds keep the blocking view and park; closing one leaves the other.
 *   sleep     nanosleep/usleep/sleep/clock_nanosleep (relative and absolute) and poll
 *             with a timeout park: 1,000 sleepers on few threads; bad arguments EINVAL.
 *   foreign   calls before the runtime starts and on foreign threads pass straight
 *             through (a user non-blocking fd gives EAGAIN, sleeps sleep).
 *   timeo     SO_RCVTIMEO / SO_SNDTIMEO are deadlines: EAGAIN when they pass (goroutine
 *             and foreign thread), inherited by accept, kept by dup.
 *   select    select, pselect, ppoll and epoll_wait park on their fds and answer as
 *             libc; getaddrinfo works from a goroutine (the hand-off).
 *   echo      an unmodified thread-per-connection echo server (blocking accept, read,
 *             write), run with one goroutine per connection: 5,000 clients connected
 *             at once, every byte echoed, threads stay at most GOMAXPROCS + 8.
 *   offload   a blocking call that waits for a goroutine parked on its thread: at
 *             GOMAXPROCS=1 goroutine A takes a flock and parks in read() on a pipe
 *             (bound to its thread); B, run next on that thread, starts C and asks for
 *             the same lock (flock blocks). C, next on that thread, takes another flock
 *             (a second call on a helper while the first still blocks its own: each call
 *             has a helper) and then writes the byte that wakes A. A must run on its
 *             thread to release the lock, so B's flock is made on a helper thread while
 *             B parks (before, the thread sat in B's flock and A never ran). All end
 *             within 10 s, each on the thread it started on; and a waitpid failing with
 *             ECHILD on a helper sets B's errno.
 */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <netdb.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <arpa/inet.h>

#include <gmp-sched/gmp.h>

static int tid(void) { return (int)syscall(SYS_gettid); }

/* Spins (yielding) until *flag is set; fails after 20 s. */
static void wait_flag(volatile int *flag)
{
    double t0 = now_sec();
    while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE)) {
        CHECK(now_sec() - t0 < 20);
        gmp_yield();
    }
}

/* ---- errno ---------------------------------------------------------------------- */

#define ERRNO_GOROUTINES 100
#define ERRNO_ROUNDS 100

static gmp_wg errno_wg = GMP_WG_INIT;
static long errno_moved, errno_stale;

struct closer { int fd; };

/* Closes its end of a socketpair with unread data queued on it: the peer's read fails
 * with ECONNRESET. usleep first, so that the reader is parked by then. */
static void closer(void *arg)
{
    struct closer *c = arg;
    usleep(200);
    close(c->fd);
    free(c);
}

/* A busy goroutine: keeps the other P's thread wanting work to steal. */
static volatile int errno_done;
static void spinner(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&errno_done, __ATOMIC_ACQUIRE))
        gmp_yield();
}

static void errno_reader(void *arg)
{
    (void)arg;
    for (int i = 0; i < ERRNO_ROUNDS; i++) {
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
        char c = 'x', buf[8];
        CHECK_EQ(write(sv[0], &c, 1), 1);
        struct closer *cl = malloc(sizeof *cl);
        CHECK(cl != NULL);
        cl->fd = sv[1];
        CHECK_OK(gmp_go(closer, cl));
        int before = tid();
        errno = 12345;
        ssize_t n;
        while ((n = read(sv[0], buf, sizeof buf)) < 0 && errno == EINTR)
            ;
        int e = errno;
        if (tid() != before)
            __atomic_add_fetch(&errno_moved, 1, __ATOMIC_RELAXED);
        if (n != -1 || e != ECONNRESET) {
            fprintf(stderr, "read returned %zd, errno %d (want -1, ECONNRESET)\n", n, e);
            __atomic_add_fetch(&errno_stale, 1, __ATOMIC_RELAXED);
        }
        close(sv[0]);
    }
    gmp_wg_done(&errno_wg);
}

static void case_errno(void)
{
    gmp_sched_stats s0 = sched_stats();
    CHECK_OK(gmp_go(spinner, NULL));
    CHECK_OK(gmp_go(spinner, NULL));
    CHECK_OK(gmp_wg_add(&errno_wg, ERRNO_GOROUTINES));
    for (int i = 0; i < ERRNO_GOROUTINES; i++)
        CHECK_OK(gmp_go(errno_reader, NULL));
    CHECK_OK(gmp_wg_wait(&errno_wg));
    __atomic_store_n(&errno_done, 1, __ATOMIC_RELEASE);
    gmp_sched_stats s1 = sched_stats();
    long parks = (long)(s1.netpoll_readied - s0.netpoll_readied);
    printf("errno: %d reads, %ld woken by the poller, %ld moved, %ld stale\n",
           ERRNO_GOROUTINES * ERRNO_ROUNDS, parks, errno_moved, errno_stale);
    CHECK_EQ(errno_stale, 0);
    CHECK_EQ(errno_moved, 0);
    /* Most reads really parked (the closer sleeps first). */
    CHECK(parks >= ERRNO_GOROUTINES * ERRNO_ROUNDS / 2);
}

/* ---- nonblock -------------------------------------------------------------------- */

struct delayed { int fd; int ms; };

static void delayed_writer(void *arg)
{
    struct delayed *d = arg;
    usleep((useconds_t)d->ms * 1000);
    CHECK_EQ(write(d->fd, "y", 1), 1);
}

static volatile int nb_done;
static int nb_fd[2];

static void nonblock_goroutine(void *arg)
{
    (void)arg;
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    /* Blocking for the user: no O_NONBLOCK shown, and a read parks until data comes. */
    int fl = fcntl(sv[0], F_GETFL);
    CHECK(fl >= 0);
    CHECK((fl & O_NONBLOCK) == 0);
    struct delayed d = {sv[1], 50};
    CHECK_OK(gmp_go(delayed_writer, &d));
    char c;
    double t0 = now_sec();
    CHECK_EQ(read(sv[0], &c, 1), 1);
    CHECK(now_sec() - t0 >= 0.040);
    /* The user's own O_NONBLOCK: EAGAIN, and F_GETFL shows it. */
    CHECK_EQ(fcntl(sv[0], F_SETFL, fl | O_NONBLOCK), 0);
    CHECK((fcntl(sv[0], F_GETFL) & O_NONBLOCK) != 0);
    errno = 0;
    CHECK_EQ(read(sv[0], &c, 1), -1);
    CHECK_EQ(errno, EAGAIN);
    CHECK_EQ(recv(sv[0], &c, 1, 0), -1);
    CHECK_EQ(errno, EAGAIN);
    /* Blocking again: parks again. */
    CHECK_EQ(fcntl(sv[0], F_SETFL, fl), 0);
    CHECK((fcntl(sv[0], F_GETFL) & O_NONBLOCK) == 0);
    d.ms = 30;
    CHECK_OK(gmp_go(delayed_writer, &d));
    CHECK_EQ(read(sv[0], &c, 1), 1);
    /* FIONBIO is the same flag. */
    int on = 1;
    CHECK_EQ(ioctl(sv[0], FIONBIO, &on), 0);
    CHECK_EQ(read(sv[0], &c, 1), -1);
    CHECK_EQ(errno, EAGAIN);
    on = 0;
    CHECK_EQ(ioctl(sv[0], FIONBIO, &on), 0);
    CHECK((fcntl(sv[0], F_GETFL) & O_NONBLOCK) == 0);
    close(sv[0]);
    close(sv[1]);
    /* Created non-blocking: EAGAIN from the start. */
    int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    CHECK(s >= 0);
    CHECK((fcntl(s, F_GETFL) & O_NONBLOCK) != 0);
    CHECK_EQ(accept(s, NULL, NULL), -1);
    CHECK(errno == EINVAL || errno == EAGAIN); /* not listening: EINVAL, never a park */
    close(s);
    int p[2];
    CHECK_EQ(pipe2(p, O_NONBLOCK), 0);
    CHECK_EQ(read(p[0], &c, 1), -1);
    CHECK_EQ(errno, EAGAIN);
    close(p[0]);
    close(p[1]);
    /* poll on several fds parks too, and reports the one that became ready. */
    int p1[2], p2[2];
    CHECK_EQ(pipe(p1), 0);
    CHECK_EQ(pipe(p2), 0);
    struct delayed d2 = {p2[1], 30};
    CHECK_OK(gmp_go(delayed_writer, &d2));
    struct pollfd pf[3] = {{p1[0], POLLIN, 0}, {-1, POLLIN, 0}, {p2[0], POLLIN, 0}};
    t0 = now_sec();
    CHECK_EQ(poll(pf, 3, 5000), 1);
    CHECK(now_sec() - t0 >= 0.025);
    CHECK(pf[2].revents & POLLIN);
    CHECK_EQ(pf[0].revents, 0);
    CHECK_EQ(poll(pf, 3, 20), 1); /* still readable */
    CHECK_EQ(read(p2[0], &c, 1), 1);
    t0 = now_sec();
    CHECK_EQ(poll(pf, 3, 20), 0); /* times out, not early */
    CHECK(now_sec() - t0 >= 0.019);
    close(p1[0]);
    close(p1[1]);
    close(p2[0]);
    close(p2[1]);
    /* A blocking socketpair for the foreign thread (main) to read. */
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, nb_fd), 0);
    c = 0;
    CHECK_EQ(write(nb_fd[1], "z", 1), 1);
    CHECK_EQ(read(nb_fd[0], &c, 1), 1); /* registers it under the poller */
    __atomic_store_n(&nb_done, 1, __ATOMIC_RELEASE);
}

static void case_nonblock(void)
{
    CHECK_OK(gmp_go(nonblock_goroutine, NULL));
    while (!__atomic_load_n(&nb_done, __ATOMIC_ACQUIRE))
        usleep(1000);
    /* main is a foreign thread: the fd is non-blocking underneath, but it must see a
     * blocking fd: read waits for the goroutine's write instead of failing EAGAIN. */
    CHECK((fcntl(nb_fd[0], F_GETFL) & O_NONBLOCK) == 0);
    struct delayed d = {nb_fd[1], 50};
    CHECK_OK(gmp_go(delayed_writer, &d));
    char c;
    double t0 = now_sec();
    CHECK_EQ(read(nb_fd[0], &c, 1), 1);
    CHECK_EQ(c, 'y');
    CHECK(now_sec() - t0 >= 0.040);
    close(nb_fd[0]);
    close(nb_fd[1]);
    printf("nonblock: ok\n");
}

/* ---- close ----------------------------------------------------------------------- */

static volatile int parked_result = 1, parked_errno, parked_done;

static void parked_reader(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char c;
    errno = 0;
    parked_result = (int)read(fd, &c, 1);
    parked_errno = errno;
    __atomic_store_n(&parked_done, 1, __ATOMIC_RELEASE);
}

static void parked_acceptor(void *arg)
{
    int fd = (int)(intptr_t)arg;
    errno = 0;
    parked_result = accept(fd, NULL, NULL);
    parked_errno = errno;
    __atomic_store_n(&parked_done, 1, __ATOMIC_RELEASE);
}

/* Waits until a goroutine is parked on the poller: `waiting` goroutines in IO wait are
 * not visible in the stats, so wait until the reader had time to block, then check it
 * did not finish. */
static void settle(void)
{
    usleep(30 * 1000);
    CHECK(!__atomic_load_n(&parked_done, __ATOMIC_ACQUIRE));
}

static void close_goroutine(void *arg)
{
    (void)arg;
    int sv[2];
    /* Parked in read, fd closed by us. */
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    parked_done = 0;
    CHECK_OK(gmp_go(parked_reader, (void *)(intptr_t)sv[0]));
    settle();
    CHECK_EQ(close(sv[0]), 0);
    wait_flag(&parked_done);
    CHECK_EQ(parked_result, -1);
    CHECK_EQ(parked_errno, EBADF);
    close(sv[1]);
    /* Parked in accept on a listening socket. */
    int l = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(l >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    CHECK_EQ(listen(l, 16), 0);
    parked_done = 0;
    CHECK_OK(gmp_go(parked_acceptor, (void *)(intptr_t)l));
    settle();
    CHECK_EQ(close(l), 0);
    wait_flag(&parked_done);
    CHECK_EQ(parked_result, -1);
    CHECK_EQ(parked_errno, EBADF);
    /* Parked in read, another fd dup2'ed onto its number. */
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    int other = open("/dev/null", O_RDONLY);
    CHECK(other >= 0);
    parked_done = 0;
    CHECK_OK(gmp_go(parked_reader, (void *)(intptr_t)sv[0]));
    settle();
    CHECK_EQ(dup2(other, sv[0]), sv[0]);
    wait_flag(&parked_done);
    CHECK_EQ(parked_result, -1);
    CHECK_EQ(parked_errno, EBADF);
    /* The number is /dev/null now: reads return 0 at once. */
    char c;
    CHECK_EQ(read(sv[0], &c, 1), 0);
    close(sv[0]);
    close(sv[1]);
    close(other);
    __atomic_store_n(&nb_done, 1, __ATOMIC_RELEASE);
}

static void case_close(void)
{
    CHECK_OK(gmp_go(close_goroutine, NULL));
    while (!__atomic_load_n(&nb_done, __ATOMIC_ACQUIRE))
        usleep(1000);
    printf("close: ok\n");
}

/* ---- dup ------------------------------------------------------------------------- */

/* A vfork child shares the parent's memory and thread pointer: its dup2 must not put its
 * fds into the parent's poller. (Globals: nothing of the frame is clobbered by vfork.) */
static int vf_p[2], vf_q[2];

static void vfork_dup2(void)
{
    CHECK_EQ(pipe(vf_p), 0);                 /* a goroutine's: blocking for the user */
    CHECK_EQ(syscall(SYS_pipe2, vf_q, O_NONBLOCK), 0); /* made behind the hooks' back */
    pid_t pid = vfork();
    if (pid == 0) {
        dup2(vf_p[1], vf_q[1]);
        _exit(0);
    }
    CHECK(pid > 0);
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    /* The parent's vf_q[1] is still its own non-blocking pipe, not a registered copy of
     * the blocking vf_p[1]. */
    CHECK((fcntl(vf_q[1], F_GETFL) & O_NONBLOCK) != 0);
    char c;
    CHECK_EQ(write(vf_q[1], "v", 1), 1);
    CHECK_EQ(read(vf_q[0], &c, 1), 1);
    CHECK_EQ(read(vf_q[0], &c, 1), -1);
    CHECK_EQ(errno, EAGAIN);
    close(vf_p[0]);
    close(vf_p[1]);
    close(vf_q[0]);
    close(vf_q[1]);
}

static void dup_goroutine(void *arg)
{
    (void)arg;
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    int d1 = dup(sv[0]);
    int d2 = fcntl(sv[0], F_DUPFD_CLOEXEC, 100);
    CHECK(d1 >= 0 && d2 >= 100);
    int d3 = dup2(sv[0], 200);
    CHECK_EQ(d3, 200);
    int fds[] = {d1, d2, d3};
    for (int i = 0; i < 3; i++) {
        CHECK((fcntl(fds[i], F_GETFL) & O_NONBLOCK) == 0);
        struct delayed d = {sv[1], 20};
        CHECK_OK(gmp_go(delayed_writer, &d));
        char c;
        double t0 = now_sec();
        CHECK_EQ(read(fds[i], &c, 1), 1);
        CHECK(now_sec() - t0 >= 0.015);
    }
    /* Closing the original leaves the duplicates working. */
    CHECK_EQ(close(sv[0]), 0);
    CHECK_EQ(write(d1, "abc", 3), 3);
    char buf[4];
    CHECK_EQ(read(sv[1], buf, 3), 3);
    struct delayed d = {sv[1], 20};
    CHECK_OK(gmp_go(delayed_writer, &d));
    CHECK_EQ(read(d2, buf, 1), 1);
    close(d1);
    close(d2);
    close(d3);
    close(sv[1]);
    vfork_dup2();
    __atomic_store_n(&nb_done, 1, __ATOMIC_RELEASE);
}

static void case_dup(void)
{
    CHECK_OK(gmp_go(dup_goroutine, NULL));
    while (!__atomic_load_n(&nb_done, __ATOMIC_ACQUIRE))
        usleep(1000);
    printf("dup: ok\n");
}

/* ---- sleep ----------------------------------------------------------------------- */

#define SLEEPERS 1000
static gmp_wg sleep_wg = GMP_WG_INIT;
static volatile int sleep_bad;

static void sleeper(void *arg)
{
    int kind = (int)(intptr_t)arg % 6;
    double t0 = now_sec();
    int before = tid();
    switch (kind) {
    case 0: {
        struct timespec ts = {0, 100 * 1000 * 1000};
        CHECK_EQ(nanosleep(&ts, NULL), 0);
        break;
    }
    case 1:
        CHECK_EQ(usleep(100 * 1000), 0);
        break;
    case 2: {
        struct timespec ts = {0, 100 * 1000 * 1000};
        CHECK_EQ(clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL), 0);
        break;
    }
    case 3: {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        CHECK_EQ(clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL), 0);
        break;
    }
    case 4:
        CHECK_EQ(poll(NULL, 0, 100), 0);
        break;
    default: {
        int p[2];
        CHECK_EQ(pipe(p), 0);
        struct pollfd pf = {p[0], POLLIN, 0};
        CHECK_EQ(poll(&pf, 1, 100), 0); /* times out */
        close(p[0]);
        close(p[1]);
        break;
    }
    }
    double dt = now_sec() - t0;
    if (dt < 0.095 || tid() != before)
        sleep_bad = 1;
    gmp_wg_done(&sleep_wg);
}

static void case_sleep(void)
{
    double t0 = now_sec();
    CHECK_OK(gmp_wg_add(&sleep_wg, SLEEPERS));
    for (int i = 0; i < SLEEPERS; i++)
        CHECK_OK(gmp_go(sleeper, (void *)(intptr_t)i));
    CHECK_OK(gmp_wg_wait(&sleep_wg));
    double dt = now_sec() - t0;
    gmp_sched_stats s = sched_stats();
    printf("sleep: %d sleepers of 100 ms in %.3f s on %d threads\n", SLEEPERS, dt, s.threads);
    CHECK(!sleep_bad);
    /* Had they blocked their threads, 1,000 x 100 ms on a few threads would take 10+ s. */
    CHECK(dt < 5.0);
    CHECK(s.threads <= s.gomaxprocs + 8);
    /* Bad arguments: as libc. */
    struct timespec bad = {0, 1000000000};
    errno = 0;
    CHECK_EQ(nanosleep(&bad, NULL), -1);
    CHECK_EQ(errno, EINVAL);
    CHECK_EQ(clock_nanosleep(CLOCK_MONOTONIC, 0, &bad, NULL), EINVAL);
}

/* ---- foreign --------------------------------------------------------------------- */

static void *foreign_thread(void *arg)
{
    int *p = arg;
    char c;
    errno = 0;
    CHECK_EQ(read(p[0], &c, 1), -1);
    CHECK_EQ(errno, EAGAIN);
    double t0 = now_sec();
    CHECK_EQ(usleep(20 * 1000), 0);
    CHECK(now_sec() - t0 >= 0.019);
    return NULL;
}

static void case_foreign(void)
{
    /* Before the runtime starts: plain libc. */
    int p[2];
    CHECK_EQ(pipe2(p, O_NONBLOCK), 0);
    char c;
    errno = 0;
    CHECK_EQ(read(p[0], &c, 1), -1);
    CHECK_EQ(errno, EAGAIN);
    CHECK_EQ(write(p[1], "q", 1), 1);
    CHECK_EQ(read(p[0], &c, 1), 1);
    struct timespec ts = {0, 1000 * 1000};
    CHECK_EQ(nanosleep(&ts, NULL), 0);
    /* Runtime started: main and a pthread are still foreign. */
    CHECK(gmp_maxprocs(0) >= 1);
    errno = 0;
    CHECK_EQ(read(p[0], &c, 1), -1);
    CHECK_EQ(errno, EAGAIN);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, foreign_thread, p), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    struct pollfd pf = {p[0], POLLIN, 0};
    CHECK_EQ(poll(&pf, 1, 10), 0);
    close(p[0]);
    close(p[1]);
    printf("foreign: ok\n");
}

/* ---- timeo ----------------------------------------------------------------------- */

static void set_timeo(int fd, int opt, long ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    CHECK_EQ(setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof tv), 0);
}

static int timeo_fd[2];

static void timeo_goroutine(void *arg)
{
    (void)arg;
    int sv[2];
    char c, big[65536];
    memset(big, 'b', sizeof big);
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    set_timeo(sv[0], SO_RCVTIMEO, 50);
    double t0 = now_sec();
    errno = 0;
    CHECK_EQ(read(sv[0], &c, 1), -1);
    CHECK_EQ(errno, EAGAIN);
    CHECK(now_sec() - t0 >= 0.045);
    /* Data before the deadline: no error (a generous deadline: the writer may be slow to
     * run on a loaded machine). */
    set_timeo(sv[0], SO_RCVTIMEO, 2000);
    struct delayed d = {sv[1], 10};
    CHECK_OK(gmp_go(delayed_writer, &d));
    CHECK_EQ(recv(sv[0], &c, 1, 0), 1);
    set_timeo(sv[0], SO_RCVTIMEO, 50);
    /* A dup keeps the timeout (it is the open file's). */
    int d2 = dup(sv[0]);
    t0 = now_sec();
    CHECK_EQ(read(d2, &c, 1), -1);
    CHECK_EQ(errno, EAGAIN);
    CHECK(now_sec() - t0 >= 0.045);
    close(d2);
    /* SO_SNDTIMEO: a write into a full socket gives up. */
    set_timeo(sv[1], SO_SNDTIMEO, 50);
    ssize_t n;
    while ((n = write(sv[1], big, sizeof big)) > 0)
        ;
    CHECK_EQ(n, -1);
    CHECK_EQ(errno, EAGAIN);
    close(sv[0]);
    close(sv[1]);
    /* accept: the listener's timeout, and the accepted socket inherits it. */
    int l = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(l >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t alen = sizeof a;
    CHECK_EQ(getsockname(l, (struct sockaddr *)&a, &alen), 0);
    CHECK_EQ(listen(l, 4), 0);
    set_timeo(l, SO_RCVTIMEO, 40);
    t0 = now_sec();
    CHECK_EQ(accept(l, NULL, NULL), -1);
    CHECK_EQ(errno, EAGAIN);
    CHECK(now_sec() - t0 >= 0.035);
    int cl = socket(AF_INET, SOCK_STREAM, 0);
    CHECK_EQ(connect(cl, (struct sockaddr *)&a, sizeof a), 0);
    int s = accept(l, NULL, NULL);
    CHECK(s >= 0);
    t0 = now_sec();
    CHECK_EQ(read(s, &c, 1), -1);
    CHECK_EQ(errno, EAGAIN);
    CHECK(now_sec() - t0 >= 0.035);
    close(s);
    close(cl);
    close(l);
    /* For main: a goroutine's blocking socket with a receive timeout. */
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, timeo_fd), 0);
    set_timeo(timeo_fd[0], SO_RCVTIMEO, 50);
    CHECK_EQ(write(timeo_fd[1], "x", 1), 1);
    CHECK_EQ(read(timeo_fd[0], &c, 1), 1);
    __atomic_store_n(&nb_done, 1, __ATOMIC_RELEASE);
}

static void case_timeo(void)
{
    CHECK_OK(gmp_go(timeo_goroutine, NULL));
    while (!__atomic_load_n(&nb_done, __ATOMIC_ACQUIRE))
        usleep(1000);
    /* main, a foreign thread, on the goroutine's fd: the timeout holds there too. */
    char c;
    double t0 = now_sec();
    errno = 0;
    CHECK_EQ(read(timeo_fd[0], &c, 1), -1);
    CHECK_EQ(errno, EAGAIN);
    CHECK(now_sec() - t0 >= 0.045);
    close(timeo_fd[0]);
    close(timeo_fd[1]);
    printf("timeo: ok\n");
}

/* ---- select ---------------------------------------------------------------------- */

static volatile int select_parked;

static void select_goroutine(void *arg)
{
    (void)arg;
    int p1[2], p2[2];
    CHECK_EQ(pipe(p1), 0);
    CHECK_EQ(pipe(p2), 0);
    int maxfd = (p1[0] > p2[0] ? p1[0] : p2[0]) + 1;
    gmp_sched_stats s0 = sched_stats();
    /* select: the second pipe becomes readable. */
    struct delayed d = {p2[1], 30};
    CHECK_OK(gmp_go(delayed_writer, &d));
    fd_set rs;
    FD_ZERO(&rs);
    FD_SET(p1[0], &rs);
    FD_SET(p2[0], &rs);
    struct timeval tv = {5, 0};
    double t0 = now_sec();
    CHECK_EQ(select(maxfd, &rs, NULL, NULL, &tv), 1);
    CHECK(now_sec() - t0 >= 0.025);
    CHECK(!FD_ISSET(p1[0], &rs));
    CHECK(FD_ISSET(p2[0], &rs));
    CHECK(tv.tv_sec < 5 && tv.tv_sec >= 4); /* time left, as Linux writes it */
    /* select times out with the sets cleared. */
    char c;
    CHECK_EQ(read(p2[0], &c, 1), 1);
    FD_ZERO(&rs);
    FD_SET(p1[0], &rs);
    FD_SET(p2[0], &rs);
    tv.tv_sec = 0;
    tv.tv_usec = 30000;
    t0 = now_sec();
    CHECK_EQ(select(maxfd, &rs, NULL, NULL, &tv), 0);
    CHECK(now_sec() - t0 >= 0.025);
    CHECK(!FD_ISSET(p1[0], &rs) && !FD_ISSET(p2[0], &rs));
    /* A writable fd answers at once; a read set on the same call too. */
    fd_set ws;
    FD_ZERO(&rs);
    FD_ZERO(&ws);
    FD_SET(p1[0], &rs);
    FD_SET(p1[1], &ws);
    CHECK_EQ(select(p1[1] + 1, &rs, &ws, NULL, NULL), 1);
    CHECK(FD_ISSET(p1[1], &ws) && !FD_ISSET(p1[0], &rs));
    /* pselect, one fd. */
    d.fd = p1[1];
    CHECK_OK(gmp_go(delayed_writer, &d));
    FD_ZERO(&rs);
    FD_SET(p1[0], &rs);
    struct timespec ts = {5, 0};
    t0 = now_sec();
    CHECK_EQ(pselect(p1[0] + 1, &rs, NULL, NULL, &ts, NULL), 1);
    CHECK(now_sec() - t0 >= 0.025);
    CHECK(FD_ISSET(p1[0], &rs));
    CHECK_EQ(read(p1[0], &c, 1), 1);
    /* ppoll without a mask, two fds. */
    d.fd = p2[1];
    CHECK_OK(gmp_go(delayed_writer, &d));
    struct pollfd pf[2] = {{p1[0], POLLIN, 0}, {p2[0], POLLIN, 0}};
    t0 = now_sec();
    CHECK_EQ(ppoll(pf, 2, NULL, NULL), 1);
    CHECK(now_sec() - t0 >= 0.025);
    CHECK(pf[1].revents & POLLIN);
    CHECK_EQ(read(p2[0], &c, 1), 1);
    /* epoll_wait on an epoll fd of the program's own. */
    int ep = epoll_create1(0);
    CHECK(ep >= 0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 7};
    CHECK_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, p1[0], &ev), 0);
    d.fd = p1[1];
    CHECK_OK(gmp_go(delayed_writer, &d));
    struct epoll_event got;
    t0 = now_sec();
    CHECK_EQ(epoll_wait(ep, &got, 1, 5000), 1);
    CHECK(now_sec() - t0 >= 0.025);
    CHECK_EQ(got.data.u32, 7);
    CHECK_EQ(read(p1[0], &c, 1), 1);
    t0 = now_sec();
    CHECK_EQ(epoll_pwait(ep, &got, 1, 30, NULL), 0);
    CHECK(now_sec() - t0 >= 0.025);
    close(ep);
    /* They parked: the poller woke this goroutine (no thread blocked in them). */
    gmp_sched_stats s1 = sched_stats();
    printf("select: %llu wake-ups by the poller\n",
           (unsigned long long)(s1.netpoll_readied - s0.netpoll_readied));
    CHECK(s1.netpoll_readied - s0.netpoll_readied >= 4); /* select, pselect, ppoll, epoll_wait */
    CHECK(s1.threads <= s1.gomaxprocs + 8);
    /* getaddrinfo from a goroutine. */
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    CHECK_EQ(getaddrinfo("127.0.0.1", "80", &hints, &res), 0);
    CHECK(res != NULL && res->ai_family == AF_INET);
    freeaddrinfo(res);
    close(p1[0]);
    close(p1[1]);
    close(p2[0]);
    close(p2[1]);
    __atomic_store_n(&nb_done, 1, __ATOMIC_RELEASE);
}

static void case_select(void)
{
    CHECK_OK(gmp_go(select_goroutine, NULL));
    while (!__atomic_load_n(&nb_done, __ATOMIC_ACQUIRE))
        usleep(1000);
    printf("select: ok\n");
}

/* ---- echo ------------------------------------------------------------------------ */

/* The server as written for threads: blocking calls, one connection per thread. */
static void handle_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[512];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0)
            break;
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(fd, buf + off, (size_t)(n - off));
            if (w < 0)
                goto out;
            off += w;
        }
    }
out:
    close(fd);
}

static int listener;
static volatile int server_stop;

static void serve(void *arg)
{
    (void)arg;
    for (;;) {
        int c = accept(listener, NULL, NULL);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            CHECK(__atomic_load_n(&server_stop, __ATOMIC_ACQUIRE));
            return;
        }
        CHECK_OK(gmp_go(handle_conn, (void *)(intptr_t)c));
    }
}

#define CLIENTS 5000
static struct sockaddr_in server_addr;
static gmp_wg connected = GMP_WG_INIT, finished = GMP_WG_INIT;
static volatile int go_ahead;
static long echoed_bytes;

static void client(void *arg)
{
    int id = (int)(intptr_t)arg;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    while (connect(fd, (struct sockaddr *)&server_addr, sizeof server_addr) != 0) {
        CHECK(errno == EINTR || errno == EAGAIN);
        usleep(1000);
    }
    gmp_wg_done(&connected);
    wait_flag(&go_ahead);
    char msg[64], back[64];
    int len = snprintf(msg, sizeof msg, "hello from client %d", id);
    for (int round = 0; round < 3; round++) {
        CHECK_EQ(write(fd, msg, (size_t)len), len);
        int got = 0;
        while (got < len) {
            ssize_t n = read(fd, back + got, (size_t)(len - got));
            CHECK(n > 0);
            got += (int)n;
        }
        CHECK(memcmp(msg, back, (size_t)len) == 0);
        __atomic_add_fetch(&echoed_bytes, len, __ATOMIC_RELAXED);
    }
    close(fd);
    gmp_wg_done(&finished);
}

static void case_echo(void)
{
    struct rlimit rl;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < 3 * CLIENTS) {
        rl.rlim_cur = rl.rlim_max;
        CHECK_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
    }
    CHECK(rl.rlim_cur >= 2 * CLIENTS + 100);
    /* The listening socket is made by main, a foreign thread: plain libc. */
    listener = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(listener >= 0);
    server_addr.sin_family = AF_INET;
    server_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK_EQ(bind(listener, (struct sockaddr *)&server_addr, sizeof server_addr), 0);
    socklen_t alen = sizeof server_addr;
    CHECK_EQ(getsockname(listener, (struct sockaddr *)&server_addr, &alen), 0);
    CHECK_EQ(listen(listener, 4096), 0);
    CHECK_OK(gmp_go(serve, NULL));
    double t0 = now_sec();
    CHECK_OK(gmp_wg_add(&connected, CLIENTS));
    CHECK_OK(gmp_wg_add(&finished, CLIENTS));
    for (int i = 0; i < CLIENTS; i++)
        CHECK_OK(gmp_go(client, (void *)(intptr_t)i));
    CHECK_OK(gmp_wg_wait(&connected));
    /* Every client connected and every handler blocked in read() at the same time. */
    gmp_sched_stats s = sched_stats();
    for (double t1 = now_sec(); s.goroutines < 2 * CLIENTS + 1; s = sched_stats()) {
        CHECK(now_sec() - t1 < 60);
        usleep(1000);
    }
    printf("echo: %d connections open, %lld goroutines, %d threads\n", CLIENTS,
           (long long)s.goroutines, s.threads);
    CHECK(s.threads <= s.gomaxprocs + 8);
    __atomic_store_n(&go_ahead, 1, __ATOMIC_RELEASE);
    CHECK_OK(gmp_wg_wait(&finished));
    s = sched_stats();
    printf("echo: %ld bytes echoed in %.2f s, %d threads\n", echoed_bytes, now_sec() - t0,
           s.threads);
    CHECK(s.threads <= s.gomaxprocs + 8);
    __atomic_store_n(&server_stop, 1, __ATOMIC_RELEASE);
    close(listener);
}

/* ---- offload ------------------------------------------------------------------- */

static int off_pipe[2], off_fd1, off_fd2, off_fd3;
static int off_tid_a, off_a_done, off_b_done, off_c_done;

static void off_c(void *arg)
{
    (void)arg;
    int t = tid();
    CHECK_EQ(t, off_tid_a);
    CHECK_EQ(flock(off_fd3, LOCK_EX), 0); /* on a second helper: the first is in B's */
    CHECK_EQ(tid(), t);
    CHECK_EQ(flock(off_fd3, LOCK_UN), 0);
    CHECK_EQ(write(off_pipe[1], "x", 1), 1); /* wakes A */
    __atomic_store_n(&off_c_done, 1, __ATOMIC_RELEASE);
}

static void off_b(void *arg)
{
    (void)arg;
    int t = tid();
    CHECK_EQ(t, off_tid_a); /* run next on A's thread (GOMAXPROCS=1) */
    int st;
    errno = 0;
    CHECK_EQ(waitpid(-1, &st, 0), -1); /* no children: ECHILD, made on a helper */
    CHECK_EQ(errno, ECHILD);
    CHECK_EQ(tid(), t);
    CHECK(gmp_go(off_c, NULL) > 0); /* runs next, here, once we park */
    CHECK_EQ(flock(off_fd2, LOCK_EX), 0); /* A holds it until its read returns */
    CHECK_EQ(tid(), t);
    CHECK_EQ(flock(off_fd2, LOCK_UN), 0);
    __atomic_store_n(&off_b_done, 1, __ATOMIC_RELEASE);
}

static void off_a(void *arg)
{
    (void)arg;
    off_tid_a = tid();
    CHECK_EQ(flock(off_fd1, LOCK_EX), 0);
    CHECK(gmp_go(off_b, NULL) > 0); /* runs next, here, once we park */
    char c;
    CHECK_EQ(read(off_pipe[0], &c, 1), 1); /* parks, bound to this thread */
    CHECK_EQ(tid(), off_tid_a);
    CHECK_EQ(flock(off_fd1, LOCK_UN), 0);
    __atomic_store_n(&off_a_done, 1, __ATOMIC_RELEASE);
}

static void case_offload(void)
{
    CHECK_OK(gmp_maxprocs(1));
    char path[] = "/tmp/gmp-offload-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    off_fd1 = open(path, O_RDWR);
    off_fd2 = open(path, O_RDWR);
    CHECK(off_fd1 >= 0 && off_fd2 >= 0);
    unlink(path);
    char path3[] = "/tmp/gmp-offload-XXXXXX";
    off_fd3 = mkstemp(path3);
    CHECK(off_fd3 >= 0);
    unlink(path3);
    CHECK_EQ(pipe(off_pipe), 0);
    CHECK(gmp_go(off_a, NULL) > 0);
    WAIT_UNTIL(__atomic_load_n(&off_a_done, __ATOMIC_ACQUIRE) &&
                   __atomic_load_n(&off_b_done, __ATOMIC_ACQUIRE) &&
                   __atomic_load_n(&off_c_done, __ATOMIC_ACQUIRE),
               10);
    printf("offload: a flock waiting for a goroutine parked on its thread returned\n");
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IONBF, 0);
    CHECK(argc == 2);
    const char *c = argv[1];
    if (strcmp(c, "foreign") == 0)
        case_foreign(); /* first: it checks calls before the runtime starts */
    else if (strcmp(c, "errno") == 0)
        case_errno();
    else if (strcmp(c, "nonblock") == 0)
        case_nonblock();
    else if (strcmp(c, "close") == 0)
        case_close();
    else if (strcmp(c, "dup") == 0)
        case_dup();
    else if (strcmp(c, "sleep") == 0)
        case_sleep();
    else if (strcmp(c, "timeo") == 0)
        case_timeo();
    else if (strcmp(c, "select") == 0)
        case_select();
    else if (strcmp(c, "echo") == 0)
        case_echo();
    else if (strcmp(c, "offload") == 0)
        case_offload();
    else
        CHECK(!"unknown case");
    return 0;
}
