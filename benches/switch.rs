//! Context-switch cost: a round trip (two switches) through `gmp::arch::switch`, against a
//! bare register swap that saves the same six callee-saved registers and exchanges rsp but
//! does nothing about MXCSR or the x87 control word. The design claims the real switch is
//! within 2x of the bare one (DESIGN.md, "Context switching"); after the criterion runs,
//! [`check_claim`] measures both again (best of 31 batches) and panics, loudly, if the
//! ratio is above 2.
//!
//! `cargo bench --bench switch`

use criterion::{Criterion, criterion_group, criterion_main};
use gmp::{arch, stack};
use std::arch::naked_asm;
use std::hint::black_box;

/// The two saved stack pointers of a benchmark: the bench loop's and the coroutine's.
#[repr(C)]
struct Pair {
    main_sp: usize,
    co_sp: usize,
}

/// Coroutine for `gmp::arch::switch`: bounces every value straight back.
unsafe extern "C" fn echo(arg: usize) -> ! {
    let pair = arg as *mut Pair;
    let mut v = 0;
    loop {
        // SAFETY: the bench loop resumed us through `pair` and is suspended.
        v = unsafe { arch::switch(&raw mut (*pair).co_sp, (*pair).main_sp, v + 1) };
    }
}

/// Like `echo`, with MXCSR set to round down (0x3F80) for the coroutine's whole life.
unsafe extern "C" fn echo_round_down(arg: usize) -> ! {
    let mxcsr: u32 = 0x3F80;
    // SAFETY: loads a valid MXCSR (default masks, rounding down) from a local.
    unsafe { std::arch::asm!("ldmxcsr [{p}]", p = in(reg) &mxcsr, options(nostack)) };
    // SAFETY: the same contract as `echo`.
    unsafe { echo(arg) }
}

/// The baseline: the same pushes, sp exchange and pops as `arch::switch`, nothing else.
#[unsafe(naked)]
unsafe extern "C" fn bare_switch(save_sp: *mut usize, to_sp: usize, arg: usize) -> usize {
    naked_asm!(
        "push rbp",
        "push rbx",
        "push r12",
        "push r13",
        "push r14",
        "push r15",
        "mov [rdi], rsp", // suspend
        "mov rsp, rsi",   // resume the other side
        "pop r15",
        "pop r14",
        "pop r13",
        "pop r12",
        "pop rbx",
        "pop rbp",
        "pop rcx",
        "mov rax, rdx",
        "jmp rcx",
    )
}

/// First resume point of a bare coroutine: rax = arg, r12 = entry.
#[unsafe(naked)]
unsafe extern "C" fn bare_trampoline() -> ! {
    naked_asm!("mov rdi, rax", "call r12", "ud2")
}

/// Coroutine for `bare_switch`.
unsafe extern "C" fn bare_echo(arg: usize) -> ! {
    let pair = arg as *mut Pair;
    let mut v = 0;
    loop {
        // SAFETY: as in `echo`.
        v = unsafe { bare_switch(&raw mut (*pair).co_sp, (*pair).main_sp, v + 1) };
    }
}

