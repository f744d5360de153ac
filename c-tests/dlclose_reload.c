/*
 * dlclose_reload.c -- the library stays loaded once the runtime has started.
 *
 * Built without linking libgmp (the harness passes its path in GMP_TEST_LIB): dlopen()s
 * it, starts goroutines (one keeps sleeping in a loop, so the runtime's threads are busy
 * inside the library), dlclose()s it, waits 500 ms while those threads run, then checks
 * that the library is still mapped (dlopen with RTLD_NOLOAD finds it, at the same
 * address), dlopen()s it again and uses it: more goroutines, and the one still looping
 * is the same runtime's. If dlclose unmapped the library, its threads would run unmapped
 * code (SIGSEGV) or the second dlopen would start a second runtime.
 */
#define CHECK_NO_GMP 1 /* the library is dlopen()ed: no gmp.h */
#include "check.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

typedef void (*fn_t)(void *);
struct api {
    int (*go)(fn_t, void *);
    int (*wg_add)(void *, int64_t);
    int (*wg_done)(void *);
    int (*wg_wait)(void *);
    int32_t (*sleep)(int64_t);
    int64_t (*num_goroutine)(void);
};

static struct api api;
static uint64_t wg[2];        /* gmp_wgs: two 64-bit words, zero-initialised; workers */
static uint64_t looper_wg[2]; /* the looping goroutine */
static volatile int looping; /* ticks of the goroutine that keeps sleeping */
static volatile int stop;

static void *sym(void *h, const char *name)
{
    void *p = dlsym(h, name);
    if (p == NULL) {
        fprintf(stderr, "dlsym %s: %s\n", name, dlerror());
        _exit(1);
    }
    return p;
}

static void load(void *h)
{
    /* POSIX guarantees that a function pointer fits in void *; copy it through memcpy
     * semantics with a union to stay within ISO C. */
    union {
        void *p;
        int (*go)(fn_t, void *);
        int (*wg)(void *);
        int (*wg_add)(void *, int64_t);
        int32_t (*sleep)(int64_t);
        int64_t (*count)(void);
    } u;
    u.p = sym(h, "gmp_go");
    api.go = u.go;
    u.p = sym(h, "gmp_wg_add");
    api.wg_add = u.wg_add;
    u.p = sym(h, "gmp_wg_done");
    api.wg_done = u.wg;
    u.p = sym(h, "gmp_wg_wait");
    api.wg_wait = u.wg;
    u.p = sym(h, "gmp_sleep");
    api.sleep = u.sleep;
    u.p = sym(h, "gmp_num_goroutine");
    api.num_goroutine = u.count;
}

static void worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 5; i++)
        CHECK_OK(api.sleep(1000000));
    CHECK_OK(api.wg_done(wg));
}

static void looper(void *arg)
{
    (void)arg;
    while (!stop) {
        CHECK_OK(api.sleep(1000000));
        looping++;
    }
    CHECK_OK(api.wg_done(looper_wg));
}

static void run_workers(int n)
{
    CHECK_OK(api.wg_add(wg, n));
    for (int i = 0; i < n; i++)
        CHECK_OK(api.go(worker, NULL));
    CHECK_OK(api.wg_wait(wg));
}

/* dlclose()s `h`, waits 500 ms, and checks that the library is still mapped at the same
 * address; returns a new handle from a second dlopen. */
static void *close_wait_reopen(void *h, const char *lib, void *go_before)
{
    CHECK_EQ(dlclose(h), 0);
    sleep_ms(500);
    void *still = dlopen(lib, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    CHECK(still != NULL);
    CHECK(sym(still, "gmp_go") == go_before);
    CHECK_EQ(dlclose(still), 0);
    void *h2 = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    CHECK(h2 != NULL);
    load(h2);
    return h2;
}

int main(void)
{
    const char *lib = getenv("GMP_TEST_LIB");
    CHECK(lib != NULL);
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    load(h);
    void *go_before = sym(h, "gmp_go");

    /* 1. The runtime started (its monitor thread runs), no goroutine yet. */
    int (*maxprocs)(int);
    union {
        void *p;
        int (*f)(int);
    } u = {sym(h, "gmp_maxprocs")};
    maxprocs = u.f;
    CHECK(maxprocs(0) >= 1);
    h = close_wait_reopen(h, lib, go_before);

    /* 2. Goroutines running inside the library while it is closed. */
    CHECK_OK(api.wg_add(looper_wg, 1));
    CHECK_OK(api.go(looper, NULL));
    run_workers(8);
    int ticks = looping;
    h = close_wait_reopen(h, lib, go_before);
    CHECK(looping > ticks); /* the runtime kept running meanwhile */

    /* 3. The same runtime: the looping goroutine is still one of its goroutines. */
    CHECK(api.num_goroutine() >= 1);
    run_workers(8);
    stop = 1;
    CHECK_OK(api.wg_wait(looper_wg));
    printf("dlclose kept the started runtime loaded; reopened and used it\n");
    return 0;
}
