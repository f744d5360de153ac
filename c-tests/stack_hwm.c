/*
 * stack_hwm.c -- stack high-water marks per start function tell the truth.
 *
 * Modes (argv[1]):
 *  every    GMP_DEBUG=stackhwm=1: every goroutine is measured.
 *    1. The API: sizing with (NULL, 0), -EINVAL for NULL with a size.
 *    2. Goroutines that touch 96 KiB of their stack get a mark of at least 96 KiB and
 *       below their stack's size; goroutines that touch nothing but their first frames
 *       get at most 16 KiB; goroutines on 64 KiB stacks that touch 40 KiB report both.
 *       Each start function counts exactly the goroutines it started, by name (the test
 *       is linked with -rdynamic), and the deepest comes first.
 *    3. The marks do not carry over: shallow goroutines started after deep ones, on the
 *       deep ones' recycled stacks, still get a shallow mark.
 *    4. gmp_stats' totals agree, and the dump lists the marks.
 *  default  no GMP_DEBUG: of 6,000 starts, some are measured (the first on each thread,
 *           then at most one every 4 ms), far from all; a goroutine started every 200 ms
 *           is measured each time.
 *  off      GMP_DEBUG=stackhwm=off: none is.
 */
#include "check.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gmp-sched/gmp.h>

#define KIB 1024u
#define DEEP_BYTES (96 * KIB)

static gmp_wg wg;

/* Touches DEEP_BYTES of the stack (every page of it, deepest last). */
__attribute__((noinline)) void deep(void *arg)
{
    (void)arg;
    volatile unsigned char buf[DEEP_BYTES];
    for (size_t i = 0; i < sizeof buf; i += 512)
        buf[i] = (unsigned char)i;
    buf[0] = 1;
    gmp_wg_done(&wg);
}

__attribute__((noinline)) void shallow(void *arg)
{
    (void)arg;
    gmp_wg_done(&wg);
}

/* Touches 40 KiB, on 64 KiB stacks. */
__attribute__((noinline)) void deep_small(void *arg)
{
    (void)arg;
    volatile unsigned char buf[40 * KIB];
    for (size_t i = 0; i < sizeof buf; i += 512)
        buf[i] = (unsigned char)i;
    buf[0] = 1;
    gmp_wg_done(&wg);
}

static uint64_t samples(void)
{
    struct gmp_sched_stats st;
    CHECK(gmp_stats(&st, NULL, 0) >= 0);
    return st.stack_samples;
}

/* Waits until `want` goroutines have been measured (a goroutine is measured after its
 * function returned: after the WaitGroup let the caller go). */
static void wait_samples(uint64_t want)
{
    for (int i = 0; samples() < want; i++) {
        CHECK(i < 10000);
        gmp_sleep(1000 * 1000);
    }
}

static void start(gmp_func f, int n, size_t stack)
{
    struct gmp_attr a = {0};
    a.stack_size = stack;
    gmp_wg_add(&wg, n);
    for (int i = 0; i < n; i++)
        CHECK(gmp_go_attr(f, NULL, &a) > 0);
    gmp_wg_wait(&wg);
}

static const struct gmp_stack_mark *find(const struct gmp_stack_mark *m, int n, gmp_func f)
{
    for (int i = 0; i < n; i++)
        if (m[i].func == f)
            return &m[i];
    fprintf(stderr, "stack_hwm: no mark for a start function\n");
    exit(1);
}

/* Every mark. A start function's first mark may come between the sizing call and the
 * read (goroutines are measured as they end, on their threads): the read returns the
 * larger count, and is made again when the marks no longer fit. */
static struct gmp_stack_mark *read_all(int *n)
{
    for (;;) {
        int total = gmp_stack_usage(NULL, 0);
        CHECK(total >= 0);
        size_t room = (size_t)total + 1;
        struct gmp_stack_mark *m = calloc(room, sizeof *m);
        CHECK(m != NULL);
        int got = gmp_stack_usage(m, room);
        CHECK(got >= total);
        if ((size_t)got <= room) {
            *n = got;
            return m;
        }
        free(m);
    }
}

/* How many of `f`'s goroutines have been measured (0: none yet). */
static uint64_t samples_of(gmp_func f)
{
    int n;
    struct gmp_stack_mark *m = read_all(&n);
    uint64_t got = 0;
    for (int i = 0; i < n; i++)
        if (m[i].func == f)
            got = m[i].samples;
    free(m);
    return got;
}

