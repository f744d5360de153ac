/*
 * bench.h -- shared helpers for the C side of the libgmp benchmarks.
 *
 * Each bench/c/<name>.c includes this header (the only file shared by the C
 * programs); bench/go/internal/bench is its Go mirror. The two must print the
 * same RESULT line:
 *
 *   RESULT workload=<w> impl=c procs=<P> n=<ops> ns_per_op=<f> wall_ms=<f> maxrss_kib=<k> [key=value ...]
 *
 * maxrss_kib is the peak RSS (VmHWM), see bench_maxrss_kib; bench_rss_kib is the
 * current RSS (VmRSS).
 *
 * Command line: "-name value" or "-name=value" (one or two leading dashes), the
 * same spelling Go's flag package accepts. Unknown flags are an error (exit 2).
 * "-procs P" (P > 0) sets GOMAXPROCS with gmp_maxprocs(P) before timing starts;
 * that first call also starts the runtime, so start-up is never timed.
 *
 * "-shape S" (programs that list BENCH_SHAPE_FLAG) chooses who drives the workload, see
 * bench_drive: 0 (the default) a root goroutine, as Go's main is one; 1 the C main
 * thread itself, a foreign thread, as C programs are usually written. With -shape 1 the
 * RESULT line (and a FAIL message) carries the extra key shape=main.
 */
#ifndef GMP_BENCH_H
#define GMP_BENCH_H

#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <gmp-sched/gmp.h>

/* An installed copy of another version could answer <gmp-sched/gmp.h>: build with -I include. */
#if !defined(GMP_SCHED_H) || defined(__GNU_MP__)
#error "this is not libgmp's include/gmp-sched/gmp.h: compile with -I include"
#endif

/* One integer flag: its name (without dashes), its value (holds the default). */
typedef struct bench_flag {
    const char *name;
    int64_t *value;
    const char *help;
} bench_flag;

static inline void bench_usage(const char *prog, const bench_flag *flags, size_t nflags)
{
    fprintf(stderr, "usage: %s", prog);
    for (size_t i = 0; i < nflags; i++)
        fprintf(stderr, " [-%s N]", flags[i].name);
    fprintf(stderr, "\n");
    for (size_t i = 0; i < nflags; i++)
        fprintf(stderr, "  -%s N\t%s (default %" PRId64 ")\n", flags[i].name, flags[i].help,
                *flags[i].value);
}

/* Parses argv into flags; exits 2 on a malformed or unknown flag. */
static inline void bench_parse(int argc, char **argv, const bench_flag *flags, size_t nflags)
{
    for (int i = 1; i < argc; i++) {
        const int at = i; /* the flag's index (i moves on to a separate value) */
        const char *a = argv[i];
        if (a[0] != '-')
            goto bad;
        a++;
        if (a[0] == '-')
            a++;
        if (strcmp(a, "h") == 0 || strcmp(a, "help") == 0) {
            bench_usage(argv[0], flags, nflags);
            exit(0);
        }
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        const bench_flag *f = NULL;
        for (size_t j = 0; j < nflags; j++)
            if (strlen(flags[j].name) == len && strncmp(flags[j].name, a, len) == 0)
                f = &flags[j];
        if (f == NULL || val == NULL || val[0] == '\0')
            goto bad;
        char *end;
        long long v = strtoll(val, &end, 10);
        if (*end != '\0')
            goto bad;
        *f->value = (int64_t)v;
        continue;
    bad:
        fprintf(stderr, "%s: bad argument '%s'\n", argv[0], argv[at]);
        bench_usage(argv[0], flags, nflags);
        exit(2);
    }
}

/* Who drives the workload (-shape): see bench_drive. */
enum { BENCH_SHAPE_ROOT = 0, BENCH_SHAPE_MAIN = 1 };
static int64_t bench_shape = BENCH_SHAPE_ROOT;
#define BENCH_SHAPE_FLAG                                                                   \
    {"shape", &bench_shape,                                                                \
     "who drives the workload: 0 a root goroutine (Go's main), 1 the C main thread"}

/* The RESULT / FAIL key of the shape: "" for the root goroutine, " shape=main". */
static inline const char *bench_shape_key(void)
{
    return bench_shape == BENCH_SHAPE_MAIN ? " shape=main" : "";
}

/* Prints "FAIL <workload>: <message>" to stderr and exits 1. */
_Noreturn static inline void bench_fail(const char *workload, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "FAIL %s impl=c%s: ", workload, bench_shape_key());
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

/* Applies -procs (when > 0) and returns the GOMAXPROCS now in effect. Always calls
 * into the library, which starts the runtime before anything is timed. */
/* One goroutine per P, each sleeping 1 ms: the runtime's threads exist before the clock
 * starts, as Go's do when its main begins (runtime start-up is not part of any
 * workload). */
static gmp_wg bench_warm_wg = GMP_WG_INIT;
static void bench_warm_one(void *arg)
{
    (void)arg;
    gmp_sleep(1000000);
    gmp_wg_done(&bench_warm_wg);
}
static inline void bench_warm_up(int procs)
{
    gmp_wg_add(&bench_warm_wg, procs);
    for (int i = 0; i < procs; i++)
        if (gmp_go(bench_warm_one, NULL) <= 0)
            gmp_wg_done(&bench_warm_wg);
    gmp_wg_wait(&bench_warm_wg);
}

