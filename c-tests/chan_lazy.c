/*
 * chan_lazy.c -- a large channel buffer costs nothing until it is used.
 *
 * Two channels: 4096 elements of 64 KiB (slots of 128 KiB: a 512 MiB buffer) and 2^30
 * elements of 8 bytes (slots of 16 bytes: a 16 GiB buffer, 8 GiB of elements). Each must
 * be made in under 10 ms and grow the resident set by under 16 MiB, also once it has
 * been used a little (a goroutine's sends, C main's receives, the try forms, len and
 * cap, close and the drain after it), and its release must give the memory back. A
 * make that writes the whole buffer (zeroing it) takes ~1 s per GiB here and makes all
 * of it resident; the smaller channel comes first, so that such a make fails the test
 * before it makes 16 GiB resident. Each make is tried up to three times (a machine busy
 * with other work may deschedule the test for a few ms): one must be quick.
 *
 * Then, with the address space limited (RLIMIT_AS) to what is mapped now plus 256 MiB,
 * both makes fail with -ENOMEM, and succeed again once the limit is lifted.
 */
#include "check.h"

#include <errno.h>
#include <gmp-sched/gmp.h>
#include <stdlib.h>
#include <string.h>

#define BIG_ELEM 65536
#define BIG_CAP 4096
#define WIDE_CAP (1L << 30)

#define MAX_MAKE_SEC 0.010
#define MAX_GROWTH_KIB (16L * 1024)
#define SENDS 8

static gmp_wg wg = GMP_WG_INIT;

/* An element of `size` bytes for value `v`: every 8-byte word is v + its index. */
static void fill(unsigned char *e, size_t size, long v)
{
    for (size_t i = 0; i < size / sizeof(long); i++) {
        long w = v + (long)i;
        memcpy(e + i * sizeof(long), &w, sizeof w);
    }
}

static void check_filled(const unsigned char *e, size_t size, long v)
{
    for (size_t i = 0; i < size / sizeof(long); i++) {
        long w;
        memcpy(&w, e + i * sizeof(long), sizeof w);
        CHECK_EQ(w, v + (long)i);
    }
}

struct sender {
    gmp_chan *ch;
    size_t size;
};

/* Sends values 1 .. SENDS, each a whole element. */
static void sender(void *arg)
{
    struct sender *s = arg;
    unsigned char *e = malloc(s->size);
    CHECK(e != NULL);
    for (long v = 1; v <= SENDS; v++) {
        fill(e, s->size, v);
        CHECK_EQ(gmp_chan_send(s->ch, e), 0);
    }
    free(e);
    gmp_wg_done(&wg);
}

/* Makes a channel (quickly, without growing the resident set), uses it, releases it. */
static void lazy(size_t size, size_t cap)
{
    long base = rss_kib();
    gmp_chan *ch = NULL;
    double best = 1e9;
    long growth = 0;
    for (int attempt = 0; attempt < 3; attempt++) {
        double t0 = now_sec();
        CHECK_OK(gmp_chan_make(&ch, size, cap));
        double t = now_sec() - t0;
        growth = rss_kib() - base;
        printf("chan_lazy: make(%zu, %zu) %.3f ms, resident +%ld KiB\n", size, cap, t * 1e3,
               growth);
        fflush(stdout);
        CHECK(growth < MAX_GROWTH_KIB);
        if (t < best)
            best = t;
        if (best < MAX_MAKE_SEC)
            break;
        gmp_chan_release(ch);
    }
    CHECK(best < MAX_MAKE_SEC);
    CHECK_EQ(gmp_chan_cap(ch), (long long)cap);
    CHECK_EQ(gmp_chan_len(ch), 0);

    /* A goroutine's sends, C main's receives (the buffer holds them all). */
    struct sender s = {ch, size};
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK_OK(gmp_go(sender, &s));
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_EQ(gmp_chan_len(ch), SENDS);
    unsigned char *e = malloc(size);
    CHECK(e != NULL);
    for (long v = 1; v <= SENDS; v++) {
        CHECK_EQ(gmp_chan_recv(ch, e), 0);
        check_filled(e, size, v);
    }
    CHECK_EQ(gmp_chan_try_recv(ch, e), -EAGAIN);

    /* The try forms, then close: the buffered value drains, then -EPIPE. */
    fill(e, size, 100);
    CHECK_EQ(gmp_chan_try_send(ch, e), 0);
    CHECK_EQ(gmp_chan_len(ch), 1);
    CHECK_EQ(gmp_chan_close(ch), 0);
    CHECK_EQ(gmp_chan_try_send(ch, e), -EPIPE);
    memset(e, 0xff, size);
    CHECK_EQ(gmp_chan_try_recv(ch, e), 0);
    check_filled(e, size, 100);
    CHECK_EQ(gmp_chan_recv(ch, e), -EPIPE);
    for (size_t i = 0; i < size; i++)
        CHECK_EQ(e[i], 0);
    free(e);

    long used = rss_kib() - base;
    printf("chan_lazy: used, resident +%ld KiB\n", used);
    CHECK(used < MAX_GROWTH_KIB);
    gmp_chan_release(ch);
    long after = rss_kib() - base;
    printf("chan_lazy: released, resident +%ld KiB\n", after);
    CHECK(after < MAX_GROWTH_KIB);
}

int main(void)
{
    /* The runtime's threads and a goroutine's first stack, before anything is measured. */
    gmp_chan *warm;
    CHECK_OK(gmp_chan_make(&warm, 8, 16));
    struct sender s = {warm, 8};
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK_OK(gmp_go(sender, &s));
    CHECK_OK(gmp_wg_wait(&wg));
    gmp_chan_release(warm);

    lazy(BIG_ELEM, BIG_CAP);
    lazy(8, WIDE_CAP);

    /* A mapping the system refuses is -ENOMEM, and the channel is not made. */
    gmp_chan *ch = NULL;
    struct rlimit old = limit_address_space(256L << 20);
    CHECK_EQ(gmp_chan_make(&ch, BIG_ELEM, BIG_CAP), -ENOMEM);
    CHECK_EQ(gmp_chan_make(&ch, 8, WIDE_CAP), -ENOMEM);
    CHECK(ch == NULL);
    CHECK_EQ(setrlimit(RLIMIT_AS, &old), 0);
    CHECK_OK(gmp_chan_make(&ch, 8, WIDE_CAP));
    gmp_chan_release(ch);

    printf("chan_lazy: ok\n");
    return 0;
}
