/*
 * preempt_soak: goroutines that loop in C making raw system calls, holding pthread locks
 * and using thread-local state, beside goroutines that only compute (which only
 * asynchronous preemption stops). Preemption must change none of the calls' outcomes:
 * no EINTR the program did not cause, no short count, no wrong byte, no lost update, no
 * hang.
 *
 *   preempt_soak SECONDS
 *
 * Each looping goroutine makes at least one round, however late it first runs.
 * The system calls are made with syscall(2), which no hook sees: with the hooks on or
 * off (GMP_INTERPOSE=0) they meet the preemption signal as a library loaded by dlopen
 * would. GOMAXPROCS and the preemption source come from the environment. Prints the
 * counts and the runtime's preemption counters; fails if no goroutine was preempted.
 *
 * A damaged call (an EINTR or a short count) is counted and the program goes on as a
 * careful one would, so that one damaged call does not hang the rest. It fails if there
 * are more damaged calls than the runtime's own count of unseen-call signals that found
 * the thread out of the call sysmon saw (`/gmp/sched/unseen/missed:events`, the window
 * HACKING.md lists under known limits): any other damage is a bug.
 */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <gmp-sched/gmp.h>

static gmp_wg wg = GMP_WG_INIT;
static long deadline_ns;
static atomic_long calls, eintr, shortc, regs_changed, preempt_free_rounds;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static long mu_count, mu_rounds;
static long rw_value[2];
static _Thread_local long tls_owner;
static volatile unsigned long sink;

static int sp[2]; /* the MSG_WAITALL socket pair: sender, receiver */

#define PIPE_BLOCK (4 << 20)
#define WAITALL_LEN (64 << 10)

static long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static int running(void) { return now_ns() < deadline_ns; }

/* The latest time, in ms from the start, at which a looping goroutine began its first
 * round (printed: past the deadline, some kinds ran only after the others had stopped). */
static long start_ns;
static atomic_long last_first_round_ms;

/* Whether a looping goroutine that has made `round` rounds begins another: while
 * running(), and always a first one. With the CPU-time timer source a goroutine looping
 * on short raw sleeps keeps its P until a scheduler tick finds its thread on a CPU, which
 * on an otherwise idle CPU can take many seconds (HACKING.md, known limits): a goroutine
 * queued behind two of them may first run after the deadline, and still makes its round. */
static int again(long round)
{
    if (round > 0)
        return running();
    long ms = (now_ns() - start_ns) / 1000000;
    for (long cur = atomic_load(&last_first_round_ms);
         ms > cur && !atomic_compare_exchange_weak(&last_first_round_ms, &cur, ms);)
        ;
    return 1;
}

/* poll and epoll_wait as raw calls: their own system calls on x86-64; aarch64 has only
 * ppoll (a relative timespec, which glibc's poll passes) and epoll_pwait. */
static long poll_ms(struct pollfd *pfd, int ms)
{
#if defined(SYS_poll)
    return syscall(SYS_poll, pfd, 1, ms);
#else
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    return syscall(SYS_ppoll, pfd, 1, &ts, NULL, 8);
#endif
}

static long epoll_wait_ms(int ep, struct epoll_event *out, int ms)
{
#if defined(SYS_epoll_wait)
    return syscall(SYS_epoll_wait, ep, out, 1, ms);
#else
    return syscall(SYS_epoll_pwait, ep, out, 1, ms, NULL, 8);
#endif
}

static void compute(int n)
{
    unsigned long x = sink;
    for (int i = 0; i < n * 1000; i++)
        x = x * 6364136223846793005UL + 1442695040888963407UL;
    sink = x;
}

/* A raw call's result: EINTR counts as a failure (the program installed no handler). */
#define raw(r) raw_named((r), #r)

static long raw_named(long r, const char *what)
{
    atomic_fetch_add(&calls, 1);
    if (r < 0 && errno == EINTR) {
        atomic_fetch_add(&eintr, 1);
        fprintf(stderr, "EINTR from %s\n", what);
    }
    return r;
}

/* A call that moved less than it was asked to (or failed with EINTR): counted. */
static void damaged(const char *what, long want, long got)
{
    fprintf(stderr, "%s of %ld returned %ld\n", what, want, got);
    if (got >= 0)
        atomic_fetch_add(&shortc, 1);
}

