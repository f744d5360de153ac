/*
 * metrics.c -- gmp_metrics and the Prometheus writer tell the truth.
 *
 * With "window" and no GMP_DEBUG: the first read of the metrics starts the timing in
 * windows, and a ping-pong gets waits timed. Otherwise run with GOMAXPROCS=1 and
 * GMP_DEBUG=schedlatency=1 (every wait timed, always):
 *  1. The API: sizing with (NULL, 0), -EINVAL for NULL with a size, the bucket bounds,
 *     -EBADF for a bad fd.
 *  2. Goroutines by state: goroutines parked on a channel are counted as waiting and as
 *     live, their starts as created.
 *  3. The scheduling latency histogram: a goroutine made runnable while the goroutine
 *     that woke it computes for 5 ms without yielding waits about 5 ms before it runs.
 *     Such waits must land in the buckets above 4 ms, and quick hand-offs between two
 *     goroutines must add a sample each.
 *  4. The Prometheus text: every metric has HELP and TYPE lines, names are legal, a
 *     histogram's buckets are cumulative and its +Inf bucket is its count.
 */
#include "check.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gmp-sched/gmp.h>

#define PARKED 50
#define DELAYS 20
#define DELAY_NS (5 * 1000 * 1000LL)

static struct gmp_metric *read_all(int *n)
{
    int total = gmp_metrics(NULL, 0);
    CHECK(total > 0);
    struct gmp_metric *m = calloc((size_t)total, sizeof *m);
    CHECK(m != NULL);
    CHECK_EQ(gmp_metrics(m, (size_t)total), total);
    *n = total;
    return m;
}

static const struct gmp_metric *find(const struct gmp_metric *m, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(m[i].name, name) == 0)
            return &m[i];
    fprintf(stderr, "metrics: no metric %s\n", name);
    exit(1);
}

static uint64_t value_of(const char *name)
{
    int n;
    struct gmp_metric *m = read_all(&n);
    uint64_t v = find(m, n, name)->value;
    free(m);
    return v;
}

/* Samples of the latency histogram at or above bucket `from`. */
static uint64_t latency_from(int from)
{
    int n;
    struct gmp_metric *m = read_all(&n);
    const struct gmp_metric *h = find(m, n, "/sched/latencies:seconds");
    CHECK_EQ(h->kind, GMP_METRIC_HISTOGRAM);
    uint64_t s = 0, all = 0;
    for (int i = 0; i < GMP_METRIC_BUCKETS; i++) {
        all += h->buckets[i];
        if (i >= from)
            s += h->buckets[i];
    }
    CHECK_EQ(all, h->value);
    free(m);
    return s;
}

static gmp_chan *park_ch;
static gmp_wg parked_done = GMP_WG_INIT;

static void parker(void *arg)
{
    (void)arg;
    CHECK_EQ(gmp_chan_recv(park_ch, NULL), -EPIPE);
    CHECK_EQ(gmp_wg_done(&parked_done), 0);
}

static gmp_chan *wake_ch;
static gmp_wg delay_done = GMP_WG_INIT;
static volatile uint64_t sink;

static void sleeper_side(void *arg)
{
    (void)arg;
    for (int i = 0; i < DELAYS; i++)
        CHECK_EQ(gmp_chan_recv(wake_ch, NULL), 0);
    CHECK_EQ(gmp_wg_done(&delay_done), 0);
}

/* Wakes the receiver, then keeps the only processor for DELAY_NS without a safe point
 * (no call into the library: the receiver waits runnable meanwhile). */
static void hog_side(void *arg)
{
    (void)arg;
    int v = 1;
    for (int i = 0; i < DELAYS; i++) {
        CHECK_EQ(gmp_chan_send(wake_ch, &v), 0);
        int64_t until = gmp_now() + DELAY_NS;
        uint64_t h = sink;
        for (unsigned k = 0;; k++) {
            h = h * 6364136223846793005ULL + 1;
            if ((k & 1023) == 0 && gmp_now() >= until)
                break;
        }
        sink = h;
        CHECK_EQ(gmp_yield(), 0);
    }
    CHECK_EQ(gmp_wg_done(&delay_done), 0);
}

static void quick_side(void *arg)
{
    gmp_chan *c = arg;
    int v = 0;
    for (int i = 0; i < 500; i++)
        CHECK_EQ(gmp_chan_send(c, &v), 0);
    CHECK_EQ(gmp_wg_done(&delay_done), 0);
}

