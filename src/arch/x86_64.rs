//! The context switch, the fresh-stack trampoline and the runtime's TLS slot for x86_64
//! (System V ABI, Linux).
//!
//! # What a switch saves
//!
//! A switch is an ordinary `extern "C"` call as far as the compiler of the caller knows, so
//! only the callee-saved state has to survive it: rbx, rbp, r12–r15, rsp, and the control
//! parts of the floating-point environment (the MXCSR control bits and the x87 control
//! word, which the ABI also makes callee-saved). Everything else is caller-saved and already
//! spilled by the caller if it is live.
//!
//! The MXCSR and the x87 control word are saved on every switch (`stmxcsr`/`fnstcw` are
//! cheap) but reloaded only when the resumed context's *control* bits differ from the
//! current ones: `ldmxcsr` and `fldcw` serialize the pipeline, and the sticky exception
//! flags (MXCSR bits 0–5) differ between goroutines all the time, so reloading
//! unconditionally would pay that serialization on nearly every switch. The consequence: the sticky exception flags are per thread, not per
//! goroutine (as in Go, which does not preserve them either).
//!
//! # Why `pop` + `jmp` and not `ret`
//!
//! The return address popped belongs to the *other* context's call of `switch`; a `ret`
//! there would never match the `call` the return-stack buffer predicted and mispredicts on
//! every switch. An indirect `jmp` is predicted by the branch target buffer instead.
//!
//! # Return-stack balance
//!
//! The return-stack buffer (RSB) predicts each `ret` from the last `call` not yet returned
//! from. A switch resumes a context whose calls are not the ones the RSB holds, so after
//! it every `ret` up the resumed goroutine's chain (switch → mcall → gopark → ... → the
//! `gmp_*` function → C) would pop an entry pushed by someone else: with `call` into both
//! directions and `pop; jmp` out of both, the RSB is one entry off (the scheduler's call
//! of `switch_from_g0`) and every one of those returns mispredicted (~15-20 cycles each).
//!
//! So the two directions differ:
//! - goroutine → scheduler: `switch`, called normally (its `call` pushes the goroutine's
//!   resume address), ends in `pop; jmp` to the scheduler's resume point (one address,
//!   well predicted by the BTB); nothing is popped.
//! - scheduler → goroutine: [`switch_from_g0_balanced`] / [`start_from_g0_balanced`] push
//!   the scheduler's resume address by hand and `jmp` into [`switch_from_g0`] /
//!   [`start_from_g0`] (no RSB entry), and `switch_from_g0` ends in `ret`. That `ret` pops
//!   the entry the previous goroutine's `call` of `switch` pushed: the same instruction
//!   address as the resumed goroutine's own (both are the return site in `mcall`), and
//!   the returns above it then find the previous goroutine's chain, which for goroutines
//!   blocked in the same kind of call is their own chain too.
//!
//! The balance is worth its two entry points: with `call` and `pop; jmp` in both
//! directions, yield2, yield100 and pingpong (`python3 bench/run.py --only
//! yield2,yield100,pingpong --procs 1`) take 36, 41 and 206 ns per operation instead of
//! 15.5, 22 and 153 (Intel Xeon, 2 vCPUs).
//!
//! # Stack layouts (addresses grow upwards, the stack grows downwards)
//!
//! A suspended context, `*save_sp` pointing at its lowest word:
//!
//! ```text
//!         +---------------------------------+  higher addresses
//!         | ...caller of switch's frame...  |
//!  sp+56  | return address into the caller  |  popped into rcx, then `jmp rcx`
//!  sp+48  | rbp                             |
//!  sp+40  | rbx                             |
//!  sp+32  | r12                             |
//!  sp+24  | r13                             |
//!  sp+16  | r14                             |
//!  sp+8   | r15                             |
//!  sp+4   | x87 control word (16 bits) | 0  |
//!  sp+0   | MXCSR (32 bits)                 |  <- saved sp
//!         +---------------------------------+  lower addresses
//! ```
//!
//! A fresh stack made by [`init_stack`], `top` being `stack_top` rounded down to 16:
//!
//! ```text
//!  top-8   | 0                               |  padding; keeps the trampoline's rsp at
//!  top-16  | 0                               |  top-16, 16-byte aligned before its call
//!  top-24  | address of TRAMPOLINE           |  the "return address" the switch jumps to
//!  top-32  | rbp = 0                         |  ends frame-pointer walks
//!  top-40  | rbx = 0                         |
//!  top-48  | r12 = entry                     |  the trampoline calls r12
//!  top-56  | r13 = 0                         |
//!  top-64  | r14 = 0                         |
//!  top-72  | r15 = 0                         |
//!  top-80  | MXCSR 0x1F80, x87 CW 0x037F     |  <- returned sp
//! ```
//!
//! A fresh goroutine thus starts with the ABI's default floating-point environment
//! (round to nearest, all exceptions masked, 64-bit x87 precision), like a new thread.
//! The switch into it pops the frame above and jumps to the trampoline with rax = `arg`
//! and rsp = top-16; the trampoline moves `arg` to rdi and calls `entry`, so `entry` starts
//! with rsp = top-24, i.e. rsp+8 16-aligned, exactly as after a normal call.
//!
//! A running context has no saved state: its registers are live and its sp is in rsp.
//!
//! # Unwind information
//!
//! `switch` carries CFI for its whole body. After the pushes the frame is described as
//! "CFA = rsp+64, registers at fixed offsets"; the switch of rsp keeps that description
//! true, because the resumed stack holds the same layout (for the resumed context), and the
//! pops then undo it one by one. The trampoline's frame marks the end of the call chain
//! with `.cfi_undefined rip`, so gdb's `bt` from inside a goroutine stops cleanly there.

use core::arch::{asm, global_asm, naked_asm};

/// MXCSR bits compared before reloading: DAZ (6), exception masks (7–12), rounding
/// control (13–14), flush-to-zero (15). Bits 0–5 are the sticky exception flags.
const MXCSR_CONTROL_MASK: u32 = 0xFFC0;

/// The floating-point environment a fresh stack starts with: MXCSR 0x1F80 in the low 32
/// bits, x87 control word 0x037F in bits 32–47 (the slot's layout, see the diagram).
const INITIAL_FP_SLOT: usize = 0x037F << 32 | 0x1F80;

/// Bytes of the initial frame written by [`init_stack`] below the aligned top.
const INITIAL_FRAME: usize = 80;

