/*
 * syscall_bad_input.c -- argument checks and wrong-caller answers of the syscall and
 * LockOSThread API.
 *
 * From main (not a goroutine): gmp_entersyscall/gmp_exitsyscall return 0 and do nothing;
 * gmp_blocking runs the function directly; gmp_lock_os_thread/unlock return -EPERM.
 * Everywhere: NULL fn/buf/path -> -EINVAL; a bad fd -> -EBADF (read, write, pread,
 * pwrite, close, fsync); a missing file -> -ENOENT; errno is never changed. In a
 * goroutine: gmp_exitsyscall without gmp_entersyscall -> -EINVAL; a nested
 * gmp_entersyscall -> -EINVAL; gmp_blocking inside gmp_entersyscall runs directly; a
 * file written with gmp_pwrite reads back with gmp_pread; unlock without lock -> 0.
 * gmp_syscall, everywhere: the calls that would break the thread (exit, clone, clone3,
 * fork, vfork, rt_sigreturn, arch_prctl, set_tid_address, rseq, sigaltstack) -> -EINVAL
 * without being made; an unknown number -> the kernel's -ENOSYS; a bad fd -> -EBADF; a
 * real call returns the kernel's result (getppid, and a read of a pipe); errno is never
 * changed; inside gmp_entersyscall it simply makes the call.
 */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <gmp-sched/gmp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static int64_t forty_two(void *arg)
{
    (void)arg;
    return 42;
}

static void raw_syscalls(void)
{
    /* fork, vfork and arch_prctl exist on x86-64 only. */
    static const long refused[] = {
        SYS_exit,         SYS_clone, SYS_clone3, SYS_rt_sigreturn, SYS_set_tid_address,
        SYS_rseq,         SYS_sigaltstack,
#ifdef SYS_fork
        SYS_fork,
#endif
#ifdef SYS_vfork
        SYS_vfork,
#endif
#ifdef SYS_arch_prctl
        SYS_arch_prctl,
#endif
    };
    errno = 321;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        CHECK_EQ(gmp_syscall(refused[i], 0, 0, 0, 0, 0, 0), -EINVAL);
    CHECK_EQ(gmp_syscall(100000, 0, 0, 0, 0, 0, 0), -ENOSYS);
    CHECK_EQ(gmp_syscall(-1, 0, 0, 0, 0, 0, 0), -ENOSYS);
    char c = 0;
    CHECK_EQ(gmp_syscall(SYS_read, -1, (long)&c, 1, 0, 0, 0), -EBADF);
    CHECK_EQ(gmp_syscall(SYS_getppid, 0, 0, 0, 0, 0, 0), (long)getppid());
    int p[2];
    CHECK_EQ(pipe(p), 0);
    CHECK_EQ(gmp_syscall(SYS_write, p[1], (long)"q", 1, 0, 0, 0), 1);
    CHECK_EQ(gmp_syscall(SYS_read, p[0], (long)&c, 1, 0, 0, 0), 1);
    CHECK_EQ(c, 'q');
    close(p[0]);
    close(p[1]);
    CHECK_EQ(errno, 321);
}

static void common(void)
{
    raw_syscalls();
    char buf[8];
    errno = 123;
    CHECK_EQ(gmp_blocking(NULL, NULL), -EINVAL);
    CHECK_EQ(gmp_blocking(forty_two, NULL), 42);
    CHECK_EQ(gmp_read(0, NULL, 1), -EINVAL);
    CHECK_EQ(gmp_write(1, NULL, 1), -EINVAL);
    CHECK_EQ(gmp_pread(0, NULL, 1, 0), -EINVAL);
    CHECK_EQ(gmp_pwrite(1, NULL, 1, 0), -EINVAL);
    CHECK_EQ(gmp_open(NULL, O_RDONLY, 0), -EINVAL);
    CHECK_EQ(gmp_read(-1, buf, 1), -EBADF);
    CHECK_EQ(gmp_write(-1, buf, 1), -EBADF);
    CHECK_EQ(gmp_pread(-1, buf, 1, 0), -EBADF);
    CHECK_EQ(gmp_pwrite(-1, buf, 1, 0), -EBADF);
    CHECK_EQ(gmp_close(-1), -EBADF);
    CHECK_EQ(gmp_fsync(-1), -EBADF);
    CHECK_EQ(gmp_open("/nonexistent/gmp/file", O_RDONLY, 0), -ENOENT);
    CHECK_EQ(errno, 123);

    char path[] = "/tmp/gmp_syscall_XXXXXX";
    int tmp = mkstemp(path);
    CHECK(tmp >= 0);
    close(tmp);
    int fd = gmp_open(path, O_RDWR | O_TRUNC, 0600);
    CHECK(fd >= 0);
    CHECK_EQ(gmp_pwrite(fd, "abcdef", 6, 10), 6);
    CHECK_EQ(gmp_fsync(fd), 0);
    memset(buf, 0, sizeof buf);
    CHECK_EQ(gmp_pread(fd, buf, 6, 10), 6);
    CHECK(memcmp(buf, "abcdef", 6) == 0);
    CHECK_EQ(gmp_write(fd, "xy", 2), 2);
    CHECK_EQ(gmp_pread(fd, buf, 2, 0), 2);
    CHECK(memcmp(buf, "xy", 2) == 0);
    CHECK_EQ(gmp_close(fd), 0);
    unlink(path);
    CHECK_EQ(errno, 123);
}

static void in_goroutine(void *arg)
{
    gmp_wg *wg = arg;
    common();
    CHECK_EQ(gmp_exitsyscall(), -EINVAL);
    CHECK_EQ(gmp_entersyscall(), 0);
    CHECK_EQ(gmp_entersyscall(), -EINVAL);
    CHECK_EQ(gmp_blocking(forty_two, NULL), 42);
    raw_syscalls();
    CHECK_EQ(gmp_exitsyscall(), 0);
    CHECK_EQ(gmp_exitsyscall(), -EINVAL);
    CHECK_EQ(gmp_unlock_os_thread(), 0);
    CHECK_OK(gmp_wg_done(wg));
}

int main(void)
{
    CHECK_EQ(gmp_entersyscall(), 0);
    CHECK_EQ(gmp_exitsyscall(), 0);
    CHECK_EQ(gmp_lock_os_thread(), -EPERM);
    CHECK_EQ(gmp_unlock_os_thread(), -EPERM);
    common();
    gmp_wg wg = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK_OK(gmp_go(in_goroutine, &wg));
    CHECK_OK(gmp_wg_wait(&wg));
    return 0;
}