static int every(void)
{
    /* 1. The API. */
    CHECK_EQ(gmp_stack_usage(NULL, 1), -EINVAL);
    CHECK_EQ(gmp_stack_usage(NULL, 0), 0);

    /* 2. Deep, shallow, and deep on small stacks. */
    start(deep, 10, 0);
    start(shallow, 10, 0);
    start(deep_small, 5, 64 * KIB);
    wait_samples(25);
    int n;
    struct gmp_stack_mark *m = read_all(&n);
    CHECK_EQ(n, 3);
    for (int i = 1; i < n; i++)
        CHECK(m[i - 1].high_water >= m[i].high_water);
    const struct gmp_stack_mark *d = find(m, n, deep);
    const struct gmp_stack_mark *s = find(m, n, shallow);
    const struct gmp_stack_mark *ds = find(m, n, deep_small);
    CHECK_EQ(d->samples, 10);
    CHECK_EQ(s->samples, 10);
    CHECK_EQ(ds->samples, 5);
    CHECK_EQ(d->stack_size, 256 * KIB);
    CHECK_EQ(ds->stack_size, 64 * KIB);
    CHECK(d->high_water >= DEEP_BYTES && d->high_water < d->stack_size);
    CHECK(ds->high_water >= 40 * KIB && ds->high_water < ds->stack_size);
    CHECK(s->high_water > 0 && s->high_water <= 16 * KIB);
    long page = sysconf(_SC_PAGESIZE);
    CHECK(d->high_water % (size_t)page == 0 && s->high_water % (size_t)page == 0);
    CHECK(d->name != NULL && strcmp(d->name, "deep") == 0);
    CHECK(s->name != NULL && strcmp(s->name, "shallow") == 0);
    size_t shallow_mark = s->high_water;
    free(m);

    /* 3. Shallow goroutines on recycled deep stacks stay shallow. */
    start(deep, 20, 0);
    start(shallow, 20, 0);
    wait_samples(65);
    m = read_all(&n);
    s = find(m, n, shallow);
    CHECK_EQ(s->samples, 30);
    CHECK_EQ(s->high_water, shallow_mark);

    /* 4. gmp_stats and the dump. */
    struct gmp_sched_stats st;
    CHECK(gmp_stats(&st, NULL, 0) >= 0);
    CHECK_EQ(st.stack_samples, 65);
    CHECK_EQ(st.stack_high_water, m[0].high_water);
    free(m);
    m = NULL;
    int fd = memfd_create("dump", 0);
    CHECK(fd >= 0);
    CHECK_EQ(gmp_dump(fd), 0);
    off_t len = lseek(fd, 0, SEEK_CUR);
    CHECK(len > 0);
    char *text = calloc((size_t)len + 1, 1);
    CHECK(text != NULL);
    CHECK_EQ(pread(fd, text, (size_t)len, 0), len);
    CHECK(strstr(text, "stack high-water marks by start function (1 goroutine start in 1 "
                       "measured):\n") != NULL);
    CHECK(strstr(text, "  deep: ") != NULL);
    CHECK(strstr(text, "  shallow: ") != NULL);
    CHECK(strstr(text, " KiB of 256 KiB (30 goroutines)\n") != NULL);
    free(text);
    close(fd);
    m = read_all(&n);
    printf("stack_hwm: deep %zu KiB, deep on 64 KiB %zu KiB, shallow %zu KiB\n",
           find(m, n, deep)->high_water / KIB, find(m, n, deep_small)->high_water / KIB,
           shallow_mark / KIB);
    free(m);
    return 0;
}

static int sampled(int on)
{
    for (int i = 0; i < 60; i++)
        start(shallow, 100, 0);
    if (on) {
        wait_samples(1);
        uint64_t got = samples();
        CHECK(got < 600);
        int n;
        struct gmp_stack_mark *m = read_all(&n);
        CHECK_EQ(n, 1);
        CHECK(m[0].func == shallow && m[0].samples == got);
        free(m);
        printf("stack_hwm: %llu of 6000 starts measured\n", (unsigned long long)got);
        /* A start function used now and then is measured every time. Counted on its own
         * mark: a shallow goroutine's measurement may still land after the count above
         * (it is made after the goroutine's function returned). */
        for (uint64_t i = 0; i < 3; i++) {
            /* sysmon's clock, which the period is counted on, lags by up to its 10 ms
             * sleep, more when the machine is busy (the test suite runs in parallel). */
            gmp_sleep(200 * 1000 * 1000);
            start(deep, 1, 0);
            for (int k = 0; samples_of(deep) < i + 1; k++) {
                CHECK(k < 10000);
                gmp_sleep(1000 * 1000);
            }
        }
        m = read_all(&n);
        CHECK_EQ(n, 2);
        CHECK(m[0].func == deep && m[0].samples == 3 && m[0].high_water >= DEEP_BYTES);
        free(m);
    } else {
        gmp_sleep(20 * 1000 * 1000);
        CHECK_EQ(samples(), 0);
        CHECK_EQ(gmp_stack_usage(NULL, 0), 0);
    }
    return 0;
}

int main(int argc, char **argv)
{
    alarm(60);
    CHECK(argc > 1);
    if (strcmp(argv[1], "every") == 0)
        return every();
    if (strcmp(argv[1], "default") == 0)
        return sampled(1);
    if (strcmp(argv[1], "off") == 0)
        return sampled(0);
    return 2;
}
