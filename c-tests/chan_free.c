/*
 * chan_free.c -- a channel is freed when its last handle is released and nothing holds
 * it any more, also after goroutines blocked on it were served.
 *
 * 200 batches of 100 channels with 8 KiB buffers (160 MB if none were freed): in each
 * batch, 100 goroutines block receiving, one per channel (waited for: all blocked), main
 * sends to each channel (the send completes the blocked receiver's sudog, which drops
 * the channel's hold count), the goroutines end, and main releases every channel. A
 * channel whose header or buffer is not freed (release deciding wrongly under its lock,
 * a hold count that never returns to zero, a buffer left allocated by destroy) shows as
 * resident memory (~80 MB over the run when none is freed): it must not grow by more
 * than 24 MB from the first batch to the last.
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <stdatomic.h>
#include <stdlib.h>

#define BATCHES 200
#define PER_BATCH 100
#define CAP 1024 /* x 8-byte elements: 8 KiB buffers */

static gmp_chan *ch[PER_BATCH];
static gmp_wg wg = GMP_WG_INIT;

static void receiver(void *arg)
{
    gmp_chan *c = arg;
    long v = 0;
    CHECK_OK(gmp_chan_recv(c, &v));
    CHECK_EQ(v, 42);
    CHECK_OK(gmp_chan_release(c)); /* the goroutine's own handle */
    CHECK_OK(gmp_wg_done(&wg));
}

int main(void)
{
    long first = 0;
    for (int b = 0; b < BATCHES; b++) {
        CHECK_OK(gmp_wg_add(&wg, PER_BATCH));
        for (int i = 0; i < PER_BATCH; i++) {
            CHECK_OK(gmp_chan_make(&ch[i], sizeof(long), CAP));
            CHECK_OK(gmp_chan_retain(ch[i]));
            CHECK_OK(gmp_go(receiver, ch[i]));
        }
        WAIT_BLOCKED(PER_BATCH);
        for (int i = 0; i < PER_BATCH; i++) {
            long v = 42;
            CHECK_OK(gmp_chan_send(ch[i], &v));
        }
        CHECK_OK(gmp_wg_wait(&wg));
        for (int i = 0; i < PER_BATCH; i++)
            CHECK_OK(gmp_chan_release(ch[i]));
        if (b == 0)
            first = rss_kib() * 1024L;
    }
    long last = rss_kib() * 1024L;
    printf("chan_free: resident %ld MB after the first batch, %ld MB after %d\n",
           first >> 20, last >> 20, BATCHES);
    CHECK(last - first < 24L << 20);
    printf("chan_free: ok\n");
    return 0;
}