static inline int bench_setup_procs(const char *workload, int64_t procs)
{
    if (bench_shape != BENCH_SHAPE_ROOT && bench_shape != BENCH_SHAPE_MAIN)
        bench_fail(workload, "-shape %" PRId64 " out of range (0 or 1)", bench_shape);
    if (procs > 0) {
        int prev = gmp_maxprocs((int)procs);
        if (prev < 0)
            bench_fail(workload, "gmp_maxprocs(%" PRId64 ") = %d", procs, prev);
    }
    int now = gmp_maxprocs(0);
    if (now <= 0)
        bench_fail(workload, "gmp_maxprocs(0) = %d", now);
    if (procs > 0 && now != procs)
        bench_fail(workload, "asked for %" PRId64 " procs, runtime has %d", procs, now);
    bench_warm_up(now);
    return now;
}

/* Runs driver(arg), the part of the program that Go's main goroutine runs, in the shape
 * -shape chose, and returns when it has returned:
 *  - BENCH_SHAPE_ROOT: in a root goroutine, while the C main thread waits for it on a
 *    WaitGroup (the C main thread is a foreign thread that holds no P; Go's main is a
 *    goroutine, so this is the same program as Go's);
 *  - BENCH_SHAPE_MAIN: on the C main thread itself, which then spawns, sends, receives
 *    and waits as a foreign thread (no P: it blocks on a futex where a goroutine parks).
 * The driver must not call bench_fail (exit from inside a goroutine): it records what
 * went wrong and main checks after bench_drive. */
static gmp_wg bench_root_done = GMP_WG_INIT;
static struct {
    void (*fn)(void *);
    void *arg;
} bench_root_call;
static inline void bench_root(void *unused)
{
    (void)unused;
    bench_root_call.fn(bench_root_call.arg);
    gmp_wg_done(&bench_root_done);
}
static inline void bench_drive(const char *workload, void (*driver)(void *), void *arg)
{
    if (bench_shape == BENCH_SHAPE_MAIN) {
        driver(arg);
        return;
    }
    bench_root_call.fn = driver;
    bench_root_call.arg = arg;
    gmp_wg_add(&bench_root_done, 1);
    int64_t id = gmp_go(bench_root, NULL);
    if (id <= 0)
        bench_fail(workload, "gmp_go(root) = %" PRId64, id);
    int rc = gmp_wg_wait(&bench_root_done);
    if (rc < 0)
        bench_fail(workload, "gmp_wg_wait = %d", rc);
}

static inline int64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The "<field>: <n> kB" line of /proc/self/status, in KiB; -1 if absent. */
static inline long bench_status_kib(const char *field)
{
    long kib = -1;
    size_t len = strlen(field);
    FILE *f = fopen("/proc/self/status", "r");
    if (f != NULL) {
        char line[256];
        while (fgets(line, sizeof line, f) != NULL)
            if (strncmp(line, field, len) == 0 && line[len] == ':' &&
                sscanf(line + len + 1, " %ld kB", &kib) == 1)
                break;
        fclose(f);
    }
    return kib;
}

/* Peak RSS in KiB: VmHWM from /proc/self/status. Not getrusage's ru_maxrss, which
 * Linux carries across execve: a child started by a big parent (the Python runner
 * starts it with vfork) would report the parent's peak. getrusage only as fallback. */
static inline long bench_maxrss_kib(void)
{
    long kib = bench_status_kib("VmHWM");
    if (kib < 0) {
        struct rusage ru;
        if (getrusage(RUSAGE_SELF, &ru) == 0)
            kib = ru.ru_maxrss;
    }
    return kib;
}

/* Current RSS in KiB: VmRSS from /proc/self/status (-1 if unavailable). */
static inline long bench_rss_kib(void)
{
    return bench_status_kib("VmRSS");
}

/* Prints the RESULT line; extra is "" or " key=value ..." (leading space). With -shape 1
 * the line ends with shape=main. */
static inline void bench_result(const char *workload, int procs, int64_t n, int64_t wall_ns,
                         const char *extra)
{
    printf("RESULT workload=%s impl=c procs=%d n=%" PRId64 " ns_per_op=%.3f wall_ms=%.3f "
           "maxrss_kib=%ld%s%s\n",
           workload, procs, n, (double)wall_ns / (double)n, (double)wall_ns / 1e6,
           bench_maxrss_kib(), extra, bench_shape_key());
    fflush(stdout);
}

#ifdef BENCH_TCP
/* Helpers of the TCP workloads (tcp_rtt, tcp_echo). */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

/* The "Threads:" line of /proc/self/status (-1 if absent). */
static inline int os_threads(void)
{
    int t = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (f != NULL) {
        char line[256];
        while (fgets(line, sizeof line, f) != NULL)
            if (sscanf(line, "Threads: %d", &t) == 1)
                break;
        fclose(f);
    }
    return t;
}

/* Soft RLIMIT_NOFILE up to the hard one (Go raises it itself at start-up). */
static inline void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static inline void set_nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Reads exactly len bytes (io.ReadFull): len, or the failed call's -errno / 0 at EOF. */
static inline int64_t read_full(int fd, char *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        int64_t r = gmp_read(fd, buf + got, len - got);
        if (r <= 0)
            return r;
        got += (size_t)r;
    }
    return (int64_t)got;
}
#endif /* BENCH_TCP */

#endif /* GMP_BENCH_H */
