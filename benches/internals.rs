//! Micro-benchmarks of the runtime's internals, for finding regressions (not for claims:
//! the comparisons with Go are in bench/). Run: `cargo bench --bench internals`.
//!
//! Every call's result is checked (assert!): a benchmark of an operation that fails fast
//! would report a fine time.
//!
//! Goroutine-side operations (yield, timers, spawn) are timed inside a goroutine with
//! `iter_custom`: the benchmark thread is a foreign thread, which has no P.

use std::ffi::c_void;
use std::hint::black_box;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use gmp::ffi::{gmp_go, gmp_wg, gmp_wg_add, gmp_wg_done, gmp_wg_wait, gmp_yield};
use gmp::rt::runq::RunQueue;
use gmp::sync::sema::{semacquire1, semrelease1};

/// Runs `body(iters)` in a goroutine and returns the time it measured there.
fn in_goroutine(iters: u64, body: fn(u64) -> Duration) -> Duration {
    struct Job {
        iters: u64,
        body: fn(u64) -> Duration,
        took: Duration,
        wg: gmp_wg,
    }
    unsafe extern "C" fn run(arg: *mut c_void) {
        // SAFETY: arg is the Job below, alive until gmp_wg_wait returns.
        let job = unsafe { &mut *(arg as *mut Job) };
        job.took = (job.body)(job.iters);
        // SAFETY: the Job's wg is live.
        assert_eq!(unsafe { gmp_wg_done(&mut job.wg) }, 0);
    }
    let mut job = Job {
        iters,
        body,
        took: Duration::ZERO,
        wg: gmp_wg {
            state: 0,
            sema: 0,
            reserved: 0,
        },
    };
    // SAFETY: job outlives the goroutine (we wait for it).
    unsafe {
        assert_eq!(gmp_wg_add(&mut job.wg, 1), 0);
        assert!(gmp_go(Some(run), &mut job as *mut Job as *mut c_void) > 0);
        assert_eq!(gmp_wg_wait(&mut job.wg), 0);
    }
    job.took
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("internals");

    // Run queue, owner side: put then get (the ring, not runnext).
    let q: RunQueue<u8> = RunQueue::new();
    let mut items = [0u8; 256];
    let base = NonNull::new(items.as_mut_ptr()).unwrap();
    g.bench_function("runqput_get", |b| {
        b.iter(|| {
            // SAFETY: single-threaded owner use; the queue never overflows (one item).
            unsafe {
                q.put(base, false, |_| unreachable!());
                assert_eq!(black_box(q.get()), Some((base, false)));
            }
        })
    });

    // Run queue, thief side: steal half of a 128-item queue, then drain both.
    let victim: RunQueue<u8> = RunQueue::new();
    let thief: RunQueue<u8> = RunQueue::new();
    g.bench_function("runq_steal_128", |b| {
        b.iter(|| {
            // SAFETY: both queues are used by this thread only, as their owner and as thief.
            unsafe {
                for i in 0..128 {
                    victim.put(base.add(i), false, |_| unreachable!());
                }
                // Half of 128 (one returned, the rest in the thief's queue).
                let (_, n) = black_box(thief.steal(&victim, false)).expect("steal from 128");
                assert_eq!(n, 64);
                victim.drain(|_| {});
                thief.drain(|_| {});
            }
        })
    });

    // Semaphore, uncontended: release then acquire (the fast paths).
    let sema = AtomicU32::new(0);
    g.bench_function("sema_release_acquire", |b| {
        b.iter(|| {
            semrelease1(&sema, false);
            semacquire1(&sema, false, gmp::rt::WaitReason::Semacquire);
        })
    });

    // Channel operations without blocking: send then receive on a buffered channel (cap 1).
    let mut ch: *mut gmp::ffi::chan::gmp_chan = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the channel lives until the release below.
    assert_eq!(unsafe { gmp::ffi::chan::gmp_chan_make(&mut ch, 8, 1) }, 0);
    g.bench_function("chan_send_recv_buffered", |b| {
        let v: u64 = 7;
        let mut out: u64 = 0;
        b.iter(|| {
            // SAFETY: ch is live; v and out are 8-byte buffers.
            unsafe {
                assert_eq!(
                    gmp::ffi::chan::gmp_chan_send(ch, (&v as *const u64).cast()),
                    0
                );
                assert_eq!(
                    gmp::ffi::chan::gmp_chan_recv(ch, (&mut out as *mut u64).cast()),
                    0
                );
            }
            assert_eq!(black_box(out), 7);
        })
    });
    // SAFETY: the reference from gmp_chan_make, released once, with no operation in flight.
    assert_eq!(unsafe { gmp::ffi::chan::gmp_chan_release(ch) }, 0);

    // WaitGroup add/done, uncontended.
    let mut wg = gmp_wg {
        state: 0,
        sema: 0,
        reserved: 0,
    };
    g.bench_function("wg_add_done", |b| {
        b.iter(|| {
            // SAFETY: wg is live.
            unsafe {
                assert_eq!(gmp_wg_add(&mut wg, 1), 0);
                assert_eq!(gmp_wg_done(&mut wg), 0);
            }
        })
    });

    // A goroutine yielding alone on its P (switch to the scheduler and back).
    g.bench_function("yield_alone", |b| {
        b.iter_custom(|iters| {
            in_goroutine(iters, |n| {
                let t = std::time::Instant::now();
                for _ in 0..n {
                    assert_eq!(gmp_yield(), 0);
                }
                t.elapsed()
            })
        })
    });

    // Sleeping 1 ns: arm a timer on the P's heap, park, fire, ready, resume.
    g.bench_function("sleep_timer_round_trip", |b| {
        b.iter_custom(|iters| {
            in_goroutine(iters, |n| {
                let t = std::time::Instant::now();
                for _ in 0..n {
                    gmp::rt::timer::sleep(1);
                }
                t.elapsed()
            })
        })
    });

    // Spawn + run + exit of an empty goroutine from a goroutine, joined every 256.
    g.bench_function("spawn_join", |b| {
        b.iter_custom(|iters| {
            in_goroutine(iters, |n| {
                static DONE: AtomicU64 = AtomicU64::new(0);
                unsafe extern "C" fn empty(_: *mut c_void) {
                    DONE.fetch_add(1, Ordering::Relaxed);
                }
                let t = std::time::Instant::now();
                let start = DONE.load(Ordering::Relaxed);
                for _ in 0..n {
                    assert!(gmp_go(Some(empty), std::ptr::null_mut()) > 0);
                }
                while DONE.load(Ordering::Relaxed) - start < n {
                    assert_eq!(gmp_yield(), 0);
                }
                t.elapsed()
            })
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
