/*
 * fork_child.c -- fork() and the runtime.
 *
 * Only the forking thread survives in a child; the runtime's threads (and the goroutines
 * they ran) do not, so the runtime cannot work there. The child's first gmp call must
 * abort with a "gmp:" message saying so, not hang. And fork + exec from a goroutine must
 * keep working.
 *   1. With goroutines running, main (not a goroutine) forks; the child calls gmp_go with
 *      its stderr on a pipe. The parent waits (at most 10 s) and checks that the child
 *      died by SIGABRT with "gmp:" and "fork" in its message. Again with the child's
 *      first call a gmp_chan_send, then a gmp_chan_recv, on a buffered channel that many
 *      calm operations have taken out of exclusive mode, so that the call would take the
 *      channel's lock-free quick path (which tests the fork in its own way).
 *   2. A goroutine forks and the child execs this program with argv[1] = "exec-child",
 *      which runs goroutines in its fresh process and exits 0; the goroutine waits for
 *      it inside gmp_blocking and checks the status.
 *   3. After all that the parent's runtime still works (the fork handler touched only
 *      the child).
 *   4. A child that makes no gmp call and ends with exit(0) runs the atexit handlers it
 *      inherited: exit status 0 and nothing on its stderr (the suite runs this program
 *      with GMP_TRACE too, whose handler finishes the trace in the parent only).
 */
#include "check.h"

#include <errno.h>
#include <gmp-sched/gmp.h>
#include <signal.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>

static volatile int stop;
static char *self;

static void looper(void *arg)
{
    while (!stop)
        CHECK_OK(gmp_sleep(1000000));
    CHECK_OK(gmp_wg_done(arg));
}

static void nothing(void *arg)
{
    (void)arg;
}

static void done(void *arg)
{
    CHECK_OK(gmp_wg_done(arg));
}

/* Waits for `pid` for at most 10 s; kills it and fails if it is still running. */
static int wait_bounded(pid_t pid)
{
    int status;
    for (int i = 0; i < 1000; i++) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        CHECK(r >= 0);
        if (r == pid)
            return status;
        sleep_ms(10);
    }
    kill(pid, SIGKILL);
    fprintf(stderr, "child %d hung\n", (int)pid);
    _exit(1);
}

/* Reads what a child wrote on the pipe of its stderr (NUL-terminated in `msg`) and closes
 * the pipe; returns the byte count. */
static size_t read_child_stderr(int fd, char *msg, size_t size)
{
    size_t n = 0;
    ssize_t r;
    while (n < size - 1 && (r = read(fd, msg + n, size - 1 - n)) > 0)
        n += (size_t)r;
    msg[n] = 0;
    close(fd);
    return n;
}

/* What the child of fork_from_main calls first. */
enum first_call { CALL_GO, CALL_SEND, CALL_RECV };

/* A buffered channel with values in it, past exclusive mode (see the header comment). */
static gmp_chan *flowing;

static void fork_from_main(enum first_call call)
{
    int fds[2];
    CHECK_EQ(pipe(fds), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        int64_t v = 7;
        switch (call) {
        case CALL_GO:
            gmp_go(nothing, NULL);
            break;
        case CALL_SEND:
            gmp_chan_send(flowing, &v);
            break;
        case CALL_RECV:
            gmp_chan_recv(flowing, &v);
            break;
        }
        _exit(3); /* not reached: the call must abort */
    }
    close(fds[1]);
    int status = wait_bounded(pid);
    char msg[512];
    read_child_stderr(fds[0], msg, sizeof msg);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT || !strstr(msg, "gmp:") ||
        !strstr(msg, "fork")) {
        fprintf(stderr, "child status %#x, message: %s\n", status, msg);
        CHECK(0);
    }
    printf("child of main: first gmp call (%d) aborted: %s", (int)call, msg);
}

static void fork_exit_quietly(void)
{
    int fds[2];
    CHECK_EQ(pipe(fds), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        exit(0);
    }
    close(fds[1]);
    int status = wait_bounded(pid);
    char msg[512];
    size_t n = read_child_stderr(fds[0], msg, sizeof msg);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || n != 0) {
        fprintf(stderr, "child that exits: status %#x, stderr: %s\n", status, msg);
        CHECK(0);
    }
    printf("child that exits: status 0, nothing on stderr\n");
}

static int64_t wait_child(void *arg)
{
    pid_t pid = *(pid_t *)arg;
    int status;
    pid_t r;
    while ((r = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
        ;
    CHECK_EQ(r, pid);
    return status;
}

static void fork_exec(void *arg)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        char *argv[] = {self, "exec-child", NULL};
        execv(self, argv);
        _exit(127);
    }
    int64_t status = gmp_blocking(wait_child, &pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    CHECK_OK(gmp_wg_done(arg));
}

static void run_goroutines(void)
{
    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&wg, 16));
    for (int i = 0; i < 16; i++)
        CHECK_OK(gmp_go(done, &wg));
    CHECK_OK(gmp_wg_wait(&wg));
}

int main(int argc, char **argv)
{
    self = argv[0];
    if (argc == 2 && strcmp(argv[1], "exec-child") == 0) {
        run_goroutines();
        return 0;
    }
    gmp_wg loop_wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&loop_wg, 1));
    CHECK_OK(gmp_go(looper, &loop_wg));
    run_goroutines();

    fork_from_main(CALL_GO);
    CHECK_OK(gmp_chan_make(&flowing, sizeof(int64_t), 8));
    for (int64_t i = 0; i < 1000; i++) {
        int64_t out = -1;
        CHECK_OK(gmp_chan_send(flowing, &i));
        CHECK_OK(gmp_chan_recv(flowing, &out));
        CHECK_EQ(out, i);
    }
    int64_t one = 1;
    CHECK_OK(gmp_chan_send(flowing, &one));
    fork_from_main(CALL_SEND);
    fork_from_main(CALL_RECV);
    CHECK_OK(gmp_chan_release(flowing));

    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&wg, 3));
    for (int i = 0; i < 3; i++)
        CHECK_OK(gmp_go(fork_exec, &wg));
    CHECK_OK(gmp_wg_wait(&wg));
    printf("fork + exec from goroutines: children ran goroutines and exited 0\n");

    run_goroutines();
    fork_exit_quietly();
    stop = 1;
    CHECK_OK(gmp_wg_wait(&loop_wg));
    return 0;
}
