/*
 * tcp_rtt: one TCP connection on 127.0.0.1 inside the process. A listener on a random
 * port (gmp_socket, bind, listen), an accept goroutine that starts one echo goroutine per
 * connection (gmp_read, gmp_write what was read), and the driver (Go: main; a root
 * goroutine with -shape 0, the C main thread with -shape 1), which connects (gmp_connect)
 * and then N times writes a 64-byte message and reads the 64-byte echo. Both sockets get TCP_NODELAY, as Go's net package sets on every TCP
 * connection. Reports ns per round trip, timed from the first write to the last echo;
 * extra key threads = the process's OS threads (/proc/self/status Threads:) at the end
 * of the measured phase. Check: every echo equals the message sent.
 * Mirror: bench/go/tcp_rtt/main.go.
 */
#define BENCH_TCP 1
#include "bench.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

static const char *const WORKLOAD = "tcp_rtt";
enum { MSG_SIZE = 64 };

static int64_t n = 100000;
static struct sockaddr_in server_addr;
static int listener = -1;
static gmp_wg wg = GMP_WG_INIT;
static int64_t bad;       /* echoes that differ from the message sent (driver) */
static int64_t io_error;  /* first failed call of the driver, as -errno */
static const char *io_what = "";
static int64_t wall_ns;
static int threads;

static void serve(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[4096];
    int64_t r;
    while ((r = gmp_read(fd, buf, sizeof buf)) > 0)
        if (gmp_write(fd, buf, (size_t)r) != r)
            break;
    gmp_close(fd);
    gmp_wg_done(&wg);
}

static void accept_loop(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = gmp_accept(listener, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            break; /* -EBADF once the listener is closed */
        set_nodelay(fd);
        gmp_wg_add(&wg, 1);
        if (gmp_go(serve, (void *)(intptr_t)fd) <= 0) {
            gmp_close(fd);
            gmp_wg_done(&wg);
        }
    }
    gmp_wg_done(&wg);
}

/* What Go's main does; run by a root goroutine or by the C main thread (-shape). */
static void driver(void *arg)
{
    (void)arg;
    gmp_wg_add(&wg, 1);
    if (gmp_go(accept_loop, NULL) <= 0) {
        gmp_wg_done(&wg);
        io_error = -1, io_what = "gmp_go(accept_loop)";
        goto out;
    }
    int fd = gmp_socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
        io_error = fd, io_what = "gmp_socket";
        goto out;
    }
    int rc = gmp_connect(fd, (struct sockaddr *)&server_addr, sizeof server_addr, -1);
    if (rc != 0) {
        io_error = rc, io_what = "gmp_connect";
        gmp_close(fd);
        goto out;
    }
    set_nodelay(fd);

    char out[MSG_SIZE], in[MSG_SIZE];
    for (int i = 0; i < MSG_SIZE; i++)
        out[i] = (char)i;
    int64_t t0 = bench_now_ns();
    for (int64_t i = 0; i < n; i++) {
        memcpy(out, &i, sizeof i);
        int64_t w = gmp_write(fd, out, MSG_SIZE);
        if (w != MSG_SIZE) {
            io_error = w, io_what = "gmp_write";
            break;
        }
        int64_t r = read_full(fd, in, MSG_SIZE);
        if (r != MSG_SIZE) {
            io_error = r, io_what = "gmp_read";
            break;
        }
        if (memcmp(in, out, MSG_SIZE) != 0)
            bad++;
    }
    wall_ns = bench_now_ns() - t0;
    threads = os_threads();
    gmp_close(fd);
out:
    gmp_close(listener); /* ends accept_loop */
    gmp_wg_wait(&wg);
}

int main(int argc, char **argv)
{
    int64_t procs = 0;
    const bench_flag flags[] = {
        {"n", &n, "round trips"},
        {"procs", &procs, "GOMAXPROCS (0: leave the runtime's default)"},
        BENCH_SHAPE_FLAG,
    };
    bench_parse(argc, argv, flags, sizeof flags / sizeof flags[0]);
    if (n <= 0)
        bench_fail(WORKLOAD, "-n %" PRId64 " out of range", n);
    int p = bench_setup_procs(WORKLOAD, procs);
    raise_nofile();

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

    if (io_error != 0)
        bench_fail(WORKLOAD, "%s = %" PRId64, io_what, io_error);
    if (bad != 0)
        bench_fail(WORKLOAD, "%" PRId64 " echoes differ from the message sent", bad);
    char extra[32];
    snprintf(extra, sizeof extra, " threads=%d", threads);
    bench_result(WORKLOAD, p, n, wall_ns, extra);
    return 0;
}
