/* C side of bench/python/bench.py: an echo goroutine and a unit of spawn work. */
#include <gmp-sched/gmp.h>

#include <stdint.h>

struct echo {
    gmp_chan *in;
    gmp_chan *out;
    gmp_wg *wg;
};

/* Sends back each int64 it receives until `in` is closed, then marks the WaitGroup
 * done: its owner may release the channels only after that. */
void echo(void *arg) {
    struct echo *e = arg;
    int64_t x;
    while (gmp_chan_recv(e->in, &x) == 0)
        if (gmp_chan_send(e->out, &x) != 0)
            break;
    gmp_wg_done(e->wg);
}

struct unit {
    gmp_wg *wg;
    int64_t sum;
};

/* The work of one spawned goroutine or thread: a few arithmetic steps, an atomic add,
 * then done on the WaitGroup (gmp_wg_done works from any thread). */
void work(void *arg) {
    struct unit *u = arg;
    int64_t v = 0;
    for (int i = 0; i < 64; i++)
        v += i * i;
    __atomic_fetch_add(&u->sum, v, __ATOMIC_RELAXED);
    gmp_wg_done(u->wg);
}

struct drain {
    gmp_chan *in;
    gmp_wg *wg;
    int64_t sum;
};

/* Adds up the int64 values it receives until `in` is closed, then done. */
void drain(void *arg) {
    struct drain *d = arg;
    int64_t x, sum = 0;
    while (gmp_chan_recv(d->in, &x) == 0)
        sum += x;
    d->sum = sum;
    gmp_wg_done(d->wg);
}
