/*
 * pthread_exit_goroutine.c -- pthread_exit in a goroutine aborts with a message.
 *
 * pthread_exit ends the OS thread under the goroutine: the goroutine, its thread and the
 * processor it held would be lost silently (a hang at GOMAXPROCS=1). With argv[1] =
 * "exit" a goroutine calls pthread_exit; the program must die by SIGABRT with
 * "gmp: pthread_exit called in a goroutine (goroutine N)" (the harness checks). Main
 * meanwhile waits for a goroutine that can only run on that processor: reaching the end
 * is a failure.
 */
#include "check.h"

#include <gmp.h>
#include <pthread.h>
#include <string.h>

static void exiter(void *arg)
{
    (void)arg;
    pthread_exit(NULL);
}

static void after(void *arg)
{
    CHECK_OK(gmp_wg_done(arg));
}

int main(int argc, char **argv)
{
    CHECK(argc == 2 && strcmp(argv[1], "exit") == 0);
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
