/*
 * A seeded random sequence of fd operations, made by one goroutine, each printed with
 * what it observed (c-tests/contract_random.c).
 *
 * Usage: contract_random SEED [STEPS]   (STEPS: default 400, or CONTRACT_RANDOM_STEPS)
 *
 * tests/c_interpose.rs runs each seed with the hooks and as the reference, plain libc in
 * the goroutine (GMP_INTERPOSE=0), and requires the two outputs to be the same: return
 * values, errno, bytes read, revents, O_NONBLOCK as fcntl reports it, what stdio reads
 * and writes, what forked children see. The operations: pipes, socket pairs (stream and
 * datagram), loopback TCP connections and connected UDP pairs, eventfds, timerfds,
 * /dev/null and a regular file; dup, dup2 and dup3 onto another open number, F_DUPFD;
 * close_range (a close the hooks do not see); a child (fork, vfork, or posix_spawn of
 * this program with the fd as its stdin or stdout) that writes to or reads from an fd
 * with the plain calls and exits with what it got; O_NONBLOCK set and cleared with fcntl
 * and ioctl(FIONBIO); writes (write, writev, sendfile from a file) and reads (read,
 * readv, recv with MSG_DONTWAIT or MSG_PEEK, pread on the file), each made only when a zero-timeout
 * poll says it will not block or the fd is non-blocking, so that the sequence never
 * waits; poll on several fds at once with a zero timeout, and select; fdopen + fputs +
 * fclose (a close the runtime does not see, after which the number is reused) and
 * fdopen + fgets; close. The sequence is the seed's alone: both runs make the same calls.
 */
#define _GNU_SOURCE
#include "check.h"
#include "rng.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmp-sched/gmp.h>

#define SLOTS 10

enum kind {
    K_FREE,
    K_PIPE_R,
    K_PIPE_W,
    K_STREAM,
    K_DGRAM,
    K_EVENTFD,
    K_NULL,
    K_FILE,
    K_TIMERFD
};

static const char *const kind_names[] = {"free",    "pipe_r", "pipe_w", "stream", "dgram",
                                         "eventfd", "null",   "file",   "timerfd"};

static struct slot {
    int fd;
    enum kind kind;
} slots[SLOTS];

static uint64_t rng;
static unsigned long steps;
static gmp_wg wg = GMP_WG_INIT;
static char path[64];
static int source; /* sendfile's source file */
static char *self; /* this program, which step 12 spawns */
extern char **environ;

static void watchdog(int sig)
{
    (void)sig;
    static const char msg[] = "contract_random: hung (watchdog)\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(3);
}

/* Prints a result: the value, and errno's name when it is negative. */
static void out(unsigned long i, const char *what, long r, int err)
{
    if (r < 0)
        printf("%lu %s = -1 %s\n", i, what, strerrorname_np(err));
    else
        printf("%lu %s = %ld\n", i, what, r);
}

static int free_slot(void)
{
    int start = (int)rnd_below(&rng, SLOTS);
    for (int k = 0; k < SLOTS; k++) {
        int s = (start + k) % SLOTS;
        if (slots[s].kind == K_FREE)
            return s;
    }
    return -1;
}

static int used_slot(void)
{
    int start = (int)rnd_below(&rng, SLOTS);
    for (int k = 0; k < SLOTS; k++) {
        int s = (start + k) % SLOTS;
        if (slots[s].kind != K_FREE)
            return s;
    }
    return -1;
}

static void put(int fd, enum kind k)
{
    int s = free_slot();
    if (s < 0) {
        close(fd);
        return;
    }
    slots[s].fd = fd;
    slots[s].kind = k;
}

static void drop(int s)
{
    slots[s].kind = K_FREE;
    slots[s].fd = -1;
}

/* Whether a zero-timeout poll finds `events` on `fd`. */
static int ready(int fd, short events)
{
    struct pollfd p = {fd, events, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & (events | POLLHUP | POLLERR));
}

/* A connected loopback pair: TCP (a listener, connect, accept) or UDP (two bound sockets
 * connected to each other). 0, or -1 with errno. */
