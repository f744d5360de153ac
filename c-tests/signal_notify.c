/*
 * signal_notify.c -- signals relayed to channels (gmp_signal_notify, gmp_signal_stop:
 * Go's os/signal Notify and Stop).
 *
 * Steps, in order:
 *   args       -EINVAL for a NULL channel or list, n of 0 or 65, a channel of 8-byte
 *              elements, and each signal the runtime refuses (SIGURG, SIGKILL, SIGSTOP,
 *              SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, 32, 33); stop of NULL is
 *              -EINVAL, of a channel that watches nothing 0.
 *   relay      SIGUSR1 raised on this thread reaches a goroutine blocked on the channel,
 *              as the int SIGUSR1; sent from a goroutine with kill(2), it arrives too.
 *   several    two channels watch SIGUSR2: one kill reaches both.
 *   full       a channel of capacity 1, full, misses SIGUSR1 (relayed without waiting):
 *              after a later SIGUSR2 reached another channel, it holds only its filler.
 *   stop       after gmp_signal_stop(a) returns, a SIGUSR1 reaches b (still watching)
 *              and never a.
 *   restore    the program's own SIGWINCH handler: not called while a channel watches
 *              SIGWINCH; called again after the last channel stops.
 * Waits are for values on channels (5 s bounds), never sleeps.
 */
#include "check.h"

#include <errno.h>
#include <gmp-sched/gmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define SEC 1000000000LL

static gmp_chan *make_int(size_t cap)
{
    gmp_chan *c = NULL;
    CHECK_OK(gmp_chan_make(&c, sizeof(int), cap));
    return c;
}

static int recv5s(gmp_chan *c)
{
    int v = 0;
    CHECK_OK(gmp_chan_recv_timeout(c, &v, 5 * SEC));
    return v;
}

static void step_args(void)
{
    gmp_chan *c = make_int(1);
    gmp_chan *wide = NULL;
    CHECK_OK(gmp_chan_make(&wide, 8, 1));
    int usr1 = SIGUSR1;
    CHECK_EQ(gmp_signal_notify(NULL, &usr1, 1), -EINVAL);
    CHECK_EQ(gmp_signal_notify(c, NULL, 1), -EINVAL);
    CHECK_EQ(gmp_signal_notify(c, &usr1, 0), -EINVAL);
    CHECK_EQ(gmp_signal_notify(c, &usr1, 65), -EINVAL);
    CHECK_EQ(gmp_signal_notify(wide, &usr1, 1), -EINVAL);
    static const int refused[] = {SIGURG,  SIGKILL, SIGSTOP, SIGSEGV, SIGBUS, SIGFPE,
                                  SIGILL,  SIGTRAP, SIGSYS,  32,      33,     0,
                                  65,      -1};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        int two[2] = {SIGUSR1, refused[i]};
        CHECK_EQ(gmp_signal_notify(c, two, 2), -EINVAL);
    }
    CHECK_EQ(gmp_signal_stop(NULL), -EINVAL);
    CHECK_OK(gmp_signal_stop(c));
    CHECK_OK(gmp_chan_release(c));
    CHECK_OK(gmp_chan_release(wide));
}

static gmp_chan *results;

static void relay_receiver(void *arg)
{
    int v = recv5s((gmp_chan *)arg);
    CHECK_OK(gmp_chan_send(results, &v));
}

static void killer(void *arg)
{
    (void)arg;
    CHECK_EQ(kill(getpid(), SIGUSR1), 0);
}

static void step_relay(gmp_chan *c)
{
    CHECK(gmp_go(relay_receiver, c) > 0);
    CHECK_EQ(raise(SIGUSR1), 0);
    CHECK_EQ(recv5s(results), SIGUSR1);
    CHECK(gmp_go(killer, NULL) > 0);
    CHECK_EQ(recv5s(c), SIGUSR1);
}

