/*
 * spin_pingpong: the floor under a ping-pong between two threads on two CPUs, with no
 * runtime at all: main writes a counter into one cache line, the other thread spins until
 * it sees it and answers in a second line, main spins for the answer. Each round trip is
 * two cache-line transfers between the CPUs. README ("C main rows") compares the
 * pingpong from C main against it.
 *
 *   cc -O2 -Wall -Wextra -o /tmp/spin_pingpong scripts/spin_pingpong.c -lpthread
 *   /tmp/spin_pingpong [round trips]
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Alignas(64) atomic_long ping;
static _Alignas(64) atomic_long pong;
static long rounds = 2000000;

static void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *echo(void *arg)
{
    (void)arg;
    for (long i = 1; i <= rounds; i++) {
        while (atomic_load_explicit(&ping, memory_order_acquire) != i)
            relax();
        atomic_store_explicit(&pong, i, memory_order_release);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        rounds = atol(argv[1]);
    if (rounds <= 0) {
        fprintf(stderr, "usage: %s [round trips > 0]\n", argv[0]);
        return 2;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, echo, NULL) != 0) {
        perror("pthread_create");
        return 1;
    }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 1; i <= rounds; i++) {
        atomic_store_explicit(&ping, i, memory_order_release);
        while (atomic_load_explicit(&pong, memory_order_acquire) != i)
            relax();
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    pthread_join(t, NULL);
    double ns = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
    printf("%.1f ns per round trip (%ld round trips)\n", ns / (double)rounds, rounds);
    return 0;
}
