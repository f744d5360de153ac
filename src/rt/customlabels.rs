//! Goroutine labels for profilers outside the process: the custom-labels thread-local ABI
//! (v1, `polarsignals/custom-labels`' `custom-labels-v1.md`), which eBPF profilers such as
//! Parca's agent and the OpenTelemetry eBPF profiler read from a thread they interrupt.
//!
//! **The ABI.** Two exported symbols: `custom_labels_abi_version`, a 4-byte constant 1,
//! and `custom_labels_current_set`, a thread-local pointer (in the static TLS block,
//! referenced through an `R_X86_64_TLSDESC` relocation, `R_AARCH64_TLSDESC` on aarch64,
//! which is how the profiler finds its offset in a shared object) to a
//! `custom_labels_labelset_t`:
//! `{ custom_labels_label_t *storage; size_t count; size_t capacity; }`, each label two
//! `{ size_t len; const unsigned char *buf; }` strings, key and value. Null: no labels.
//!
//! **Where the sets come from.** Every gmp label set (labels.rs) carries its ABI form in
//! its own allocation, built once when the set is made (sets are immutable): the header
//! holds the `custom_labels_labelset_t`, and the label array, after the text, points into
//! the text. So switching labels is one pointer store: `execute` stores the goroutine's
//! (null for none) into the M thread's `custom_labels_current_set` as it starts running
//! it, and `after_switch` clears it when the goroutine leaves the thread, so that the
//! pointer never outlives the goroutine's reference to its set (a parked goroutine may
//! change its labels on another thread, freeing the old set). A goroutine that changes
//! its labels stores the new set before it drops the old one; a thread outside the
//! runtime shows its own labels (the ones its goroutines inherit) the same way.
//!
//! **Limits.** The ABI's text asks a shared object that defines the symbols to be named
//! `libcustomlabels*.so`, and profilers that follow it look for them only in such a file
//! or in the executable: a program that links libgmp statically (scripts/static-lib.sh)
//! and exports the two symbols (`-Wl,--export-dynamic-symbol=custom_labels_*`) has them in
//! the executable; with `libgmp.so` a profiler must be told to look there. A program may
//! not link the custom-labels library too: the symbols would clash.

/// `custom_labels_string_t`.
#[repr(C)]
pub(crate) struct AbiString {
    pub(crate) len: usize,
    pub(crate) buf: *const u8,
}

/// `custom_labels_label_t`.
#[repr(C)]
pub(crate) struct AbiLabel {
    pub(crate) key: AbiString,
    pub(crate) value: AbiString,
}

/// `custom_labels_labelset_t`.
#[repr(C)]
pub(crate) struct AbiSet {
    pub(crate) storage: *const AbiLabel,
    pub(crate) count: usize,
    pub(crate) capacity: usize,
}

// The symbols, in assembly: Rust has no stable way to define an exported thread-local
// (`#[thread_local]` is unstable). `custom_labels_current_set` is in .tbss (zero, that
// is null, on every new thread) and global with default visibility, so that the version
// script exports it; `custom_labels_abi_version` is read-only data.
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".globl custom_labels_current_set",
    ".type custom_labels_current_set, @object",
    ".size custom_labels_current_set, 8",
    "custom_labels_current_set:",
    ".zero 8",
    ".popsection",
    ".pushsection .rodata.custom_labels_abi_version,\"a\",@progbits",
    ".p2align 2",
    ".globl custom_labels_abi_version",
    ".type custom_labels_abi_version, @object",
    ".size custom_labels_abi_version, 4",
    "custom_labels_abi_version:",
    ".long 1",
    ".popsection",
);

