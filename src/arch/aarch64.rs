//! The context switch, the fresh-stack trampoline, the runtime's TLS slot and the
//! asynchronous-preemption trampolines for aarch64 (AAPCS64, Linux).
//!
//! # What a switch saves
//!
//! A switch is an ordinary `extern "C"` call as far as the compiler of the caller knows, so
//! only the callee-saved state has to survive it: x19–x28, the frame pointer x29, the link
//! register x30 (the switch's return address), sp, the low 64 bits of v8–v15 (d8–d15:
//! AAPCS64 makes only those callee-saved, the upper halves and v0–v7, v16–v31 are
//! caller-saved), and FPCR, the floating-point control register (rounding mode,
//! flush-to-zero, default NaN, trap enables), which the ABI treats as callee-saved
//! thread state as x86-64's MXCSR control bits. Everything else is caller-saved and
//! already spilled by the caller if it is live.
//!
//! FPCR is read on every switch (`mrs` does not serialize) but written only when the
//! resumed context's value differs (`msr fpcr` may synchronize the FP pipeline on some
//! cores). FPSR, the cumulative exception flags, is not saved: as x86-64's sticky MXCSR
//! flags (and as in Go) the flags are per thread, not per goroutine.
//!
//! # Return prediction
//!
//! Both directions end in `ret`: the return-stack predictor then mispredicts the returns of
//! a resumed chain as it does on x86-64 with `call` and `pop; jmp` (see x86_64.rs,
//! "Return-stack balance"). The scheduler-side entries [`switch_from_g0_balanced`] and
//! [`start_from_g0_balanced`] are plain calls here: the hand-made call of the x86-64 file
//! has not been measured on Arm hardware, so it is not carried over.
//!
//! # Stack layouts (addresses grow upwards, the stack grows downwards)
//!
//! A suspended context, `*save_sp` pointing at its lowest word (sp is 16-aligned):
//!
//! ```text
//!         +---------------------------------+  higher addresses
//!         | ...caller of switch's frame...  |
//!  sp+168 | 0                               |  padding (keeps sp 16-aligned)
//!  sp+160 | FPCR                            |
//!  sp+152 | x30 (lr): return into the caller|  a frame record {x29, x30}, as every
//!  sp+144 | x29 (fp)                        |  AAPCS64 frame has: [`SAVED_FP_OFFSET`]
//!  sp+136 | x28                             |
//!  ...    | ...                             |
//!  sp+64  | x19                             |
//!  sp+56  | d15                             |
//!  ...    | ...                             |
//!  sp+0   | d8                              |  <- saved sp
//!         +---------------------------------+  lower addresses
//! ```
//!
//! A fresh stack made by [`init_stack`], `top` being `stack_top` rounded down to 16: the
//! same 176 bytes, all zero (FPCR 0 is the ABI's default environment: round to nearest,
//! no traps, no flush-to-zero) except
//!
//! ```text
//!  top-24  | x30 = address of TRAMPOLINE    |  the "return address" the switch returns to
//!  top-32  | x29 = 0                        |  ends frame-pointer walks
//!  top-112 | x19 = entry                    |  the trampoline calls x19
//!  top-176 | d8                             |  <- returned sp
//! ```
//!
//! The switch into it restores the frame above and returns to the trampoline with x0 =
//! `arg` and sp = top; the trampoline calls `entry(arg)` with sp = top, 16-aligned as
//! AAPCS64 requires at every public interface.
//!
//! A running context has no saved state: its registers are live and its sp is in sp.
//!
//! # Unwind information
//!
//! `switch` carries CFI for its whole body: after the stores the frame is described as
//! "CFA = sp+176, registers at fixed offsets"; the switch of sp keeps that description
//! true, because the resumed stack holds the same layout. The trampoline's frame marks the
//! end of the call chain with `.cfi_undefined x30`.

use core::arch::{asm, global_asm, naked_asm};

/// The FP environment a fresh goroutine starts with: FPCR = 0.
const INITIAL_FPCR: usize = 0;

/// Bytes of a suspended context's frame (see the diagram).
const FRAME: usize = 176;

/// Bytes of the initial frame written by [`init_stack`] below the aligned top.
const INITIAL_FRAME: usize = FRAME;

/// Where a suspended context keeps its frame record {x29, x30} above its saved sp: the
/// goroutine dump starts its walk there.
pub(crate) const SAVED_FP_OFFSET: usize = 144;

