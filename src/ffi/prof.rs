//! Profiling: the CPU profile in pprof's format.

use core::ffi::c_int;

use super::boundary;
use crate::rt;

/// Starts a CPU profile (Go's `pprof.StartCPUProfile`): every thread that runs goroutines
/// is interrupted every 1/`hz` s of its CPU time (`hz` <= 0: 100 Hz, Go's rate), and
/// each interruption records the stack it stopped (frame pointers: compile with
/// -fno-omit-frame-pointer), the goroutine's id and its labels (`gmp_labels_set`).
/// `gmp_cpuprofile_stop` writes the profile to `fd` in pprof's protobuf format
/// (`go tool pprof -top prog file`; no binary needed: functions are named by their
/// exported symbols, so link executables with -rdynamic); the runtime keeps a duplicate
/// of `fd` meanwhile, so the caller may close its own. Threads outside the runtime (C
/// main, threads that only call gmp functions) are not sampled. `GMP_CPUPROFILE=file`
/// starts one when the runtime starts, written at exit. The runtime uses SIGPROF: it
/// refuses to start while the program has a SIGPROF handler of its own or runs the
/// ITIMER_PROF timer, and keeps its handler (which ignores stray signals) after stop.
/// Returns 0, -EBADF if `fd` is not open, -EINVAL if `hz` is above 10000, -EBUSY if a
/// profile runs (or a `gmp_cpuprofile_stop` is still writing one) or SIGPROF is taken,
/// or -EAGAIN if the writer thread cannot start.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_cpuprofile_start(fd: c_int, hz: c_int) -> c_int {
    boundary("gmp_cpuprofile_start", || {
        if fd < 0 {
            return -libc::EBADF;
        }
        rt::init();
        match rt::cpuprof::start(fd, hz) {
            Ok(()) => 0,
            Err(e) => -e,
        }
    })
}

/// Stops the CPU profile gmp_cpuprofile_start (or GMP_CPUPROFILE) started and writes it
/// to its descriptor, returning when it is written. Returns 0, -EINVAL if no profile runs
/// (or another stop is writing it), or the negative errno of the write.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_cpuprofile_stop() -> c_int {
    boundary("gmp_cpuprofile_stop", || match rt::cpuprof::stop() {
        Ok(()) => 0,
        Err(e) => -e,
    })
}