/// Stores `set` (null: none) into the calling thread's `custom_labels_current_set`.
///
/// Initial-exec access (the runtime's own TLS slot is initial-exec too, so libgmp's TLS
/// is in the static block anyway): a GOT load of the offset and one store, on every
/// switch. A non-`pure` asm block, so each call writes the slot of the thread running it.
#[inline(always)]
pub(crate) fn set_current(set: *const AbiSet) {
    // SAFETY: writes the calling thread's 8-byte TLS variable defined above; no other
    // memory is touched.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        core::arch::asm!(
            "mov {t}, qword ptr [rip + custom_labels_current_set@GOTTPOFF]",
            "mov qword ptr fs:[{t}], {v}",
            t = out(reg) _,
            v = in(reg) set,
            options(nostack, preserves_flags),
        );
    }
    #[cfg(target_arch = "aarch64")]
    {
        let p = crate::sys::tls_addr!("custom_labels_current_set") as *mut *const AbiSet;
        // SAFETY: as above.
        unsafe { p.write_volatile(set) };
    }
}

/// The address of the calling thread's `custom_labels_current_set`, found through the
/// general-dynamic (TLSDESC) sequence the ABI names: this reference is the
/// `R_X86_64_TLSDESC` relocation (`R_AARCH64_TLSDESC` on aarch64) a profiler looks the
/// variable up by, so it must stay in the library (`store_slow` uses it). Not on the
/// switch path.
fn slot() -> *mut *const AbiSet {
    let addr: *mut *const AbiSet;
    // SAFETY: the TLSDESC call sequence: rax gets the variable's offset from the thread
    // pointer (fs:0 holds the thread pointer itself); the descriptor function preserves
    // every register but rax and the flags, and may use the stack (no `nostack`).
    #[cfg(target_arch = "x86_64")]
    unsafe {
        core::arch::asm!(
            "lea rax, [rip + custom_labels_current_set@TLSDESC]",
            "call qword ptr [rax + custom_labels_current_set@TLSCALL]",
            "add rax, qword ptr fs:0",
            out("rax") addr,
        );
    }
    // SAFETY: aarch64's TLSDESC sequence (the `R_AARCH64_TLSDESC` relocations a profiler
    // looks the variable up by): x0 gets the variable's offset from the thread pointer
    // (tpidr_el0); the descriptor function preserves every register but x0, x1 (its
    // address, loaded here), x30 (the link register of `blr`) and the flags.
    #[cfg(target_arch = "aarch64")]
    unsafe {
        core::arch::asm!(
            "adrp x0, :tlsdesc:custom_labels_current_set",
            "ldr x1, [x0, #:tlsdesc_lo12:custom_labels_current_set]",
            "add x0, x0, #:tlsdesc_lo12:custom_labels_current_set",
            ".tlsdesccall custom_labels_current_set",
            "blr x1",
            "mrs x1, tpidr_el0",
            "add x0, x0, x1",
            out("x0") addr,
            out("x1") _,
            out("x30") _,
        );
    }
    addr
}

/// `set_current` through the TLSDESC reference: when labels change (labels.rs), off
/// the switch path.
pub(crate) fn store_slow(set: *const AbiSet) {
    // SAFETY: the calling thread's own 8-byte variable.
    unsafe { slot().write_volatile(set) };
}

/// The calling thread's `custom_labels_current_set`.
#[cfg(test)]
fn current() -> *const AbiSet {
    // SAFETY: as in `store_slow`.
    unsafe { slot().read_volatile() }
}

/// The value of `custom_labels_abi_version`.
#[cfg(test)]
fn abi_version() -> u32 {
    unsafe extern "C" {
        static custom_labels_abi_version: u32;
    }
    // SAFETY: a constant defined above.
    unsafe { custom_labels_abi_version }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_accesses_name_one_variable_per_thread() {
        assert_eq!(abi_version(), 1);
        let s = AbiSet {
            storage: core::ptr::null(),
            count: 0,
            capacity: 0,
        };
        set_current(&s);
        assert_eq!(current(), &s as *const AbiSet);
        std::thread::spawn(|| assert!(current().is_null()))
            .join()
            .unwrap();
        store_slow(core::ptr::null());
        assert!(current().is_null());
    }
}
