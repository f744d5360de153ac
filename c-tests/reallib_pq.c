/*
 * reallib_pq.c -- the distribution's unmodified libpq against a PostgreSQL server the
 * test starts (tests/c_reallib.rs: a fresh cluster in a temporary directory, listening on
 * 127.0.0.1 and a unix socket there), driven from goroutines as a thread-per-connection
 * program drives it from threads, beside the same code on plain pthreads.
 *
 * argv[1] is the transport ("unix" or "tcp", for the output), argv[2] the mode, "go"
 * (goroutines; the program links libgmp.so, so libpq's socket, connect, poll, send and
 * recv are its hooks) or "thread" (one pthread per connection; tests/c_reallib.rs runs it
 * with GMP_INTERPOSE=0 and compares the "outcome:" lines of both modes), argv[3] the
 * connection string.
 *
 * 100 workers each open a connection (PQconnectdb); once all are connected, each runs
 * SELECT pg_sleep(0.3), $1::int * 2 with its own number and checks the answer. The
 * sleeps must overlap: every answer arrives within 3 s of the start signal (one after
 * the other they take 30 s), and in goroutines the process stays at most GOMAXPROCS + 8
 * threads. Then LISTEN/NOTIFY: each worker listens on its own channel, and once all
 * listen, notifies the next worker's; each waits for its notification as asynchronous
 * libpq programs do (poll on PQsocket, PQconsumeInput, PQnotifies) and checks who sent
 * it. Then PQcancel: the first 10 workers start SELECT pg_sleep(30) and cancel it from
 * the same goroutine or thread (PQgetCancel, PQcancel: a second connection that the
 * server answers by signalling the backend); each query ends within 5 s with SQLSTATE
 * 57014. A watchdog ends a hung run with a message (and, in goroutines, the goroutine
 * dump).
 */
#include "check.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include <gmp-sched/gmp.h>

#define CONNS 100
#define SLEEP "0.3"
#define CANCELS 10

static int use_goroutines;
static const char *conninfo;
static atomic_long connected, answered, answer_sum, listening, notified, cancelled;
static atomic_int max_threads;
static double started, last_done;
static pthread_mutex_t last_mu = PTHREAD_MUTEX_INITIALIZER;

/* The start signal: a WaitGroup in goroutines, a condition variable on threads. */
static gmp_wg gate = GMP_WG_INIT;
static gmp_wg done = GMP_WG_INIT;
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_open;

static void watchdog(int sig)
{
    (void)sig;
    static const char msg[] = "reallib_pq: hung (watchdog)\n";
    if (write(2, msg, sizeof msg - 1) < 0) {
        /* nothing more to do */
    }
    if (use_goroutines)
        gmp_dump(2);
    _exit(3);
}

static void note_threads(void)
{
    int t = sched_stats().threads;
    int m = atomic_load(&max_threads);
    while (t > m && !atomic_compare_exchange_weak(&max_threads, &m, t))
        ;
}

static void wait_gate(void)
{
    if (use_goroutines) {
        CHECK_OK(gmp_wg_wait(&gate));
        return;
    }
    CHECK_EQ(pthread_mutex_lock(&gate_mu), 0);
    while (!gate_open)
        CHECK_EQ(pthread_cond_wait(&gate_cv, &gate_mu), 0);
    CHECK_EQ(pthread_mutex_unlock(&gate_mu), 0);
}

/* Runs a command that returns no rows, or fails the run. */
static void command(PGconn *c, long id, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        fprintf(stderr, "worker %ld: %s: %s", id, sql, PQerrorMessage(c));
        _exit(1);
    }
    PQclear(r);
}

/* Waits up to `secs` for the connection's socket to be readable (poll: parks a
 * goroutine), then reads what came; false on timeout. */
static int await_input(PGconn *c, long id, double secs)
{
    struct pollfd p = {PQsocket(c), POLLIN, 0};
    int n = poll(&p, 1, (int)(secs * 1000));
    CHECK(n >= 0);
    if (n == 0)
        return 0;
    if (!PQconsumeInput(c)) {
        fprintf(stderr, "worker %ld: %s", id, PQerrorMessage(c));
        _exit(1);
    }
    return 1;
}

static void listen_notify(PGconn *c, long id)
{
    char sql[80];
    snprintf(sql, sizeof sql, "LISTEN ch%ld", id);
    command(c, id, sql);
    atomic_fetch_add(&listening, 1);
    WAIT_UNTIL(atomic_load(&listening) == CONNS, 20.0);
    long to = (id + 1) % CONNS;
    snprintf(sql, sizeof sql, "NOTIFY ch%ld, 'from %ld'", to, id);
    command(c, id, sql);
    char want_chan[32], want_from[32];
    snprintf(want_chan, sizeof want_chan, "ch%ld", id);
    snprintf(want_from, sizeof want_from, "from %ld", (id + CONNS - 1) % CONNS);
    double deadline = now_sec() + 10.0;
    for (;;) {
        PGnotify *n = PQnotifies(c);
        if (n != NULL) {
            CHECK(strcmp(n->relname, want_chan) == 0);
            CHECK(strcmp(n->extra, want_from) == 0);
            PQfreemem(n);
            atomic_fetch_add(&notified, 1);
            return;
        }
        CHECK(now_sec() < deadline);
        await_input(c, id, deadline - now_sec());
    }
}

