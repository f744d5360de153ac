/*
 * custom_labels.c -- goroutine labels through the custom-labels thread-local ABI (v1),
 * as an out-of-process profiler reads them: custom_labels_current_set, the calling
 * thread's pointer to a custom_labels_labelset_t, and custom_labels_abi_version == 1.
 *
 *  1. Both symbols resolve with dlsym (for a TLS symbol, the calling thread's copy), at
 *     the address the linker gave the program's own reference.
 *  2. A goroutine that sets labels sees its set at once, keys and values as set; a change
 *     and a removal show at once too; no labels is NULL.
 *  3. On one thread (GOMAXPROCS=1), goroutines with other labels, and one without, run in
 *     turn: each sees its own set while it runs, and the first sees its own again when it
 *     resumes.
 *  4. C main (a thread outside the runtime) shows the labels it set for its goroutines.
 */
#include "check.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <gmp-sched/gmp.h>

/* The ABI's types (custom-labels-v1.md). */
typedef struct {
    size_t len;
    const unsigned char *buf;
} custom_labels_string_t;

typedef struct {
    custom_labels_string_t key;
    custom_labels_string_t value;
} custom_labels_label_t;

typedef struct {
    custom_labels_label_t *storage;
    size_t count;
    size_t capacity;
} custom_labels_labelset_t;

extern __thread custom_labels_labelset_t *custom_labels_current_set;
extern const uint32_t custom_labels_abi_version;

static custom_labels_labelset_t *current(void)
{
    /* dlsym of a TLS symbol gives the calling thread's instance: the profiler's view. */
    custom_labels_labelset_t **p = dlsym(RTLD_DEFAULT, "custom_labels_current_set");
    CHECK(p != NULL);
    CHECK(p == &custom_labels_current_set);
    return *p;
}

/* The value of `key` in `s` (the first label with that key, as the ABI says), or NULL. */
static const custom_labels_string_t *value_of(const custom_labels_labelset_t *s,
                                              const char *key)
{
    for (size_t i = 0; i < s->count; i++) {
        const custom_labels_label_t *l = &s->storage[i];
        if (l->key.buf != NULL && l->key.len == strlen(key) &&
            memcmp(l->key.buf, key, l->key.len) == 0)
            return &l->value;
    }
    return NULL;
}

static void expect(const char *key, const char *want)
{
    custom_labels_labelset_t *s = current();
    CHECK(s != NULL);
    const custom_labels_string_t *v = value_of(s, key);
    if (want == NULL) {
        CHECK(v == NULL);
        return;
    }
    CHECK(v != NULL && v->buf != NULL);
    CHECK_EQ(v->len, strlen(want));
    CHECK(memcmp(v->buf, want, v->len) == 0);
}

static gmp_wg wg;
static gmp_chan *turn_b, *turn_c, *turn_a;
static long tid_a, tid_b, tid_c;

static long gettid_(void)
{
    return (long)syscall(SYS_gettid);
}

static void a(void *arg)
{
    (void)arg;
    CHECK(current() == NULL);
    CHECK_OK(gmp_labels_set("tenant", "acme"));
    CHECK_OK(gmp_labels_set("request", "17"));
    CHECK_EQ(current()->count, 2);
    expect("tenant", "acme");
    expect("request", "17");
    CHECK_OK(gmp_labels_set("request", "18"));
    expect("request", "18");
    CHECK_OK(gmp_labels_set("empty", ""));
    expect("empty", "");
    CHECK_OK(gmp_labels_set("empty", NULL));
    expect("empty", NULL);
    CHECK_EQ(current()->count, 2);
    tid_a = gettid_();
    long v = 1;
    CHECK_OK(gmp_chan_send(turn_b, &v));
    CHECK_OK(gmp_chan_recv(turn_a, &v));
    /* Resumed after b and c ran on this thread: our set again. */
    expect("tenant", "acme");
    expect("request", "18");
    gmp_wg_done(&wg);
}

static void b(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_labels_set("tenant", "globex"));
    long v;
    CHECK_OK(gmp_chan_recv(turn_b, &v));
    tid_b = gettid_();
    CHECK_EQ(current()->count, 1);
    expect("tenant", "globex");
    expect("request", NULL);
    CHECK_OK(gmp_chan_send(turn_c, &v));
    gmp_wg_done(&wg);
}

static void c(void *arg)
{
    (void)arg;
    long v;
    CHECK_OK(gmp_chan_recv(turn_c, &v));
    tid_c = gettid_();
    CHECK(current() == NULL);
    CHECK_OK(gmp_chan_send(turn_a, &v));
    gmp_wg_done(&wg);
}

int main(void)
{
    void *version = dlsym(RTLD_DEFAULT, "custom_labels_abi_version");
    CHECK(version == &custom_labels_abi_version);
    CHECK_EQ(custom_labels_abi_version, 1);

    CHECK_OK(gmp_chan_make(&turn_a, sizeof(long), 0));
    CHECK_OK(gmp_chan_make(&turn_b, sizeof(long), 0));
    CHECK_OK(gmp_chan_make(&turn_c, sizeof(long), 0));
    CHECK_OK(gmp_wg_add(&wg, 3));
    CHECK(gmp_go(c, NULL) > 0);
    CHECK(gmp_go(b, NULL) > 0);
    CHECK(gmp_go(a, NULL) > 0);
    gmp_wg_wait(&wg);
    /* GOMAXPROCS=1 and no blocking call: one thread ran the three in turn. */
    CHECK(tid_a == tid_b && tid_b == tid_c);
    CHECK(tid_a != gettid_());

    /* 4. C main's own labels, for the goroutines it starts. */
    CHECK(current() == NULL);
    CHECK_OK(gmp_labels_set("origin", "main"));
    expect("origin", "main");
    CHECK_OK(gmp_labels_set("origin", NULL));
    CHECK(current() == NULL);
    CHECK_OK(gmp_chan_release(turn_a));
    CHECK_OK(gmp_chan_release(turn_b));
    CHECK_OK(gmp_chan_release(turn_c));
    printf("custom_labels ok\n");
    return 0;
}