static int loopback_pair(int type, int fds[2])
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct sockaddr_in b = a;
    socklen_t len = sizeof a;
    int x = socket(AF_INET, type, 0);
    int y = socket(AF_INET, type, 0);
    if (x < 0 || y < 0 || bind(x, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(x, (struct sockaddr *)&a, &len) != 0)
        goto fail;
    if (type == SOCK_STREAM) {
        if (listen(x, 1) != 0 || connect(y, (struct sockaddr *)&a, sizeof a) != 0)
            goto fail;
        int z = accept(x, NULL, NULL);
        if (z < 0)
            goto fail;
        close(x);
        fds[0] = y;
        fds[1] = z;
        return 0;
    }
    len = sizeof b;
    if (bind(y, (struct sockaddr *)&b, sizeof b) != 0 ||
        getsockname(y, (struct sockaddr *)&b, &len) != 0 ||
        connect(x, (struct sockaddr *)&b, sizeof b) != 0 ||
        connect(y, (struct sockaddr *)&a, sizeof a) != 0)
        goto fail;
    fds[0] = x;
    fds[1] = y;
    return 0;
fail: {
    int e = errno;
    if (x >= 0)
        close(x);
    if (y >= 0)
        close(y);
    errno = e;
    return -1;
}
}

static int nonblocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl >= 0 && (fl & O_NONBLOCK);
}