/* Sends the part of `len` bytes at `buf` that a damaged send left (`sent`: its result). */
static void send_rest(const unsigned char *buf, long len, long sent)
{
    for (long done = sent > 0 ? sent : 0; done < len;) {
        long m = send(sp[0], buf + done, (size_t)(len - done), 0);
        CHECK(m > 0 || (m < 0 && errno == EINTR));
        done += m > 0 ? m : 0;
    }
}

static void watchdog(int sig)
{
    (void)sig;
    static const char msg[] = "preempt_soak: hung (watchdog); goroutines:\n";
    if (write(2, msg, sizeof msg - 1) < 0) {
        /* nothing more to do */
    }
    gmp_dump(2);
    _exit(3);
}

/* ---------------------------------------------------------------------------------- */

static void hog(void *arg)
{
    (void)arg;
    for (long round = 0; again(round); round++)
        compute(100);
    gmp_wg_done(&wg);
}

static void sleeper(void *arg)
{
    (void)arg;
    for (long round = 0; again(round); round++) {
        struct timespec ts = {0, 30000};
        CHECK(raw(syscall(SYS_nanosleep, &ts, NULL)) == 0 || errno == EINTR);
        CHECK(raw(syscall(SYS_clock_nanosleep, CLOCK_MONOTONIC, 0, &ts, NULL)) == 0 ||
              errno == EINTR);
        compute(2);
    }
    gmp_wg_done(&wg);
}

static void waiter(void *arg)
{
    (void)arg;
    int p[2];
    CHECK(syscall(SYS_pipe2, p, O_CLOEXEC) == 0);
    int ep = (int)syscall(SYS_epoll_create1, EPOLL_CLOEXEC);
    CHECK(ep >= 0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = p[0]};
    CHECK(syscall(SYS_epoll_ctl, ep, EPOLL_CTL_ADD, p[0], &ev) == 0);
    static atomic_int word;
    for (long round = 0; again(round); round++) {
        struct pollfd pfd = {.fd = p[0], .events = POLLIN};
        struct timespec ms = {0, 1000000};
        long r = raw(syscall(SYS_ppoll, &pfd, 1, &ms, NULL, 8));
        CHECK(r == 0 || (r < 0 && errno == EINTR));
        r = raw(poll_ms(&pfd, 1));
        CHECK(r == 0 || (r < 0 && errno == EINTR));
        struct epoll_event out;
        r = raw(epoll_wait_ms(ep, &out, 1));
        CHECK(r == 0 || (r < 0 && errno == EINTR));
        struct timespec us = {0, 200000};
        r = raw(syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, &us, NULL, 0));
        CHECK(r < 0 && (errno == ETIMEDOUT || errno == EINTR));
        compute(2);
    }
    close(ep);
    close(p[0]);
    close(p[1]);
    gmp_wg_done(&wg);
}

/* Relative timeouts of 60 ms whose rest the kernel reports nowhere (usleep's nanosleep,
 * poll, FUTEX_WAIT): long enough for sysmon to hand their P on. Each must end as
 * uninterrupted: 0 (ETIMEDOUT for the futex), no earlier than asked. */
static atomic_long long_sleeps, worst_late_us;

static void long_sleeper(void *arg)
{
    (void)arg;
    int p[2];
    CHECK(syscall(SYS_pipe2, p, O_CLOEXEC) == 0);
    static int word;
    for (long round = 0; again(round); round++) {
        int k = (int)(round % 4);
        struct timespec ts = {0, 60 * 1000000};
        struct pollfd pfd = {.fd = p[0], .events = POLLIN};
        long t0 = now_ns(), r;
        switch (k) {
        case 0: r = raw(syscall(SYS_nanosleep, &ts, NULL)); break;
        case 1: r = raw(syscall(SYS_clock_nanosleep, CLOCK_MONOTONIC, 0, &ts, NULL)); break;
        case 2: r = raw(poll_ms(&pfd, 60)); break;
        default:
            r = raw(syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0));
            CHECK(r == -1 && (errno == ETIMEDOUT || errno == EINTR));
            r = errno == ETIMEDOUT ? 0 : r;
            break;
        }
        long late = now_ns() - t0 - 60 * 1000000;
        if (r < 0 && errno == EINTR)
            continue; /* counted by raw() */
        CHECK_EQ(r, 0);
        CHECK(late >= 0);
        if (late / 1000 > atomic_load(&worst_late_us))
            atomic_store(&worst_late_us, late / 1000);
        atomic_fetch_add(&long_sleeps, 1);
        compute(2);
    }
    close(p[0]);
    close(p[1]);
    gmp_wg_done(&wg);
}

