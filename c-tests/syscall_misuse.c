/*
 * syscall_misuse.c -- misuses of the blocking-call API get -EINVAL or abort with a "gmp:"
 * message that names them (release builds too).
 *
 * Without arguments: inside a gmp_blocking function, gmp_exitsyscall and gmp_entersyscall
 * return -EINVAL and change nothing (the goroutine stays in its blocking call, and
 * gmp_blocking ends it normally, also nested in a gmp_entersyscall pair); afterwards the
 * goroutine yields, which shows that its state is sound. At GOMAXPROCS=1 with a second
 * goroutine yielding in a loop, so that the P is retaken while the blocking function
 * runs (a refused exit that ended the call anyway would make gmp_blocking's own exit
 * dereference a null P). The blocking function also calls gmp_wg_wait on a zero count,
 * takes a read lock, and sends and receives on a buffered channel with room: safe points
 * that must do nothing without a processor.
 *
 * With argv[1] naming a misuse, the program must die by SIGABRT with a message naming it
 * (the harness checks the signal and stderr); reaching the end of a case is a failure:
 *   yield_in_syscall      gmp_yield between gmp_entersyscall and gmp_exitsyscall
 *                         ("gmp_yield ... called between gmp_entersyscall and ...")
 *   wait_in_blocking      a channel receive inside a gmp_blocking function
 *                         ("waits (chan receive) between gmp_entersyscall ...")
 *   sleep_in_syscall      gmp_sleep between gmp_entersyscall and gmp_exitsyscall
 *                         ("waits (sleep) between ...")
 *   return_in_syscall     the goroutine's function returns after gmp_entersyscall
 *                         ("ended (returned, or called gmp_goexit) between ...")
 *   goexit_in_blocking    gmp_goexit inside a gmp_blocking function (the same message)
 */
#include "check.h"

#include <errno.h>
#include <gmp-sched/gmp.h>
#include <stdint.h>
#include <string.h>

static gmp_chan *ch;
static gmp_chan *buffered;
static volatile int stop_spinner;

static int64_t refuse_exit(void *arg)
{
    (void)arg;
    /* Long enough for sysmon to retake the P (>= 20 us) while we are in here. */
    sleep_ms(5);
    CHECK_EQ(gmp_exitsyscall(), -EINVAL);
    CHECK_EQ(gmp_entersyscall(), -EINVAL);
    CHECK_EQ(gmp_exitsyscall(), -EINVAL);
    /* Calls with a safe point that do not wait are allowed here: the safe point sees no
     * processor and does nothing (it must not touch the P the goroutine gave up). */
    gmp_wg done = GMP_WG_INIT;
    CHECK_OK(gmp_wg_wait(&done));
    gmp_rwmutex rw = GMP_RWMUTEX_INIT;
    CHECK_OK(gmp_rwmutex_rlock(&rw));
    CHECK_OK(gmp_rwmutex_runlock(&rw));
    long v = 5;
    CHECK_OK(gmp_chan_send(buffered, &v)); /* room in the buffer: no wait */
    v = 0;
    CHECK_OK(gmp_chan_recv(buffered, &v));
    CHECK_EQ(v, 5);
    sleep_ms(1);
    return 7;
}

static void spinner(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&stop_spinner, __ATOMIC_RELAXED))
        CHECK_OK(gmp_yield());
}

static void balanced(void *arg)
{
    gmp_wg *wg = arg;
    for (int i = 0; i < 20; i++) {
        CHECK_EQ(gmp_blocking(refuse_exit, NULL), 7);
        /* Not in a syscall any more: a plain exit is refused, a pair works. */
        CHECK_EQ(gmp_exitsyscall(), -EINVAL);
        CHECK_EQ(gmp_entersyscall(), 0);
        CHECK_EQ(gmp_blocking(refuse_exit, NULL), 7);
        CHECK_EQ(gmp_exitsyscall(), 0);
        CHECK_OK(gmp_yield());
    }
    __atomic_store_n(&stop_spinner, 1, __ATOMIC_RELAXED);
    CHECK_OK(gmp_wg_done(wg));
}

static void run_balanced(void)
{
    CHECK_OK(gmp_chan_make(&buffered, sizeof(long), 1));
    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK_OK(gmp_go(spinner, NULL));
    CHECK_OK(gmp_go(balanced, &wg));
    CHECK_OK(gmp_wg_wait(&wg));
    printf("gmp_exitsyscall/gmp_entersyscall inside gmp_blocking: -EINVAL, state intact\n");
}

static void yield_in_syscall(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_entersyscall());
    gmp_yield();
}

static int64_t recv_in_blocking(void *arg)
{
    (void)arg;
    int v;
    gmp_chan_recv(ch, &v);
    return 0;
}

static void wait_in_blocking(void *arg)
{
    (void)arg;
    gmp_blocking(recv_in_blocking, NULL);
}

static void sleep_in_syscall(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_entersyscall());
    gmp_sleep(1000000);
}

static void return_in_syscall(void *arg)
{
    (void)arg;
    CHECK_OK(gmp_entersyscall());
}

static int64_t goexit_now(void *arg)
{
    (void)arg;
    gmp_goexit();
    return 0;
}

static void goexit_in_blocking(void *arg)
{
    (void)arg;
    gmp_blocking(goexit_now, NULL);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        run_balanced();
        return 0;
    }
    static const struct {
        const char *name;
        void (*fn)(void *);
    } cases[] = {
        {"yield_in_syscall", yield_in_syscall},
        {"wait_in_blocking", wait_in_blocking},
        {"sleep_in_syscall", sleep_in_syscall},
        {"return_in_syscall", return_in_syscall},
        {"goexit_in_blocking", goexit_in_blocking},
    };
    CHECK_OK(gmp_chan_make(&ch, sizeof(int), 0));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (strcmp(argv[1], cases[i].name) == 0) {
            CHECK_OK(gmp_go(cases[i].fn, NULL));
            sleep_ms(5000);
            fprintf(stderr, "misuse %s did not abort\n", argv[1]);
            return 1;
        }
    }
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
