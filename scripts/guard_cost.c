/*
 * guard_cost: what a fresh goroutine stack costs the kernel, without the runtime. Maps
 * slabs of 64 stacks as src/stack does (MAP_NORESERVE | MAP_STACK, each stack above a
 * guard), installs the guards of each slab with one process_madvise(MADV_GUARD_INSTALL)
 * call, then touches each stack's top page once (the page fault a goroutine's first
 * frame takes). Prints ns per slab mmap, per guard and per first touch: the costs
 * src/stack/mod.rs ("Guard pages and the VMA budget") weighs. Needs Linux 6.13 (MADV_GUARD_INSTALL) and 6.15 (PIDFD_SELF).
 *
 *   cc -O2 -Wall -Wextra -o /tmp/guard_cost scripts/guard_cost.c
 *   /tmp/guard_cost [guard KiB, default 64] [slabs, default 300]
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define PER_SLAB 64
#define STACK (256 * 1024)
#define GUARD_INSTALL 102
#define PIDFD_SELF (-10001)

static long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    size_t guard = (size_t)(argc > 1 ? atol(argv[1]) : 64) * 1024;
    int slabs = argc > 2 ? atoi(argv[2]) : 300;
    size_t stride = STACK + guard;
    long t_map = 0, t_guard = 0, t_touch = 0;
    if (guard == 0 || slabs <= 0) {
        fprintf(stderr, "guard_cost: bad arguments\n");
        return 2;
    }
    for (int s = 0; s < slabs; s++) {
        long t0 = now_ns();
        char *base = mmap(NULL, stride * PER_SLAB, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
        if (base == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
        long t1 = now_ns();
        struct iovec iov[PER_SLAB];
        for (int i = 0; i < PER_SLAB; i++) {
            iov[i].iov_base = base + (size_t)i * stride;
            iov[i].iov_len = guard;
        }
        if (syscall(SYS_process_madvise, PIDFD_SELF, iov, PER_SLAB, GUARD_INSTALL, 0) < 0) {
            perror("process_madvise(MADV_GUARD_INSTALL)");
            return 1;
        }
        long t2 = now_ns();
        for (int i = 0; i < PER_SLAB; i++)
            ((volatile char *)base)[(size_t)i * stride + guard + STACK - 64] = 1;
        long t3 = now_ns();
        t_map += t1 - t0;
        t_guard += t2 - t1;
        t_touch += t3 - t2;
    }
    printf("guard %zu KiB: mmap %.0f ns per slab, guard %.0f ns per stack, first touch %.0f ns "
           "per stack\n",
           guard / 1024, (double)t_map / slabs, (double)t_guard / slabs / PER_SLAB,
           (double)t_touch / slabs / PER_SLAB);
    return 0;
}