static void cancel(PGconn *c, long id)
{
    CHECK(PQsendQuery(c, "SELECT pg_sleep(30)") == 1);
    PGcancel *k = PQgetCancel(c);
    CHECK(k != NULL);
    double t0 = now_sec();
    /* A cancel that reaches the backend before it starts the query is ignored: ask
     * again until the query ends. */
    do {
        char err[256];
        if (!PQcancel(k, err, sizeof err)) {
            fprintf(stderr, "worker %ld: PQcancel: %s\n", id, err);
            _exit(1);
        }
        CHECK(now_sec() - t0 < 5.0);
        await_input(c, id, 0.2);
    } while (PQisBusy(c));
    PQfreeCancel(k);
    PGresult *r = PQgetResult(c);
    CHECK(PQresultStatus(r) == PGRES_FATAL_ERROR);
    const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    CHECK(state != NULL && strcmp(state, "57014") == 0);
    PQclear(r);
    while ((r = PQgetResult(c)) != NULL)
        PQclear(r);
    atomic_fetch_add(&cancelled, 1);
}

static void worker(long id)
{
    PGconn *c = PQconnectdb(conninfo);
    CHECK(c != NULL);
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "worker %ld: %s", id, PQerrorMessage(c));
        _exit(1);
    }
    atomic_fetch_add(&connected, 1);
    if (use_goroutines)
        note_threads();
    wait_gate();
    char arg[16];
    snprintf(arg, sizeof arg, "%ld", id);
    const char *params[1] = {arg};
    PGresult *r = PQexecParams(c, "SELECT pg_sleep(" SLEEP "), $1::int * 2", 1, NULL, params,
                               NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        fprintf(stderr, "worker %ld: %s", id, PQerrorMessage(c));
        _exit(1);
    }
    CHECK_EQ(PQntuples(r), 1);
    CHECK_EQ(PQnfields(r), 2);
    long v = atol(PQgetvalue(r, 0, 1));
    CHECK_EQ(v, id * 2);
    PQclear(r);
    double t = now_sec();
    CHECK_EQ(pthread_mutex_lock(&last_mu), 0);
    if (t > last_done)
        last_done = t;
    CHECK_EQ(pthread_mutex_unlock(&last_mu), 0);
    atomic_fetch_add(&answered, 1);
    atomic_fetch_add(&answer_sum, v);
    if (use_goroutines)
        note_threads();
    listen_notify(c, id);
    if (id < CANCELS)
        cancel(c, id);
    PQfinish(c);
}

static void go_worker(void *arg)
{
    worker((long)(intptr_t)arg);
    gmp_wg_done(&done);
}

static void *thread_worker(void *arg)
{
    worker((long)(intptr_t)arg);
    return NULL;
}

int main(int argc, char **argv)
{
    CHECK(argc == 4);
    const char *transport = argv[1];
    CHECK(strcmp(argv[2], "go") == 0 || strcmp(argv[2], "thread") == 0);
    use_goroutines = strcmp(argv[2], "go") == 0;
    conninfo = argv[3];
    signal(SIGALRM, watchdog);
    signal(SIGPIPE, SIG_IGN);
    alarm(60);
    double t0 = now_sec();
    static pthread_t threads[CONNS];
    if (use_goroutines) {
        CHECK_OK(gmp_wg_add(&gate, 1));
        CHECK_OK(gmp_wg_add(&done, CONNS));
        for (long i = 0; i < CONNS; i++)
            CHECK_OK(gmp_go(go_worker, (void *)(intptr_t)i));
    } else {
        for (long i = 0; i < CONNS; i++)
            CHECK_EQ(pthread_create(&threads[i], NULL, thread_worker, (void *)(intptr_t)i), 0);
    }
    WAIT_UNTIL(atomic_load(&connected) == CONNS, 30.0);
    double connect_s = now_sec() - t0;
    started = now_sec();
    if (use_goroutines) {
        gmp_wg_done(&gate);
        CHECK_OK(gmp_wg_wait(&done));
    } else {
        CHECK_EQ(pthread_mutex_lock(&gate_mu), 0);
        gate_open = 1;
        CHECK_EQ(pthread_cond_broadcast(&gate_cv), 0);
        CHECK_EQ(pthread_mutex_unlock(&gate_mu), 0);
        for (int i = 0; i < CONNS; i++)
            CHECK_EQ(pthread_join(threads[i], NULL), 0);
    }
    double sleep_s = last_done - started;
    CHECK_EQ(atomic_load(&answered), CONNS);
    CHECK_EQ(atomic_load(&answer_sum), (long)CONNS * (CONNS - 1));
    if (use_goroutines)
        printf("libpq %s in goroutines: %d connections in %.2f s, all in pg_sleep(" SLEEP
               ") in %.2f s, at most %d threads at GOMAXPROCS=%d\n",
               transport, CONNS, connect_s, sleep_s, atomic_load(&max_threads),
               gmp_maxprocs(0));
    else
        printf("libpq %s on pthreads: %d connections in %.2f s, all in pg_sleep(" SLEEP
               ") in %.2f s\n",
               transport, CONNS, connect_s, sleep_s);
    CHECK(sleep_s < 3.0);
    if (use_goroutines)
        CHECK(atomic_load(&max_threads) <= gmp_maxprocs(0) + 8);
    CHECK_EQ(atomic_load(&notified), CONNS);
    CHECK_EQ(atomic_load(&cancelled), CANCELS);
    printf("outcome: pq %s connections=%ld answers=%ld sum=%ld notified=%ld cancelled=%ld\n",
           transport, atomic_load(&connected), atomic_load(&answered),
           atomic_load(&answer_sum), atomic_load(&notified), atomic_load(&cancelled));
    return 0;
}