/// Switches stacks: pushes the callee-saved state of the current context on its stack,
/// stores the resulting stack pointer to `*save_sp`, loads `to_sp`, restores that context
/// and resumes it; the resumed side's own `switch` call returns `arg`. (A fresh stack made
/// by [`init_stack`] receives `arg` as its entry function's argument instead.)
///
/// # Safety
///
/// - `save_sp` must be valid for a write of one `usize`. The old stack is not touched after
///   that store, so the suspended context may be resumed as soon as another thread sees
///   the value; the scheduler must publish it with its own release/acquire pair (the store
///   itself is a plain one).
/// - `to_sp` must be a stack pointer previously stored by `switch` or returned by
///   [`init_stack`], for a context that is not running anywhere and is resumed at most once
///   per suspension.
/// - The stack behind `to_sp` must stay mapped while that context runs.
#[unsafe(naked)]
pub unsafe extern "C" fn switch(save_sp: *mut usize, to_sp: usize, arg: usize) -> usize {
    // rdi = save_sp, rsi = to_sp, rdx = arg. Scratch: rax, rcx, r8–r10 (caller-saved).
    naked_asm!(
        ".cfi_startproc",
        // On entry the CIE's default rule holds: CFA = rsp+8, return address at CFA-8.
        // Save the FP control state first, into the slot the pushes below will frame
        // (rsp-56: just under the six registers, inside the red zone): the
        // stores then complete while the pushes run, and reading them back later does not
        // stall on store forwarding from stmxcsr (~1 ns on AMD Zen).
        "stmxcsr dword ptr [rsp - 56]",    // MXCSR (control bits and sticky flags)
        "fnstcw word ptr [rsp - 52]",      // x87 control word
        "push rbp",                        // save the callee-saved registers...
        ".cfi_adjust_cfa_offset 8",
        ".cfi_offset rbp, -16",
        "push rbx",
        ".cfi_adjust_cfa_offset 8",
        ".cfi_offset rbx, -24",
        "push r12",
        ".cfi_adjust_cfa_offset 8",
        ".cfi_offset r12, -32",
        "push r13",
        ".cfi_adjust_cfa_offset 8",
        ".cfi_offset r13, -40",
        "push r14",
        ".cfi_adjust_cfa_offset 8",
        ".cfi_offset r14, -48",
        "push r15",                        // ...in the order of the diagram
        ".cfi_adjust_cfa_offset 8",
        ".cfi_offset r15, -56",
        "sub rsp, 8",                      // the MXCSR + x87 CW slot, already written
        ".cfi_adjust_cfa_offset 8",        // CFA = rsp+64 from here to the first pop
        "mov r8d, dword ptr [rsp]",        // r8d = current MXCSR, for the compare below
        "movzx r9d, word ptr [rsp + 4]",   // r9d = current x87 CW
        "mov qword ptr [rdi], rsp",        // *save_sp = sp: this context is now suspended
        // From here on rsp is the resumed context's; its stack holds the same layout, so
        // the CFI above describes the resumed context's frame.
        "mov rsp, rsi",                    // load the resumed context's sp
        "xor r8d, dword ptr [rsp]",        // MXCSR bits that differ from the resumed one's
        "test r8d, {mxcsr_mask}",          // ...among the control bits only?
        "jz 2f",                           // none: keep the current MXCSR (fast path)
        "ldmxcsr dword ptr [rsp]",         // some: load the resumed context's MXCSR
        "2:",
        "cmp r9w, word ptr [rsp + 4]",     // same x87 CW as the resumed context's?
        "je 3f",                           // yes: skip the serializing fldcw
        "fldcw word ptr [rsp + 4]",        // no: load the resumed context's x87 CW
        "3:",
        "add rsp, 8",                      // drop the MXCSR/CW slot
        ".cfi_adjust_cfa_offset -8",
        "pop r15",                         // restore the callee-saved registers
        ".cfi_adjust_cfa_offset -8",
        ".cfi_restore r15",
        "pop r14",
        ".cfi_adjust_cfa_offset -8",
        ".cfi_restore r14",
        "pop r13",
        ".cfi_adjust_cfa_offset -8",
        ".cfi_restore r13",
        "pop r12",
        ".cfi_adjust_cfa_offset -8",
        ".cfi_restore r12",
        "pop rbx",
        ".cfi_adjust_cfa_offset -8",
        ".cfi_restore rbx",
        "pop rbp",
        ".cfi_adjust_cfa_offset -8",
        ".cfi_restore rbp",
        "pop rcx",                         // the resumed context's return address
        ".cfi_adjust_cfa_offset -8",       // CFA = rsp: the caller's rsp after its call
        ".cfi_register rip, rcx",          // the return address now lives in rcx
        "mov rax, rdx",                    // the resumed `switch` returns arg (a fresh
                                           // stack's trampoline takes it from rax too)
        "jmp rcx",                         // resume (not `ret`: see the module doc)
        ".cfi_endproc",
        mxcsr_mask = const MXCSR_CONTROL_MASK,
    )
}

/// The floating-point control state of the calling thread in the layout of a saved
/// context's slot: MXCSR in bits 0–31, the x87 control word in bits 32–47.
pub fn fpenv_current() -> u64 {
    let mut slot = 0u64;
    // SAFETY: stores MXCSR and the x87 control word into a local 8-byte slot.
    unsafe {
        asm!(
            "stmxcsr dword ptr [{p}]",
            "fnstcw word ptr [{p} + 4]",
            p = in(reg) &mut slot,
            options(nostack, preserves_flags),
        );
    }
    slot
}

