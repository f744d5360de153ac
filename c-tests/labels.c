/*
 * labels.c -- goroutine labels (gmp_labels_set, gmp_labels_get) behave as Go's.
 *
 *  1. The API: -EINVAL for a NULL or empty key, NULL buffer with a size; -ENOENT for a
 *     label not set; snprintf's contract for the copy (full length returned, cut copy
 *     NUL-terminated, (NULL, 0) sizes it).
 *  2. Set, replace, remove, several keys, on a goroutine.
 *  3. Inheritance: a goroutine starts with its parent's labels as they were at the start;
 *     later changes on either side are their own; a grandchild inherits in turn; a
 *     goroutine started by C main gets the labels C main set.
 *  4. A goroutine that ends gives its labels up: goroutines started without labels on the
 *     records that labelled goroutines left on the same processor start without.
 *  5. The dump shows a parked goroutine's labels in its header, escaped.
 *  6. Many changes and starts leak nothing (the run ends with every set freed under ASan;
 *     here, RSS stays flat over 200,000 changes).
 *  7. The execution trace gives a labelled goroutine's runs its labels.
 */
#include "check.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gmp-sched/gmp.h>

static gmp_wg wg;
static gmp_chan *park_ch;

static void expect_label(const char *key, const char *want)
{
    char buf[64];
    int n = gmp_labels_get(key, buf, sizeof buf);
    if (want == NULL) {
        CHECK_EQ(n, -ENOENT);
        return;
    }
    CHECK_EQ(n, (int)strlen(want));
    CHECK(strcmp(buf, want) == 0);
}

static void grandchild(void *arg)
{
    (void)arg;
    expect_label("request", "42");
    expect_label("stage", "child");
    gmp_wg_done(&wg);
}

static void child(void *arg)
{
    gmp_chan *go_on = arg;
    /* As the parent had them when it started us. */
    expect_label("request", "42");
    expect_label("stage", "parent");
    expect_label("late", NULL);
    long v;
    CHECK_OK(gmp_chan_recv(go_on, &v)); /* the parent changes its labels meanwhile */
    expect_label("stage", "parent");
    expect_label("late", NULL);
    CHECK_OK(gmp_labels_set("stage", "child"));
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK(gmp_go(grandchild, NULL) > 0);
    gmp_wg_done(&wg);
}

static void parent(void *arg)
{
    (void)arg;
    /* 2. On a goroutine. */
    expect_label("request", "42"); /* from C main */
    CHECK_OK(gmp_labels_set("stage", "parent"));
    CHECK_OK(gmp_labels_set("a", "1"));
    CHECK_OK(gmp_labels_set("a", "2"));
    expect_label("a", "2");
    CHECK_OK(gmp_labels_set("a", NULL));
    expect_label("a", NULL);
    CHECK_OK(gmp_labels_set("a", NULL)); /* removing what is not there */
    /* 3. Inheritance. */
    gmp_chan *go_on;
    CHECK_OK(gmp_chan_make(&go_on, sizeof(long), 0));
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK(gmp_go(child, go_on) > 0);
    CHECK_OK(gmp_labels_set("late", "yes"));
    CHECK_OK(gmp_labels_set("stage", "changed"));
    long v = 1;
    CHECK_OK(gmp_chan_send(go_on, &v));
    expect_label("stage", "changed");
    gmp_wg_done(&wg);
}

static void plain(void *arg)
{
    (void)arg;
    expect_label("stage", NULL);
    expect_label("request", NULL);
    gmp_wg_done(&wg);
}

static void labelled(void *arg)
{
    gmp_wg *done = arg;
    CHECK_OK(gmp_labels_set("stage", "dead"));
    gmp_wg_done(done);
}

/* Starts goroutines that set labels and end, then, on the records they left on this
 * processor, goroutines that must start without. */
static void reuse(void *arg)
{
    (void)arg;
    gmp_wg done = {0};
    for (int round = 0; round < 20; round++) {
        CHECK_OK(gmp_wg_add(&done, 20));
        for (int i = 0; i < 20; i++)
            CHECK(gmp_go(labelled, &done) > 0);
        gmp_wg_wait(&done);
        CHECK_OK(gmp_wg_add(&wg, 20));
        for (int i = 0; i < 20; i++)
            CHECK(gmp_go(plain, NULL) > 0);
    }
    gmp_wg_done(&wg);
}