/// Switches stacks: stores the callee-saved state of the current context on its stack,
/// stores the resulting stack pointer to `*save_sp`, loads `to_sp`, restores that context
/// and resumes it; the resumed side's own `switch` call returns `arg`. (A fresh stack made
/// by [`init_stack`] receives `arg` as its entry function's argument instead.)
///
/// # Safety
///
/// As for the x86-64 `switch`: `save_sp` valid for a write of one `usize` (a plain store:
/// the scheduler publishes it with its own release/acquire pair); `to_sp` a stack pointer
/// stored by `switch` or returned by [`init_stack`], of a context not running anywhere,
/// resumed at most once per suspension, whose stack stays mapped while it runs.
#[unsafe(naked)]
pub unsafe extern "C" fn switch(save_sp: *mut usize, to_sp: usize, arg: usize) -> usize {
    // x0 = save_sp, x1 = to_sp, x2 = arg. Scratch: x9, x10 (caller-saved).
    naked_asm!(
        ".cfi_startproc",
        "sub sp, sp, #176", // the frame of the diagram
        ".cfi_def_cfa_offset 176",
        "stp d8, d9, [sp, #0]", // the callee-saved halves of v8-v15
        "stp d10, d11, [sp, #16]",
        "stp d12, d13, [sp, #32]",
        "stp d14, d15, [sp, #48]",
        "stp x19, x20, [sp, #64]", // the callee-saved general registers
        "stp x21, x22, [sp, #80]",
        "stp x23, x24, [sp, #96]",
        "stp x25, x26, [sp, #112]",
        "stp x27, x28, [sp, #128]",
        "stp x29, x30, [sp, #144]", // the frame record: fp and the return address
        ".cfi_offset x19, -112",
        ".cfi_offset x20, -104",
        ".cfi_offset x21, -96",
        ".cfi_offset x22, -88",
        ".cfi_offset x23, -80",
        ".cfi_offset x24, -72",
        ".cfi_offset x25, -64",
        ".cfi_offset x26, -56",
        ".cfi_offset x27, -48",
        ".cfi_offset x28, -40",
        ".cfi_offset x29, -32",
        ".cfi_offset x30, -24",
        "mrs x9, fpcr", // x9 = current FPCR, for the compare below
        "str x9, [sp, #160]",
        "mov x10, sp",
        "str x10, [x0]", // *save_sp = sp: this context is now suspended
        // From here on sp is the resumed context's; its stack holds the same layout, so
        // the CFI above describes the resumed context's frame.
        "mov sp, x1",          // load the resumed context's sp
        "ldr x10, [sp, #160]", // its FPCR
        "cmp x9, x10",
        "b.eq 2f", // the same: no write (the usual case)
        "msr fpcr, x10",
        "2:",
        "ldp d8, d9, [sp, #0]", // restore the callee-saved registers
        "ldp d10, d11, [sp, #16]",
        "ldp d12, d13, [sp, #32]",
        "ldp d14, d15, [sp, #48]",
        "ldp x19, x20, [sp, #64]",
        "ldp x21, x22, [sp, #80]",
        "ldp x23, x24, [sp, #96]",
        "ldp x25, x26, [sp, #112]",
        "ldp x27, x28, [sp, #128]",
        "ldp x29, x30, [sp, #144]",
        "add sp, sp, #176",
        ".cfi_def_cfa_offset 0",
        ".cfi_restore x19",
        ".cfi_restore x20",
        ".cfi_restore x21",
        ".cfi_restore x22",
        ".cfi_restore x23",
        ".cfi_restore x24",
        ".cfi_restore x25",
        ".cfi_restore x26",
        ".cfi_restore x27",
        ".cfi_restore x28",
        ".cfi_restore x29",
        ".cfi_restore x30",
        "mov x0, x2", // the resumed `switch` returns arg (a fresh
        // stack's trampoline takes it from x0 too)
        "ret", // resume at the restored x30
        ".cfi_endproc",
    )
}

