/*
 * interpose_memcached.c -- the distro's unmodified libmemcached from 500 goroutines at
 * once: each creates its own memcached_st naming one server, whose first operation
 * resolves the host with getaddrinfo (the runtime's resolver, src/net/, parks instead of
 * taking the syscall hand-off), connects (a non-blocking connect waited for with poll)
 * and then does a SET and a GET of its own key. Every value must come back, and the
 * process must stay at most GOMAXPROCS + 8 threads: C main counts /proc/self/task every
 * millisecond while the goroutines run, and keeps the thread names of the largest count
 * to print when it is over.
 *
 * argv[1]: the port of the memcached on 127.0.0.1 (tests/c_interpose.rs starts it on a
 * free port and stops it); argv[2]: the host name to give libmemcached ("127.0.0.1", or
 * "localhost", a name of /etc/hosts).
 */
#include "check.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include <libmemcached/memcached.h>

#include <gmp-sched/gmp.h>

#define CLIENTS 500

static const char *host;
static in_port_t port;
static gmp_wg done = GMP_WG_INIT;
static int ok_clients;

static void client(void *arg)
{
    int id = (int)(intptr_t)arg;
    memcached_st *m = memcached_create(NULL);
    CHECK(m != NULL);
    CHECK_EQ(memcached_server_add(m, host, port), MEMCACHED_SUCCESS);
    char key[32], val[64];
    snprintf(key, sizeof key, "k:%s:%d", host, id);
    snprintf(val, sizeof val, "value %d of %s", id, host);
    memcached_return_t rc = memcached_set(m, key, strlen(key), val, strlen(val), 0, 0);
    if (rc != MEMCACHED_SUCCESS)
        fprintf(stderr, "client %d: set: %s\n", id, memcached_last_error_message(m));
    CHECK_EQ(rc, MEMCACHED_SUCCESS);
    size_t len = 0;
    uint32_t flags = 1;
    char *got = memcached_get(m, key, strlen(key), &len, &flags, &rc);
    if (rc != MEMCACHED_SUCCESS)
        fprintf(stderr, "client %d: get: %s\n", id, memcached_last_error_message(m));
    CHECK_EQ(rc, MEMCACHED_SUCCESS);
    CHECK(got != NULL);
    CHECK_EQ(len, strlen(val));
    CHECK(memcmp(got, val, len) == 0);
    CHECK_EQ(flags, 0);
    free(got);
    memcached_free(m);
    __atomic_add_fetch(&ok_clients, 1, __ATOMIC_RELAXED);
    gmp_wg_done(&done);
}

/* The names of the process's threads, "comm(tid) ...", and their count. */
static int thread_names(char *out, size_t cap)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int n = 0;
    size_t used = 0;
    CHECK(d != NULL);
    out[0] = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        n++;
        char path[300], comm[32] = "?";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f) {
            if (fgets(comm, sizeof comm, f))
                comm[strcspn(comm, "\n")] = 0;
            fclose(f);
        }
        int w = snprintf(out + used, cap - used, " %s(%s)", comm, e->d_name);
        if (w > 0 && (size_t)w < cap - used)
            used += (size_t)w;
    }
    closedir(d);
    return n;
}

int main(int argc, char **argv)
{
    CHECK(argc == 3);
    signal(SIGPIPE, SIG_IGN);
    int p = atoi(argv[1]);
    CHECK(p > 0 && p < 65536);
    port = (in_port_t)p;
    host = argv[2];
    static char names[8192], peak_names[8192];
    int peak = thread_names(peak_names, sizeof peak_names);
    double t0 = now_sec();
    CHECK_OK(gmp_wg_add(&done, CLIENTS));
    for (int i = 0; i < CLIENTS; i++)
        CHECK_OK(gmp_go(client, (void *)(intptr_t)i));
    /* C main is not a goroutine: its usleep is libc's, and it counts the threads until
     * every client is done (the last count is taken after that). */
    for (;;) {
        int finished = __atomic_load_n(&ok_clients, __ATOMIC_RELAXED) == CLIENTS;
        int n = thread_names(names, sizeof names);
        if (n > peak) {
            peak = n;
            memcpy(peak_names, names, sizeof names);
        }
        if (finished)
            break;
        CHECK(now_sec() - t0 < 60);
        usleep(1000);
    }
    CHECK_OK(gmp_wg_wait(&done));
    double dt = now_sec() - t0;
    long procs = gmp_maxprocs(0);
    printf("memcached (%s): %d goroutines, a SET and a GET each, in %.2f s; "
           "at most %d threads at GOMAXPROCS=%ld:%s\n",
           host, CLIENTS, dt, peak, procs, peak_names);
    CHECK_EQ(ok_clients, CLIENTS);
    CHECK(peak <= procs + 8);
    return 0;
}
