/*
 * hiredis_goroutines: the unmodified, blocking hiredis client API from one goroutine per
 * client. Nothing here knows about the netpoller: hiredis calls plain connect, poll,
 * read and write, and libgmp.so, which exports those names, parks the calling goroutine
 * where hiredis would block its thread.
 *
 *   cc -O2 -I include examples/hiredis_goroutines.c target/release/libgmp.so -lhiredis \
 *      -Wl,-rpath,$PWD/target/release -o hiredis_goroutines
 *   redis-server --port 6379 --save '' &
 *   ./hiredis_goroutines 127.0.0.1 6379 1000     # 1,000 clients on GOMAXPROCS threads
 */
#define _GNU_SOURCE 1
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include <gmp-sched/gmp.h>

static const char *host;
static int port;
static gmp_wg done = GMP_WG_INIT;
static long failures;

/* Written as for a thread: connect, then blocking request/reply pairs. */
static void client(void *arg)
{
    int id = (int)(intptr_t)arg;
    redisContext *c = redisConnect(host, port);
    if (c == NULL || c->err) {
        fprintf(stderr, "client %d: %s\n", id, c ? c->errstr : "out of memory");
        __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
    } else {
        for (int i = 0; i < 100; i++) {
            redisReply *r = redisCommand(c, "SET key:%d:%d %d", id, i, i);
            if (r == NULL || r->type == REDIS_REPLY_ERROR)
                __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
            freeReplyObject(r);
            r = redisCommand(c, "GET key:%d:%d", id, i);
            if (r == NULL || r->type != REDIS_REPLY_STRING || atoi(r->str) != i)
                __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
            freeReplyObject(r);
        }
    }
    if (c)
        redisFree(c);
    gmp_wg_done(&done);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s HOST PORT CLIENTS\n", argv[0]);
        return 2;
    }
    host = argv[1];
    port = atoi(argv[2]);
    int clients = atoi(argv[3]);
    gmp_wg_add(&done, clients);
    for (int i = 0; i < clients; i++)
        gmp_go(client, (void *)(intptr_t)i);
    gmp_wg_wait(&done);
    gmp_sched_stats s;
    gmp_stats(&s, NULL, 0);
    printf("%d clients x 100 SET/GET pairs, %ld failures, %d threads\n", clients, failures,
           s.threads);
    return failures != 0;
}
