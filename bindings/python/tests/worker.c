/* C goroutine bodies for the Python tests: built by conftest.py with cc, loaded with
 * ctypes, started with gmp_sched.go(fn, job). */
#include <gmp-sched/gmp.h>

#include <stdint.h>

/* A job: the channels a worker reads and writes, and the WaitGroup it finishes. */
struct job {
    gmp_chan *in;
    gmp_chan *out;
    gmp_wg *wg;
};

/* Receives one int64 from in, sends its square to out, marks the WaitGroup done. */
void square_one(void *arg) {
    struct job *j = arg;
    int64_t x;
    if (gmp_chan_recv(j->in, &x) == 0) {
        x *= x;
        gmp_chan_send(j->out, &x);
    }
    gmp_wg_done(j->wg);
}

/* Sends back every int64 it receives, plus one, until in is closed; then done. */
void echo_plus_one(void *arg) {
    struct job *j = arg;
    int64_t x;
    while (gmp_chan_recv(j->in, &x) == 0) {
        x += 1;
        if (gmp_chan_send(j->out, &x) != 0)
            break;
    }
    gmp_wg_done(j->wg);
}

/* Sends `count` int64 values 1..count on out (count read from in first), then done. */
void produce(void *arg) {
    struct job *j = arg;
    int64_t count;
    if (gmp_chan_recv(j->in, &count) == 0)
        for (int64_t i = 1; i <= count; i++)
            if (gmp_chan_send(j->out, &i) != 0)
                break;
    gmp_wg_done(j->wg);
}

/* Adds to a counter under the job's channel-free path: atomically, then done. */
static int64_t counter;
void count_done(void *arg) {
    gmp_wg *wg = arg;
    __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
    gmp_wg_done(wg);
}
int64_t counter_value(void) { return __atomic_load_n(&counter, __ATOMIC_RELAXED); }

/* Records the count gmp_lock_os_thread returns (2 when started locked, 1 otherwise),
 * unlocks back to zero, then done. */
struct depth_job {
    int depth;
    gmp_wg *wg;
};
void record_lock_depth(void *arg) {
    struct depth_job *j = arg;
    j->depth = gmp_lock_os_thread();
    while (gmp_unlock_os_thread() > 0) {
    }
    gmp_wg_done(j->wg);
}
