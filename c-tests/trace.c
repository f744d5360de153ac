/*
 * trace.c -- the execution trace (gmp_trace_start / gmp_trace_stop, GMP_TRACE).
 *
 * Runs a workload that makes every kind of event -- spawns (from C main and from
 * goroutines), channel ping-pong (unparks), yields, blocking calls long enough for sysmon
 * to hand their P off, and more goroutines than Ps (steals; and a phase that queues
 * goroutines on a P it keeps busy, for the other P to steal) -- between gmp_trace_start(argv[1])
 * and gmp_trace_stop() (argv[1], default trace.trace). tests/c_debug.rs then checks the
 * file with scripts/check-trace.py. With argv[2] = "env", the trace comes from GMP_TRACE
 * and ends at exit instead.
 */
#include "check.h"

#include <stdatomic.h>

#include <errno.h>
#include <string.h>

#define WORKERS 16
#define ROUNDS 200

static gmp_wg wg = GMP_WG_INIT;

void trace_pong(void *arg)
{
    struct gmp_chan **ch = arg;
    long v;
    for (int i = 0; i < ROUNDS; i++) {
        CHECK_EQ(gmp_chan_recv(ch[0], &v), 0);
        v++;
        CHECK_EQ(gmp_chan_send(ch[1], &v), 0);
    }
    gmp_wg_done(&wg);
}

static int64_t slow_call(void *arg)
{
    (void)arg;
    sleep_ms(15); /* past sysmon's 20 us tick: the P is handed off */
    return 0;
}

void trace_leaf(void *arg)
{
    (void)arg;
    for (int i = 0; i < 3; i++)
        CHECK_OK(gmp_yield());
    gmp_wg_done(&wg);
}

void trace_worker(void *arg)
{
    intptr_t id = (intptr_t)arg;
    struct gmp_chan *ch[2];
    CHECK_OK(gmp_chan_make(&ch[0], sizeof(long), 0));
    CHECK_OK(gmp_chan_make(&ch[1], sizeof(long), 0));
    CHECK_OK(gmp_wg_add(&wg, 2));
    CHECK_OK(gmp_go(trace_pong, ch));
    CHECK_OK(gmp_go(trace_leaf, NULL));
    for (long i = 0; i < ROUNDS; i++) {
        long v = i;
        CHECK_EQ(gmp_chan_send(ch[0], &v), 0);
        CHECK_EQ(gmp_chan_recv(ch[1], &v), 0);
        CHECK_EQ(v, i + 1);
    }
    if (id % 4 == 0)
        CHECK_OK(gmp_blocking(slow_call, NULL));
    gmp_chan_release(ch[0]);
    gmp_chan_release(ch[1]);
    gmp_wg_done(&wg);
}

/* The steal phase: a goroutine queues STOLEN goroutines on its own P and keeps that P
 * busy until they have run, so the other P's M, woken by the spawns, can only run them
 * by stealing (or, after a whole slice, preemption lets them run here). */
#define STOLEN 8
static atomic_int stolen_ran;

void trace_stolen(void *arg)
{
    (void)arg;
    atomic_fetch_add(&stolen_ran, 1);
    gmp_wg_done(&wg);
}

void trace_spawner(void *arg)
{
    (void)arg;
    for (int i = 0; i < STOLEN; i++)
        CHECK_OK(gmp_go(trace_stolen, NULL));
    int64_t t0 = gmp_now();
    while (atomic_load(&stolen_ran) < STOLEN && gmp_now() - t0 < 1000000000)
        ;
    gmp_wg_done(&wg);
}

int main(int argc, char **argv)
{
    const char *path = argc >= 2 ? argv[1] : "trace.trace";
    int from_env = argc >= 3 && strcmp(argv[2], "env") == 0;
    if (!from_env) {
        CHECK_EQ(gmp_trace_start(NULL), -EINVAL);
        CHECK_OK(gmp_trace_start(path));
        CHECK_EQ(gmp_trace_start(path), -EBUSY);
    }
    CHECK_OK(gmp_wg_add(&wg, WORKERS));
    for (intptr_t i = 0; i < WORKERS; i++)
        CHECK_OK(gmp_go(trace_worker, (void *)i));
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_OK(gmp_wg_add(&wg, STOLEN + 1));
    CHECK_OK(gmp_go(trace_spawner, NULL));
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_EQ(atomic_load(&stolen_ran), STOLEN);
    if (!from_env) {
        CHECK_OK(gmp_trace_stop());
        CHECK_EQ(gmp_trace_stop(), -EINVAL);
    }
    printf("goroutines=%d\n", WORKERS * 3);
    return 0;
}
