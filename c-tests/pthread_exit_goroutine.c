/*
 * pthread_exit_goroutine.c -- pthread_exit in a goroutine aborts with a message.
 *
 * pthread_exit ends the OS thread under the goroutine: the goroutine, its thread and the
 * processor it held would be lost silently (a hang at GOMAXPROCS=1). With argv[1] =
 * "exit" a goroutine calls pthread_exit; the program must die by SIGABRT with
 * "gmp: pthread_exit called in a goroutine (goroutine N)" (the harness checks). Main
 * meanwhile waits for a goroutine that can only run on that processor: reaching the end
 * is a failure.
 *
 * With argv[1] = "locked" the goroutine first locks itself to its thread
 * (gmp_lock_os_thread), as an embedding runtime's threads are (CPython ends the threads
 * of Python goroutines with pthread_exit at finalization): that ends the goroutine as Go
 * ends one that exits locked — its thread goes, its processor is handed on, and the
 * program continues at GOMAXPROCS=1, 20 times over.
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <pthread.h>
#include <string.h>

static void exiter(void *arg)
{
    (void)arg;
    pthread_exit(NULL);
}

static void locked_exiter(void *arg)
{
    CHECK_OK(gmp_lock_os_thread());
    CHECK_OK(gmp_wg_done(arg));
    pthread_exit(NULL);
}

static void after(void *arg)
{
    CHECK_OK(gmp_wg_done(arg));
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    if (strcmp(argv[1], "locked") == 0) {
        CHECK_OK(gmp_maxprocs(1));
        for (int i = 0; i < 20; i++) {
            gmp_wg started = GMP_WG_INIT, done = GMP_WG_INIT;
            CHECK_OK(gmp_wg_add(&started, 1));
            CHECK_OK(gmp_go(locked_exiter, &started));
            CHECK_OK(gmp_wg_wait(&started));
            /* The one processor must come back: a goroutine runs, then the count drops. */
            CHECK_OK(gmp_wg_add(&done, 1));
            CHECK_OK(gmp_go(after, &done));
            CHECK_OK(gmp_wg_wait(&done));
        }
        WAIT_UNTIL(gmp_num_goroutine() == 0, 10.0);
        printf("locked: 20 goroutines ended their threads with pthread_exit\n");
        return 0;
    }
    CHECK(strcmp(argv[1], "exit") == 0);
    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK_OK(gmp_go(exiter, NULL));
    sleep_ms(100);
    CHECK_OK(gmp_go(after, &wg));
    CHECK_OK(gmp_wg_wait(&wg));
    sleep_ms(1000);
    fprintf(stderr, "pthread_exit in a goroutine did not abort\n");
    return 1;
}
