//! valgrind's client requests: registering the stacks, and asking whether valgrind runs
//! the process.

/// `VALGRIND_STACK_REGISTER(lo, hi)`, paid once per stack when its slab is mapped.
pub(super) fn valgrind_stack_register(lo: usize, hi: usize) {
    const VG_USERREQ_STACK_REGISTER: usize = 0x1501;
    valgrind_request(VG_USERREQ_STACK_REGISTER, lo, hi);
}

/// `RUNNING_ON_VALGRIND`: whether the process runs under valgrind (asynchronous
/// preemption stays off there: its handler writes below the interrupted stack pointer,
/// which valgrind reports as invalid writes).
pub fn running_on_valgrind() -> bool {
    const VG_USERREQ_RUNNING_ON_VALGRIND: usize = 0x1001;
    valgrind_request(VG_USERREQ_RUNNING_ON_VALGRIND, 0, 0) != 0
}

/// A valgrind client request: a sequence of rotations of rdi by 128 bits in all (no
/// effect) and `xchg rbx, rbx` that valgrind recognises; natively a few cycles, returning 0.
#[cfg(target_arch = "x86_64")]
pub(super) fn valgrind_request(req: usize, a1: usize, a2: usize) -> usize {
    let args: [usize; 6] = [req, a1, a2, 0, 0, 0];
    let mut result: usize = 0;
    // SAFETY: the rotations leave rdi as it was and `xchg rbx, rbx` changes nothing;
    // valgrind reads `args` (rax) and writes the result into rdx.
    unsafe {
        core::arch::asm!(
            "rol rdi, 3",
            "rol rdi, 13",
            "rol rdi, 61",
            "rol rdi, 51",
            "xchg rbx, rbx",
            in("rax") args.as_ptr(),
            inout("rdx") result,
            out("rdi") _,
            options(nostack),
        );
    }
    result
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) fn valgrind_request(_req: usize, _a1: usize, _a2: usize) -> usize {
    0
}