static void quick_recv(void *arg)
{
    gmp_chan *c = arg;
    for (int i = 0; i < 500; i++)
        CHECK_EQ(gmp_chan_recv(c, NULL), 0);
    CHECK_EQ(gmp_wg_done(&delay_done), 0);
}

/* Runs `first` and `second` as goroutines and waits until both are done. */
static void run_pair(gmp_func first, gmp_func second, void *arg)
{
    CHECK_EQ(gmp_wg_add(&delay_done, 2), 0);
    CHECK(gmp_go(first, arg) > 0);
    CHECK(gmp_go(second, arg) > 0);
    CHECK_EQ(gmp_wg_wait(&delay_done), 0);
}

static int legal_name(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
                 (i > 0 && c >= '0' && c <= '9');
        if (!ok)
            return 0;
    }
    return n > 0;
}

static void check_prometheus(void)
{
    int fd = memfd_create("metrics", MFD_CLOEXEC);
    CHECK(fd >= 0);
    CHECK_EQ(gmp_metrics_write_prometheus(fd), 0);
    off_t len = lseek(fd, 0, SEEK_END);
    CHECK(len > 0);
    char *text = malloc((size_t)len + 1);
    CHECK(text != NULL);
    CHECK_EQ(pread(fd, text, (size_t)len, 0), len);
    text[len] = '\0';
    close(fd);

    int n;
    struct gmp_metric *m = read_all(&n);
    int types = 0, samples = 0, hist_buckets = 0;
    unsigned long long last_cum = 0, inf = 0, count = 0;
    for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        if (strncmp(line, "# HELP ", 7) == 0)
            continue;
        if (strncmp(line, "# TYPE ", 7) == 0) {
            types++;
            CHECK(strstr(line, " counter") || strstr(line, " gauge") || strstr(line, " histogram"));
            last_cum = 0;
            continue;
        }
        size_t name_len = strcspn(line, "{ ");
        CHECK(legal_name(line, name_len));
        CHECK_EQ(strncmp(line, "gmp_", 4), 0);
        samples++;
        const char *val = strrchr(line, ' ');
        CHECK(val != NULL);
        unsigned long long v = strtoull(val + 1, NULL, 10);
        if (strstr(line, "_bucket{le=") != NULL) {
            hist_buckets++;
            CHECK(v >= last_cum); /* cumulative */
            last_cum = v;
            if (strstr(line, "le=\"+Inf\"") != NULL)
                inf = v;
        } else if (strncmp(line, "gmp_sched_latencies_seconds_count ", 34) == 0) {
            count = v;
        }
    }
    CHECK_EQ(types, n);
    CHECK_EQ(hist_buckets, GMP_METRIC_BUCKETS);
    CHECK_EQ(inf, count);
    CHECK(count > 0);
    CHECK(samples >= n);
    free(m);
    free(text);
}

static atomic_int pp_stop;

static void pp_side(void *arg)
{
    gmp_chan *c = arg;
    int v = 0;
    while (!atomic_load(&pp_stop))
        if (gmp_chan_send(c, &v) != 0)
            break;
    CHECK_EQ(gmp_wg_done(&delay_done), 0);
}

static void pp_recv(void *arg)
{
    gmp_chan *c = arg;
    while (gmp_chan_recv(c, NULL) == 0) {
    }
    CHECK_EQ(gmp_wg_done(&delay_done), 0);
}

/* Without GMP_DEBUG: the first read starts sysmon's timing windows (1 ms in every 100),
 * and a ping-pong of two goroutines gets waits timed within a second. */
static int window_mode(void)
{
    uint64_t before = latency_from(0);
    gmp_chan *c;
    CHECK_EQ(gmp_chan_make(&c, sizeof(int), 0), 0);
    CHECK_EQ(gmp_wg_add(&delay_done, 2), 0);
    CHECK(gmp_go(pp_recv, c) > 0);
    CHECK(gmp_go(pp_side, c) > 0);
    uint64_t now = before;
    for (int i = 0; i < 1000 && now == before; i++) {
        usleep(2000);
        now = latency_from(0);
    }
    atomic_store(&pp_stop, 1);
    CHECK_EQ(gmp_chan_close(c), 0);
    CHECK_EQ(gmp_wg_wait(&delay_done), 0);
    CHECK_EQ(gmp_chan_release(c), 0);
    printf("metrics: %llu waits timed in sysmon's windows\n", (unsigned long long)(now - before));
    CHECK(now > before);
    return 0;
}