/// [`switch`] for a context whose floating-point control state is known and constant: the
/// scheduler's own stack (g0), which never changes MXCSR or the x87 control word. Entered
/// through [`switch_from_g0_balanced`]; it ends in `ret`, not `pop; jmp` (see
/// "Return-stack balance"). Instead
/// of reading them (`stmxcsr` costs ~3 ns on AMD Zen 4, more than the rest of a switch:
/// `cargo bench --bench switch`, `abi_floor_round_trip` against `bare_round_trip`),
/// it stores `fpenv` (as returned by [`fpenv_current`] on this thread) as the suspended
/// context's slot, and compares the resumed context's control bits with it using one
/// 64-bit xor; only when they differ does it reload them.
///
/// # Safety
///
/// As for [`switch`]; in addition `fpenv` must be the current floating-point control state
/// of the calling context (its control bits; the sticky flags are not compared).
#[unsafe(naked)]
pub unsafe extern "C" fn switch_from_g0(
    save_sp: *mut usize,
    to_sp: usize,
    arg: usize,
    fpenv: u64,
) -> usize {
    // rdi = save_sp, rsi = to_sp, rdx = arg, rcx = fpenv. Scratch: rax, r8–r11.
    naked_asm!(
        ".cfi_startproc",
        "push rbp",                        // save the callee-saved registers, in the
        ".cfi_adjust_cfa_offset 8",        // layout `switch` uses (see the diagram)
        ".cfi_offset rbp, -16",
        "push rbx",
        ".cfi_adjust_cfa_offset 8",
        ".cfi_offset rbx, -24",
        "push r12",
        ".cfi_adjust_cfa_offset 8",
        ".cfi_offset r12, -32",
        "push r13",
        ".cfi_adjust_cfa_offset 8",
        ".cfi_offset r13, -40",
        "push r14",
        ".cfi_adjust_cfa_offset 8",
        ".cfi_offset r14, -48",
        "push r15",
        ".cfi_adjust_cfa_offset 8",
        ".cfi_offset r15, -56",
        "push rcx",                        // the FP slot: the known state, not read back
        ".cfi_adjust_cfa_offset 8",        // CFA = rsp+64 from here to the first pop
        "mov qword ptr [rdi], rsp",        // *save_sp = sp: this context is now suspended
        "mov rsp, rsi",                    // load the resumed context's sp
        "mov r10, qword ptr [rsp]",        // r10 = resumed context's MXCSR | CW << 32
        "xor r10, rcx",                    // bits that differ from ours
        "movabs r11, {mask}",              // control bits of both words
        "test r10, r11",
        "jz 2f",                           // none differ: no serializing reload
        "ldmxcsr dword ptr [rsp]",         // rare: load both control words
        "fldcw word ptr [rsp + 4]",
        "2:",
        "add rsp, 8",                      // drop the FP slot
        ".cfi_adjust_cfa_offset -8",
        "pop r15",                         // restore the callee-saved registers
        ".cfi_adjust_cfa_offset -8",
        ".cfi_restore r15",
        "pop r14",
        ".cfi_adjust_cfa_offset -8",
        ".cfi_restore r14",
        "pop r13",
        ".cfi_adjust_cfa_offset -8",
        ".cfi_restore r13",
        "pop r12",
        ".cfi_adjust_cfa_offset -8",
        ".cfi_restore r12",
        "pop rbx",
        ".cfi_adjust_cfa_offset -8",
        ".cfi_restore rbx",
        "pop rbp",
        ".cfi_adjust_cfa_offset -8",
        ".cfi_restore rbp",
        "mov rax, rdx",                    // the resumed side returns arg
        "ret",                             // resume: `ret`, see "Return-stack balance"
        ".cfi_endproc",
        mask = const FP_CONTROL_MASK,
    )
}

/// The body of a naked C entry point `fn(a: *mut T, b) -> R` that picks one of two
/// functions of its own signature: it jumps to `$quick` when `a` is not null and the byte
/// at `a + $offset` is 0, else to `$full`. For an entry whose common case is a leaf
/// (`$quick`, which jumps on to `$full` when it cannot finish) while the other case pays
/// three instructions rather than a second frame (`ffi::chan`'s send and receive; why:
/// docs/internals/channels.md, "The C entries' two halves"). The arguments stay in their
/// registers.
macro_rules! gate_on_byte {
    ($offset:expr, $quick:path, $full:path) => {
        core::arch::naked_asm!(
            "test rdi, rdi",
            "jz {full}",
            "cmp byte ptr [rdi + {offset}], 0",
            "jne {full}",
            "jmp {quick}",
            offset = const $offset,
            quick = sym $quick,
            full = sym $full,
        )
    };
}
pub(crate) use gate_on_byte;

/// A call of the naked function `$f` with four arguments, made without a `call`
/// instruction: the return address is pushed by hand and `$f` is entered with a `jmp`, so
/// that the return-stack buffer is left as the suspended goroutine's `call` of `switch`
/// left it (see "Return-stack balance"). The hand-made call is placed 128 bytes below rsp,
/// off the red zone the compiler may be using; rsp is 16-aligned at the jump minus the
/// pushed address, as at a call. Evaluates to `$f`'s return value (rax).
macro_rules! call_balanced {
    ($f:path, $a:expr, $b:expr, $c:expr, $d:expr) => {{
        let ret: usize;
        asm!(
            "sub rsp, 128",
            "lea rax, [rip + 7f]",
            "push rax",
            "jmp {f}",
            "7:",
            "add rsp, 128",
            f = sym $f,
            in("rdi") $a,
            in("rsi") $b,
            in("rdx") $c,
            in("rcx") $d,
            lateout("rax") ret,
            clobber_abi("C"),
        );
        ret
    }};
}

/// Calls [`switch_from_g0`] without a `call` (see `call_balanced`).
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
    // SAFETY: the caller's contract is switch_from_g0's. The block behaves as a call of it:
    // the pushed address is where the context resumes (label 7, reached by `switch`'s
    // `jmp` when some goroutine switches back to us), at which point rsp is back where it
    // was after the push's pop and the callee-saved registers are restored; the
    // caller-saved ones are clobbered.
    unsafe { call_balanced!(switch_from_g0, save_sp, to_sp, arg, fpenv) }
}

/// Calls [`start_from_g0`] without a `call` (see `call_balanced`).
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
    // SAFETY: as in switch_from_g0_balanced; the caller's contract is start_from_g0's.
    unsafe { call_balanced!(start_from_g0, save_sp, stack_top, entry, fpenv) }
}

/// Control bits of a saved FP slot: MXCSR's (see [`MXCSR_CONTROL_MASK`]) and the whole x87
/// control word.
const FP_CONTROL_MASK: u64 = 0xFFFF << 32 | MXCSR_CONTROL_MASK as u64;

/// The floating-point environment of a fresh goroutine, for `start_from_g0` to load.
static INITIAL_FP: u64 = INITIAL_FP_SLOT as u64;

