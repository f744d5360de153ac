/*
 * cpuprof.c -- the CPU profile (gmp_cpuprofile_start, gmp_cpuprofile_stop,
 * GMP_CPUPROFILE) samples goroutines with their ids and labels.
 *
 *  api      The errors: -EBADF for a negative or closed fd, -EINVAL for a rate above
 *           10000 Hz and for a stop without a start, -EBUSY for a second start and while
 *           the program has a SIGPROF handler of its own (which stays installed).
 *  profile  FILE: at 100 Hz, a goroutine labelled role=hot spends ~900 ms of CPU in
 *           burn_hot while one labelled role=cold spends ~300 ms in burn_cold; the
 *           profile goes to FILE, and the process CPU time is printed as "cpu_ms N" for
 *           the driver (tests/c_prof.rs), which reads FILE with go tool pprof.
 *  env      With GMP_CPUPROFILE set: a goroutine spends ~400 ms in burn_hot, and the
 *           runtime writes the profile at exit.
 */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <gmp-sched/gmp.h>

static int64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static volatile uint64_t sink;

/* The loop is in each function itself (not a shared helper), so that the sampled PCs
 * are theirs. A goroutine that makes no gmp call stays on its thread (asynchronous
 * preemption resumes it there), so the thread's CPU clock is its own. */
__attribute__((noinline)) void burn_hot(int ms);
__attribute__((noinline)) void burn_hot(int ms)
{
    int64_t end = thread_cpu_ns() + (int64_t)ms * 1000000;
    uint64_t x = 0;
    while (thread_cpu_ns() < end)
        for (uint64_t i = 0; i < 200000; i++)
            x += i * i ^ (x >> 3);
    sink = x;
}

__attribute__((noinline)) void burn_cold(int ms);
__attribute__((noinline)) void burn_cold(int ms)
{
    int64_t end = thread_cpu_ns() + (int64_t)ms * 1000000;
    uint64_t x = 1;
    while (thread_cpu_ns() < end)
        for (uint64_t i = 0; i < 200000; i++)
            x += i * i ^ (x >> 5);
    sink = x;
}

static gmp_wg wg;

static void hot(void *arg)
{
    CHECK_OK(gmp_labels_set("role", "hot"));
    burn_hot((int)(intptr_t)arg);
    gmp_wg_done(&wg);
}

static void cold(void *arg)
{
    CHECK_OK(gmp_labels_set("role", "cold"));
    burn_cold((int)(intptr_t)arg);
    gmp_wg_done(&wg);
}

static void on_prof(int sig)
{
    (void)sig;
}

static void api(void)
{
    CHECK_EQ(gmp_cpuprofile_stop(), -EINVAL);
    CHECK_EQ(gmp_cpuprofile_start(-1, 100), -EBADF);
    CHECK_EQ(gmp_cpuprofile_start(1000, 100), -EBADF);
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    CHECK_EQ(gmp_cpuprofile_start(fd, 10001), -EINVAL);

    /* A SIGPROF handler of the program's own: refused, and left in place. */
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_handler = on_prof;
    sigemptyset(&act.sa_mask);
    CHECK_OK(sigaction(SIGPROF, &act, &old));
    CHECK_EQ(gmp_cpuprofile_start(fd, 100), -EBUSY);
    struct sigaction now;
    CHECK_OK(sigaction(SIGPROF, NULL, &now));
    CHECK(now.sa_handler == on_prof);
    CHECK_OK(sigaction(SIGPROF, &old, NULL));

    CHECK_OK(gmp_cpuprofile_start(fd, 0));
    CHECK_EQ(gmp_cpuprofile_start(fd, 100), -EBUSY);
    /* The runtime keeps its own duplicate: closing ours is fine. */
    CHECK_OK(close(fd));
    CHECK_OK(gmp_cpuprofile_stop());
    CHECK_EQ(gmp_cpuprofile_stop(), -EINVAL);
    /* Again, after a stop. */
    fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    CHECK_OK(gmp_cpuprofile_start(fd, 250));
    CHECK_OK(gmp_cpuprofile_stop());
    CHECK_OK(close(fd));
    printf("api ok\n");
}

static int64_t process_cpu_ms(void)
{
    struct rusage ru;
    CHECK_OK(getrusage(RUSAGE_SELF, &ru));
    return (int64_t)ru.ru_utime.tv_sec * 1000 + ru.ru_utime.tv_usec / 1000 +
           (int64_t)ru.ru_stime.tv_sec * 1000 + ru.ru_stime.tv_usec / 1000;
}

static void profile(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    int64_t cpu0 = process_cpu_ms();
    CHECK_OK(gmp_cpuprofile_start(fd, 100));
    CHECK_OK(gmp_wg_add(&wg, 2));
    CHECK(gmp_go(hot, (void *)(intptr_t)900) > 0);
    CHECK(gmp_go(cold, (void *)(intptr_t)300) > 0);
    gmp_wg_wait(&wg);
    int64_t cpu = process_cpu_ms() - cpu0;
    CHECK_OK(gmp_cpuprofile_stop());
    CHECK_OK(close(fd));
    printf("cpu_ms %lld\n", (long long)cpu);
}

static void env(void)
{
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK(gmp_go(hot, (void *)(intptr_t)400) > 0);
    gmp_wg_wait(&wg);
    printf("env ok\n");
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "api") == 0)
        api();
    else if (argc >= 3 && strcmp(argv[1], "profile") == 0)
        profile(argv[2]);
    else if (argc >= 2 && strcmp(argv[1], "env") == 0)
        env();
    else {
        fprintf(stderr, "usage: cpuprof api | profile FILE | env\n");
        return 2;
    }
    fflush(stdout);
    return 0;
}
