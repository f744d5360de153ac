/* The program runner inside the aarch64 virtual machine (scripts/aarch64-vm.sh).
 *
 * It watches a queue directory shared with the host over 9p. The host's runner
 * (scripts/aarch64-vm/run) puts each request there as a directory `<id>.req` holding
 *   argv  the program and its arguments, each ending in a NUL byte;
 *   env   the environment, NAME=value entries each ending in a NUL byte;
 *   cwd   the working directory.
 * The agent starts the program in a session of its own, with stdin from /dev/null and
 * stdout and stderr into `out` and `err` in the request's directory, and when it ends
 * writes its wait status, as a decimal number, to `status` (written under another name
 * and renamed, so the host never reads half of it). A file `kill` holding a signal
 * number sends that signal to the program's process group; a program still running
 * after LIMIT_S seconds gets SIGKILL (the host's runner is killed after 120 s, and a
 * program left running would slow every one after it).
 *
 * Usage: agent QUEUE_DIR */
#define _GNU_SOURCE
#include <dirent.h>
#include <limits.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_JOBS 64
#define LIMIT_S 300
#define NAME_MAX_LEN 200

struct job {
    char name[NAME_MAX_LEN];
    pid_t pid;
    time_t started;
    int signalled;
};

static struct job jobs[MAX_JOBS];
static const char *queue;

/* Reads the whole of `path` into a NUL-terminated buffer; *len gets its length. */
static char *slurp(const char *path, size_t *len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        close(fd);
        return NULL;
    }
    for (;;) {
        if (n == cap) {
            cap *= 2;
            char *grown = realloc(buf, cap + 1);
            if (!grown) {
                free(buf);
                close(fd);
                return NULL;
            }
            buf = grown;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

/* Splits a buffer of NUL-terminated strings into a NULL-terminated vector (NULL if out
 * of memory). */
static char **split(char *buf, size_t len) {
    size_t count = 0;
    for (size_t i = 0; i < len; i++)
        if (buf[i] == '\0') count++;
    char **vec = calloc(count + 1, sizeof *vec);
    if (!vec) return NULL;
    size_t at = 0, k = 0;
    while (at < len && k < count) {
        vec[k++] = buf + at;
        at += strlen(buf + at) + 1;
    }
    return vec;
}

static void path_of(char *out, size_t cap, const char *name, const char *file) {
    int n = snprintf(out, cap, "%s/%s/%s", queue, name, file);
    if (n < 0 || (size_t)n >= cap) {
        fprintf(stderr, "agent: path %s/%s/%s too long\n", queue, name, file);
        exit(1);
    }
}

/* The child: becomes the program the request names. Never returns. */
static void become(const char *name) {
    char path[PATH_MAX];
    size_t alen = 0, elen = 0;
    path_of(path, sizeof path, name, "argv");
    char *abuf = slurp(path, &alen);
    path_of(path, sizeof path, name, "env");
    char *ebuf = slurp(path, &elen);
    path_of(path, sizeof path, name, "cwd");
    char *cwd = slurp(path, NULL);
    if (!abuf || !ebuf || !cwd) _exit(126);
    char **argv = split(abuf, alen);
    char **envp = split(ebuf, elen);
    if (!argv || !envp || !argv[0]) _exit(126);

    setsid();
    int in = open("/dev/null", O_RDONLY);
    path_of(path, sizeof path, name, "out");
    int out = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    path_of(path, sizeof path, name, "err");
    int err = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || err < 0) _exit(126);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    if (in > 2) close(in);
    if (out > 2) close(out);
    if (err > 2) close(err);
    /* Signals the agent ignores would stay ignored across exec. */
    signal(SIGPIPE, SIG_DFL);
    if (chdir(cwd) != 0) {
        fprintf(stderr, "agent: chdir %s: %s\n", cwd, strerror(errno));
        _exit(126);
    }
    if (strchr(argv[0], '/')) {
        execve(argv[0], argv, envp);
    } else {
        char full[PATH_MAX];
        const char *dirs[] = {"/bin", "/sbin", "/usr/bin", NULL};
        for (int i = 0; dirs[i]; i++) {
            snprintf(full, sizeof full, "%s/%s", dirs[i], argv[0]);
            execve(full, argv, envp);
        }
    }
    fprintf(stderr, "agent: exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

static int known(const char *name) {
    for (int i = 0; i < MAX_JOBS; i++)
        if (jobs[i].pid && strcmp(jobs[i].name, name) == 0) return 1;
    return 0;
}

static void finish(struct job *j, int status) {
    char tmp[PATH_MAX], final[PATH_MAX];
    path_of(tmp, sizeof tmp, j->name, "status.tmp");
    path_of(final, sizeof final, j->name, "status");
    FILE *f = fopen(tmp, "w");
    if (f) {
        fprintf(f, "%d\n", status);
        fclose(f);
        rename(tmp, final);
    }
    j->pid = 0;
}

/* Starts the requests not yet started. */
static void scan(void) {
    DIR *d = opendir(queue);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 5 || n >= NAME_MAX_LEN || strcmp(e->d_name + n - 4, ".req") != 0) continue;
        if (known(e->d_name)) continue;
        char path[PATH_MAX];
        struct stat st;
        path_of(path, sizeof path, e->d_name, "status");
        if (stat(path, &st) == 0) continue;
        struct job *slot = NULL;
        for (int i = 0; i < MAX_JOBS && !slot; i++)
            if (!jobs[i].pid) slot = &jobs[i];
        if (!slot) break;
        pid_t pid = fork();
        if (pid < 0) break;
        if (pid == 0) become(e->d_name);
        snprintf(slot->name, sizeof slot->name, "%s", e->d_name);
        slot->pid = pid;
        slot->started = time(NULL);
        slot->signalled = 0;
    }
    closedir(d);
}

/* Reaps the programs that ended and passes kill requests on. */
static void tend(void) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < MAX_JOBS; i++)
            if (jobs[i].pid == pid) finish(&jobs[i], status);
    }
    time_t now = time(NULL);
    for (int i = 0; i < MAX_JOBS; i++) {
        struct job *j = &jobs[i];
        if (!j->pid || j->signalled) continue;
        char path[PATH_MAX];
        path_of(path, sizeof path, j->name, "kill");
        char *sig = slurp(path, NULL);
        if (sig) {
            kill(-j->pid, atoi(sig) > 0 ? atoi(sig) : SIGKILL);
            free(sig);
            j->signalled = 1;
        } else if (now - j->started > LIMIT_S) {
            fprintf(stderr, "agent: %s ran for %d s, killed\n", j->name, LIMIT_S);
            kill(-j->pid, SIGKILL);
            j->signalled = 1;
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: agent QUEUE_DIR\n");
        return 2;
    }
    queue = argv[1];
    signal(SIGPIPE, SIG_IGN);
    fprintf(stderr, "agent: ready, queue %s\n", queue);
    for (;;) {
        scan();
        tend();
        struct timespec nap = {0, 5 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
}