/// Starts a goroutine that has never run, without a frame prepared on its stack: saves the
/// scheduler context exactly as [`switch_from_g0`] does (so that the goroutine's first
/// `switch` back resumes it), then sets rsp to `stack_top` (rounded down to 16) and enters
/// `entry(0)` through the trampoline, with the ABI's default floating-point environment.
///
/// Compared with [`init_stack`] + [`switch_from_g0`], nothing is written to the new stack
/// at spawn time and nothing is read back from it at the first switch: the first touch of
/// the stack's top line is the goroutine's own first push, when it is about to use it. On
/// a workload that spawns far ahead of running (skynet keeps ~64k goroutines queued) the
/// prepared frame had always left the cache — and often been evicted to a page fault —
/// by the time the switch loaded it.
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
    // rdi = save_sp, rsi = stack_top, rdx = entry, rcx = fpenv.
    naked_asm!(
        ".cfi_startproc",
        "push rbp",                        // save the callee-saved registers, in the
        ".cfi_adjust_cfa_offset 8",        // layout `switch` uses (see the diagram)
        ".cfi_offset rbp, -16",
        "push rbx",
        ".cfi_adjust_cfa_offset 8",
        ".cfi_offset rbx, -24",
        "push r12",
        ".cfi_adjust_cfa_offset 8",
        ".cfi_offset r12, -32",
        "push r13",
        ".cfi_adjust_cfa_offset 8",
        ".cfi_offset r13, -40",
        "push r14",
        ".cfi_adjust_cfa_offset 8",
        ".cfi_offset r14, -48",
        "push r15",
        ".cfi_adjust_cfa_offset 8",
        ".cfi_offset r15, -56",
        "push rcx",                        // the FP slot: the known state, not read back
        ".cfi_adjust_cfa_offset 8",
        "mov qword ptr [rdi], rsp",        // *save_sp = sp: the scheduler is suspended
        "mov r10, qword ptr [rip + {initial}]",
        "xor rcx, r10",                    // control bits that differ from the default
        "movabs r11, {mask}",
        "test rcx, r11",
        "jz 2f",                           // none (the usual case): no serializing load
        "ldmxcsr dword ptr [rip + {initial}]",
        "fldcw word ptr [rip + {initial} + 4]",
        "2:",
        "and rsi, -16",                    // the new stack's aligned top
        "lea rsp, [rsi - 16]",             // where a prepared frame would leave rsp
        ".cfi_undefined rip",              // a new call chain starts here
        "mov r12, rdx",                    // the trampoline calls r12...
        "xor eax, eax",                    // ...with argument 0
        "xor ebp, ebp",                    // ends frame-pointer walks
        "jmp __gmp_arch_trampoline",
        ".cfi_endproc",
        initial = sym INITIAL_FP,
        mask = const FP_CONTROL_MASK,
    )
}