static void step(unsigned long i)
{
    char what[96];
    char buf[600];
    int op = (int)rnd_below(&rng, 17);
    if (op == 0) {
        /* Open something. */
        int fds[2] = {-1, -1};
        int k = (int)rnd_below(&rng, 9);
        long r;
        switch (k) {
        case 0:
            r = pipe(fds);
            out(i, "pipe", r, errno);
            if (r == 0) {
                put(fds[0], K_PIPE_R);
                put(fds[1], K_PIPE_W);
            }
            break;
        case 1:
        case 2:
            r = socketpair(AF_UNIX, k == 1 ? SOCK_STREAM : SOCK_DGRAM, 0, fds);
            out(i, k == 1 ? "socketpair stream" : "socketpair dgram", r, errno);
            if (r == 0) {
                put(fds[0], k == 1 ? K_STREAM : K_DGRAM);
                put(fds[1], k == 1 ? K_STREAM : K_DGRAM);
            }
            break;
        case 3:
            fds[0] = eventfd((unsigned)rnd_below(&rng, 3), 0);
            out(i, "eventfd", fds[0] >= 0 ? 0 : -1, errno);
            if (fds[0] >= 0)
                put(fds[0], K_EVENTFD);
            break;
        case 6: {
            /* Expired at once: readable, one expiration. */
            fds[0] = timerfd_create(CLOCK_MONOTONIC, 0);
            struct itimerspec its = {{0, 0}, {0, 1}};
            r = fds[0] >= 0 ? timerfd_settime(fds[0], 0, &its, NULL) : -1;
            out(i, "timerfd", r, errno);
            if (fds[0] >= 0)
                put(fds[0], K_TIMERFD);
            break;
        }
        case 7:
        case 8:
            r = loopback_pair(k == 7 ? SOCK_STREAM : SOCK_DGRAM, fds);
            out(i, k == 7 ? "tcp pair" : "udp pair", r, errno);
            if (r == 0) {
                put(fds[0], k == 7 ? K_STREAM : K_DGRAM);
                put(fds[1], k == 7 ? K_STREAM : K_DGRAM);
            }
            break;
        case 4:
            fds[0] = open("/dev/null", O_RDWR);
            out(i, "open /dev/null", fds[0] >= 0 ? 0 : -1, errno);
            if (fds[0] >= 0)
                put(fds[0], K_NULL);
            break;
        default:
            fds[0] = open(path, O_RDWR | O_CREAT, 0600);
            out(i, "open file", fds[0] >= 0 ? 0 : -1, errno);
            if (fds[0] >= 0)
                put(fds[0], K_FILE);
            break;
        }
        return;
    }
    int s = used_slot();
    if (s < 0)
        return;
    int fd = slots[s].fd;
    enum kind kind = slots[s].kind;
    snprintf(what, sizeof what, "slot %d (%s)", s, kind_names[kind]);
    char name[160];
    switch (op) {
    case 1: {
        /* Duplicate: dup, F_DUPFD above 50, or dup2 onto another open slot's number. */
        int k = (int)rnd_below(&rng, 3);
        int d;
        if (k == 2) {
            int t = used_slot();
            if (t < 0 || t == s)
                return;
            int cloexec = (int)rnd_below(&rng, 2);
            d = cloexec ? dup3(fd, slots[t].fd, O_CLOEXEC) : dup2(fd, slots[t].fd);
            snprintf(name, sizeof name, "%s %s onto slot %d", cloexec ? "dup3 CLOEXEC" : "dup2",
                     what, t);
            out(i, name, d >= 0 ? 0 : -1, errno);
            if (d >= 0) {
                slots[t].kind = kind;
                out(i, "  F_GETFD", fcntl(slots[t].fd, F_GETFD), errno);
            }
            return;
        }
        d = k == 0 ? dup(fd) : fcntl(fd, F_DUPFD, 50);
        snprintf(name, sizeof name, "%s %s", k == 0 ? "dup" : "F_DUPFD", what);
        out(i, name, d >= 0 ? 0 : -1, errno);
        if (d >= 0)
            put(d, kind);
        return;
    }
    case 2: {
        /* O_NONBLOCK on or off, with fcntl or ioctl(FIONBIO); then what fcntl says. */
        int on = (int)rnd_below(&rng, 2);
        long r;
        if (rnd_below(&rng, 2)) {
            int fl = fcntl(fd, F_GETFL);
            r = fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
        } else {
            r = ioctl(fd, FIONBIO, &on);
        }
        snprintf(name, sizeof name, "nonblock=%d %s", on, what);
        out(i, name, r, errno);
        snprintf(name, sizeof name, "O_NONBLOCK %s", what);
        out(i, name, nonblocking(fd), 0);
        return;
    }
    case 3:
    case 4: {
        /* A write, when it cannot block. */
        if (kind == K_PIPE_R)
            return;
        size_t n = 1 + rnd_below(&rng, 512);
        if (kind == K_EVENTFD || kind == K_TIMERFD)
            n = 8;
        for (size_t k = 0; k < n; k++)
            buf[k] = (char)(i + k);
        if (kind == K_EVENTFD) {
            uint64_t v = 1 + rnd_below(&rng, 5);
            memcpy(buf, &v, 8);
        }
        if (!nonblocking(fd) && !ready(fd, POLLOUT))
            return;
        long r;
        const char *how = "write";
        if (op == 4 && (kind == K_PIPE_W || kind == K_STREAM) && i % 3 == 0) {
            /* Every third such step (no draw: the seeds' sequences stay as they were). */
            off_t off = 0;
            r = sendfile(fd, source, &off, n);
            how = "sendfile";
        } else if (op == 3 || kind == K_NULL || kind == K_FILE || kind == K_EVENTFD) {
            r = write(fd, buf, n);
        } else {
            struct iovec iov[2] = {{buf, n / 2}, {buf + n / 2, n - n / 2}};
            r = writev(fd, iov, 2);
        }
        snprintf(name, sizeof name, "%s %zu %s", how, n, what);
        out(i, name, r, errno);
        return;
    }
    case 5:
    case 6: {
        /* A read, when it cannot block. */
        if (kind == K_PIPE_W)
            return;
        if (!nonblocking(fd) && !ready(fd, POLLIN) && kind != K_NULL && kind != K_FILE)
            return;
        size_t n = kind == K_EVENTFD || kind == K_TIMERFD ? 8 : 1 + rnd_below(&rng, 600);
        long r;
        const char *how = "read";
        if (kind == K_STREAM || kind == K_DGRAM) {
            int k = (int)rnd_below(&rng, 3);
            if (k == 0) {
                r = recv(fd, buf, n, MSG_DONTWAIT);
                how = "recv DONTWAIT";
            } else if (k == 1) {
                r = recv(fd, buf, n, MSG_PEEK | MSG_DONTWAIT);
                how = "recv PEEK";
            } else {
                struct iovec iov[2] = {{buf, n / 2}, {buf + n / 2, n - n / 2}};
                r = readv(fd, iov, 2);
                how = "readv";
            }
        } else if (kind == K_FILE && op == 6) {
            r = pread(fd, buf, n, (off_t)rnd_below(&rng, 256));
            how = "pread";
        } else {
            r = read(fd, buf, n);
        }
        snprintf(name, sizeof name, "%s %zu %s", how, n, what);
        out(i, name, r, errno);
        if (r > 0) {
            unsigned long h = 1469598103934665603UL;
            for (long k = 0; k < r; k++)
                h = (h ^ (unsigned char)buf[k]) * 1099511628211UL;
            printf("%lu   bytes hash %lx\n", i, h);
        }
        return;
    }
    case 7:
    case 8: {
        /* poll on up to three fds with a zero timeout; or select. */
        struct pollfd p[3];
        int n = 1 + (int)rnd_below(&rng, 3);
        for (int k = 0; k < n; k++) {
            int t = used_slot();
            static const short evs[] = {POLLIN, POLLOUT, POLLIN | POLLOUT, POLLRDNORM,
                                        POLLWRNORM, POLLPRI};
            p[k].fd = slots[t].fd;
            p[k].events = evs[rnd_below(&rng, 6)];
            p[k].revents = 0;
        }
        if (op == 7) {
            long r = poll(p, (nfds_t)n, 0);
            out(i, "poll", r, errno);
            for (int k = 0; k < n; k++)
                printf("%lu   revents[%d] = %#x\n", i, k, (unsigned)p[k].revents);
        } else {
            fd_set rd, wr;
            FD_ZERO(&rd);
            FD_ZERO(&wr);
            int max = 0;
            for (int k = 0; k < n; k++) {
                FD_SET(p[k].fd, (p[k].events & (POLLOUT | POLLWRNORM)) ? &wr : &rd);
                if (p[k].fd > max)
                    max = p[k].fd;
            }
            struct timeval tv = {0, 0};
            long r = select(max + 1, &rd, &wr, NULL, &tv);
            out(i, "select", r, errno);
            for (int k = 0; k < n; k++)
                printf("%lu   set[%d] = %d%d\n", i, k, FD_ISSET(p[k].fd, &rd) != 0,
                       FD_ISSET(p[k].fd, &wr) != 0);
        }
        return;
    }
    case 9: {
        /* stdio writes, then fclose: the close is glibc's own, unseen by the hooks. */
        if (kind == K_PIPE_R || kind == K_EVENTFD || kind == K_DGRAM || kind == K_TIMERFD)
            return;
        if (!ready(fd, POLLOUT) && kind != K_FILE && kind != K_NULL)
            return;
        FILE *f = fdopen(fd, "w");
        if (f == NULL) {
            out(i, "fdopen w", -1, errno);
            return;
        }
        int r = fprintf(f, "line %lu\n", i);
        int c = fclose(f);
        snprintf(name, sizeof name, "fputs+fclose %s", what);
        out(i, name, r < 0 ? -1 : c, errno);
        drop(s);
        return;
    }
    case 10: {
        /* stdio read of one line, when it cannot block: a file, or a pipe or socket the
         * sequence made non-blocking (a line may lack its newline; fgets then stops at
         * EAGAIN with what it has). */
        if (kind != K_PIPE_R && kind != K_STREAM && kind != K_FILE && kind != K_NULL)
            return;
        if ((kind == K_PIPE_R || kind == K_STREAM) && !nonblocking(fd))
            return;
        int d = dup(fd);
        if (d < 0)
            return;
        FILE *f = fdopen(d, "r");
        if (f == NULL) {
            close(d);
            return;
        }
        setvbuf(f, NULL, _IONBF, 0);
        char line[80];
        errno = 0;
        char *l = fgets(line, sizeof line, f);
        snprintf(name, sizeof name, "fgets %s", what);
        out(i, name, l == NULL ? (ferror(f) ? -1 : 0) : (long)strlen(l), errno);
        fclose(f);
        return;
    }
    case 11: {
        /* fcntl's view of the flags and of FD_CLOEXEC. */
        snprintf(name, sizeof name, "F_GETFL&ACCMODE|NONBLOCK %s", what);
        int fl = fcntl(fd, F_GETFL);
        out(i, name, fl < 0 ? -1 : (fl & (O_ACCMODE | O_NONBLOCK)), errno);
        return;
    }
    case 12: {
        /* A child forked here writes to the fd or reads from it with the plain calls,
         * when that cannot block, and exits with the count (or 100 + errno). */
        int wr = kind != K_PIPE_R && (kind == K_NULL || kind == K_FILE || ready(fd, POLLOUT));
        int rd = kind != K_PIPE_W && !wr &&
                 (kind == K_NULL || kind == K_FILE || ready(fd, POLLIN));
        if (!wr && !rd)
            return;
        size_t n = kind == K_EVENTFD || kind == K_TIMERFD ? 8 : 16;
        uint64_t one = 1;
        memcpy(buf, &one, 8);
        memset(buf + 8, 'c', 8);
        /* 0: fork, 1: vfork, 2: posix_spawn of this program with the fd as its stdin or
         * stdout (not for eventfd and timerfd counts, which it does not know). */
        int how = (int)rnd_below(&rng, 3);
        if (how == 2 && (kind == K_EVENTFD || kind == K_TIMERFD))
            how = 0;
        static const char *const hows[] = {"fork", "vfork", "posix_spawn"};
        fflush(stdout);
        pid_t pid;
        if (how == 2) {
            posix_spawn_file_actions_t fa;
            CHECK_EQ(posix_spawn_file_actions_init(&fa), 0);
            CHECK_EQ(posix_spawn_file_actions_adddup2(&fa, fd, wr ? 1 : 0), 0);
            char nbuf[8];
            snprintf(nbuf, sizeof nbuf, "%zu", n);
            char *argv[] = {self, (char *)(wr ? "child-write" : "child-read"), nbuf, NULL};
            if (posix_spawn(&pid, self, &fa, NULL, argv, environ) != 0)
                pid = -1;
            CHECK_EQ(posix_spawn_file_actions_destroy(&fa), 0);
        } else {
            pid = how == 1 ? vfork() : fork();
            if (pid == 0) {
                long r = wr ? write(fd, buf, n) : read(fd, buf, n);
                _exit(r < 0 ? 100 + errno % 100 : (int)r);
            }
        }
        int st = 0;
        long r = pid < 0 ? -1 : waitpid(pid, &st, 0);
        snprintf(name, sizeof name, "%s child %s %s: waitpid", hows[how],
                 wr ? "write" : "read", what);
        out(i, name, r < 0 ? -1 : 0, errno);
        if (r > 0)
            printf("%lu   child exit %d\n", i, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return;
    }
    case 13: {
        /* close_range of the one number: a close the hooks do not see. */
        long r = close_range((unsigned)fd, (unsigned)fd, 0);
        snprintf(name, sizeof name, "close_range %s", what);
        out(i, name, r, errno);
        if (r == 0)
            for (int t = 0; t < SLOTS; t++)
                if (slots[t].kind != K_FREE && slots[t].fd == fd)
                    drop(t);
        return;
    }
    default: {
        long r = close(fd);
        snprintf(name, sizeof name, "close %s", what);
        out(i, name, r, errno);
        /* Another slot may hold the same number (dup2 onto it): it is closed too. */
        for (int t = 0; t < SLOTS; t++)
            if (slots[t].kind != K_FREE && slots[t].fd == fd)
                drop(t);
        return;
    }
    }
}

static void run(void *arg)
{
    (void)arg;
    for (unsigned long i = 0; i < steps; i++)
        step(i);
    for (int s = 0; s < SLOTS; s++)
        if (slots[s].kind != K_FREE)
            close(slots[s].fd);
    gmp_wg_done(&wg);
}

/* A child posix_spawn'ed by step 12: writes or reads `n` bytes on its stdout or stdin
 * with one plain call, and exits with the count (or 100 + errno). */
static int child_main(int wr, size_t n)
{
    char b[16];
    memset(b, 's', sizeof b);
    long r = wr ? write(1, b, n) : read(0, b, n);
    return r < 0 ? 100 + errno % 100 : (int)r;
}

int main(int argc, char **argv)
{
    CHECK(argc >= 2);
    if (argc == 3 && strncmp(argv[1], "child-", 6) == 0)
        return child_main(strcmp(argv[1], "child-write") == 0, strtoul(argv[2], NULL, 0));
    self = "/proc/self/exe";
    signal(SIGALRM, watchdog);
    signal(SIGPIPE, SIG_IGN);
    unsigned long seed = strtoul(argv[1], NULL, 0);
    const char *st = argc >= 3 ? argv[2] : getenv("CONTRACT_RANDOM_STEPS");
    steps = st != NULL ? strtoul(st, NULL, 0) : 400;
    alarm(30 + (unsigned)(steps / 1000));
    rng = splitmix(seed) | 1;
    snprintf(path, sizeof path, "/tmp/gmp-contract-random-%d", (int)getpid());
    /* A file a killed run left under a reused pid would differ between the two runs. */
    unlink(path);
    for (int s = 0; s < SLOTS; s++)
        drop(s);
    /* sendfile's source: 512 bytes of a pattern in an unlinked file. */
    char spath[] = "/tmp/gmp-contract-random-src-XXXXXX";
    source = mkstemp(spath);
    CHECK(source >= 0);
    unlink(spath);
    char sbuf[512];
    for (size_t k = 0; k < sizeof sbuf; k++)
        sbuf[k] = (char)(k * 7);
    CHECK_EQ(write(source, sbuf, sizeof sbuf), (long)sizeof sbuf);
    /* stdout is a pipe to the test: line-buffered, so that nothing waits in it. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    gmp_wg_add(&wg, 1);
    CHECK(gmp_go(run, NULL) >= 0);
    gmp_wg_wait(&wg);
    unlink(path);
    printf("contract_random %lu: %lu steps\n", seed, steps);
    return 0;
}