/// Builds a `bare_switch` initial frame: r15..rbp, then the trampoline, at a 16-aligned
/// position so that `bare_echo` starts with a call-aligned stack.
fn bare_init(top: usize, entry: unsafe extern "C" fn(usize) -> !) -> usize {
    let top = top & !15;
    let sp = top - 64;
    let frame = [
        0,
        0,
        0,
        entry as usize,
        0,
        0,
        bare_trampoline as *const () as usize,
        0,
    ];
    // SAFETY: [top - 64, top) lies in a stack owned by the caller.
    unsafe { std::ptr::copy_nonoverlapping(frame.as_ptr(), sp as *mut usize, frame.len()) };
    sp
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("switch");

    let s = stack::alloc(stack::DEFAULT_STACK).expect("stack");
    let mut pair = Pair {
        main_sp: 0,
        co_sp: 0,
    };
    // SAFETY: the stack is ours for the whole benchmark.
    pair.co_sp = unsafe { arch::init_stack(s.top(), echo) };
    let p: *mut Pair = &mut pair;
    // SAFETY: starts the coroutine; it switches straight back through main_sp.
    unsafe { arch::switch(&raw mut (*p).main_sp, (*p).co_sp, p as usize) };
    g.bench_function("gmp_round_trip", |b| {
        // SAFETY: the coroutine is suspended at co_sp and switches back each time.
        b.iter(|| unsafe { arch::switch(&raw mut (*p).main_sp, (*p).co_sp, black_box(1)) })
    });

    let s2 = stack::alloc(stack::DEFAULT_STACK).expect("stack");
    let mut bare = Pair {
        main_sp: 0,
        co_sp: bare_init(s2.top(), bare_echo),
    };
    let q: *mut Pair = &mut bare;
    // SAFETY: as above, with the bare switch.
    unsafe { bare_switch(&raw mut (*q).main_sp, (*q).co_sp, q as usize) };
    g.bench_function("bare_round_trip", |b| {
        // SAFETY: as above.
        b.iter(|| unsafe { bare_switch(&raw mut (*q).main_sp, (*q).co_sp, black_box(1)) })
    });

    // The scheduler's round trip: g0 -> goroutine with `switch_from_g0_balanced` (known FP
    // state, no stmxcsr, no `call`), goroutine -> g0 with `switch` (the echo coroutine), as
    // `execute` and `mcall` do.
    let fpenv = arch::fpenv_current();
    g.bench_function("scheduler_round_trip", |b| {
        // SAFETY: as for gmp_round_trip; fpenv is this thread's current FP control state.
        b.iter(|| unsafe {
            arch::switch_from_g0_balanced(&raw mut (*p).main_sp, (*p).co_sp, black_box(1), fpenv)
        })
    });

    // The slow path for comparison: the coroutine rounds down, the bench loop to nearest,
    // so every switch reloads MXCSR (ldmxcsr serializes).
    let s3 = stack::alloc(stack::DEFAULT_STACK).expect("stack");
    let mut rd = Pair {
        main_sp: 0,
        co_sp: 0,
    };
    // SAFETY: as for the first coroutine.
    rd.co_sp = unsafe { arch::init_stack(s3.top(), echo_round_down) };
    let r: *mut Pair = &mut rd;
    // SAFETY: as above.
    unsafe { arch::switch(&raw mut (*r).main_sp, (*r).co_sp, r as usize) };
    g.bench_function("gmp_round_trip_rounding_differs", |b| {
        // SAFETY: as for gmp_round_trip.
        b.iter(|| unsafe { arch::switch(&raw mut (*r).main_sp, (*r).co_sp, black_box(1)) })
    });
    g.finish();
    // SAFETY: both coroutines are suspended and switch straight back, as in the benches.
    unsafe {
        check_claim(
            || arch::switch(&raw mut (*p).main_sp, (*p).co_sp, black_box(1)),
            || bare_switch(&raw mut (*q).main_sp, (*q).co_sp, black_box(1)),
        )
    };
    // The coroutines stay suspended forever: give their stacks back only now that nothing
    // will resume them.
    for st in [s, s2, s3] {
        stack::free(st);
    }
}

/// Nanoseconds per call of `f`: the best of 31 batches of 200,000 (the best, because
/// this machine is shared and every disturbance only adds time).
fn best_ns(mut f: impl FnMut() -> usize) -> f64 {
    const N: u32 = 200_000;
    (0..31)
        .map(|_| {
            let t = std::time::Instant::now();
            for _ in 0..N {
                black_box(f());
            }
            t.elapsed().as_nanos() as f64 / f64::from(N)
        })
        .fold(f64::INFINITY, f64::min)
}

/// The design's claim, checked: a `gmp::arch::switch` round trip costs at most twice a
/// bare register swap's.
fn check_claim(gmp: impl FnMut() -> usize, bare: impl FnMut() -> usize) {
    let g = best_ns(gmp);
    let b = best_ns(bare);
    let ratio = g / b;
    eprintln!(
        "\n==== CLAIM CHECK: switch round trip {g:.2} ns vs bare {b:.2} ns: ratio {ratio:.2} \
         (claim: <= 2) ====\n"
    );
    assert!(
        ratio <= 2.0,
        "CLAIM BROKEN: gmp::arch::switch is {ratio:.2}x a bare swap (claim: within 2x)"
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