/// The floating-point control state of the calling thread in the layout of a saved
/// context's slot: FPCR.
pub fn fpenv_current() -> u64 {
    let v: u64;
    // SAFETY: reads FPCR, which EL0 may always read; no memory is touched.
    unsafe { asm!("mrs {v}, fpcr", v = out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

/// [`switch`] for a context whose floating-point control state is known and constant: the
/// scheduler's own stack (g0), which never changes FPCR. It stores `fpenv` (as returned by
/// [`fpenv_current`] on this thread) as the suspended context's FPCR instead of reading
/// it, and writes FPCR only when the resumed context's differs.
///
/// # Safety
///
/// As for [`switch`]; in addition `fpenv` must be the current FPCR of the calling context.
#[unsafe(naked)]
pub unsafe extern "C" fn switch_from_g0(
    save_sp: *mut usize,
    to_sp: usize,
    arg: usize,
    fpenv: u64,
) -> usize {
    // x0 = save_sp, x1 = to_sp, x2 = arg, x3 = fpenv. Scratch: x10.
    naked_asm!(
        ".cfi_startproc",
        "sub sp, sp, #176", // the frame `switch` uses (see the diagram)
        ".cfi_def_cfa_offset 176",
        "stp d8, d9, [sp, #0]",
        "stp d10, d11, [sp, #16]",
        "stp d12, d13, [sp, #32]",
        "stp d14, d15, [sp, #48]",
        "stp x19, x20, [sp, #64]",
        "stp x21, x22, [sp, #80]",
        "stp x23, x24, [sp, #96]",
        "stp x25, x26, [sp, #112]",
        "stp x27, x28, [sp, #128]",
        "stp x29, x30, [sp, #144]",
        ".cfi_offset x19, -112",
        ".cfi_offset x20, -104",
        ".cfi_offset x21, -96",
        ".cfi_offset x22, -88",
        ".cfi_offset x23, -80",
        ".cfi_offset x24, -72",
        ".cfi_offset x25, -64",
        ".cfi_offset x26, -56",
        ".cfi_offset x27, -48",
        ".cfi_offset x28, -40",
        ".cfi_offset x29, -32",
        ".cfi_offset x30, -24",
        "str x3, [sp, #160]", // the FPCR slot: the known state, not read
        "mov x10, sp",
        "str x10, [x0]", // *save_sp = sp: this context is now suspended
        "mov sp, x1",    // load the resumed context's sp
        "ldr x10, [sp, #160]",
        "cmp x3, x10",
        "b.eq 2f", // the same FPCR: no write
        "msr fpcr, x10",
        "2:",
        "ldp d8, d9, [sp, #0]",
        "ldp d10, d11, [sp, #16]",
        "ldp d12, d13, [sp, #32]",
        "ldp d14, d15, [sp, #48]",
        "ldp x19, x20, [sp, #64]",
        "ldp x21, x22, [sp, #80]",
        "ldp x23, x24, [sp, #96]",
        "ldp x25, x26, [sp, #112]",
        "ldp x27, x28, [sp, #128]",
        "ldp x29, x30, [sp, #144]",
        "add sp, sp, #176",
        ".cfi_def_cfa_offset 0",
        ".cfi_restore x19",
        ".cfi_restore x20",
        ".cfi_restore x21",
        ".cfi_restore x22",
        ".cfi_restore x23",
        ".cfi_restore x24",
        ".cfi_restore x25",
        ".cfi_restore x26",
        ".cfi_restore x27",
        ".cfi_restore x28",
        ".cfi_restore x29",
        ".cfi_restore x30",
        "mov x0, x2", // the resumed side returns arg
        "ret",
        ".cfi_endproc",
    )
}

/// The body of a naked C entry point `fn(a: *mut T, b) -> R` that picks one of two
/// functions of its own signature: it branches to `$quick` when `a` is not null and the
/// byte at `a + $offset` is 0, else to `$full` (see the x86-64 file; `ffi::chan`'s send
/// and receive). The arguments stay in their registers; x9 is scratch (caller-saved).
macro_rules! gate_on_byte {
    ($offset:expr, $quick:path, $full:path) => {
        core::arch::naked_asm!(
            "cbz x0, {full}",
            "ldrb w9, [x0, #{offset}]",
            "cbnz w9, {full}",
            "b {quick}",
            offset = const $offset,
            quick = sym $quick,
            full = sym $full,
        )
    };
}
pub(crate) use gate_on_byte;

/// Calls [`switch_from_g0`] (a plain call on aarch64: see "Return prediction").
///
/// # Safety
/// As for [`switch_from_g0`].
#[inline(always)]
pub unsafe fn switch_from_g0_balanced(
    save_sp: *mut usize,
    to_sp: usize,
    arg: usize,
    fpenv: u64,
) -> usize {
    // SAFETY: the caller's contract is switch_from_g0's.
    unsafe { switch_from_g0(save_sp, to_sp, arg, fpenv) }
}

/// Calls [`start_from_g0`] (a plain call on aarch64: see "Return prediction").
///
/// # Safety
/// As for [`start_from_g0`].
#[inline(always)]
pub unsafe fn start_from_g0_balanced(
    save_sp: *mut usize,
    stack_top: usize,
    entry: unsafe extern "C" fn(usize) -> !,
    fpenv: u64,
) -> usize {
    // SAFETY: the caller's contract is start_from_g0's.
    unsafe { start_from_g0(save_sp, stack_top, entry, fpenv) }
}

/// Starts a goroutine that has never run, without a frame prepared on its stack: saves the
/// scheduler context exactly as [`switch_from_g0`] does (so that the goroutine's first
/// `switch` back resumes it), then sets sp to `stack_top` (rounded down to 16) and enters
/// `entry(0)` through the trampoline, with the ABI's default FPCR (0). Why no prepared
/// frame: the x86-64 file's `start_from_g0`.
///
/// # Safety
///
/// As for `switch_from_g0`'s `save_sp` and `fpenv`; the memory below `stack_top` must be a
/// stack that no context uses, and stay mapped while the goroutine runs. `entry` never
/// returns.
#[unsafe(naked)]
pub unsafe extern "C" fn start_from_g0(
    save_sp: *mut usize,
    stack_top: usize,
    entry: unsafe extern "C" fn(usize) -> !,
    fpenv: u64,
) -> usize {
    // x0 = save_sp, x1 = stack_top, x2 = entry, x3 = fpenv.
    naked_asm!(
        ".cfi_startproc",
        "sub sp, sp, #176", // the frame `switch` uses (see the diagram)
        ".cfi_def_cfa_offset 176",
        "stp d8, d9, [sp, #0]",
        "stp d10, d11, [sp, #16]",
        "stp d12, d13, [sp, #32]",
        "stp d14, d15, [sp, #48]",
        "stp x19, x20, [sp, #64]",
        "stp x21, x22, [sp, #80]",
        "stp x23, x24, [sp, #96]",
        "stp x25, x26, [sp, #112]",
        "stp x27, x28, [sp, #128]",
        "stp x29, x30, [sp, #144]",
        ".cfi_offset x29, -32",
        ".cfi_offset x30, -24",
        "str x3, [sp, #160]", // the FPCR slot: the known state
        "mov x10, sp",
        "str x10, [x0]", // *save_sp = sp: the scheduler is suspended
        "cbz x3, 2f",    // FPCR already the default: no write
        "msr fpcr, xzr",
        "2:",
        "and x1, x1, #-16", // the new stack's aligned top
        "mov sp, x1",
        ".cfi_undefined x30", // a new call chain starts here
        "mov x19, x2",        // the trampoline calls x19...
        "mov x0, #0",         // ...with argument 0
        "mov x29, #0",        // ends frame-pointer walks
        "mov x30, #0",
        "b __gmp_arch_trampoline",
        ".cfi_endproc",
    )
}

// The outermost frame of every goroutine stack. Never called: `init_stack` stores the
// address of the label `__gmp_arch_trampoline` (one instruction in, after the `nop`) as the
// return address of a fresh stack's initial frame, and the first `switch` into that stack
// returns there with x0 = arg and x19 = entry.
//
// The `nop` before the label matters to unwinders: they look up the frame of a return
// address `ra` at `ra - 1`, which must fall inside this function's CFI (the saved return
// address of a suspended, never-started context is the label itself). `bti c` would be
// needed there only if the library were built with branch protection; a `ret` to the
// label is not an indirect branch BTI checks.
global_asm!(
    ".pushsection .text.__gmp_arch_trampoline,\"ax\",%progbits",
    ".p2align 4",
    ".globl __gmp_arch_trampoline_fn",  // global and hidden: never exported from the cdylib
    ".hidden __gmp_arch_trampoline_fn",
    ".type __gmp_arch_trampoline_fn, %function",
    "__gmp_arch_trampoline_fn:",
    ".cfi_startproc",
    ".cfi_undefined x30",               // end of the call chain: no caller to unwind to
    "nop",                              // see above
    ".globl __gmp_arch_trampoline",     // the resume point init_stack stores
    ".hidden __gmp_arch_trampoline",
    "__gmp_arch_trampoline:",
    "blr x19",                          // entry(arg): x0 is the first switch's arg; sp is
                                        // the stack's 16-aligned top
    "bl {returned}",                    // entry returned: abort with a message
    "brk #1",                           // not reached (entry_returned never returns)
    ".cfi_endproc",
    ".size __gmp_arch_trampoline_fn, . - __gmp_arch_trampoline_fn",
    ".popsection",
    returned = sym entry_returned,
);

/// Called by the trampoline if a goroutine's entry function returns, which it must not:
/// there is no frame above it to return to.
extern "C" fn entry_returned() -> ! {
    const MSG: &[u8] = b"gmp: goroutine entry returned\n";
    // SAFETY: write(2) on fd 2 from a valid static buffer of MSG.len() bytes; abort(3) is
    // always safe to call. No allocation: the goroutine's state is unknown here.
    unsafe {
        crate::sys::real::write(2, MSG.as_ptr().cast(), MSG.len());
        libc::abort()
    }
}

/// Prepares a fresh stack whose highest usable address (exclusive) is `stack_top` (rounded
/// down to 16 here), such that `switch(&mut x, returned_sp, arg)` starts running
/// `entry(arg)` on that stack with sp 16-aligned at its top. `entry` never returns (if it
/// did, the process aborts with "gmp: goroutine entry returned").
///
/// # Safety
///
/// The 176 bytes below `stack_top & !15` must be writable memory owned by the caller, with
/// room below them for whatever `entry` needs, and must stay mapped while the stack is in
/// use.
pub unsafe fn init_stack(stack_top: usize, entry: unsafe extern "C" fn(usize) -> !) -> usize {
    let top = stack_top & !15;
    let sp = top - INITIAL_FRAME;
    let resume: usize;
    // SAFETY: computes the address of the hidden label defined in the trampoline's asm; no
    // memory is accessed.
    unsafe {
        asm!(
            "adrp {r}, __gmp_arch_trampoline",
            "add {r}, {r}, :lo12:__gmp_arch_trampoline",
            r = out(reg) resume,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    let mut frame = [0usize; INITIAL_FRAME / 8];
    frame[64 / 8] = entry as usize; // x19, called by the trampoline
    frame[SAVED_FP_OFFSET / 8] = 0; // x29: ends frame-pointer chains
    frame[SAVED_FP_OFFSET / 8 + 1] = resume; // x30: where the first switch returns
    frame[160 / 8] = INITIAL_FPCR;
    // SAFETY: the caller guarantees [top - 176, top) is writable memory it owns; `sp` is
    // 16-aligned because `top` is, so the usize writes are aligned.
    unsafe {
        core::ptr::copy_nonoverlapping(frame.as_ptr(), sp as *mut usize, frame.len());
    }
    sp
}

// The runtime's per-thread slot: one initial-exec TLS word in .tbss (zero on every new
// thread), defined in assembly for the reason the x86-64 file gives (HACKING.md, decision
// 8). Global but hidden.
global_asm!(
    ".pushsection .tbss,\"awT\",%nobits",
    ".p2align 3",
    ".globl __gmp_tls_slot",
    ".hidden __gmp_tls_slot",
    ".type __gmp_tls_slot, %object",
    ".size __gmp_tls_slot, 8",
    "__gmp_tls_slot:",
    ".zero 8",
    ".popsection",
);

/// Reads the calling thread's runtime TLS slot (0 on a thread that never set it).
///
/// Each call reads the slot of the thread running it at that moment (see `sys::tls_addr`).
#[inline]
pub fn tls_get() -> usize {
    let p = crate::sys::tls_addr!("__gmp_tls_slot") as *const usize;
    // SAFETY: the thread's own 8-byte, 8-aligned slot defined above.
    unsafe { p.read_volatile() }
}

/// Writes the calling thread's runtime TLS slot.
#[inline]
pub fn tls_set(v: usize) {
    let p = crate::sys::tls_addr!("__gmp_tls_slot") as *mut usize;
    // SAFETY: the thread's own 8-byte, 8-aligned slot defined above.
    unsafe { p.write_volatile(v) }
}

/// The caller's frame pointer (x29), for frame-pointer walks of its own stack.
#[inline(always)]
pub fn frame_pointer() -> usize {
    let fp: usize;
    // SAFETY: reads x29; no memory access.
    unsafe { asm!("mov {}, x29", out(reg) fp, options(nomem, nostack, preserves_flags)) };
    fp
}

/// Makes system call `nr` with six arguments and returns the kernel's answer (a result >= 0
/// or -errno), without touching errno: the `svc` instruction itself.
///
/// # Safety
/// The call must be sound for the calling thread: its arguments are whatever `nr` wants
/// (pointers it reads or writes must be valid), and it must not break the thread under
/// the runtime (gmp_syscall refuses the calls that would).
#[inline(always)]
pub unsafe fn syscall6(nr: i64, a: [i64; 6]) -> i64 {
    let r: i64;
    // SAFETY: the caller's contract. The kernel's aarch64 convention: number in x8,
    // arguments in x0-x5, result in x0; no other register changes. Memory may be read or
    // written by the call (no nomem).
    unsafe {
        asm!(
            "svc #0",
            in("x8") nr,
            inlateout("x0") a[0] => r,
            in("x1") a[1],
            in("x2") a[2],
            in("x3") a[3],
            in("x4") a[4],
            in("x5") a[5],
            options(nostack),
        );
    }
    r
}

// ---------------------------------------------------------------------------------------
// Asynchronous preemption (rt/preempt.rs) and unseen calls (rt/unseen.rs).
//
// aarch64 has no branch that takes its target from memory: returning to an interrupted
// instruction with every register as it was needs a register for the target, and any
// register may be live at an arbitrary instruction (x16 and x17 too, between calls). So the
// return is the kernel's: the signal handler copies the ucontext the kernel gave it (the
// general registers, sp, pc, pstate, and the records of `__reserved`: FPSIMD, q0-q31 with
// FPSR and FPCR, and SVE/SME state where the CPU has it) onto the goroutine's stack as an
// `rt_sigframe`, points the context at the trampoline, and returns; the trampoline calls
// the runtime and then makes `rt_sigreturn` with sp at the copy, which restores all of it
// exactly (the same thread: the goroutine is bound to its M for this stop).
//
// The goroutine's stack at the trampoline's entry:
//
//   original sp ─┐
//                │  128 bytes, untouched (AAPCS64 on Linux has no red zone: a margin)
//                │  ucontext_t (the copy; what rt_sigreturn reads)      ┐ the rt_sigframe,
//                │  128 bytes: the siginfo slot (not read back)         ┘ 16-aligned
//                │  `call`, `carried`: what the handler tells `ASYNC_SYSCALL`
//   sp, x29 ────►│  frame record: {interrupted x29, interrupted pc}
//
// The frame record makes the interrupted code the trampoline's caller for frame-pointer
// walks (the goroutine dump, the profiler). A context whose state does not fit the
// `__reserved` area (an `extra_context` record: SVE vectors longer than 2048 bits with
// SME's ZA) is not copied: the handler refuses it (counted as no room on the stack).

/// `rt_sigframe`'s siginfo part: the kernel's frame starts with it.
const SIGINFO_BYTES: usize = 128;

/// Bytes below the trampoline's sp that hold `SavedRegs` (see the diagram).
const SAVED_BYTES: usize = core::mem::size_of::<SavedRegs>();

// The trampolines find the `rt_sigframe` 32 bytes above their sp, and the kernel its
// ucontext 128 bytes into the frame.
const _: () = assert!(core::mem::offset_of!(SavedRegs, siginfo) == 32);
const _: () = assert!(core::mem::offset_of!(SavedRegs, uc) == 32 + SIGINFO_BYTES);

/// `__reserved` record magics (the kernel's `asm/sigcontext.h`).
const FPSIMD_MAGIC: u32 = 0x4650_8001;
const EXTRA_MAGIC: u32 = 0x4558_5401;

/// The runtime's park function, called by `__gmp_async_preempt` on the goroutine's stack.
pub static ASYNC_PARK: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);
/// The runtime's wrapper of an unseen call, called by `__gmp_async_syscall`.
pub static ASYNC_SYSCALL: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

/// Records the runtime's functions the trampolines call. Always true on aarch64: the
/// kernel's frame carries the whole register state, whatever vector extensions the CPU has.
pub fn async_preempt_init(park: extern "C" fn(), syscall: extern "C" fn(*mut SavedRegs)) -> bool {
    use core::sync::atomic::Ordering;
    ASYNC_PARK.store(park as usize, Ordering::Relaxed);
    ASYNC_SYSCALL.store(syscall as usize, Ordering::Release);
    true
}

/// Bytes a diversion into a trampoline uses below the interrupted sp (the handler checks
/// the goroutine's stack has them, and more for the runtime's frames).
pub fn async_stack_need() -> usize {
    128 + SAVED_BYTES + 16
}

/// The trampoline's address, for the signal handler.
pub fn async_preempt_entry() -> usize {
    unsafe extern "C" {
        fn __gmp_async_preempt();
    }
    __gmp_async_preempt as *const () as usize
}

/// The address of the trampoline that makes an unseen blocking call seen (rt/unseen.rs).
pub fn async_syscall_entry() -> usize {
    unsafe extern "C" {
        fn __gmp_async_syscall();
    }
    __gmp_async_syscall as *const () as usize
}

/// What the trampolines find on the goroutine's stack (see the diagram), as the callee of
/// `__gmp_async_syscall` gets it: it may change the saved registers, which `rt_sigreturn`
/// then restores.
#[repr(C, align(16))]
pub struct SavedRegs {
    /// The frame record: the interrupted x29 and pc.
    record: [u64; 2],
    /// The system call `wrapped` makes, or its marker (rt/unseen.rs).
    call: u64,
    /// Bytes a cut-short call already moved, or a resumed call's result.
    carried: u64,
    /// The siginfo slot of the `rt_sigframe` (not read by `rt_sigreturn`).
    siginfo: [u8; SIGINFO_BYTES],
    /// The copy of the interrupted context.
    uc: libc::ucontext_t,
}

impl SavedRegs {
    /// The call the handler asked `ASYNC_SYSCALL` to make (or its marker).
    pub fn call(&self) -> u64 {
        self.call
    }
    /// What the handler carried beside the call.
    pub fn carried(&self) -> u64 {
        self.carried
    }
    /// The interrupted system call's six argument registers.
    pub fn args(&self) -> [u64; 6] {
        let r = &self.uc.uc_mcontext.regs;
        [r[0], r[1], r[2], r[3], r[4], r[5]]
    }
    /// Leaves what the kernel leaves after a system call: its result in x0.
    pub fn set_return(&mut self, v: u64) {
        self.uc.uc_mcontext.regs[0] = v;
    }
}

/// The interrupted code's pc.
///
/// # Safety
/// `uc` is the context the kernel passed to an SA_SIGINFO handler.
pub unsafe fn ctx_pc(uc: *const libc::ucontext_t) -> usize {
    // SAFETY: caller contract.
    unsafe { (*uc).uc_mcontext.pc as usize }
}

/// The interrupted code's sp.
///
/// # Safety
/// As for [`ctx_pc`].
pub unsafe fn ctx_sp(uc: *const libc::ucontext_t) -> usize {
    // SAFETY: caller contract.
    unsafe { (*uc).uc_mcontext.sp as usize }
}

/// The return address of a leaf function stopped in the context `uc`: the link register
/// x30 (libc's `syscall` wrapper at its `svc`).
///
/// # Safety
/// As for [`ctx_pc`].
pub unsafe fn ctx_leaf_return(uc: *const libc::ucontext_t) -> usize {
    // SAFETY: caller contract.
    unsafe { (*uc).uc_mcontext.regs[30] as usize }
}

/// The interrupted code's frame pointer (x29).
///
/// # Safety
/// As for [`ctx_pc`].
pub unsafe fn ctx_fp(uc: *const libc::ucontext_t) -> usize {
    // SAFETY: caller contract.
    unsafe { (*uc).uc_mcontext.regs[29] as usize }
}

/// The bytes of the instruction that makes a system call: `svc #0`.
pub(crate) const SYSCALL_INSN_LEN: usize = 4;

/// Whether the instruction at `pc` is `svc #0`.
///
/// # Safety
/// `pc` is readable: the address of an instruction the thread just executed.
pub unsafe fn is_syscall_insn(pc: usize) -> bool {
    // SAFETY: caller contract; instructions are 4-aligned.
    unsafe { (pc as *const u32).read() == 0xd400_0001 }
}

/// Whether the kernel reports a system call's result in its first argument's register
/// (x0): after the call, that argument is only where sysmon recorded it.
pub(crate) const SYSCALL_RET_IN_ARG0: bool = true;

/// The system-call registers of an interrupted context: the number (x8), the result (x0),
/// and the six arguments (x0-x5).
///
/// # Safety
/// As for [`ctx_pc`].
pub unsafe fn ctx_syscall(uc: *const libc::ucontext_t) -> (u64, u64, [u64; 6]) {
    // SAFETY: caller contract.
    let r = unsafe { &(*uc).uc_mcontext.regs };
    (r[8], r[0], [r[0], r[1], r[2], r[3], r[4], r[5]])
}

/// Sets the interrupted system call's result.
///
/// # Safety
/// As for [`ctx_pc`].
pub unsafe fn set_ctx_syscall_ret(uc: *mut libc::ucontext_t, v: u64) {
    // SAFETY: caller contract.
    unsafe { (*uc).uc_mcontext.regs[0] = v };
}

/// Makes the interrupted context enter system call `nr` again, as the kernel does for a
/// call it restarts: the pc back on `svc` (`pc_after` is the address after it), x0 the
/// first argument again.
///
/// # Safety
/// As for [`ctx_pc`].
pub unsafe fn ctx_rewind_syscall(uc: *mut libc::ucontext_t, pc_after: usize, nr: u64, arg0: u64) {
    // SAFETY: caller contract.
    unsafe {
        let mc = &mut (*uc).uc_mcontext;
        mc.pc = (pc_after - SYSCALL_INSN_LEN) as u64;
        mc.regs[8] = nr;
        mc.regs[0] = arg0;
    }
}

/// Whether the trampolines can carry the interrupted context's register state: the records
/// of `__reserved` can be copied as they are (an FPSIMD record, no `extra_context`, which
/// holds state outside the frame at an address the copy would not follow, and a
/// terminator inside the area).
///
/// # Safety
/// As for [`ctx_pc`].
pub unsafe fn can_divert(uc: *const libc::ucontext_t) -> bool {
    const RESERVED: usize = 4096;
    let mc = core::mem::size_of::<libc::mcontext_t>();
    // SAFETY: caller contract: `__reserved` is the last 4096 bytes of mcontext_t, written
    // by the kernel as a list of {magic: u32, size: u32} headers, 16-aligned, ended by a
    // zero header.
    unsafe {
        let base = (&raw const (*uc).uc_mcontext as *const u8).add(mc - RESERVED);
        let (mut off, mut fpsimd) = (0usize, false);
        while off + 8 <= RESERVED {
            let magic = (base.add(off) as *const u32).read();
            let size = (base.add(off + 4) as *const u32).read() as usize;
            if magic == 0 && size == 0 {
                return fpsimd;
            }
            if magic == EXTRA_MAGIC || size < 8 || !size.is_multiple_of(16) {
                return false;
            }
            fpsimd |= magic == FPSIMD_MAGIC;
            off += size;
        }
        false
    }
}

/// Diverts the interrupted context into `__gmp_async_preempt`, which returns to the
/// interrupted pc with every register as it was.
///
/// # Safety
/// In a signal handler, with the context of code running on a goroutine stack that has
/// [`async_stack_need`] bytes below the interrupted sp, which [`can_divert`] accepted.
pub unsafe fn divert_preempt(uc: *mut libc::ucontext_t) {
    // SAFETY: caller contract.
    unsafe {
        let pc = ctx_pc(uc);
        divert(uc, async_preempt_entry(), pc, 0, 0)
    }
}

/// Diverts a context interrupted in (or just after) a system call into
/// `__gmp_async_syscall`, whose callee finds `call` and `carried` in its `SavedRegs`, and
/// which returns to `resume_pc` (the address after `svc`).
///
/// # Safety
/// As for [`divert_preempt`].
pub unsafe fn divert_syscall(uc: *mut libc::ucontext_t, resume_pc: usize, call: u64, carried: u64) {
    // SAFETY: caller contract.
    unsafe { divert(uc, async_syscall_entry(), resume_pc, call, carried) }
}

/// Diverts the interrupted context into the trampoline at `entry`, leaving `call` and
/// `carried` for its callee and `resume_pc` as the pc it returns to.
///
/// # Safety
/// As for [`divert_preempt`].
unsafe fn divert(
    uc: *mut libc::ucontext_t,
    entry: usize,
    resume_pc: usize,
    call: u64,
    carried: u64,
) {
    // SAFETY: caller contract: the context is the kernel's, its records copyable, and the
    // goroutine's stack has room for the save area below sp (no red zone on Linux; 128
    // bytes kept anyway). The area is 16-aligned, as rt_sigreturn requires of the frame.
    unsafe {
        let sp = ctx_sp(uc);
        let base = (sp - 128 - SAVED_BYTES) & !15;
        let saved = base as *mut SavedRegs;
        let mc = &mut (*uc).uc_mcontext;
        mc.pc = resume_pc as u64;
        (&raw mut (*saved).uc).copy_from_nonoverlapping(uc, 1);
        (*saved).record = [mc.regs[29], resume_pc as u64];
        (*saved).call = call;
        (*saved).carried = carried;
        mc.sp = base as u64;
        mc.regs[29] = base as u64;
        mc.pc = entry as u64;
    }
}

/// The body both trampolines share; they differ in the function they call (with x0 = the
/// `SavedRegs` at sp). x19 keeps that address across the call (every register is restored
/// from the copy afterwards), and `rt_sigreturn` (number 139) finds the frame at sp.
macro_rules! async_trampoline {
    ($name:literal, $callee:path) => {
        global_asm!(
            ".pushsection .text,\"ax\",%progbits",
            ".p2align 2",
            concat!(".globl ", $name),
            concat!(".hidden ", $name),
            concat!(".type ", $name, ", %function"),
            concat!($name, ":"),
            ".cfi_startproc",
            ".cfi_def_cfa x29, 16",             // the handler's frame record at sp = x29
            ".cfi_offset x29, -16",
            ".cfi_offset x30, -8",              // the interrupted pc as the return address
            "hint #34",                         // bti c (a nop without branch protection)
            "mov x19, sp",
            "mov x0, sp",                       // the callee's SavedRegs
            "adrp x16, {callee}",
            "ldr x16, [x16, :lo12:{callee}]",
            "blr x16",
            "add sp, x19, #{sigframe}",         // sp = the rt_sigframe copy
            "mov x8, #139",                     // rt_sigreturn: every register, sp, pc
            "svc #0",
            "brk #1",                           // not reached
            ".cfi_endproc",
            concat!(".size ", $name, ", . - ", $name),
            ".popsection",
            callee = sym $callee,
            sigframe = const 32,
        );
    };
}

async_trampoline!("__gmp_async_preempt", ASYNC_PARK);
async_trampoline!("__gmp_async_syscall", ASYNC_SYSCALL);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack;
    use std::hint::black_box;

    /// FPCR's rounding-mode field (bits 22-23): 0b11 rounds toward zero.
    const RMODE_ZERO: u64 = 3 << 22;
    const RMODE_DOWN: u64 = 2 << 22;

    fn set_fpcr(v: u64) {
        // SAFETY: writes FPCR with only the rounding mode changed from the ABI default.
        unsafe { asm!("msr fpcr, {v}", v = in(reg) v, options(nomem, nostack, preserves_flags)) };
    }

    #[repr(C)]
    struct Pair {
        main_sp: usize,
        co_sp: usize,
    }

    fn resume(pair: &mut Pair, v: usize) -> usize {
        let p: *mut Pair = pair;
        // SAFETY: co_sp is the coroutine's suspended sp; it switches back through main_sp.
        unsafe { switch(&raw mut (*p).main_sp, (*p).co_sp, v) }
    }

    /// # Safety
    /// `pair` is the Pair the test resumed us through, and the test is suspended.
    unsafe fn yield_back(pair: *mut Pair, v: usize) -> usize {
        // SAFETY: per the contract, main_sp is the suspended test's sp.
        unsafe { switch(&raw mut (*pair).co_sp, (*pair).main_sp, v) }
    }

    /// -1/3 in single precision: its last bit shows the rounding mode in force.
    fn third() -> u32 {
        (black_box(-1.0f32) / black_box(3.0f32)).to_bits()
    }

    unsafe extern "C" fn fp_entry(arg: usize) -> ! {
        let pair = arg as *mut Pair;
        let fresh = fpenv_current() as usize;
        set_fpcr(RMODE_DOWN);
        // Callee-saved vector halves live across the switch on this side.
        let kept = black_box(1.25f64);
        // SAFETY: the test resumed us through `pair` and is suspended.
        unsafe { yield_back(pair, fresh) };
        loop {
            let report = fpenv_current() as usize | (third() as usize) << 32;
            assert_eq!(black_box(kept) * 4.0, 5.0);
            // SAFETY: as above.
            unsafe { yield_back(pair, report) };
        }
    }

    #[test]
    fn fpcr_preserved_per_context() {
        let saved = fpenv_current();
        set_fpcr(RMODE_ZERO);
        let mut pair = Pair {
            main_sp: 0,
            co_sp: 0,
        };
        let s = stack::alloc(stack::DEFAULT_STACK).expect("stack alloc");
        // SAFETY: the stack is ours and mapped until freed below.
        pair.co_sp = unsafe { init_stack(s.top(), fp_entry) };
        let arg = &raw mut pair as usize;
        assert_eq!(
            resume(&mut pair, arg),
            0,
            "ABI default FPCR on a fresh stack"
        );
        set_fpcr(0);
        let nearest = third();
        set_fpcr(RMODE_ZERO);
        let main_third = third();
        for _ in 0..100 {
            let report = resume(&mut pair, 0);
            assert_eq!(report as u32 as u64, RMODE_DOWN, "coroutine FPCR");
            assert_eq!(
                (report >> 32) as u32,
                nearest + 1,
                "rounding down: larger magnitude"
            );
            assert_eq!(fpenv_current(), RMODE_ZERO, "our FPCR");
            assert_eq!(third(), main_third);
        }
        set_fpcr(saved);
        stack::free(s);
    }

    /// Entry point that records sp as it is on entry, then branches to the real entry.
    #[unsafe(naked)]
    unsafe extern "C" fn sp_probe_entry(arg: usize) -> ! {
        naked_asm!(
            "mov x1, sp",         // second argument: sp on entry
            "b {real}",
            real = sym sp_probe_real,
        )
    }

    unsafe extern "C" fn sp_probe_real(arg: usize, sp: usize) -> ! {
        let pair = arg as *mut Pair;
        // SAFETY: the test resumed us through `pair` and is suspended.
        unsafe { yield_back(pair, sp) };
        unreachable!("resumed after the test finished");
    }

    #[test]
    fn fresh_stack_entry_is_aligned_at_the_top() {
        let mut pair = Pair {
            main_sp: 0,
            co_sp: 0,
        };
        let s = stack::alloc(stack::DEFAULT_STACK).expect("stack alloc");
        // SAFETY: the stack is ours and mapped until freed below.
        pair.co_sp = unsafe { init_stack(s.top() - 9, sp_probe_entry) };
        assert_eq!(pair.co_sp % 16, 0);
        assert_eq!(pair.co_sp, (s.top() - 9) / 16 * 16 - INITIAL_FRAME);
        let arg = &raw mut pair as usize;
        let sp = resume(&mut pair, arg);
        assert_eq!(sp % 16, 0, "sp 16-aligned at entry");
        assert_eq!(
            sp,
            (s.top() - 9) / 16 * 16,
            "entry starts at the aligned top"
        );
        stack::free(s);
    }

    /// The Pair of `start_from_g0_runs_on_top_with_default_fpcr`.
    static START_PAIR: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    unsafe extern "C" fn start_entry(arg: usize) -> ! {
        assert_eq!(arg, 0);
        let pair = START_PAIR.load(std::sync::atomic::Ordering::Relaxed) as *mut Pair;
        let fresh = fpenv_current();
        let local = 0u8;
        let report = [fresh as usize, black_box(&local) as *const u8 as usize];
        // SAFETY: the test is suspended until we switch back; it reads `report` before
        // this stack is freed.
        unsafe { yield_back(pair, &report as *const [usize; 2] as usize) };
        unreachable!("resumed after the test finished");
    }

    #[test]
    fn start_from_g0_runs_on_top_with_default_fpcr() {
        let mut pair = Pair {
            main_sp: 0,
            co_sp: 0,
        };
        START_PAIR.store(&raw mut pair as usize, std::sync::atomic::Ordering::Relaxed);
        let s = stack::alloc(stack::DEFAULT_STACK).expect("stack alloc");
        let ours = fpenv_current();
        // Round toward zero on this side: the goroutine must not inherit it, and we must
        // get it back.
        set_fpcr(RMODE_ZERO);
        let p: *mut Pair = &mut pair;
        // SAFETY: the stack is ours and unused; start_entry switches back through main_sp.
        let r = unsafe { start_from_g0(&raw mut (*p).main_sp, s.top(), start_entry, RMODE_ZERO) };
        let after = fpenv_current();
        // SAFETY: the report lives on the suspended goroutine's stack, still mapped.
        let [fresh, local] = unsafe { *(r as *const [usize; 2]) };
        set_fpcr(ours);
        assert_eq!(after, RMODE_ZERO, "our FPCR came back");
        assert_eq!(fresh, 0, "fresh goroutine: default FPCR");
        assert!(
            (s.top() - 4096..s.top()).contains(&local),
            "runs at the top of its stack"
        );
        stack::free(s);
    }

    #[test]
    fn syscall6_returns_the_kernels_answer() {
        // SAFETY: getpid and a close of a descriptor that cannot be open take no pointers.
        unsafe {
            assert_eq!(syscall6(libc::SYS_getpid, [0; 6]), libc::getpid() as i64);
            assert_eq!(
                syscall6(libc::SYS_close, [-1, 0, 0, 0, 0, 0]),
                -libc::EBADF as i64
            );
        }
    }
}
