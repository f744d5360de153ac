/*
 * deadlock.c -- "all goroutines are asleep - deadlock!" (rt/checkdead.rs).
 *
 *   main_wg     goroutines wait on channels nobody will use, C main waits on a WaitGroup
 *               they never finish: the runtime must report the deadlock, dump, exit 2;
 *   main_recv   no goroutine at all, C main receives on a channel nobody has: same;
 *   traced      main_recv while an execution trace runs, the tenth of the process (each
 *               trace has a writer thread of the runtime's, which must be known as such
 *               however many traces came before);
 *   off         main_wg under GMP_DEBUG=checkdead=0: no report (SIGALRM ends the wait
 *               after 2 s with status 0; an alarm, not a thread, which would itself
 *               keep the detector quiet);
 *   pinned_lock two pinned goroutines on one thread (GOMAXPROCS=1; A spawns B, so that B
 *               first runs where A does): B holds a mutex and sleeps; A locks the thread
 *               and waits for the mutex. B's wake-up can run
 *               only on that thread, which LockOSThread keeps for A: the runtime must
 *               report the deadlock (and name the locked thread), not hang;
 *   (none)      no false report: C main waits on a channel while a thread the runtime has
 *               never seen sleeps 1 s in nanosleep and then sends; a goroutine waits for a
 *               timer meanwhile, another on a channel the late thread closes. Exit 0.
 */
#include "check.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>

static struct gmp_chan *never, *late, *closed_late;
static gmp_wg wg = GMP_WG_INIT;

void wait_forever(void *arg);
void wait_forever(void *arg)
{
    (void)arg;
    long v;
    gmp_chan_recv(never, &v);
    gmp_wg_done(&wg);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "alarm: still waiting after 2 s, no deadlock report\n";
    if (write(1, msg, sizeof msg - 1) < 0) {
        /* nothing to do */
    }
    _exit(0);
}

static void *late_sender(void *arg)
{
    (void)arg;
    sleep_ms(1000);
    long v = 42;
    CHECK_OK(gmp_chan_send(late, &v));
    CHECK_OK(gmp_chan_close(closed_late));
    return NULL;
}

static void timer_waiter(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_sleep(300LL * 1000000LL));
    gmp_wg_done(&wg);
}

static gmp_mutex pmu = GMP_MUTEX_INIT;

static void pinned_holder(void *arg)
{
    (void)arg;
    gmp_mutex_lock(&pmu);
    CHECK_OK(gmp_sleep(50LL * 1000000LL));
    gmp_mutex_unlock(&pmu);
    gmp_wg_done(&wg);
}

static void pinned_locker(void *arg)
{
    (void)arg;
    /* Spawned here, on the only P, B runs next on this thread when A sleeps. */
    gmp_attr attr = {.stack_size = 0, .flags = GMP_GO_PINNED};
    CHECK_OK(gmp_go_attr(pinned_holder, NULL, &attr));
    CHECK_OK(gmp_sleep(20LL * 1000000LL));
    CHECK_EQ(gmp_lock_os_thread(), 1);
    gmp_mutex_lock(&pmu);
    gmp_mutex_unlock(&pmu);
    CHECK_EQ(gmp_unlock_os_thread(), 0);
    gmp_wg_done(&wg);
}

static void close_waiter(void *arg)
{
    (void)arg;
    long v;
    CHECK_EQ(gmp_chan_recv(closed_late, &v), -EPIPE);
    gmp_wg_done(&wg);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    CHECK_OK(gmp_chan_make(&never, sizeof(long), 0));
    if (strcmp(mode, "main_wg") == 0 || strcmp(mode, "off") == 0) {
        if (strcmp(mode, "off") == 0) {
            signal(SIGALRM, on_alarm);
            alarm(2);
        }
        CHECK_OK(gmp_wg_add(&wg, 3));
        for (int i = 0; i < 3; i++)
            CHECK_OK(gmp_go(wait_forever, NULL));
        gmp_wg_wait(&wg);
        fprintf(stderr, "gmp_wg_wait returned\n");
        return 1;
    }
    if (strcmp(mode, "pinned_lock") == 0) {
        /* One P: A spawns B, which then first runs on A's thread (and stays bound). */
        CHECK(gmp_maxprocs(1) >= 1);
        gmp_attr attr = {.stack_size = 0, .flags = GMP_GO_PINNED};
        CHECK_OK(gmp_wg_add(&wg, 2));
        CHECK_OK(gmp_go_attr(pinned_locker, NULL, &attr));
        gmp_wg_wait(&wg);
        fprintf(stderr, "gmp_wg_wait returned\n");
        return 1;
    }
    if (strcmp(mode, "traced") == 0) {
        for (int i = 0; i < 10; i++) {
            CHECK_OK(gmp_trace_start("deadlock.trace"));
            if (i < 9)
                CHECK_OK(gmp_trace_stop());
        }
        mode = "main_recv";
    }
    if (strcmp(mode, "main_recv") == 0) {
        long v;
        gmp_chan_recv(never, &v);
        fprintf(stderr, "gmp_chan_recv returned\n");
        return 1;
    }
    /* No false report. */
    CHECK_OK(gmp_chan_make(&late, sizeof(long), 0));
    CHECK_OK(gmp_chan_make(&closed_late, sizeof(long), 0));
    CHECK_OK(gmp_wg_add(&wg, 2));
    CHECK_OK(gmp_go(timer_waiter, NULL));
    CHECK_OK(gmp_go(close_waiter, NULL));
    pthread_t t;
    CHECK(pthread_create(&t, NULL, late_sender, NULL) == 0);
    double t0 = now_sec();
    long v = 0;
    CHECK_OK(gmp_chan_recv(late, &v));
    CHECK_EQ(v, 42);
    CHECK(now_sec() - t0 >= 0.9);
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK(pthread_join(t, NULL) == 0);
    printf("woken after %.2f s by a thread the runtime had never seen; no report\n", now_sec() - t0);
    return 0;
}
