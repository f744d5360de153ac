/*
 * flight.c -- the flight recorder (gmp_trace_flight_start / _write / _latency / _stop,
 * GMP_TRACE=flight) keeps the newest events and writes them when asked.
 *
 * Modes (argv[1]):
 *   api      The API's errors (-EBADF, -EINVAL without a recorder, -EBUSY beside a
 *            trace or a second recorder). Then, in a 1 MiB recorder, goroutines running
 *            `early` make far more than 1 MiB of events, then labelled goroutines running
 *            `late` make some; the window written to flight-api.trace (argv[2]) must
 *            hold `late`'s runs with their labels and none of `early`'s (tests/c_debug.rs
 *            checks the file). Writing twice works, and the recorder stops.
 *   sigquit  Under GMP_TRACE=flight: goroutines ping-pong, then SIGQUIT: the dump, and
 *            the window written to GMP_TRACE_DIR.
 *   latency  Under GMP_TRACE=flight and GMP_TRACE_LATENCY, on one P: a goroutine burns
 *            the CPU while another is runnable (it waits until preemption), and the
 *            recorder writes a window to GMP_TRACE_DIR; the test waits for the file.
 */
#include "check.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gmp-sched/gmp.h>

static gmp_wg wg;

/* Channel ping-pong between two goroutines running `fn`: n round trips. */
struct pair {
    gmp_chan *ping, *pong;
    long n;
};

static void bounce(struct pair *p, int first)
{
    for (long i = 0; i < p->n; i++) {
        long v = i;
        if (first) {
            CHECK_OK(gmp_chan_send(p->ping, &v));
            CHECK_OK(gmp_chan_recv(p->pong, &v));
        } else {
            CHECK_OK(gmp_chan_recv(p->ping, &v));
            CHECK_OK(gmp_chan_send(p->pong, &v));
        }
    }
}

static struct pair early_pair, late_pair;

__attribute__((noinline)) void early(void *arg)
{
    bounce(&early_pair, arg != NULL);
    gmp_wg_done(&wg);
}

__attribute__((noinline)) void late(void *arg)
{
    CHECK_OK(gmp_labels_set("phase", "late"));
    bounce(&late_pair, arg != NULL);
    gmp_wg_done(&wg);
}

static void run_pair(struct pair *p, void (*fn)(void *), long n)
{
    p->n = n;
    CHECK_OK(gmp_chan_make(&p->ping, sizeof(long), 0));
    CHECK_OK(gmp_chan_make(&p->pong, sizeof(long), 0));
    CHECK_OK(gmp_wg_add(&wg, 2));
    CHECK(gmp_go(fn, (void *)1) > 0);
    CHECK(gmp_go(fn, NULL) > 0);
    gmp_wg_wait(&wg);
}

static int count_files(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            n++;
    closedir(d);
    return n;
}

__attribute__((noinline)) void hog(void *arg)
{
    (void)arg;
    double t0 = now_sec();
    volatile unsigned long x = 0;
    while (now_sec() - t0 < 0.1)
        x++;
    gmp_wg_done(&wg);
}

__attribute__((noinline)) void waiter(void *arg)
{
    (void)arg;
    gmp_wg_done(&wg);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "api";
    /* SIGQUIT's default action, which the runtime replaces with its dump, whatever the
     * program was started with: a shell's background job (and so `cargo test &`) starts
     * with SIGQUIT ignored, and the runtime keeps an inherited SIG_IGN. */
    CHECK(signal(SIGQUIT, SIG_DFL) != SIG_ERR);
    if (strcmp(mode, "api") == 0) {
        const char *path = argc > 2 ? argv[2] : "flight-api.trace";
        CHECK_EQ(gmp_trace_flight_write(-1), -EBADF);
        CHECK_EQ(gmp_trace_flight_write(1), -EINVAL);
        CHECK_EQ(gmp_trace_flight_stop(), -EINVAL);
        CHECK_EQ(gmp_trace_flight_latency(-1), -EINVAL);
        CHECK_OK(gmp_trace_flight_start(60, 1));
        CHECK_EQ(gmp_trace_flight_start(60, 1), -EBUSY);
        CHECK_EQ(gmp_trace_start("flight-never.trace"), -EBUSY);
        /* 200,000 round trips: about 1.2 million events, several MiB. */
        run_pair(&early_pair, early, 200000);
        run_pair(&late_pair, late, 2000);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        CHECK(fd >= 0);
        CHECK_OK(gmp_trace_flight_write(fd));
        close(fd);
        /* Again, into /dev/null: the recorder keeps running. */
        fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
        CHECK(fd >= 0);
        CHECK_OK(gmp_trace_flight_write(fd));
        close(fd);
        CHECK_OK(gmp_trace_flight_stop());
        CHECK_EQ(gmp_trace_flight_stop(), -EINVAL);
        CHECK_EQ(gmp_trace_flight_write(1), -EINVAL);
        /* A streaming trace may start now. */
        CHECK_OK(gmp_trace_start("flight-after.trace"));
        CHECK_OK(gmp_trace_stop());
        printf("flight api: ok\n");
        return 0;
    }
    if (strcmp(mode, "sigquit") == 0) {
        run_pair(&late_pair, late, 5000);
        fflush(stdout);
        raise(SIGQUIT);
        fprintf(stderr, "SIGQUIT returned\n");
        return 1;
    }
    if (strcmp(mode, "latency") == 0) {
        const char *dir = getenv("GMP_TRACE_DIR");
        CHECK(dir != NULL);
        for (int round = 0; round < 50; round++) {
            CHECK_OK(gmp_wg_add(&wg, 2));
            CHECK(gmp_go(hog, NULL) > 0);
            CHECK(gmp_go(waiter, NULL) > 0);
            gmp_wg_wait(&wg);
            /* The recorder's thread looks every few milliseconds. */
            for (int i = 0; i < 100 && count_files(dir, "gmp-flight-") == 0; i++)
                usleep(10000);
            if (count_files(dir, "gmp-flight-") > 0) {
                /* Let it finish writing. */
                usleep(200000);
                printf("flight latency: written after %d rounds\n", round + 1);
                return 0;
            }
        }
        fprintf(stderr, "no window was written\n");
        return 1;
    }
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