static void step_several(void)
{
    gmp_chan *a = make_int(2), *b = make_int(2);
    int usr2 = SIGUSR2;
    CHECK_OK(gmp_signal_notify(a, &usr2, 1));
    CHECK_OK(gmp_signal_notify(b, &usr2, 1));
    CHECK_EQ(kill(getpid(), SIGUSR2), 0);
    CHECK_EQ(recv5s(a), SIGUSR2);
    CHECK_EQ(recv5s(b), SIGUSR2);
    CHECK_OK(gmp_signal_stop(a));
    CHECK_OK(gmp_signal_stop(b));
    CHECK_OK(gmp_chan_release(a));
    CHECK_OK(gmp_chan_release(b));
}

static void step_full(gmp_chan *usr1_watcher)
{
    gmp_chan *full = make_int(1), *later = make_int(1);
    int filler = 12345, usr1 = SIGUSR1, usr2 = SIGUSR2;
    CHECK_OK(gmp_chan_send(full, &filler));
    CHECK_OK(gmp_signal_notify(full, &usr1, 1));
    CHECK_OK(gmp_signal_notify(later, &usr2, 1));
    CHECK_EQ(raise(SIGUSR1), 0);
    CHECK_EQ(raise(SIGUSR2), 0);
    CHECK_EQ(recv5s(later), SIGUSR2);
    /* The forwarder went past SIGUSR1 (marked pending first, lower number). */
    CHECK_EQ(recv5s(usr1_watcher), SIGUSR1);
    CHECK_EQ(gmp_chan_len(full), 1);
    CHECK_EQ(recv5s(full), filler);
    CHECK_OK(gmp_signal_stop(full));
    CHECK_OK(gmp_signal_stop(later));
    CHECK_OK(gmp_chan_release(full));
    CHECK_OK(gmp_chan_release(later));
}

static void step_stop(gmp_chan *b)
{
    gmp_chan *a = make_int(4);
    int usr1 = SIGUSR1;
    CHECK_OK(gmp_signal_notify(a, &usr1, 1));
    CHECK_OK(gmp_signal_stop(a));
    CHECK_EQ(raise(SIGUSR1), 0);
    CHECK_EQ(recv5s(b), SIGUSR1);
    CHECK_EQ(gmp_chan_len(a), 0);
    CHECK_OK(gmp_chan_release(a));
}

static atomic_int own_calls;

static void own_handler(int sig)
{
    (void)sig;
    atomic_fetch_add(&own_calls, 1);
}

static void step_restore(void)
{
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_handler = own_handler;
    sigemptyset(&act.sa_mask);
    CHECK_EQ(sigaction(SIGWINCH, &act, NULL), 0);
    gmp_chan *c = make_int(1);
    int winch = SIGWINCH;
    CHECK_OK(gmp_signal_notify(c, &winch, 1));
    CHECK_EQ(raise(SIGWINCH), 0);
    CHECK_EQ(recv5s(c), SIGWINCH);
    CHECK_EQ(atomic_load(&own_calls), 0);
    CHECK_OK(gmp_signal_stop(c));
    CHECK_EQ(raise(SIGWINCH), 0);
    CHECK_EQ(atomic_load(&own_calls), 1);
    CHECK_EQ(gmp_chan_len(c), 0);
    CHECK_OK(gmp_chan_release(c));
}

int main(void)
{
    results = make_int(1);
    step_args();
    /* One channel watches SIGUSR1 throughout, so that its action stays the relay's. */
    gmp_chan *usr1 = make_int(4);
    int sig = SIGUSR1;
    CHECK_OK(gmp_signal_notify(usr1, &sig, 1));
    step_relay(usr1);
    step_several();
    step_full(usr1);
    step_stop(usr1);
    step_restore();
    CHECK_OK(gmp_signal_stop(usr1));
    CHECK_OK(gmp_chan_release(usr1));
    printf("signal_notify: relayed, dropped when full, stopped, restored\n");
    return 0;
}
