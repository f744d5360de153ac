//! Seeing inside the runtime: the goroutine dump.

use core::ffi::c_int;

use super::boundary;
use crate::rt;

/// Writes every goroutine (id, status or wait reason, how long it has waited, locked or
/// pinned, a symbolized backtrace, who started it) to file descriptor `fd`, in the format
/// of Go's traceback (`goroutine 7 [chan receive, 3 minutes]:`), followed by the threads
/// outside the runtime blocked in gmp calls. Returns 0, or -EBADF if fd is negative.
///
/// Backtraces follow frame pointers from each goroutine's saved context: compile with
/// -fno-omit-frame-pointer for complete traces, and link executables with -rdynamic for
/// their function names. A running goroutine's stack is shown only for the caller. The
/// same dump is written to stderr on SIGQUIT (then the process exits with status 2, as
/// Go's runtime does) unless GMP_DEBUG=sigquit=0 or the program installed its own
/// SIGQUIT handler before the runtime started.
#[unsafe(no_mangle)]
pub extern "C" fn gmp_dump(fd: c_int) -> c_int {
    boundary("gmp_dump", || {
        if fd < 0 {
            return -libc::EBADF;
        }
        rt::init();
        rt::dump::dump_to_fd(fd);
        0
    })
}
