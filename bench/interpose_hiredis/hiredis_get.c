/*
 * hiredis_get: GET throughput of the unmodified synchronous hiredis API, CLIENTS clients
 * each on its own connection doing GET in a loop for SECONDS, either one goroutine per
 * client (the interposer parks them where hiredis blocks) or one pthread per client.
 *
 *   hiredis_get PORT goroutines|pthreads [CLIENTS [SECONDS]]
 *
 * Prints "RESULT mode=... clients=... ops_per_sec=... threads=...".
 */
#define _GNU_SOURCE 1
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include <gmp-sched/gmp.h>

static int port;
static atomic_int stop, ready, start;
static atomic_long ops;

static void client(void *arg)
{
    (void)arg;
    redisContext *c = redisConnect("127.0.0.1", port);
    if (c == NULL || c->err) {
        fprintf(stderr, "connect: %s\n", c ? c->errstr : "oom");
        exit(1);
    }
    atomic_fetch_add(&ready, 1);
    while (!atomic_load(&start))
        usleep(1000);
    long n = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        redisReply *r = redisCommand(c, "GET bench:key");
        if (r == NULL || r->type != REDIS_REPLY_STRING || strcmp(r->str, "value") != 0) {
            fprintf(stderr, "bad reply\n");
            exit(1);
        }
        freeReplyObject(r);
        n++;
    }
    atomic_fetch_add(&ops, n);
    redisFree(c);
}

static void *thread_main(void *arg)
{
    client(arg);
    return NULL;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int threads_now(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int n = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1)
            break;
    if (f)
        fclose(f);
    return n;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    port = atoi(argv[1]);
    int goroutines = strcmp(argv[2], "goroutines") == 0;
    int clients = argc > 3 ? atoi(argv[3]) : 1000;
    double secs = argc > 4 ? atof(argv[4]) : 3;
    redisContext *c = redisConnect("127.0.0.1", port);
    if (c == NULL || c->err)
        return 1;
    freeReplyObject(redisCommand(c, "SET bench:key value"));
    redisFree(c);
    pthread_t *th = calloc((size_t)clients, sizeof *th);
    gmp_wg wg = GMP_WG_INIT;
    if (goroutines) {
        gmp_wg_add(&wg, clients);
        for (int i = 0; i < clients; i++)
            gmp_go(client, &wg);
    } else {
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, 256 * 1024);
        for (int i = 0; i < clients; i++)
            if (pthread_create(&th[i], &a, thread_main, NULL) != 0)
                return 1;
    }
    while (atomic_load(&ready) < clients)
        usleep(1000);
    double t0 = now();
    atomic_store(&start, 1);
    usleep((useconds_t)(secs * 1e6));
    int threads = threads_now();
    atomic_store(&stop, 1);
    double dt = now() - t0;
    if (goroutines) {
        while (gmp_num_goroutine() > 0)
            usleep(1000);
    } else {
        for (int i = 0; i < clients; i++)
            pthread_join(th[i], NULL);
    }
    /* Every client connected before the window opened; counted when each stops. */
    double rate = (double)atomic_load(&ops) / dt;
    printf("RESULT mode=%s clients=%d ops_per_sec=%.0f threads=%d\n", argv[2], clients, rate,
           threads);
    return 0;
}