/* A pipe carrying a byte sequence in big raw writes; the reader checks every byte. */
static int bigpipe[2];
static atomic_int writer_done;
static long piped_bytes;

/* A write made by an inline `syscall` (aarch64: `svc #0`) instruction, as compiled code
 * makes it: the kernel changes rax, rcx and r11 only (x0 only), and the code after relies
 * on the argument registers (checked here: a call the runtime continued after a signal
 * must leave them too). */
static long asm_write(int fd, const void *buf, size_t len)
{
#if defined(__x86_64__)
    long ret;
    const void *rsi_after;
    size_t rdx_after;
    __asm__ volatile("syscall\n\tmov %%rsi, %1\n\tmov %%rdx, %2"
                     : "=a"(ret), "=&r"(rsi_after), "=&r"(rdx_after)
                     : "0"((long)SYS_write), "D"((long)fd), "S"(buf), "d"(len)
                     : "rcx", "r11", "memory");
    if (rsi_after != buf || rdx_after != len) {
        fprintf(stderr, "a write's argument registers changed: %p %zu -> %p %zu\n", buf, len,
                rsi_after, rdx_after);
        atomic_fetch_add(&regs_changed, 1);
    }
    if (ret < 0) {
        errno = (int)-ret;
        return -1;
    }
    return ret;
#elif defined(__aarch64__)
    /* aarch64: the kernel changes x0 only; x1 and x2 must come back as they went in. */
    register long x8 __asm__("x8") = SYS_write;
    register long x0 __asm__("x0") = fd;
    register const void *x1 __asm__("x1") = buf;
    register size_t x2 __asm__("x2") = len;
    __asm__ volatile("svc #0" : "+r"(x0), "+r"(x1), "+r"(x2) : "r"(x8) : "memory");
    if (x1 != buf || x2 != len) {
        fprintf(stderr, "a write's argument registers changed: %p %zu -> %p %zu\n", buf, len,
                x1, x2);
        atomic_fetch_add(&regs_changed, 1);
    }
    if (x0 < 0) {
        errno = (int)-x0;
        return -1;
    }
    return x0;
#else
    return syscall(SYS_write, fd, buf, len);
#endif
}

static void pipe_writer(void *arg)
{
    (void)arg;
    unsigned char *buf = malloc(PIPE_BLOCK);
    CHECK(buf != NULL);
    unsigned char next = 0;
    for (long round = 0; again(round); round++) {
        for (int i = 0; i < PIPE_BLOCK; i++)
            buf[i] = next++;
        /* Plain, by inline asm, and vectored in three unequal pieces. */
        struct iovec iov[3] = {
            {buf, PIPE_BLOCK / 4}, {buf + PIPE_BLOCK / 4, PIPE_BLOCK / 2},
            {buf + 3 * (PIPE_BLOCK / 4), PIPE_BLOCK / 4}};
        long n = raw(round % 3 == 0   ? syscall(SYS_write, bigpipe[1], buf, (size_t)PIPE_BLOCK)
                     : round % 3 == 1 ? asm_write(bigpipe[1], buf, (size_t)PIPE_BLOCK)
                                      : syscall(SYS_writev, bigpipe[1], iov, 3));
        if (n != PIPE_BLOCK) {
            damaged("raw pipe write", PIPE_BLOCK, n);
            /* The rest, so that the reader's byte sequence goes on. */
            for (long done = n > 0 ? n : 0; done < PIPE_BLOCK;) {
                long m = syscall(SYS_write, bigpipe[1], buf + done, (size_t)(PIPE_BLOCK - done));
                CHECK(m > 0 || (m < 0 && errno == EINTR));
                done += m > 0 ? m : 0;
            }
        }
    }
    free(buf);
    close(bigpipe[1]);
    atomic_store(&writer_done, 1);
    gmp_wg_done(&wg);
}

static void pipe_reader(void *arg)
{
    (void)arg;
    static unsigned char buf[1 << 16];
    unsigned char expect = 0;
    long total = 0;
    for (;;) {
        long n = raw(syscall(SYS_read, bigpipe[0], buf, sizeof buf));
        if (n == 0)
            break;
        if (n < 0 && errno == EINTR)
            continue; /* counted by raw() */
        CHECK(n > 0);
        for (long i = 0; i < n; i++)
            CHECK_EQ(buf[i], expect++);
        total += n;
        compute(1);
    }
    CHECK_EQ(total % PIPE_BLOCK, 0);
    piped_bytes = total;
    close(bigpipe[0]);
    gmp_wg_done(&wg);
}

