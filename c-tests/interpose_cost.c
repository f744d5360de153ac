/*
 * interpose_cost.c -- what a hook costs where it passes straight through: read(2) of 0
 * bytes from a pipe and fcntl(F_GETFD), through the exported hooks (this program links
 * libgmp.so, so plain `read` is the hook) against libc's own functions (looked up in
 * libc.so.6 itself), on the C main thread (a foreign thread) after the runtime started,
 * and inside a goroutine with GMP_INTERPOSE=0 when the environment says so.
 * Prints the best of 15 alternating rounds of each; fails only if a hook costs more than
 * 100 ns extra (the target is < 5 ns; the bound is loose for a loaded machine).
 */
#include "check.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include <gmp-sched/gmp.h>

#define CALLS 200000
#define ROUNDS 15

typedef ssize_t (*read_fn)(int, void *, size_t);
typedef int (*fcntl_fn)(int, int, ...);

static read_fn libc_read;
static fcntl_fn libc_fcntl;
static int fds[2];

static double per_call_read(read_fn f)
{
    char b;
    double t0 = now_sec();
    for (int i = 0; i < CALLS; i++)
        CHECK(f(fds[0], &b, 0) == 0);
    return (now_sec() - t0) * 1e9 / CALLS;
}

static double per_call_fcntl(fcntl_fn f)
{
    double t0 = now_sec();
    for (int i = 0; i < CALLS; i++)
        CHECK(f(fds[0], F_GETFD) >= 0);
    return (now_sec() - t0) * 1e9 / CALLS;
}

static double min2(double a, double b) { return a < b ? a : b; }

static void measure(const char *where)
{
    double hook_r = 1e9, libc_r = 1e9, hook_f = 1e9, libc_f = 1e9;
    for (int r = 0; r < ROUNDS; r++) {
        hook_r = min2(hook_r, per_call_read(read));
        libc_r = min2(libc_r, per_call_read(libc_read));
        hook_f = min2(hook_f, per_call_fcntl(fcntl));
        libc_f = min2(libc_f, per_call_fcntl(libc_fcntl));
    }
    printf("%s: read(0 bytes) hook %.1f ns, libc %.1f ns, extra %.1f ns; "
           "fcntl(F_GETFD) hook %.1f ns, libc %.1f ns, extra %.1f ns\n",
           where, hook_r, libc_r, hook_r - libc_r, hook_f, libc_f, hook_f - libc_f);
    CHECK(hook_r - libc_r < 100);
    CHECK(hook_f - libc_f < 100);
}

static gmp_wg done = GMP_WG_INIT;

static void in_goroutine(void *arg)
{
    (void)arg;
    measure("goroutine, GMP_INTERPOSE=0");
    gmp_wg_done(&done);
}

int main(void)
{
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    CHECK(libc != NULL);
    libc_read = (read_fn)(uintptr_t)dlsym(libc, "read");
    libc_fcntl = (fcntl_fn)(uintptr_t)dlsym(libc, "fcntl");
    CHECK(libc_read != NULL && libc_fcntl != NULL);
    /* The hooks are ours, not libc's. */
    CHECK((uintptr_t)libc_read != (uintptr_t)read);
    CHECK_EQ(pipe(fds), 0);
    CHECK(gmp_maxprocs(0) >= 1); /* the runtime runs */
    measure("foreign thread");
    const char *e = getenv("GMP_INTERPOSE");
    if (e != NULL && strcmp(e, "0") == 0) {
        CHECK_OK(gmp_wg_add(&done, 1));
        CHECK_OK(gmp_go(in_goroutine, NULL));
        CHECK_OK(gmp_wg_wait(&done));
    }
    return 0;
}
