//! Debug builds: the count of runtime locks (`Lock`) the calling thread holds (Go's
//! `m.locks`), which the scheduler asserts is zero wherever a goroutine may switch.

// The count lives in an initial-exec TLS slot, as `arch`'s own slot (`arch::tls_get`):
// its address is computed at each access, never cached across a goroutine's move to
// another thread. No goroutine switch happens while the thread holds a lock (`execute`
// asserts it).
#[cfg(debug_assertions)]
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".globl __gmp_tls_locks",
    ".hidden __gmp_tls_locks",
    ".type __gmp_tls_locks, @object",
    ".size __gmp_tls_locks, 8",
    "__gmp_tls_locks:",
    ".zero 8",
    ".popsection",
);

/// Debug builds: adds `delta` to the calling thread's count of held runtime locks.
#[cfg(debug_assertions)]
#[inline]
pub fn locks_add(delta: isize) {
    // SAFETY: read-modify-write of the thread's own 8-byte TLS slot defined above (as
    // `arch::tls_get`); no other memory is touched.
    unsafe {
        core::arch::asm!(
            "mov {t}, qword ptr [rip + __gmp_tls_locks@GOTTPOFF]",
            "add qword ptr fs:[{t}], {d}",
            t = out(reg) _,
            d = in(reg) delta,
            options(nostack),
        );
    }
}

/// Debug builds: how many runtime locks the calling thread holds.
#[cfg(debug_assertions)]
#[inline]
pub fn locks_held() -> isize {
    let v: isize;
    // SAFETY: reads the thread's own TLS slot defined above (as `arch::tls_get`).
    unsafe {
        core::arch::asm!(
            "mov {r}, qword ptr [rip + __gmp_tls_locks@GOTTPOFF]",
            "mov {r}, qword ptr fs:[{r}]",
            r = out(reg) v,
            options(nostack, readonly, preserves_flags),
        );
    }
    v
}
