/*
 * check.h -- the assertion helpers shared by the C tests in c-tests/.
 *
 * A failed check prints "file:line: CHECK failed: <expression>" (with both values for
 * the _EQ form) to stderr and ends the process with status 1, from any thread or
 * goroutine: _exit, not exit, so that no atexit handler runs on a goroutine stack while
 * the runtime's threads are still running.
 */
#ifndef GMP_CTESTS_CHECK_H
#define GMP_CTESTS_CHECK_H

/* Include this header first: the tests use POSIX and Linux calls (clock_gettime,
 * nanosleep, syscall) that -std=c11 hides without a feature macro. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static inline void check_fail(const char *file, int line, const char *expr)
{
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", file, line, expr);
    fflush(stdout);
    fflush(stderr);
    _exit(1);
}

static inline void check_fail_eq(const char *file, int line, const char *a_expr,
                                 const char *b_expr, long long a, long long b)
{
    fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld != %lld)\n", file, line,
            a_expr, b_expr, a, b);
    fflush(stdout);
    fflush(stderr);
    _exit(1);
}

static inline void check_fail_neg(const char *file, int line, const char *expr, long long r)
{
    fprintf(stderr, "%s:%d: CHECK failed: %s >= 0 (returned %lld)\n", file, line, expr, r);
    fflush(stdout);
    fflush(stderr);
    _exit(1);
}

/* Asserts a condition. */
#define CHECK(expr)                                                                \
    do {                                                                           \
        if (!(expr))                                                               \
            check_fail(__FILE__, __LINE__, #expr);                                 \
    } while (0)

/* Asserts that two integer expressions are equal; prints both values if not. */
#define CHECK_EQ(a, b)                                                             \
    do {                                                                           \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);            \
        if (check_a_ != check_b_)                                                  \
            check_fail_eq(__FILE__, __LINE__, #a, #b, check_a_, check_b_);         \
    } while (0)

/* Asserts that a gmp_* call succeeded (returned a non-negative value). */
#define CHECK_OK(call)                                                             \
    do {                                                                           \
        long long check_r_ = (long long)(call);                                    \
        if (check_r_ < 0)                                                          \
            check_fail_neg(__FILE__, __LINE__, #call, check_r_);                  \
    } while (0)

/* CLOCK_MONOTONIC in seconds. */
static inline double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sleeps for the given number of milliseconds (a foreign thread only: it blocks the
 * thread, not just the goroutine). */
static inline void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The process's resident set size in KiB, from /proc/self/statm. */
static inline long rss_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    CHECK(f != NULL);
    long size = 0, resident = 0;
    CHECK_EQ(fscanf(f, "%ld %ld", &size, &resident), 2);
    fclose(f);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Limits the address space (RLIMIT_AS) to what the process maps now plus `extra` bytes;
 * returns the limit it replaced, for setrlimit to restore. */
static inline struct rlimit limit_address_space(size_t extra)
{
    FILE *f = fopen("/proc/self/statm", "r");
    CHECK(f != NULL);
    long pages = 0;
    CHECK_EQ(fscanf(f, "%ld", &pages), 1);
    fclose(f);
    struct rlimit lim;
    CHECK_EQ(getrlimit(RLIMIT_AS, &lim), 0);
    struct rlimit old = lim;
    lim.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (rlim_t)extra;
    CHECK_EQ(setrlimit(RLIMIT_AS, &lim), 0);
    return old;
}

/* Calls fn(text, ctx) for every thread of this process with the contents of its
 * /proc/self/task/<tid>/<file> (at most 4 KiB, NUL-terminated); a thread that ends
 * meanwhile is skipped. Returns the number of threads seen. */
static inline int each_thread_file(const char *file, void (*fn)(const char *text, void *ctx),
                                   void *ctx)
{
    DIR *d = opendir("/proc/self/task");
    CHECK(d != NULL);
    struct dirent *e;
    int threads = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], buf[4096];
        snprintf(path, sizeof path, "/proc/self/task/%s/%s", e->d_name, file);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue; /* the thread just ended */
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        if (n == 0)
            continue; /* it ended between the open and the read (the read fails: ESRCH) */
        buf[n] = 0;
        threads++;
        if (fn != NULL)
            fn(buf, ctx);
    }
    closedir(d);
    return threads;
}

/* The gmp_* helpers below need the library's header (the include guard makes a second
 * #include harmless). A test that loads the library with dlopen defines CHECK_NO_GMP. */
#ifndef CHECK_NO_GMP
#include <gmp-sched/gmp.h>

/* Asserts that `cond` becomes true within `secs` seconds, polling every millisecond from
 * a foreign thread: the way to wait for a state (a counter, a flag, gmp_stats) instead
 * of sleeping for it. */
#define WAIT_UNTIL(cond, secs)                                                     \
    do {                                                                           \
        double wait_deadline_ = now_sec() + (secs);                                \
        while (!(cond)) {                                                          \
            if (now_sec() > wait_deadline_)                                        \
                check_fail(__FILE__, __LINE__, "WAIT_UNTIL(" #cond ")");           \
            sleep_ms(1);                                                           \
        }                                                                          \
    } while (0)

/* The scheduler's counters now (gmp_stats without run queue lengths), checked. */
static inline gmp_sched_stats sched_stats(void)
{
    gmp_sched_stats s;
    CHECK_OK(gmp_stats(&s, NULL, 0));
    return s;
}

/* True when no goroutine runs or is runnable: every P idle, the global run queue empty,
 * and both still so after a millisecond with no goroutine scheduled in between (an idle
 * P's local queue is always empty). Every goroutine alive then is blocked: parked on a
 * channel, lock, WaitGroup or timer, or inside a blocking call. Foreign threads only. */
static inline int all_goroutines_blocked(void)
{
    gmp_sched_stats a, b;
    if (gmp_stats(&a, NULL, 0) < 0 || a.idleprocs != a.gomaxprocs || a.runqueue != 0)
        return 0;
    sleep_ms(1);
    if (gmp_stats(&b, NULL, 0) < 0)
        return 0;
    return b.idleprocs == b.gomaxprocs && b.runqueue == 0 && b.schedticks == a.schedticks;
}

/* Waits (at most 10 s) until exactly `n` goroutines are alive and all of them are
 * blocked (see all_goroutines_blocked). */
#define WAIT_BLOCKED(n) WAIT_UNTIL(gmp_num_goroutine() == (n) && all_goroutines_blocked(), 10.0)
#endif /* CHECK_NO_GMP */

#endif
