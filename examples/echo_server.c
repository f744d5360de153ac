/*
 * echo_server: a TCP echo server with one goroutine per connection (the netpoller parks
 * goroutines, not threads, while they wait for data).
 *
 *   ./echo_server 7000        serve on 127.0.0.1:7000 until killed
 *   ./echo_server --selftest  serve on a free port, run 100 client goroutines against it,
 *                             check every echoed byte, and exit 0
 */
#define _GNU_SOURCE 1
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <gmp-sched/gmp.h>

static void serve_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[4096];
    int64_t n;
    while ((n = gmp_read(fd, buf, sizeof buf)) > 0) /* parks until data arrives */
        for (int64_t off = 0; off < n;) {
            int64_t w = gmp_write(fd, buf + off, (size_t)(n - off));
            if (w < 0)
                goto done;
            off += w;
        }
done:
    gmp_close(fd);
}

static void accept_loop(void *arg)
{
    int listener = (int)(intptr_t)arg;
    for (;;) {
        int fd = gmp_accept(listener, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            break; /* -EBADF once the listener is closed */
        gmp_go(serve_conn, (void *)(intptr_t)fd);
    }
}

static int listen_on(uint16_t port, uint16_t *bound)
{
    int fd = gmp_socket(AF_INET, SOCK_STREAM, 0); /* registered with the poller */
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 1024) != 0)
        return -1;
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    *bound = ntohs(a.sin_port);
    return fd;
}

/* --selftest: 100 clients, each sends 100 messages and checks the echo. */
static uint16_t test_port;
static gmp_wg clients = GMP_WG_INIT;
static int failures;

static void client(void *arg)
{
    int id = (int)(intptr_t)arg;
    int fd = gmp_socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons(test_port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || gmp_connect(fd, (struct sockaddr *)&a, sizeof a, 5000000000LL) != 0) {
        __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
        gmp_wg_done(&clients);
        return;
    }
    for (int i = 0; i < 100; i++) {
        char out[32], in[32];
        int n = snprintf(out, sizeof out, "client %d message %d", id, i);
        int got = 0;
        if (gmp_write(fd, out, (size_t)n) != n)
            break;
        while (got < n) {
            int64_t r = gmp_read(fd, in + got, (size_t)(n - got));
            if (r <= 0)
                break;
            got += (int)r;
        }
        if (got != n || memcmp(in, out, (size_t)n) != 0) {
            __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
            break;
        }
    }
    gmp_close(fd);
    gmp_wg_done(&clients);
}

int main(int argc, char **argv)
{
    int selftest = argc > 1 && strcmp(argv[1], "--selftest") == 0;
    uint16_t port = 0;
    int listener = listen_on(selftest || argc < 2 ? 0 : (uint16_t)atoi(argv[1]), &port);
    if (listener < 0) {
        perror("listen");
        return 1;
    }
    gmp_go(accept_loop, (void *)(intptr_t)listener);
    if (!selftest) {
        printf("echo server on 127.0.0.1:%u\n", port);
        for (;;)
            gmp_sleep(1000000000LL);
    }
    test_port = port;
    gmp_wg_add(&clients, 100);
    for (int i = 0; i < 100; i++)
        gmp_go(client, (void *)(intptr_t)i);
    gmp_wg_wait(&clients);
    gmp_close(listener);
    printf("echo_server selftest: 100 clients x 100 messages, %d failures\n", failures);
    return failures != 0;
}