/* MSG_WAITALL receives of messages the peer sends in pieces. */

/* A msghdr for the WAITALL_LEN bytes at `buf` in two pieces, the first `first` long. */
static struct msghdr two_pieces(struct iovec iov[2], unsigned char *buf, size_t first)
{
    iov[0] = (struct iovec){buf, first};
    iov[1] = (struct iovec){buf + first, WAITALL_LEN - first};
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = iov;
    mh.msg_iovlen = 2;
    return mh;
}

static void waitall_sender(void *arg)
{
    (void)arg;
    static unsigned char msg[WAITALL_LEN];
    int seq = 0;
    while (again(seq)) {
        memset(msg, seq & 0xff, sizeof msg);
        if (seq % 2) {
            /* The whole message in one sendmsg of two pieces, more than the socket
             * buffer holds: it waits for the receiver, and a signal may cut it. */
            struct iovec iov[2];
            struct msghdr mh = two_pieces(iov, msg, WAITALL_LEN / 3);
            long n = raw(syscall(SYS_sendmsg, sp[0], &mh, 0));
            if (n != WAITALL_LEN) {
                damaged("sendmsg", WAITALL_LEN, n);
                send_rest(msg, WAITALL_LEN, n);
            }
            seq++;
            continue;
        }
        for (int off = 0; off < WAITALL_LEN; off += WAITALL_LEN / 4) {
            long n = raw(syscall(SYS_sendto, sp[0], msg + off, (size_t)(WAITALL_LEN / 4), 0,
                                 NULL, 0));
            if (n != WAITALL_LEN / 4) {
                damaged("sendto", WAITALL_LEN / 4, n);
                send_rest(msg + off, WAITALL_LEN / 4, n);
            }
            struct timespec ts = {0, 20000};
            raw(syscall(SYS_nanosleep, &ts, NULL));
        }
        seq++;
    }
    shutdown(sp[0], SHUT_WR);
    gmp_wg_done(&wg);
}

static void waitall_receiver(void *arg)
{
    (void)arg;
    static unsigned char msg[WAITALL_LEN];
    int seq = 0;
    for (int k = 0;; k++) {
        /* recvfrom, or recvmsg into two pieces. */
        struct iovec iov[2];
        struct msghdr mh = two_pieces(iov, msg, WAITALL_LEN / 4);
        long n = k % 2 ? raw(syscall(SYS_recvmsg, sp[1], &mh, MSG_WAITALL))
                       : raw(syscall(SYS_recvfrom, sp[1], msg, sizeof msg, MSG_WAITALL, NULL, NULL));
        if (n == 0)
            break;
        if (n != WAITALL_LEN) {
            damaged("MSG_WAITALL receive", WAITALL_LEN, n);
            /* The rest of the message, so that the next one starts where it should. */
            for (long done = n > 0 ? n : 0; done < WAITALL_LEN;) {
                long m = recv(sp[1], msg + done, (size_t)(WAITALL_LEN - done), MSG_WAITALL);
                CHECK(m > 0 || (m < 0 && errno == EINTR));
                done += m > 0 ? m : 0;
            }
        }
        CHECK_EQ(msg[0], seq & 0xff);
        CHECK_EQ(msg[WAITALL_LEN - 1], seq & 0xff);
        seq++;
    }
    gmp_wg_done(&wg);
}

/* pthread locks around compute (only preemption stops the holder) and thread state. */
static void locker(void *arg)
{
    long id = (long)(intptr_t)arg;
    for (long round = 0; again(round); round++) {
        CHECK_EQ(pthread_mutex_lock(&mu), 0);
        long before = mu_count;
        compute(20);
        mu_count = before + 1;
        mu_rounds++;
        CHECK_EQ(pthread_mutex_unlock(&mu), 0);

        if (id % 2) {
            CHECK_EQ(pthread_rwlock_wrlock(&rw), 0);
            long v = rw_value[0];
            compute(5);
            rw_value[0] = v + 1;
            rw_value[1] = v + 1;
            CHECK_EQ(pthread_rwlock_unlock(&rw), 0);
        } else {
            CHECK_EQ(pthread_rwlock_rdlock(&rw), 0);
            long a = rw_value[0];
            compute(5);
            CHECK_EQ(rw_value[1], a);
            CHECK_EQ(pthread_rwlock_unlock(&rw), 0);
        }

        tls_owner = id;
        compute(20);
        CHECK_EQ(tls_owner, id);
        atomic_fetch_add(&preempt_free_rounds, 1);
    }
    gmp_wg_done(&wg);
}

