/*
 * interpose_hiredis.c -- the distro's unmodified libhiredis, synchronous API, from 1,000
 * goroutines at once: each connects (redisConnect: a non-blocking connect waited for
 * with poll, then a blocking socket) and does 100 SET/GET pairs of its own keys. The
 * library's socket, fcntl, connect, poll, read and write resolve to libgmp.so's hooks,
 * so each goroutine parks where hiredis blocks. Every reply must be right, and the
 * process must stay at most GOMAXPROCS + 8 threads.
 *
 * argv[1]: the port of the redis-server on 127.0.0.1 (tests/c_interpose.rs starts it on a
 * free port and stops it).
 */
#include "check.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <hiredis/hiredis.h>

#include <gmp-sched/gmp.h>

#define CLIENTS 1000
#define PAIRS 100

static int port;
static gmp_wg done = GMP_WG_INIT;
static long ok_pairs;
static int max_threads;

static void note_threads(void)
{
    gmp_sched_stats s;
    CHECK_OK(gmp_stats(&s, NULL, 0));
    int t = s.threads;
    int m = __atomic_load_n(&max_threads, __ATOMIC_RELAXED);
    while (t > m && !__atomic_compare_exchange_n(&max_threads, &m, t, 0, __ATOMIC_RELAXED,
                                                 __ATOMIC_RELAXED))
        ;
}

static void client(void *arg)
{
    int id = (int)(intptr_t)arg;
    redisContext *c = redisConnect("127.0.0.1", port);
    CHECK(c != NULL);
    if (c->err)
        fprintf(stderr, "client %d: %s\n", id, c->errstr);
    CHECK_EQ(c->err, 0);
    for (int i = 0; i < PAIRS; i++) {
        char key[32], val[32];
        snprintf(key, sizeof key, "k:%d:%d", id, i);
        snprintf(val, sizeof val, "v%d-%d", i, id);
        redisReply *r = redisCommand(c, "SET %s %s", key, val);
        CHECK(r != NULL);
        CHECK_EQ(r->type, REDIS_REPLY_STATUS);
        CHECK(strcmp(r->str, "OK") == 0);
        freeReplyObject(r);
        r = redisCommand(c, "GET %s", key);
        CHECK(r != NULL);
        CHECK_EQ(r->type, REDIS_REPLY_STRING);
        CHECK(strcmp(r->str, val) == 0);
        freeReplyObject(r);
        __atomic_add_fetch(&ok_pairs, 1, __ATOMIC_RELAXED);
        if (i % 25 == 0)
            note_threads();
    }
    redisFree(c);
    gmp_wg_done(&done);
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    signal(SIGPIPE, SIG_IGN);
    port = atoi(argv[1]);
    CHECK(port > 0);
    double t0 = now_sec();
    CHECK_OK(gmp_wg_add(&done, CLIENTS));
    for (int i = 0; i < CLIENTS; i++)
        CHECK_OK(gmp_go(client, (void *)(intptr_t)i));
    CHECK_OK(gmp_wg_wait(&done));
    double dt = now_sec() - t0;
    note_threads();
    int procs = gmp_maxprocs(0);
    printf("hiredis: %d goroutines x %d SET/GET pairs in %.2f s (%.0f commands/s), "
           "at most %d threads at GOMAXPROCS=%d\n",
           CLIENTS, PAIRS, dt, 2.0 * CLIENTS * PAIRS / dt, max_threads, procs);
    CHECK_EQ(ok_pairs, (long)CLIENTS * PAIRS);
    CHECK(max_threads <= procs + 8);
    return 0;
}