// The outermost frame of every goroutine stack. Never called: `init_stack` stores the
// address of the label `__gmp_arch_trampoline` (one byte in, after the `nop`) as the return
// address of a fresh stack's initial frame, and the first `switch` into that stack jumps
// there with rax = arg and r12 = entry.
//
// The `nop` before the label matters to unwinders: they look up the frame of a return
// address `ra` at `ra - 1`, which must fall inside this function's CFI (the saved return
// address of a suspended, never-started context is the label itself).
//
// Written as `global_asm!` rather than a naked function so that it is always emitted:
// nothing in Rust calls it, and an unused naked function may be dropped.
global_asm!(
    ".pushsection .text.__gmp_arch_trampoline,\"ax\",@progbits",
    ".p2align 4",
    ".globl __gmp_arch_trampoline_fn",  // global and hidden: never exported from the cdylib
    ".hidden __gmp_arch_trampoline_fn",
    ".type __gmp_arch_trampoline_fn, @function",
    "__gmp_arch_trampoline_fn:",
    ".cfi_startproc",
    ".cfi_undefined rip",               // end of the call chain: no caller to unwind to
    "nop",                              // see above
    ".globl __gmp_arch_trampoline",     // the resume point init_stack stores
    ".hidden __gmp_arch_trampoline",
    "__gmp_arch_trampoline:",
    "mov rdi, rax",                     // entry's argument: the arg of the first switch
    "call r12",                         // entry(arg); rsp is 16-aligned before the call
    "call {returned}",                  // entry returned: abort with a message
    "ud2",                              // not reached (entry_returned never returns)
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
/// `entry(arg)` on that stack with a correctly aligned frame (as after a call: rsp+8
/// 16-aligned). `entry` never returns (if it did, the process aborts with
/// "gmp: goroutine entry returned").
///
/// The frame written is 80 bytes (see the diagram in the module doc); `entry` starts with
/// 24 bytes of the stack used.
///
/// # Safety
///
/// The 80 bytes below `stack_top & !15` must be writable memory owned by the caller, with
/// room below them for whatever `entry` needs, and must stay mapped while the stack is in
/// use.
pub unsafe fn init_stack(stack_top: usize, entry: unsafe extern "C" fn(usize) -> !) -> usize {
    let top = stack_top & !15;
    let sp = top - INITIAL_FRAME;
    let resume: usize;
    // SAFETY: computes the address of the hidden label defined in `trampoline`'s asm; no
    // memory is accessed.
    unsafe {
        asm!(
            "lea {r}, [rip + __gmp_arch_trampoline]",
            r = out(reg) resume,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    let frame: [usize; INITIAL_FRAME / 8] = [
        INITIAL_FP_SLOT, // sp+0:  MXCSR, x87 CW
        0,               // sp+8:  r15
        0,               // sp+16: r14
        0,               // sp+24: r13
        entry as usize,  // sp+32: r12, called by the trampoline
        0,               // sp+40: rbx
        0,               // sp+48: rbp, ends frame-pointer chains
        resume,          // sp+56: return address of the first switch
        0,               // sp+64: padding
        0,               // sp+72: padding
    ];
    // SAFETY: the caller guarantees [top - 80, top) is writable memory it owns; `sp` is
    // 16-aligned because `top` is, so the usize writes are aligned.
    unsafe {
        core::ptr::copy_nonoverlapping(frame.as_ptr(), sp as *mut usize, frame.len());
    }
    sp
}

// The runtime's per-thread slot: one initial-exec TLS word in .tbss (zero on every new
// thread). Defined in assembly so that the compiler never sees a TLS variable whose address
// it could compute once and keep across a call that switches threads (HACKING.md, decision
// 8; in a cdylib even `thread_local!` reads the old thread's slot after a switch). Global
// (so every codegen unit can name it) but hidden (never exported, and bound locally in the
// shared object).
global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".globl __gmp_tls_slot",
    ".hidden __gmp_tls_slot",
    ".type __gmp_tls_slot, @object",
    ".size __gmp_tls_slot, 8",
    "__gmp_tls_slot:",
    ".zero 8",
    ".popsection",
);

/// Reads the calling thread's runtime TLS slot (0 on a thread that never set it).
///
/// The read is a non-`pure` asm block, so each call reads the slot of the thread running
/// it at that moment, also after a switch moved the caller to another thread.
#[inline]
pub fn tls_get() -> usize {
    let v: usize;
    // SAFETY: reads the thread's own 8-byte TLS slot defined above: the GOT entry holds its
    // offset from the thread pointer (fs base), set up by the loader for every thread.
    // Not `pure`: the result depends on the current thread, which may change across any
    // call that switches.
    unsafe {
        asm!(
            "mov {r}, qword ptr [rip + __gmp_tls_slot@GOTTPOFF]", // offset of the slot from fs
            "mov {r}, qword ptr fs:[{r}]",                         // the slot of this thread
            r = out(reg) v,
            options(nostack, readonly, preserves_flags),
        );
    }
    v
}

/// Writes the calling thread's runtime TLS slot.
#[inline]
pub fn tls_set(v: usize) {
    // SAFETY: writes the thread's own 8-byte TLS slot defined above (see `tls_get`); no
    // other memory is touched.
    unsafe {
        asm!(
            "mov {t}, qword ptr [rip + __gmp_tls_slot@GOTTPOFF]", // offset of the slot from fs
            "mov qword ptr fs:[{t}], {v}",                         // store into this thread's
            t = out(reg) _,
            v = in(reg) v,
            options(nostack, preserves_flags),
        );
    }
}

/// The caller's frame pointer (rbp), for frame-pointer walks of its own stack.
#[inline(always)]
pub fn frame_pointer() -> usize {
    let fp: usize;
    // SAFETY: reads rbp; no memory access.
    unsafe { asm!("mov {}, rbp", out(reg) fp, options(nomem, nostack, preserves_flags)) };
    fp
}

/// Makes system call `nr` with six arguments and returns the kernel's answer (a result >= 0
/// or -errno), without touching errno: the `syscall` instruction itself, so the call adds
/// no function level between the caller and the kernel (on AMD Zen a return after a kernel
/// entry mispredicts, a few ns per level; README, "trivial syscall", measures the whole
/// path: `python3 bench/run.py --only syscall_fast`).
///
/// # Safety
/// The call must be sound for the calling thread: its arguments are whatever `nr` wants
/// (pointers it reads or writes must be valid), and it must not break the thread under
/// the runtime (gmp_syscall refuses the calls that would).
#[inline(always)]
pub unsafe fn syscall6(nr: i64, a: [i64; 6]) -> i64 {
    let r: i64;
    // SAFETY: the caller's contract. The kernel's x86-64 convention: number in rax,
    // arguments in rdi, rsi, rdx, r10, r8, r9; result in rax; rcx and r11 are clobbered.
    // No stack use (nostack); memory may be read or written by the call (no nomem).
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") nr => r,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            in("r9") a[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    r
}

// ---------------------------------------------------------------------------------------
// Asynchronous preemption (rt/preempt.rs): the trampoline a signal handler diverts a
// goroutine into.
//
// The handler (on the M's alternate signal stack) leaves the interrupted goroutine's
// stack like this and points rip at `__gmp_async_preempt`:
//
//   original rsp ─┐
//                 │  128 bytes: the red zone of the interrupted (leaf) code, untouched
//   rsp ─────────►│  the interrupted rip  (what `ret 128` returns to)
//
// The trampoline then pushes rflags and the 15 general registers, aligns rsp down to 64,
// reserves `ASYNC_XSAVE_SIZE` bytes, zeroes the XSAVE header and `xsave`s every enabled
// state component but AMX (`ASYNC_XSAVE_MASK`), clears DF, and calls the runtime's park
// function (`ASYNC_PARK`), which switches to the scheduler. (`__gmp_async_syscall` is the
// same with `ASYNC_SYSCALL`, which gets rdi = rbp, the saved registers as `SavedRegs`, and
// makes the interrupted goroutine's blocking call with them: rt/unseen.rs.) When the goroutine is resumed
// (on the same thread), it `xrstor`s, pops the registers and rflags, and `ret 128` jumps
// back to the interrupted instruction with rsp as it was.
//
//   [rbp + 8*16]  interrupted rip
//   [rbp + 8*15]  rflags
//   [rbp + 8*14 .. rbp]  rax rbx rcx rdx rsi rdi rbp r8 .. r15 (r15 at [rbp])
//   ... padding to 64 ...
//   [rsp]         XSAVE area (legacy 512 bytes, 64-byte header, extended components)

/// Components `xsave` saves on preemption: XCR0 without AMX (bits 17, 18: 8 KiB of tile
/// data that no C code the runtime preempts uses without the kernel's permission dance).
/// 0 until `async_preempt_init` found XSAVE.
pub static ASYNC_XSAVE_MASK: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
/// Bytes of the XSAVE area for that mask, a multiple of 64.
pub static ASYNC_XSAVE_SIZE: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
/// The runtime's park function, called by `__gmp_async_preempt` on the goroutine's stack.
pub static ASYNC_PARK: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);
/// The runtime's wrapper of an unseen call, called by `__gmp_async_syscall`.
pub static ASYNC_SYSCALL: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

/// Finds the XSAVE mask and area size of this CPU and OS; false without XSAVE (then no
/// asynchronous preemption: `fxsave` would lose the AVX state).
pub fn async_preempt_init(park: extern "C" fn(), syscall: extern "C" fn(*mut SavedRegs)) -> bool {
    use core::arch::x86_64::{__cpuid, __cpuid_count};
    use core::sync::atomic::Ordering;
    let leaf1 = __cpuid(1);
    if leaf1.ecx & (1 << 27) == 0 {
        return false; // no OSXSAVE
    }
    let xcr0: u64;
    // SAFETY: xgetbv(0) is allowed when CPUID.1:ECX.OSXSAVE is set (checked above).
    unsafe {
        let (lo, hi): (u32, u32);
        asm!("xgetbv", in("ecx") 0u32, out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags));
        xcr0 = (hi as u64) << 32 | lo as u64;
    }
    let mask = xcr0 & !(3u64 << 17);
    // Legacy area and header, then the extended components at their standard offsets.
    let mut size = 576u64;
    for i in 2..63u32 {
        if mask & (1 << i) != 0 {
            // Leaf 0xD exists when OSXSAVE is set.
            let c = __cpuid_count(0xD, i);
            size = size.max(c.ebx as u64 + c.eax as u64);
        }
    }
    size = size.div_ceil(64) * 64;
    ASYNC_XSAVE_SIZE.store(size, Ordering::Relaxed);
    ASYNC_PARK.store(park as usize, Ordering::Relaxed);
    ASYNC_SYSCALL.store(syscall as usize, Ordering::Relaxed);
    ASYNC_XSAVE_MASK.store(mask, Ordering::Release);
    true
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

/// What the trampolines saved, as they lay it out at rbp (the callee of
/// `__gmp_async_syscall` gets a pointer to it, and may change it: the trampoline restores
/// from here).
#[repr(C)]
pub struct SavedRegs {
    pub r15: u64,
    pub r14: u64,
    pub r13: u64,
    pub r12: u64,
    pub r11: u64,
    pub r10: u64,
    pub r9: u64,
    pub r8: u64,
    pub rbp: u64,
    pub rdi: u64,
    pub rsi: u64,
    pub rdx: u64,
    pub rcx: u64,
    pub rbx: u64,
    pub rax: u64,
    pub rflags: u64,
    /// Where the trampoline returns to (`ret 128`).
    pub rip: u64,
}

/// Bytes a diversion into a trampoline uses below the interrupted rsp: the red zone, the
/// return address, the XSAVE area and its alignment to 64 (the sixteen pushes and the
/// runtime's frames are the caller's slack).
pub fn async_stack_need() -> usize {
    128 + 8 + 64 + ASYNC_XSAVE_SIZE.load(core::sync::atomic::Ordering::Relaxed) as usize
}

impl SavedRegs {
    /// The call the handler asked `ASYNC_SYSCALL` to make (or its marker): rax.
    pub fn call(&self) -> u64 {
        self.rax
    }
    /// What the handler carried beside the call: rcx (which `syscall` clobbers, so the
    /// program holds nothing there).
    pub fn carried(&self) -> u64 {
        self.rcx
    }
    /// The interrupted system call's six argument registers.
    pub fn args(&self) -> [u64; 6] {
        [self.rdi, self.rsi, self.rdx, self.r10, self.r8, self.r9]
    }
    /// Leaves what the kernel leaves after `syscall`: the result in rax, rcx = the return
    /// address, r11 = rflags.
    pub fn set_return(&mut self, v: u64) {
        self.rax = v;
        self.rcx = self.rip;
        self.r11 = self.rflags;
    }
}

/// Where a suspended context keeps rbp and then its return address above its saved sp:
/// the goroutine dump starts its walk there.
pub(crate) const SAVED_FP_OFFSET: usize = 48;

/// The interrupted code's rip.
///
/// # Safety
/// `uc` is the context the kernel passed to an SA_SIGINFO handler.
pub unsafe fn ctx_pc(uc: *const libc::ucontext_t) -> usize {
    // SAFETY: caller contract.
    unsafe { (*uc).uc_mcontext.gregs[libc::REG_RIP as usize] as usize }
}

/// The interrupted code's rsp.
///
/// # Safety
/// As for [`ctx_pc`].
pub unsafe fn ctx_sp(uc: *const libc::ucontext_t) -> usize {
    // SAFETY: caller contract.
    unsafe { (*uc).uc_mcontext.gregs[libc::REG_RSP as usize] as usize }
}

/// The return address of a leaf function stopped in the context `uc` before it pushed
/// anything: the word at rsp (libc's `syscall` wrapper at its `syscall` instruction).
///
/// # Safety
/// As for [`ctx_pc`]; the context is this thread's own, so its stack is mapped.
pub unsafe fn ctx_leaf_return(uc: *const libc::ucontext_t) -> usize {
    // SAFETY: caller contract: rsp points at the thread's own mapped stack.
    unsafe { *(ctx_sp(uc) as *const usize) }
}

/// The interrupted code's frame pointer (rbp).
///
/// # Safety
/// As for [`ctx_pc`].
pub unsafe fn ctx_fp(uc: *const libc::ucontext_t) -> usize {
    // SAFETY: caller contract.
    unsafe { (*uc).uc_mcontext.gregs[libc::REG_RBP as usize] as usize }
}

/// The bytes of the instruction that makes a system call: `syscall` (0f 05).
pub(crate) const SYSCALL_INSN_LEN: usize = 2;

/// Whether the instruction at `pc` is `syscall`.
///
/// # Safety
/// `pc` and the byte after it are readable: an instruction the thread just executed.
pub unsafe fn is_syscall_insn(pc: usize) -> bool {
    // SAFETY: caller contract.
    unsafe { core::ptr::read_unaligned(pc as *const u16) == 0x050f }
}

/// Whether the kernel reports a system call's result in its first argument's register (on
/// x86-64 it is rax, the number's).
pub(crate) const SYSCALL_RET_IN_ARG0: bool = false;

/// The system-call registers of an interrupted context: the number (rax, before the call
/// ends), the result (rax, after), and the six arguments.
///
/// # Safety
/// As for [`ctx_pc`].
pub unsafe fn ctx_syscall(uc: *const libc::ucontext_t) -> (u64, u64, [u64; 6]) {
    // SAFETY: caller contract.
    let g = unsafe { &(*uc).uc_mcontext.gregs };
    let r = |i: libc::c_int| g[i as usize] as u64;
    let args = [
        r(libc::REG_RDI),
        r(libc::REG_RSI),
        r(libc::REG_RDX),
        r(libc::REG_R10),
        r(libc::REG_R8),
        r(libc::REG_R9),
    ];
    (r(libc::REG_RAX), r(libc::REG_RAX), args)
}

/// Sets the interrupted system call's result.
///
/// # Safety
/// As for [`ctx_pc`].
pub unsafe fn set_ctx_syscall_ret(uc: *mut libc::ucontext_t, v: u64) {
    // SAFETY: caller contract.
    unsafe { (*uc).uc_mcontext.gregs[libc::REG_RAX as usize] = v as i64 };
}

/// Makes the interrupted context enter system call `nr` again, as the kernel does for a
/// call it restarts: rip back on `syscall` (`pc_after` is the address after it), rax the
/// number again (the arguments never left their registers).
///
/// # Safety
/// As for [`ctx_pc`].
pub unsafe fn ctx_rewind_syscall(uc: *mut libc::ucontext_t, pc_after: usize, nr: u64, _arg0: u64) {
    // SAFETY: caller contract.
    unsafe {
        let g = &mut (*uc).uc_mcontext.gregs;
        g[libc::REG_RIP as usize] = (pc_after - SYSCALL_INSN_LEN) as i64;
        g[libc::REG_RAX as usize] = nr as i64;
    }
}

/// Whether the trampolines can carry the interrupted context's register state: always, on
/// x86-64 (`xsave` saves every component the mask names).
///
/// # Safety
/// As for [`ctx_pc`].
pub unsafe fn can_divert(_uc: *const libc::ucontext_t) -> bool {
    true
}

/// Diverts the interrupted context into `__gmp_async_preempt`: pushes the interrupted rip
/// below the red zone, for the trampoline's `ret 128`.
///
/// # Safety
/// In a signal handler, with the context of code running on a goroutine stack that has
/// [`async_stack_need`] bytes below the interrupted rsp.
pub unsafe fn divert_preempt(uc: *mut libc::ucontext_t) {
    // SAFETY: caller contract: the 8 bytes below the red zone are the goroutine's stack.
    unsafe {
        let g = &mut (*uc).uc_mcontext.gregs;
        let new_sp = g[libc::REG_RSP as usize] as usize - 128 - 8;
        *(new_sp as *mut usize) = g[libc::REG_RIP as usize] as usize;
        g[libc::REG_RSP as usize] = new_sp as i64;
        g[libc::REG_RIP as usize] = async_preempt_entry() as i64;
    }
}

/// Diverts a context interrupted in (or just after) a system call into
/// `__gmp_async_syscall`, with `call` in rax and `carried` in rcx for its callee (the
/// kernel clobbers rcx, so the program holds nothing there), returning to `resume_pc`
/// (the address after `syscall`).
///
/// # Safety
/// As for [`divert_preempt`].
pub unsafe fn divert_syscall(uc: *mut libc::ucontext_t, resume_pc: usize, call: u64, carried: u64) {
    // SAFETY: caller contract.
    unsafe {
        let g = &mut (*uc).uc_mcontext.gregs;
        let new_sp = g[libc::REG_RSP as usize] as usize - 128 - 8;
        *(new_sp as *mut usize) = resume_pc;
        g[libc::REG_RSP as usize] = new_sp as i64;
        g[libc::REG_RAX as usize] = call as i64;
        g[libc::REG_RCX as usize] = carried as i64;
        g[libc::REG_RIP as usize] = async_syscall_entry() as i64;
    }
}

/// The body both trampolines share; they differ in the function they call (with rdi =
/// the `SavedRegs` at rbp).
macro_rules! async_trampoline {
    ($name:literal, $callee:path) => {
        global_asm!(
            concat!(".globl ", $name),
            concat!(".hidden ", $name),
            concat!(".type ", $name, ", @function"),
            concat!($name, ":"),
            "pushfq",
            "push rax",
            "push rbx",
            "push rcx",
            "push rdx",
            "push rsi",
            "push rdi",
            "push rbp",
            "push r8",
            "push r9",
            "push r10",
            "push r11",
            "push r12",
            "push r13",
            "push r14",
            "push r15",
            "mov rbp, rsp",
            "sub rsp, qword ptr [rip + {size}]",
            "and rsp, -64",
            "xor eax, eax",                       // XRSTOR faults on garbage in the header
            "mov qword ptr [rsp + 512], rax",
            "mov qword ptr [rsp + 520], rax",
            "mov qword ptr [rsp + 528], rax",
            "mov qword ptr [rsp + 536], rax",
            "mov qword ptr [rsp + 544], rax",
            "mov qword ptr [rsp + 552], rax",
            "mov qword ptr [rsp + 560], rax",
            "mov qword ptr [rsp + 568], rax",
            "mov eax, dword ptr [rip + {mask}]",
            "mov edx, dword ptr [rip + {mask} + 4]",
            "xsave64 [rsp]",
            "cld",
            "mov rdi, rbp",
            "call qword ptr [rip + {callee}]",
            "mov eax, dword ptr [rip + {mask}]",
            "mov edx, dword ptr [rip + {mask} + 4]",
            "xrstor64 [rsp]",
            "mov rsp, rbp",
            "pop r15",
            "pop r14",
            "pop r13",
            "pop r12",
            "pop r11",
            "pop r10",
            "pop r9",
            "pop r8",
            "pop rbp",
            "pop rdi",
            "pop rsi",
            "pop rdx",
            "pop rcx",
            "pop rbx",
            "pop rax",
            "popfq",
            "ret 128",
            concat!(".size ", $name, ", . - ", $name),
            size = sym ASYNC_XSAVE_SIZE,
            mask = sym ASYNC_XSAVE_MASK,
            callee = sym $callee,
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

    fn mxcsr() -> u32 {
        let mut v = 0u32;
        // SAFETY: stores MXCSR into a local.
        unsafe { asm!("stmxcsr [{p}]", p = in(reg) &mut v, options(nostack, preserves_flags)) };
        v
    }

    fn set_mxcsr(v: u32) {
        // SAFETY: loads a valid MXCSR value (no reserved bits set by the tests).
        unsafe { asm!("ldmxcsr [{p}]", p = in(reg) &v, options(nostack, preserves_flags)) };
    }

    fn x87_cw() -> u16 {
        let mut v = 0u16;
        // SAFETY: stores the x87 control word into a local.
        unsafe { asm!("fnstcw [{p}]", p = in(reg) &mut v, options(nostack, preserves_flags)) };
        v
    }

    fn set_x87_cw(v: u16) {
        // SAFETY: loads a valid x87 control word.
        unsafe { asm!("fldcw [{p}]", p = in(reg) &v, options(nostack, preserves_flags)) };
    }

    const DEFAULT_MXCSR: u32 = 0x1F80;
    const RC_DOWN: u32 = 0x2000;
    const RC_ZERO: u32 = 0x6000;

    /// The saved sps of the test's context and the coroutine's.
    #[repr(C)]
    struct Pair {
        main_sp: usize,
        co_sp: usize,
    }

    fn start(pair: &mut Pair, entry: unsafe extern "C" fn(usize) -> !) -> (stack::Stack, usize) {
        let s = stack::alloc(stack::DEFAULT_STACK).expect("stack alloc");
        // SAFETY: the stack is ours and mapped until the test frees it.
        pair.co_sp = unsafe { init_stack(s.top(), entry) };
        let arg = pair as *mut Pair as usize;
        (s, arg)
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
        // Report the environment a fresh stack starts with, then pick our own.
        let fresh = (mxcsr() & MXCSR_CONTROL_MASK) as usize | (x87_cw() as usize) << 32;
        set_mxcsr(DEFAULT_MXCSR | RC_DOWN);
        set_x87_cw(0x027F); // double precision instead of extended
        // SAFETY: the test resumed us through `pair` and is suspended.
        unsafe { yield_back(pair, fresh) };
        loop {
            let report = (mxcsr() & MXCSR_CONTROL_MASK) as usize
                | (x87_cw() as usize) << 16
                | (third() as usize) << 32;
            // SAFETY: as above.
            unsafe { yield_back(pair, report) };
        }
    }

    #[test]
    fn mxcsr_and_x87_control_preserved_per_context() {
        let saved_mxcsr = mxcsr();
        let saved_cw = x87_cw();
        set_mxcsr(DEFAULT_MXCSR | RC_ZERO);
        let mut pair = Pair {
            main_sp: 0,
            co_sp: 0,
        };
        let (s, arg) = start(&mut pair, fp_entry);
        let fresh = resume(&mut pair, arg);
        assert_eq!(
            fresh,
            0x037F << 32 | DEFAULT_MXCSR as usize,
            "ABI default on a fresh stack"
        );
        let main_third = third();
        for _ in 0..100 {
            let report = resume(&mut pair, 0);
            assert_eq!(
                report & 0xFFFF,
                (DEFAULT_MXCSR | RC_DOWN) as usize,
                "coroutine MXCSR"
            );
            assert_eq!(report >> 16 & 0xFFFF, 0x027F, "coroutine x87 CW");
            let co_third = (report >> 32) as u32;
            assert_eq!(
                co_third,
                main_third + 1,
                "rounding down gives a larger magnitude"
            );
            assert_eq!(
                mxcsr() & MXCSR_CONTROL_MASK,
                DEFAULT_MXCSR | RC_ZERO,
                "our MXCSR"
            );
            assert_eq!(x87_cw(), saved_cw, "our x87 CW");
            assert_eq!(third(), main_third);
        }
        set_mxcsr(saved_mxcsr);
        stack::free(s);
    }

    unsafe extern "C" fn flags_entry(arg: usize) -> ! {
        let pair = arg as *mut Pair;
        set_mxcsr(DEFAULT_MXCSR); // same control bits as the test, no sticky flags
        // SAFETY: the test resumed us through `pair` and is suspended.
        unsafe { yield_back(pair, 0) };
        loop {
            // SAFETY: as above.
            unsafe { yield_back(pair, mxcsr() as usize) };
        }
    }

    /// Contexts whose MXCSRs differ only in sticky exception flags do not reload MXCSR:
    /// the flags stay those of the thread (visible on the other side), and the control bits
    /// are right on both sides.
    #[test]
    fn sticky_flags_do_not_force_reload() {
        let saved = mxcsr();
        set_mxcsr(DEFAULT_MXCSR);
        let mut pair = Pair {
            main_sp: 0,
            co_sp: 0,
        };
        let (s, arg) = start(&mut pair, flags_entry);
        resume(&mut pair, arg);
        for flags in [0x01u32, 0x04, 0x20, 0x3F] {
            set_mxcsr(DEFAULT_MXCSR | flags); // invalid/div-by-zero/precision... raised
            let seen = resume(&mut pair, 0) as u32;
            assert_eq!(
                seen & MXCSR_CONTROL_MASK,
                DEFAULT_MXCSR,
                "control bits unchanged"
            );
            assert_eq!(seen & 0x3F, flags, "fast path: MXCSR not reloaded");
            assert_eq!(mxcsr(), DEFAULT_MXCSR | flags);
        }
        // A real computation setting the precision flag keeps working across switches.
        set_mxcsr(DEFAULT_MXCSR);
        let x = black_box(1.0f64) / black_box(3.0f64);
        resume(&mut pair, 0);
        assert_eq!(x * 3.0, 1.0);
        assert_eq!(mxcsr() & MXCSR_CONTROL_MASK, DEFAULT_MXCSR);
        set_mxcsr(saved);
        stack::free(s);
    }

    /// Entry point that records rsp as it is on entry, then tail-jumps to the real entry.
    #[unsafe(naked)]
    unsafe extern "C" fn rsp_probe_entry(arg: usize) -> ! {
        naked_asm!(
            "mov rsi, rsp",       // second argument: rsp on entry
            "jmp {real}",         // same frame: real sees the same return address slot
            real = sym rsp_probe_real,
        )
    }

    unsafe extern "C" fn rsp_probe_real(arg: usize, rsp: usize) -> ! {
        let pair = arg as *mut Pair;
        // SAFETY: the test resumed us through `pair` and is suspended.
        unsafe { yield_back(pair, rsp) };
        unreachable!("resumed after the test finished");
    }

    #[test]
    fn fresh_stack_entry_is_aligned_like_after_a_call() {
        let mut pair = Pair {
            main_sp: 0,
            co_sp: 0,
        };
        let (s, arg) = start(&mut pair, rsp_probe_entry);
        let rsp = resume(&mut pair, arg);
        assert_eq!((rsp + 8) % 16, 0, "rsp+8 16-aligned at entry");
        assert_eq!(rsp, s.top() - 24, "24 bytes used above entry's frame");
        stack::free(s);
    }

    #[test]
    fn init_stack_rounds_top_down_to_16() {
        let s = stack::alloc(stack::MIN_STACK).expect("stack alloc");
        // SAFETY: the stack is ours; only the initial frame is written.
        let sp = unsafe { init_stack(s.top() - 9, rsp_probe_entry) };
        assert_eq!(sp % 16, 0);
        assert_eq!(sp, s.top() - 16 - INITIAL_FRAME);
        stack::free(s);
    }
}
