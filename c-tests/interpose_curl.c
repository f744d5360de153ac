/*
 * interpose_curl.c -- the distro's unmodified libcurl, easy API, from 200 goroutines at
 * once, against a small HTTP/1.1 server written here the thread-per-connection way
 * (blocking accept, read, write) and run with one goroutine per connection. libcurl's
 * socket, connect, poll, recv and send resolve to libgmp.so's hooks. Every body must be
 * the page asked for, and the process must stay at most GOMAXPROCS + 8 threads.
 * The server listens on 127.0.0.1 and a free port, and stops at the end.
 */
#include "check.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <curl/curl.h>

#include <gmp-sched/gmp.h>

#define CLIENTS 200
#define ROUNDS 5

static int listener, port;
static volatile int stopping;
static gmp_wg done = GMP_WG_INIT;
static long good_bodies;
static int max_threads;

/* The page for `id`: a few KiB that only that id produces. */
static size_t page(int id, char *out, size_t cap)
{
    size_t n = 0;
    for (int line = 0; n + 64 < cap && line < 100; line++)
        n += (size_t)snprintf(out + n, cap - n, "page %d line %d\n", id, line);
    return n;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* One connection, as a thread would serve it: read the request head, answer, close. */
static void handle(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char req[2048];
    size_t got = 0;
    while (got < sizeof req - 1) {
        ssize_t n = read(fd, req + got, sizeof req - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        req[got] = 0;
        if (strstr(req, "\r\n\r\n"))
            break;
    }
    req[got] = 0;
    int id = -1;
    if (sscanf(req, "GET /page/%d ", &id) == 1 && id >= 0) {
        char head[128], body[4096];
        size_t blen = page(id, body, sizeof body);
        int hlen = snprintf(head, sizeof head,
                            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                            "Content-Length: %zu\r\nConnection: close\r\n\r\n", blen);
        if (write_all(fd, head, (size_t)hlen) == 0)
            write_all(fd, body, blen);
    } else {
        const char *nf = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        write_all(fd, nf, strlen(nf));
    }
    close(fd);
}

static void serve(void *arg)
{
    (void)arg;
    for (;;) {
        int c = accept(listener, NULL, NULL);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            CHECK(stopping);
            return;
        }
        CHECK_OK(gmp_go(handle, (void *)(intptr_t)c));
    }
}

struct buf {
    char data[8192];
    size_t len;
};

static size_t collect(char *p, size_t size, size_t n, void *ud)
{
    struct buf *b = ud;
    size_t k = size * n;
    if (b->len + k > sizeof b->data)
        return 0;
    memcpy(b->data + b->len, p, k);
    b->len += k;
    return k;
}

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
    for (int round = 0; round < ROUNDS; round++) {
        int want_id = id * ROUNDS + round;
        CURL *h = curl_easy_init();
        CHECK(h != NULL);
        char url[64];
        snprintf(url, sizeof url, "http://127.0.0.1:%d/page/%d", port, want_id);
        struct buf *b = calloc(1, sizeof *b);
        CHECK(b != NULL);
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, b);
        curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
        CURLcode rc = curl_easy_perform(h);
        if (rc != CURLE_OK)
            fprintf(stderr, "client %d: %s\n", id, curl_easy_strerror(rc));
        CHECK_EQ(rc, CURLE_OK);
        long status = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        CHECK_EQ(status, 200);
        char want[4096];
        size_t wlen = page(want_id, want, sizeof want);
        CHECK_EQ(b->len, wlen);
        CHECK(memcmp(b->data, want, wlen) == 0);
        __atomic_add_fetch(&good_bodies, 1, __ATOMIC_RELAXED);
        free(b);
        curl_easy_cleanup(h);
        note_threads();
    }
    gmp_wg_done(&done);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    CHECK_EQ(curl_global_init(CURL_GLOBAL_DEFAULT), 0);
    listener = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(listener >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(bind(listener, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t alen = sizeof a;
    CHECK_EQ(getsockname(listener, (struct sockaddr *)&a, &alen), 0);
    port = ntohs(a.sin_port);
    CHECK_EQ(listen(listener, 1024), 0);
    CHECK_OK(gmp_go(serve, NULL));
    double t0 = now_sec();
    CHECK_OK(gmp_wg_add(&done, CLIENTS));
    for (int i = 0; i < CLIENTS; i++)
        CHECK_OK(gmp_go(client, (void *)(intptr_t)i));
    CHECK_OK(gmp_wg_wait(&done));
    double dt = now_sec() - t0;
    note_threads();
    int procs = gmp_maxprocs(0);
    printf("curl: %d goroutines x %d fetches in %.2f s, at most %d threads at GOMAXPROCS=%d\n",
           CLIENTS, ROUNDS, dt, max_threads, procs);
    CHECK_EQ(good_bodies, (long)CLIENTS * ROUNDS);
    CHECK(max_threads <= procs + 8);
    stopping = 1;
    close(listener);
    curl_global_cleanup();
    return 0;
}