static void labelled_then_parked(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_labels_set("user", "ann \"q\"\n"));
    long v;
    CHECK_OK(gmp_chan_recv(park_ch, &v));
    gmp_wg_done(&wg);
}

void traced(void *arg);
void traced(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_labels_set("user", "bob"));
    for (int i = 0; i < 3; i++)
        CHECK_OK(gmp_yield());
    gmp_wg_done(&wg);
}

static void ends(void *arg)
{
    (void)arg;
    gmp_wg_done(&wg);
}

static void churn(void *arg)
{
    (void)arg;
    char val[32];
    for (int i = 0; i < 200000; i++) {
        snprintf(val, sizeof val, "v%d", i);
        CHECK_OK(gmp_labels_set(i % 2 ? "odd" : "even", val));
        if (i % 1000 == 0) {
            CHECK_OK(gmp_wg_add(&wg, 1));
            CHECK(gmp_go(ends, NULL) > 0);
        }
    }
    gmp_wg_done(&wg);
}

int main(void)
{
    alarm(60);
    /* 1. The API. */
    char buf[8];
    CHECK_EQ(gmp_labels_set(NULL, "x"), -EINVAL);
    CHECK_EQ(gmp_labels_set("", "x"), -EINVAL);
    CHECK_EQ(gmp_labels_get(NULL, buf, sizeof buf), -EINVAL);
    CHECK_EQ(gmp_labels_get("k", NULL, 1), -EINVAL);
    CHECK_EQ(gmp_labels_get("k", buf, sizeof buf), -ENOENT);
    CHECK_OK(gmp_labels_set("k", "a long value"));
    CHECK_EQ(gmp_labels_get("k", NULL, 0), 12);
    memset(buf, 'x', sizeof buf);
    CHECK_EQ(gmp_labels_get("k", buf, sizeof buf), 12);
    CHECK(strcmp(buf, "a long ") == 0);
    CHECK_OK(gmp_labels_set("k", NULL));
    CHECK_EQ(gmp_labels_get("k", buf, sizeof buf), -ENOENT);

    /* 2, 3. C main's labels go to the goroutines it starts. */
    CHECK_OK(gmp_labels_set("request", "42"));
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK(gmp_go(parent, NULL) > 0);
    gmp_wg_wait(&wg);

    /* 4. Records reused by goroutines without labels start without. */
    CHECK_OK(gmp_labels_set("request", NULL));
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK(gmp_go(reuse, NULL) > 0);
    gmp_wg_wait(&wg);

    /* 5. The dump. */
    CHECK_OK(gmp_chan_make(&park_ch, sizeof(long), 0));
    CHECK_OK(gmp_wg_add(&wg, 1));
    int64_t id = gmp_go(labelled_then_parked, NULL);
    CHECK(id > 0);
    char want[96];
    snprintf(want, sizeof want,
             "goroutine %lld [chan receive, labels:{\"user\": \"ann \\\"q\\\"\\x0a\"}]:\n",
             (long long)id);
    int fd = memfd_create("dump", 0);
    CHECK(fd >= 0);
    char *text = NULL;
    for (int tries = 0;; tries++) {
        CHECK(tries < 5000);
        CHECK_OK(ftruncate(fd, 0));
        CHECK_EQ(lseek(fd, 0, SEEK_SET), 0);
        CHECK_OK(gmp_dump(fd));
        off_t len = lseek(fd, 0, SEEK_CUR);
        free(text);
        text = calloc((size_t)len + 1, 1);
        CHECK(text != NULL);
        CHECK_EQ(pread(fd, text, (size_t)len, 0), len);
        if (strstr(text, want) != NULL)
            break;
        gmp_sleep(1000 * 1000);
    }
    free(text);
    close(fd);
    long v = 0;
    CHECK_OK(gmp_chan_send(park_ch, &v));
    gmp_wg_wait(&wg);

    /* 6. No leak. */
    long before = rss_kib();
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK(gmp_go(churn, NULL) > 0);
    gmp_wg_wait(&wg);
    long after = rss_kib();
    printf("labels: RSS %ld KiB before 200,000 changes, %ld KiB after\n", before, after);
    CHECK(after - before < 4096);

    /* 7. The trace (tests/c_debug.rs checks the labelled slices in labels.trace). */
    CHECK_OK(gmp_trace_start("labels.trace"));
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK(gmp_go(traced, NULL) > 0);
    gmp_wg_wait(&wg);
    CHECK_OK(gmp_trace_stop());
    return 0;
}