int main(int argc, char **argv)
{
    alarm(60);
    if (argc > 1 && strcmp(argv[1], "window") == 0)
        return window_mode();
    /* 1. The API. */
    int n = gmp_metrics(NULL, 0);
    CHECK(n >= 10);
    CHECK_EQ(gmp_metrics(NULL, 1), -EINVAL);
    struct gmp_metric one;
    CHECK_EQ(gmp_metrics(&one, 1), n);
    CHECK(one.name != NULL && one.name[0] == '/');
    double b;
    CHECK_EQ(gmp_metric_bucket_bound(0, &b), 0);
    CHECK(b == 128e-9);
    CHECK_EQ(gmp_metric_bucket_bound(GMP_METRIC_BUCKETS - 1, &b), 0);
    CHECK(isinf(b));
    CHECK_EQ(gmp_metric_bucket_bound(GMP_METRIC_BUCKETS, &b), -EINVAL);
    CHECK_EQ(gmp_metric_bucket_bound(0, NULL), -EINVAL);
    CHECK_EQ(gmp_metrics_write_prometheus(-1), -EBADF);
    {
        struct gmp_metric *m = read_all(&n);
        for (int i = 0; i < n; i++) {
            CHECK(m[i].name != NULL && m[i].help != NULL && strchr(m[i].name, ':') != NULL);
            for (int j = 0; j < i; j++)
                CHECK(strcmp(m[i].name, m[j].name) != 0);
        }
        free(m);
    }

    /* 2. Goroutines by state. */
    uint64_t created0 = value_of("/sched/goroutines-created:goroutines");
    CHECK_EQ(gmp_chan_make(&park_ch, 0, 0), 0);
    CHECK_EQ(gmp_wg_add(&parked_done, PARKED), 0);
    for (int i = 0; i < PARKED; i++)
        CHECK(gmp_go(parker, NULL) > 0);
    while (value_of("/sched/goroutines/waiting:goroutines") < PARKED)
        usleep(1000);
    CHECK(value_of("/sched/goroutines:goroutines") >= PARKED);
    CHECK(value_of("/sched/goroutines-created:goroutines") >= created0 + PARKED);
    CHECK_EQ(value_of("/sched/gomaxprocs:threads"), 1);
    CHECK(value_of("/sched/threads/total:threads") >= 1);
    CHECK_EQ(gmp_chan_close(park_ch), 0);
    CHECK_EQ(gmp_wg_wait(&parked_done), 0);
    CHECK_EQ(gmp_chan_release(park_ch), 0);

    /* 3. The latency histogram. Bucket 15's bound is 2^22 ns, about 4.2 ms. */
    const int slow_bucket = 15;
    CHECK_EQ(gmp_metric_bucket_bound(slow_bucket - 1, &b), 0);
    CHECK(b < 4.2e-3 && b * 2 > 4.0e-3);
    uint64_t all0 = latency_from(0), slow0 = latency_from(slow_bucket);
    gmp_chan *quick;
    CHECK_EQ(gmp_chan_make(&quick, sizeof(int), 0), 0);
    run_pair(quick_recv, quick_side, quick);
    CHECK_EQ(gmp_chan_release(quick), 0);
    uint64_t all1 = latency_from(0);
    /* On one processor each hand-off readies one of the two. */
    CHECK(all1 >= all0 + 500);

    CHECK_EQ(gmp_chan_make(&wake_ch, sizeof(int), 0), 0);
    run_pair(sleeper_side, hog_side, NULL);
    CHECK_EQ(gmp_chan_release(wake_ch), 0);
    uint64_t slow1 = latency_from(slow_bucket);
    printf("metrics: %llu samples from quick hand-offs, %llu waits of 4 ms and more after %d "
           "delayed wakes\n",
           (unsigned long long)(all1 - all0), (unsigned long long)(slow1 - slow0), DELAYS);
    /* The first send may find the receiver not yet waiting (then it is the sender that
     * gets readied, and nobody waits behind the hog). */
    CHECK(slow1 - slow0 >= DELAYS - 1);

    /* 4. The Prometheus text. */
    check_prometheus();
    printf("metrics: %d metrics, Prometheus text well formed\n", n);
    return 0;
}