/* The runtime's count of unseen-call signals that found the thread out of the call. */
static long unseen_missed(void)
{
    int n = gmp_metrics(NULL, 0);
    CHECK(n > 0);
    struct gmp_metric *m = calloc((size_t)n, sizeof *m);
    CHECK(m != NULL);
    CHECK_EQ(gmp_metrics(m, (size_t)n), n);
    long v = -1;
    for (int i = 0; i < n; i++)
        if (strcmp(m[i].name, "/gmp/sched/unseen/missed:events") == 0)
            v = (long)m[i].value;
    free(m);
    CHECK(v >= 0);
    return v;
}

int main(int argc, char **argv)
{
    int secs = argc > 1 ? atoi(argv[1]) : 5;
    CHECK(secs > 0);
    signal(SIGALRM, watchdog);
    alarm((unsigned)secs + 60);
    start_ns = now_ns();
    deadline_ns = start_ns + (long)secs * 1000000000L;

    CHECK(syscall(SYS_pipe2, bigpipe, O_CLOEXEC) == 0);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0);
    int small = 16 << 10;
    CHECK(setsockopt(sp[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small) == 0);

    struct {
        void (*fn)(void *);
        int n;
    } kinds[] = {
        /* The goroutines that mostly sleep in the kernel in calls no hook sees hold their
         * P between calls, until the signal stops them in user code, which the CPU-time
         * timer source does only at a scheduler tick that finds them on a CPU (again()):
         * the pairs first, and the short sleepers last, so that the kinds queued behind
         * them have begun when one of those takes a P for long. */
        {pipe_writer, 1},    {pipe_reader, 1}, {waitall_sender, 1}, {waitall_receiver, 1},
        {locker, 4},         {hog, 2},         {long_sleeper, 1},   {sleeper, 2},
        {waiter, 2},
    };
    long id = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (int i = 0; i < kinds[k].n; i++) {
            gmp_wg_add(&wg, 1);
            CHECK(gmp_go(kinds[k].fn, (void *)(intptr_t)id++) > 0);
        }
    gmp_wg_wait(&wg);
    alarm(0);

    struct gmp_sched_stats st;
    CHECK(gmp_stats(&st, NULL, 0) >= 0);
    long missed = unseen_missed();
    long damage = atomic_load(&eintr) + atomic_load(&shortc);
    printf("calls %ld eintr %ld short %ld piped %ld MiB lock rounds %ld long sleeps %ld "
           "(worst %ld us late): preempt signals "
           "%llu, preempted %llu, refused stale %llu lib %llu stack %llu, skipped %llu; "
           "unseen calls signalled %llu, made seen %llu, found out of the call %ld; "
           "every kind began by %ld ms\n",
           atomic_load(&calls), atomic_load(&eintr), atomic_load(&shortc),
           piped_bytes >> 20, mu_rounds, atomic_load(&long_sleeps),
           atomic_load(&worst_late_us), (unsigned long long)st.preempt_signals,
           (unsigned long long)st.async_preempts,
           (unsigned long long)st.async_refused_stale,
           (unsigned long long)st.async_refused_lib,
           (unsigned long long)st.async_refused_stack,
           (unsigned long long)st.async_skipped_blocked,
           (unsigned long long)st.unseen_signals, (unsigned long long)st.unseen_wrapped, missed,
           atomic_load(&last_first_round_ms));
    fflush(stdout);
    CHECK(damage <= missed);
    CHECK_EQ(atomic_load(&regs_changed), 0);
    CHECK_EQ(mu_count, mu_rounds);
    CHECK(piped_bytes > 0);
    CHECK(atomic_load(&preempt_free_rounds) > 0);
    const char *dbg = getenv("GMP_DEBUG");
    if (!dbg || !strstr(dbg, "asyncpreemptoff=1"))
        CHECK(st.async_preempts > 0);
    return 0;
}
