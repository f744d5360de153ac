/*
 * tcp_echo: C TCP connections on 127.0.0.1 inside the process. A listener on a random
 * port (gmp_socket, bind, listen), an accept goroutine that starts one echo goroutine per
 * connection (gmp_read, gmp_write what was read), and one client goroutine per
 * connection, which connects (gmp_connect), waits for the start signal (a closed
 * channel) and then M times writes a 64-byte message and reads the 64-byte echo. All
 * sockets get TCP_NODELAY, as Go's net package sets on every TCP connection. The driver
 * (Go: main; a root goroutine with -shape 0, the C main thread with -shape 1) starts the
 * accept and client goroutines, waits until all have dialed, closes the start channel
 * and waits for the clients. Reports ns per message (n = C*M), timed from the start
 * signal (all connections established) until every client is done; extra key threads =
 * the process's OS threads (/proc/self/status Threads:) at the end of the measured phase.
 * Check: every echo equals the message sent.
 * Mirror: bench/go/tcp_echo/main.go.
 */
#define BENCH_TCP 1
#include "bench.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <sys/socket.h>

static const char *const WORKLOAD = "tcp_echo";
enum { MSG_SIZE = 64 };

static int64_t conns = 1000, m = 200;
static struct sockaddr_in server_addr;
static int listener = -1;
static gmp_chan *start;
static gmp_wg servers = GMP_WG_INIT; /* accept loop and echo goroutines */
static gmp_wg dialed = GMP_WG_INIT;  /* clients connected (or failed) */
static gmp_wg clients = GMP_WG_INIT; /* clients done */
static atomic_llong bad;             /* echoes that differ from the message sent */
static atomic_llong failed;          /* clients that failed */
static _Atomic int64_t first_error;  /* the first failure's -errno */
static const char *_Atomic first_what;
static int64_t wall_ns;
static int threads;

static void fail(const char *what, int64_t err)
{
    atomic_fetch_add(&failed, 1);
    int64_t zero = 0;
    if (atomic_compare_exchange_strong(&first_error, &zero, err == 0 ? -1 : err))
        atomic_store(&first_what, what);
}

static void serve(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[4096];
    int64_t r;
    while ((r = gmp_read(fd, buf, sizeof buf)) > 0)
        if (gmp_write(fd, buf, (size_t)r) != r)
            break;
    gmp_close(fd);
    gmp_wg_done(&servers);
}

static void accept_loop(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = gmp_accept(listener, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            break; /* -EBADF once the listener is closed */
        set_nodelay(fd);
        gmp_wg_add(&servers, 1);
        if (gmp_go(serve, (void *)(intptr_t)fd) <= 0) {
            gmp_close(fd);
            gmp_wg_done(&servers);
        }
    }
    gmp_wg_done(&servers);
}

static void client(void *arg)
{
    int64_t id = (int64_t)(intptr_t)arg;
    int fd = gmp_socket(AF_INET, SOCK_STREAM, 0);
    int rc = fd < 0 ? fd
                    : gmp_connect(fd, (struct sockaddr *)&server_addr, sizeof server_addr, -1);
    gmp_wg_done(&dialed);
    if (rc != 0) {
        fail(fd < 0 ? "gmp_socket" : "gmp_connect", rc);
        if (fd >= 0)
            gmp_close(fd);
        gmp_wg_done(&clients);
        return;
    }
    set_nodelay(fd);
    gmp_chan_recv(start, NULL); /* returns once start is closed */

    char out[MSG_SIZE], in[MSG_SIZE];
    for (int i = 0; i < MSG_SIZE; i++)
        out[i] = (char)i;
    memcpy(out + 8, &id, sizeof id);
    for (int64_t i = 0; i < m; i++) {
        memcpy(out, &i, sizeof i);
        int64_t w = gmp_write(fd, out, MSG_SIZE);
        if (w != MSG_SIZE) {
            fail("gmp_write", w);
            break;
        }
        int64_t r = read_full(fd, in, MSG_SIZE);
        if (r != MSG_SIZE) {
            fail("gmp_read", r);
            break;
        }
        if (memcmp(in, out, MSG_SIZE) != 0)
            atomic_fetch_add(&bad, 1);
    }
    gmp_close(fd);
    gmp_wg_done(&clients);
}

/* What Go's main does; run by a root goroutine or by the C main thread (-shape). */
static void driver(void *arg)
{
    (void)arg;
    gmp_wg_add(&servers, 1);
    if (gmp_go(accept_loop, NULL) <= 0) {
        gmp_wg_done(&servers);
        fail("gmp_go(accept_loop)", -1);
        goto out;
    }
    gmp_wg_add(&dialed, conns);
    gmp_wg_add(&clients, conns);
    for (int64_t i = 0; i < conns; i++)
        if (gmp_go(client, (void *)(intptr_t)i) <= 0) {
            fail("gmp_go(client)", -1);
            gmp_wg_done(&dialed);
            gmp_wg_done(&clients);
        }
    gmp_wg_wait(&dialed);

    int64_t t0 = bench_now_ns();
    gmp_chan_close(start);
    gmp_wg_wait(&clients);
    wall_ns = bench_now_ns() - t0;
    threads = os_threads();
out:
    gmp_close(listener); /* ends accept_loop */
    gmp_wg_wait(&servers);
}

int main(int argc, char **argv)
{
    int64_t procs = 0;
    const bench_flag flags[] = {
        {"c", &conns, "connections"},
        {"m", &m, "messages per connection"},
        {"procs", &procs, "GOMAXPROCS (0: leave the runtime's default)"},
        BENCH_SHAPE_FLAG,
    };
    bench_parse(argc, argv, flags, sizeof flags / sizeof flags[0]);
    if (conns <= 0 || conns > 8000 || m <= 0)
        bench_fail(WORKLOAD, "-c %" PRId64 " / -m %" PRId64 " out of range (c in 1..8000)",
                   conns, m);
    int p = bench_setup_procs(WORKLOAD, procs);
    raise_nofile();

    int rc = gmp_chan_make(&start, 0, 0);
    if (rc != 0)
        bench_fail(WORKLOAD, "gmp_chan_make = %d", rc);
    listener = gmp_socket(AF_INET, SOCK_STREAM, 0);
    if (listener < 0)
        bench_fail(WORKLOAD, "gmp_socket = %d", listener);
    server_addr.sin_family = AF_INET;
    server_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof server_addr;
    if (bind(listener, (struct sockaddr *)&server_addr, sizeof server_addr) != 0 ||
        listen(listener, 4096) != 0 ||
        getsockname(listener, (struct sockaddr *)&server_addr, &len) != 0)
        bench_fail(WORKLOAD, "bind/listen/getsockname on 127.0.0.1:0 failed");

    bench_drive(WORKLOAD, driver, NULL);

    if (atomic_load(&failed) != 0)
        bench_fail(WORKLOAD, "%lld clients failed, first: %s = %" PRId64,
                   (long long)atomic_load(&failed), atomic_load(&first_what),
                   atomic_load(&first_error));
    if (atomic_load(&bad) != 0)
        bench_fail(WORKLOAD, "%lld echoes differ from the message sent",
                   (long long)atomic_load(&bad));
    gmp_chan_release(start);
    char extra[32];
    snprintf(extra, sizeof extra, " threads=%d", threads);
    bench_result(WORKLOAD, p, conns * m, wall_ns, extra);
    return 0;
}
