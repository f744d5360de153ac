//! The context switch, per architecture: [`switch`], [`init_stack`], and the runtime's
//! initial-exec TLS slot ([`tls_get`], [`tls_set`]).
//!
//! Each architecture has one file holding all its assembly; this module only picks it.
//! The interface every architecture provides:
//!
//! - `unsafe extern "C" fn switch(save_sp: *mut usize, to_sp: usize, arg: usize) -> usize`
//!   saves the callee-saved state of the running context on its stack, stores its sp to
//!   `*save_sp`, resumes the context saved at `to_sp`, whose own `switch` returns `arg`;
//! - `unsafe fn init_stack(stack_top: usize, entry: unsafe extern "C" fn(usize) -> !) -> usize`
//!   prepares a fresh stack so that the first `switch` into it calls `entry(arg)`;
//! - `fn tls_get() -> usize` / `fn tls_set(v: usize)`: one word per thread, read and written
//!   with non-`pure` asm so a switch that moves a goroutine to another thread never leaves
//!   it with the old thread's slot (HACKING.md, decision 8).

#[cfg(target_arch = "x86_64")]
mod x86_64;
#[cfg(target_arch = "x86_64")]
pub use x86_64::*;

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "aarch64")]
pub use aarch64::*;

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("gmp: unsupported target architecture");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack;
    use std::hint::black_box;

    /// The two saved stack pointers of a test: the test's own context and the coroutine's.
    #[repr(C)]
    struct Pair {
        main_sp: usize,
        co_sp: usize,
        seen: usize,
    }

    /// Starts a coroutine running `entry(&pair)` on a fresh stack and returns its stack;
    /// `pair.co_sp` is its initial sp.
    fn coroutine(pair: &mut Pair, entry: unsafe extern "C" fn(usize) -> !) -> stack::Stack {
        let s = stack::alloc(stack::DEFAULT_STACK).expect("stack alloc");
        // SAFETY: the stack is ours and mapped until freed at the end of the test.
        pair.co_sp = unsafe { init_stack(s.top(), entry) };
        s
    }

    /// Resumes the coroutine of `pair` with `v`; returns what it switches back with.
    fn resume(pair: &mut Pair, v: usize) -> usize {
        let p: *mut Pair = pair;
        // SAFETY: co_sp is the coroutine's suspended sp; it resumes us through main_sp
        // before this thread touches `pair` again.
        unsafe { switch(&raw mut (*p).main_sp, (*p).co_sp, v) }
    }

    /// Coroutine side: switches back to the test with `v`; returns the next value.
    ///
    /// # Safety
    /// `pair` is the Pair the test resumed us through, and the test is suspended.
    unsafe fn yield_back(pair: *mut Pair, v: usize) -> usize {
        // SAFETY: per the contract, main_sp is the suspended test's sp.
        unsafe { switch(&raw mut (*pair).co_sp, (*pair).main_sp, v) }
    }

    unsafe extern "C" fn ping_pong_entry(arg: usize) -> ! {
        let pair = arg as *mut Pair;
        // Values live across switches in callee-saved registers on this side too.
        let (mut a, mut b, mut c) = (black_box(1u64), black_box(2u64), black_box(3u64));
        // SAFETY: the test resumed us through `pair` and is suspended.
        let mut v = unsafe { yield_back(pair, 0) };
        loop {
            a = a.wrapping_mul(6364136223846793005).wrapping_add(v as u64);
            b ^= a.rotate_left(7);
            c = c.wrapping_add(b);
            // SAFETY: as above, each time the test resumes us.
            v = unsafe { yield_back(pair, v * 2 + 1) };
            if v == usize::MAX {
                // SAFETY: as above.
                unsafe { yield_back(pair, (a ^ b ^ c) as usize) };
            }
        }
    }

    #[test]
    fn ping_pong() {
        let mut pair = Pair {
            main_sp: 0,
            co_sp: 0,
            seen: 0,
        };
        let s = coroutine(&mut pair, ping_pong_entry);
        let arg = &raw mut pair as usize;
        assert_eq!(resume(&mut pair, arg), 0);
        // Live across every switch: must be kept in callee-saved registers or spilled.
        let (mut x, mut y, mut z) = (black_box(7u64), black_box(11u64), black_box(13u64));
        let (mut a, mut b, mut c) = (1u64, 2u64, 3u64);
        for i in 0..1000usize {
            let r = resume(&mut pair, i);
            assert_eq!(r, i * 2 + 1);
            x = x.wrapping_mul(31).wrapping_add(r as u64);
            y = y.rotate_left(3) ^ x;
            z = z.wrapping_add(y);
            a = a.wrapping_mul(6364136223846793005).wrapping_add(i as u64);
            b ^= a.rotate_left(7);
            c = c.wrapping_add(b);
        }
        let (mut ex, mut ey, mut ez) = (7u64, 11u64, 13u64);
        for i in 0..1000u64 {
            ex = ex.wrapping_mul(31).wrapping_add(i * 2 + 1);
            ey = ey.rotate_left(3) ^ ex;
            ez = ez.wrapping_add(ey);
        }
        assert_eq!((x, y, z), (ex, ey, ez));
        // The coroutine's own registers survived too.
        assert_eq!(resume(&mut pair, usize::MAX), (a ^ b ^ c) as usize);
        stack::free(s);
    }

    unsafe extern "C" fn record_arg_entry(arg: usize) -> ! {
        let pair = arg as *mut Pair;
        // SAFETY: the test passed a valid Pair and is suspended until we switch back.
        unsafe { (*pair).seen = arg };
        let local = 0u8;
        // SAFETY: as above.
        unsafe { yield_back(pair, black_box(&local) as *const u8 as usize) };
        unreachable!("resumed after the test finished");
    }

    #[cfg(target_arch = "x86_64")]
    /// The Pair of `start_from_g0_runs_on_top_with_default_fp`: `start_from_g0` passes
    /// its entry 0, so the entry finds it here.
    static START_PAIR: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    #[cfg(target_arch = "x86_64")]
    unsafe extern "C" fn start_entry(arg: usize) -> ! {
        assert_eq!(arg, 0);
        let pair = START_PAIR.load(std::sync::atomic::Ordering::Relaxed) as *mut Pair;
        // Report the FP environment we started with, then a local's address.
        // SAFETY: the test is suspended until we switch back.
        unsafe { (*pair).seen = fpenv_current() as usize };
        let local = 0u8;
        // SAFETY: as above.
        unsafe { yield_back(pair, black_box(&local) as *const u8 as usize) };
        unreachable!("resumed after the test finished");
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn start_from_g0_runs_on_top_with_default_fp() {
        let mut pair = Pair {
            main_sp: 0,
            co_sp: 0,
            seen: 0,
        };
        START_PAIR.store(&raw mut pair as usize, std::sync::atomic::Ordering::Relaxed);
        let s = stack::alloc(stack::DEFAULT_STACK).expect("stack alloc");
        // Round toward zero on this side: the goroutine must not inherit it, and we must
        // get it back.
        let ours = fpenv_current();
        let mxcsr_rz: u32 = (ours as u32 & !0x6000) | 0x6000;
        // SAFETY: loads a valid MXCSR value (only the rounding control changed).
        unsafe { asm_ldmxcsr(mxcsr_rz) };
        let env = fpenv_current();
        let p: *mut Pair = &mut pair;
        // SAFETY: the stack is ours and unused; start_entry switches back through main_sp.
        let local_addr = unsafe { start_from_g0(&raw mut (*p).main_sp, s.top(), start_entry, env) };
        let after = fpenv_current();
        // SAFETY: restores the environment the test started with.
        unsafe { asm_ldmxcsr(ours as u32) };
        assert_eq!(
            after as u32 & 0xFFC0,
            mxcsr_rz & 0xFFC0,
            "our MXCSR came back"
        );
        assert_eq!(
            pair.seen as u32 & 0xFFC0,
            0x1F80,
            "fresh goroutine: default MXCSR"
        );
        assert_eq!(
            (pair.seen >> 32) as u16,
            0x037F,
            "fresh goroutine: default x87 CW"
        );
        assert!(
            (s.top() - 4096..s.top()).contains(&local_addr),
            "runs at the top of its stack"
        );
        stack::free(s);
    }

    #[cfg(target_arch = "x86_64")]
    /// Loads MXCSR.
    ///
    /// # Safety
    /// `v` must be a valid MXCSR value (no reserved bits set).
    unsafe fn asm_ldmxcsr(v: u32) {
        // SAFETY: caller contract; reads 4 bytes from a local.
        unsafe {
            core::arch::asm!("ldmxcsr dword ptr [{p}]", p = in(reg) &v, options(nostack, readonly));
        }
    }

    #[test]
    fn fresh_stack_entry_receives_arg() {
        let mut pair = Pair {
            main_sp: 0,
            co_sp: 0,
            seen: 0,
        };
        let s = coroutine(&mut pair, record_arg_entry);
        let arg = &raw mut pair as usize;
        let local_addr = resume(&mut pair, arg);
        assert_eq!(pair.seen, arg);
        assert!(
            (s.lo()..s.top()).contains(&local_addr),
            "entry ran on its own stack"
        );
        stack::free(s);
    }

    #[test]
    fn tls_two_threads_are_independent() {
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let threads: Vec<_> = [0x1111usize, 0x2222]
            .into_iter()
            .map(|v| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    assert_eq!(tls_get(), 0, "a new thread starts with 0");
                    tls_set(v);
                    barrier.wait();
                    assert_eq!(tls_get(), v);
                    barrier.wait();
                    assert_eq!(tls_get(), v);
                })
            })
            .collect();
        for t in threads {
            t.join().expect("tls thread");
        }
    }

    unsafe extern "C" fn tls_entry(arg: usize) -> ! {
        let pair = arg as *mut Pair;
        loop {
            // Read, report, and write a new value, each time on whatever thread resumed us.
            let seen = tls_get();
            tls_set(seen + 1);
            // SAFETY: the test resumed us through `pair` and is suspended.
            unsafe { yield_back(pair, seen) };
        }
    }

    #[test]
    fn tls_survives_switch_same_thread() {
        tls_set(0xABC);
        let mut pair = Pair {
            main_sp: 0,
            co_sp: 0,
            seen: 0,
        };
        let s = coroutine(&mut pair, tls_entry);
        let arg = &raw mut pair as usize;
        assert_eq!(resume(&mut pair, arg), 0xABC, "same thread, same slot");
        assert_eq!(tls_get(), 0xABD, "the coroutine's write is this thread's");
        tls_set(0);
        stack::free(s);
    }

    /// A coroutine suspended on one thread and resumed on another reads the new thread's
    /// slot from the same function body: the TLS address is not cached across the switch.
    #[test]
    fn tls_read_after_migration() {
        struct Shared(Pair, stack::Stack);
        let mut pair = Pair {
            main_sp: 0,
            co_sp: 0,
            seen: 0,
        };
        let s = coroutine(&mut pair, tls_entry);
        let shared = std::sync::Arc::new(std::sync::Mutex::new(Shared(pair, s)));
        for (round, v) in [100usize, 200, 300].into_iter().enumerate() {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let mut g = shared.lock().expect("lock");
                tls_set(v);
                let arg = &raw mut g.0 as usize;
                let seen = resume(&mut g.0, arg);
                assert_eq!(seen, v, "round {round}: the resuming thread's slot");
                assert_eq!(tls_get(), v + 1);
            })
            .join()
            .expect("migration thread");
        }
        let Shared(_, s) = std::sync::Arc::try_unwrap(shared)
            .ok()
            .expect("last owner")
            .into_inner()
            .expect("lock");
        stack::free(s);
    }
}
