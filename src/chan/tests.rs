//! Channel and select tests that need the crate's internals: sudog recycling through the
//! per-P and central caches, and selects with more cases than the stack scratch space
//! (`SMALL_CASES`) and than a P's sudog cache (`SUDOG_CACHE`).
//!
//! The tests of this module share the sudog caches and the allocation counter, so they
//! run one at a time (`SERIAL`); no other unit test of the crate uses channels.

use core::ffi::c_void;
use std::sync::Mutex;

use super::hchan::{Chan, ChanError, Mode};
use super::select::{Case, select};
use crate::rt;
use crate::rt::sudog::{SUDOG_CACHE, sudogs_allocated, sudogs_central};

static SERIAL: Mutex<()> = Mutex::new(());

/// Most sudogs any test here has in use at once: the largest select (`WIDE`) plus the
/// goroutines of `sudogs_are_recycled`, with room to spare.
const PEAK_IN_USE: usize = WIDE + 64;

/// Cases of the select that outgrows a P's sudog cache.
const WIDE: usize = 2 * SUDOG_CACHE + 44;

/// Runs `f` on a new goroutine.
fn go(f: impl FnOnce() + Send + 'static) {
    unsafe extern "C" fn tramp(arg: *mut c_void) {
        // SAFETY: arg is the box leaked below, taken back exactly once.
        let f = unsafe { Box::from_raw(arg as *mut Box<dyn FnOnce() + Send>) };
        f();
    }
    let f: Box<Box<dyn FnOnce() + Send>> = Box::new(Box::new(f));
    let id = crate::ffi::gmp_go(Some(tramp), Box::into_raw(f) as *mut c_void);
    assert!(id > 0, "gmp_go = {id}");
}

/// A channel pointer that may cross to a goroutine (channels are Sync).
#[derive(Clone, Copy)]
struct Ch(*mut Chan);
// SAFETY: Chan is Sync and Send; the tests release each channel only after every
// goroutine using it has finished.
unsafe impl Send for Ch {}

impl Ch {
    fn new(cap: usize) -> Ch {
        Ch(Chan::make(8, cap).expect("make"))
    }
    fn c(self) -> &'static Chan {
        // SAFETY: alive until `free` (see the Send impl).
        unsafe { &*self.0 }
    }
    fn send(self, v: u64) -> Result<(), ChanError> {
        // SAFETY: v is readable for the element size (8).
        unsafe { self.c().send((&v as *const u64).cast(), Mode::Block) }
    }
    fn recv(self) -> Result<u64, ChanError> {
        let mut v = 0u64;
        // SAFETY: v is writable for the element size (8).
        unsafe { self.c().recv((&mut v as *mut u64).cast(), Mode::Block) }.map(|()| v)
    }
    fn free(self) {
        // SAFETY: the reference from make; no operation in flight (see the Send impl).
        unsafe { Chan::release(self.0) };
    }
    fn try_send(self, v: u64) -> Result<(), ChanError> {
        // SAFETY: as send.
        unsafe { self.c().send((&v as *const u64).cast(), Mode::Try) }
    }
    fn try_recv(self) -> Result<u64, ChanError> {
        let mut v = 0u64;
        // SAFETY: as recv.
        unsafe { self.c().recv((&mut v as *mut u64).cast(), Mode::Try) }.map(|()| v)
    }
}

fn procs_ever() -> usize {
    rt::all_ps().count()
}

/// The recycling bound of sudog.rs: a sudog is allocated only when the caller's cache and
/// the central list are empty, so every earlier one is in use or in another P's cache.
fn assert_bounded(ops: usize) {
    let allocated = sudogs_allocated();
    let bound = PEAK_IN_USE + procs_ever() * SUDOG_CACHE;
    assert!(
        allocated <= bound,
        "{allocated} sudogs allocated after {ops} blocking operations (bound {bound})"
    );
    assert!(sudogs_central() <= allocated);
}

#[test]
fn sudogs_are_recycled() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    rt::init();
    const PAIRS: usize = 8;
    const ROUNDS: u64 = 20_000;
    let done = Ch::new(0);
    let mut chans = Vec::new();
    // Goroutine pairs bounce a value over unbuffered channels (each hand-off blocks one
    // side); every 16th round goes through a two-case select instead.
    for _ in 0..PAIRS {
        let (ping, pong) = (Ch::new(0), Ch::new(0));
        chans.push(ping);
        chans.push(pong);
        go(move || {
            for i in 0..ROUNDS {
                let v = if i % 16 == 0 {
                    let mut out = 0u64;
                    let mut cases = [
                        Case {
                            chan: ping.0,
                            op: Case::recv_op(),
                            buf: (&mut out as *mut u64).cast(),
                            status: 1,
                        },
                        Case {
                            chan: core::ptr::null_mut(),
                            op: Case::recv_op(),
                            buf: core::ptr::null_mut(),
                            status: 1,
                        },
                    ];
                    // SAFETY: the enabled case's channel is alive, its buffer writable.
                    let k = unsafe { select(&mut cases, Mode::Block) }.expect("select");
                    assert_eq!((k, cases[0].status), (0, 0));
                    out
                } else {
                    ping.recv().expect("recv")
                };
                assert_eq!(v, i);
                pong.send(v + 1).expect("send");
            }
            done.send(0).expect("done");
        });
        go(move || {
            for i in 0..ROUNDS {
                ping.send(i).expect("send");
                assert_eq!(pong.recv(), Ok(i + 1));
            }
            done.send(0).expect("done");
        });
    }
    // This foreign thread blocks too (central list, no P).
    for _ in 0..2 * PAIRS {
        done.recv().expect("recv");
    }
    assert_bounded(PAIRS * ROUNDS as usize * 4);
    for c in chans {
        c.free();
    }
    done.free();
}

/// A select over `n` receive cases of distinct unbuffered channels, each fired once by a
/// sender on another goroutine; then a select over all of them that times out.
fn wide_select(n: usize) {
    let chans: Vec<Ch> = (0..n).map(|_| Ch::new(0)).collect();
    let order: Vec<usize> = (0..n).map(|i| (i * 7 + 3) % n).collect();
    let done = Ch::new(0);
    let (cs, ord) = (chans.clone(), order.clone());
    go(move || {
        let mut vals = vec![0u64; n];
        for &want in &ord {
            let mut cases: Vec<Case> = cs
                .iter()
                .zip(vals.iter_mut())
                .map(|(c, v)| Case {
                    chan: c.0,
                    op: Case::recv_op(),
                    buf: (v as *mut u64).cast(),
                    status: 1,
                })
                .collect();
            // SAFETY: every case's channel is alive and its buffer writable.
            let k = unsafe { select(&mut cases, Mode::Block) }.expect("select");
            assert_eq!((k, cases[k].status), (want, 0));
            assert_eq!(vals[k], 1000 + want as u64);
        }
        let mut cases: Vec<Case> = cs
            .iter()
            .map(|c| Case {
                chan: c.0,
                op: Case::send_op(),
                buf: (&0u64 as *const u64).cast_mut().cast(),
                status: 1,
            })
            .collect();
        let deadline = Mode::Until(crate::sys::nanotime() + 1_000_000);
        // SAFETY: every case's channel is alive and its buffer readable.
        let r = unsafe { select(&mut cases, deadline) };
        assert_eq!(r, Err(ChanError::TimedOut));
        done.send(0).expect("done");
    });
    for &i in &order {
        chans[i].send(1000 + i as u64).expect("send");
    }
    done.recv().expect("done");
    // Every sudog is off its queue again: a try on any channel finds no peer.
    for c in &chans {
        let mut v = 0u64;
        // SAFETY: v is writable for the element size.
        let r = unsafe { c.c().recv((&mut v as *mut u64).cast(), Mode::Try) };
        assert_eq!(r, Err(ChanError::WouldBlock));
        c.free();
    }
    done.free();
}

#[test]
fn select_64_cases() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    wide_select(64);
    assert_bounded(64 * 65);
}

#[test]
fn select_wider_than_sudog_cache() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Each select takes WIDE sudogs, more than one P caches: refills from the central
    // list and spills back to it, again and again.
    wide_select(WIDE);
    assert_bounded(WIDE * (WIDE + 1));
}

/// Every element size goes through intact, buffered (via the ring) and unbuffered (direct
/// from the blocked peer's buffer), including the sizes `Chan::copy` special-cases and
/// ones around them; a receive into NULL discards.
#[test]
fn element_sizes() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for size in [0usize, 1, 3, 4, 5, 8, 12, 16, 24, 1000, 65536] {
        for cap in [0usize, 2] {
            let c = Ch(Chan::make(size, cap).expect("make"));
            let done = Ch::new(0);
            go(move || {
                for round in 0..4u8 {
                    let v: Vec<u8> = (0..size)
                        .map(|i| (i as u8) ^ round.wrapping_mul(37))
                        .collect();
                    // SAFETY: v is readable for the element size.
                    unsafe { c.c().send(v.as_ptr(), Mode::Block) }.expect("send");
                }
                done.send(0).expect("done");
            });
            for round in 0..4u8 {
                if round == 3 {
                    // SAFETY: a null destination discards.
                    unsafe { c.c().recv(core::ptr::null_mut(), Mode::Block) }.expect("recv");
                    continue;
                }
                let mut out = vec![0xAAu8; size + 2];
                // SAFETY: out has room for the element (and a canary byte on each side).
                unsafe { c.c().recv(out[1..].as_mut_ptr(), Mode::Block) }.expect("recv");
                let want: Vec<u8> = (0..size)
                    .map(|i| (i as u8) ^ round.wrapping_mul(37))
                    .collect();
                assert_eq!(&out[1..=size], &want[..], "size {size} cap {cap}");
                assert_eq!(
                    (out[0], out[size + 1]),
                    (0xAA, 0xAA),
                    "size {size}: overrun"
                );
            }
            done.recv().expect("done");
            c.free();
            done.free();
        }
    }
}

/// A buffered channel starts under its lock (exclusive mode), goes lock-free after
/// `CALM_RUN` operations in a row that neither waited nor woke anyone, and goes back
/// under the lock while a receiver waits; `len` is right in both modes, and values keep
/// their order across the changes.
#[test]
fn ring_modes_and_len() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Ch::new(4);
    assert!(c.c().in_exclusive_mode(), "a new channel is under its lock");
    let mut next_in = 0u64;
    let mut next_out = 0u64;
    // Fill and drain (at most 4 buffered) until the calm run ends exclusive mode.
    let mut ops = 0;
    while c.c().in_exclusive_mode() {
        assert!(
            ops < 4 * super::hchan::CALM_RUN as usize + 8,
            "never went lock-free"
        );
        if c.c().len() < 4 {
            c.try_send(next_in).expect("room");
            next_in += 1;
        } else {
            assert_eq!(c.try_recv(), Ok(next_out));
            next_out += 1;
        }
        ops += 1;
        assert_eq!(c.c().len() as u64, next_in - next_out);
    }
    // Lock-free now: full and empty are reported without blocking, in order.
    while c.c().len() < 4 {
        c.try_send(next_in).expect("room");
        next_in += 1;
    }
    assert_eq!(c.try_send(99), Err(ChanError::WouldBlock));
    assert!(!c.c().in_exclusive_mode(), "a full ring needs no lock");
    while !c.c().is_empty() {
        assert_eq!(c.try_recv(), Ok(next_out));
        next_out += 1;
    }
    assert_eq!(c.try_recv(), Err(ChanError::WouldBlock));
    assert_eq!(c.c().len(), 0);
    // A receiver that waits puts the ring under the lock until it is served.
    let got = Ch::new(1);
    go(move || {
        let v = c.recv().expect("recv");
        got.send(v).expect("got");
    });
    while !c.c().in_exclusive_mode() {
        std::thread::yield_now();
    }
    assert_eq!(c.c().len(), 0);
    c.send(next_in).expect("send");
    assert_eq!(got.recv(), Ok(next_in));
    got.free();
    c.free();
}

/// A destroyed channel's header keeps its small buffer for the next channel of the same
/// size, which must find it empty: values left in it when the old one was released are
/// gone, and the stamps start over.
#[test]
fn kept_buffer_starts_empty() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for round in 0..3u64 {
        let c = Ch::new(4);
        for v in 0..3 {
            c.try_send(round * 10 + v).expect("room");
        }
        // Through the lock-free path as well: drain and refill past the calm run.
        for _ in 0..super::hchan::CALM_RUN + 4 {
            let v = c.try_recv().expect("value");
            c.try_send(v).expect("room");
        }
        assert_eq!(c.c().len(), 3);
        c.free();
        // Same size: the header free list is last in, first out.
        let d = Ch::new(4);
        assert_eq!(d.c().len(), 0, "round {round}");
        assert_eq!(d.try_recv(), Err(ChanError::WouldBlock), "round {round}");
        for v in 0..4 {
            d.try_send(v).expect("room");
        }
        assert_eq!(d.try_send(4), Err(ChanError::WouldBlock));
        for v in 0..4 {
            assert_eq!(d.try_recv(), Ok(v));
        }
        d.free();
        // Another size: the kept buffer is freed, a new one made.
        let e = Ch::new(5);
        assert_eq!(e.try_recv(), Err(ChanError::WouldBlock));
        for v in 0..5 {
            e.try_send(v).expect("room");
        }
        assert_eq!(e.c().len(), 5);
        e.free();
    }
}

/// A kept buffer taken by a channel of another shape with the same byte size (8-byte
/// elements in 2 slots, 24-byte ones in 1, both 32 bytes of slots) starts at position 0:
/// the old ring's positions name slots the new one does not have. Each round leaves the
/// old ring at another position. Run on a thread with a deadline: resuming the positions
/// made the new channel's first or second operation wait forever for a stamp.
#[test]
fn kept_buffer_of_another_shape_starts_fresh() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for round in 0..4u64 {
            for (first, second) in [((8, 2), (24, 1)), ((24, 1), (8, 2))] {
                let a = Chan::make(first.0, first.1).expect("make");
                let mut v = [0u8; 24];
                for k in 0..=round {
                    v[0] = k as u8;
                    // SAFETY: v is readable and writable for either element size.
                    unsafe {
                        (*a).send(v.as_ptr(), Mode::Try).expect("room");
                        (*a).recv(v.as_mut_ptr(), Mode::Try).expect("value");
                    }
                }
                // SAFETY: the reference from make; nothing in flight.
                unsafe { Chan::release(a) };
                let b = Chan::make(second.0, second.1).expect("make");
                // SAFETY: as above.
                unsafe {
                    assert_eq!((*b).len(), 0, "round {round}");
                    for k in 0..second.1 {
                        v[0] = 100 + k as u8;
                        (*b).send(v.as_ptr(), Mode::Try).expect("room");
                    }
                    assert_eq!((*b).send(v.as_ptr(), Mode::Try), Err(ChanError::WouldBlock));
                    for k in 0..second.1 {
                        (*b).recv(v.as_mut_ptr(), Mode::Try).expect("value");
                        assert_eq!(v[0], 100 + k as u8, "round {round}");
                    }
                    Chan::release(b);
                }
            }
        }
        done_tx.send(()).unwrap();
    });
    done_rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("a channel made over another shape's kept buffer hung or failed");
}

/// A two-case select: send or receive `v` on `c`, or receive on `idle` (an unbuffered
/// channel nobody sends on), in `mode`. Ok(case index, status).
fn select2(
    c: Ch,
    idle: Ch,
    send: bool,
    v: &mut u64,
    mode: Mode,
) -> Result<(usize, i32), ChanError> {
    let mut sink = 0u64;
    let mut cases = [
        Case {
            chan: idle.0,
            op: Case::recv_op(),
            buf: (&mut sink as *mut u64).cast(),
            status: 1,
        },
        Case {
            chan: c.0,
            op: if send {
                Case::send_op()
            } else {
                Case::recv_op()
            },
            buf: (v as *mut u64).cast(),
            status: 1,
        },
    ];
    // SAFETY: live channels, 8-byte buffers for 8-byte elements.
    let k = unsafe { select(&mut cases, mode) }?;
    Ok((k, cases[k].status))
}

/// Selects on a buffered channel follow its modes as plain operations do: those that
/// neither wait nor wake count toward the calm run that ends exclusive mode (without
/// that, a channel only selects used never left it), outside the mode they send and
/// receive lock-free, in order, and a select that finds nothing ready decides so only
/// with the ring back under the lock. A one-case select is its plain operation.
#[test]
fn select_and_ring_modes() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Ch::new(4);
    let idle = Ch::new(0);
    assert!(c.c().in_exclusive_mode(), "a new channel is under its lock");
    let (mut next_in, mut next_out) = (0u64, 0u64);
    let mut ops = 0;
    while c.c().in_exclusive_mode() {
        assert!(
            ops < 4 * super::hchan::CALM_RUN as usize + 8,
            "selects never took the ring out of exclusive mode"
        );
        if c.c().len() < 4 {
            let mut v = next_in;
            assert_eq!(select2(c, idle, true, &mut v, Mode::Block), Ok((1, 0)));
            next_in += 1;
        } else {
            let mut v = 0;
            assert_eq!(select2(c, idle, false, &mut v, Mode::Block), Ok((1, 0)));
            assert_eq!(v, next_out);
            next_out += 1;
        }
        ops += 1;
    }
    // Lock-free: the selects leave the mode alone while they find something to do.
    while c.c().len() < 4 {
        let mut v = next_in;
        assert_eq!(select2(c, idle, true, &mut v, Mode::Try), Ok((1, 0)));
        next_in += 1;
    }
    while !c.c().is_empty() {
        let mut v = 0;
        assert_eq!(select2(c, idle, false, &mut v, Mode::Try), Ok((1, 0)));
        assert_eq!(v, next_out);
        next_out += 1;
    }
    assert!(
        !c.c().in_exclusive_mode(),
        "selects that proceed need no lock"
    );
    // Nothing ready: decided with every ring in the mode (a snapshot of both channels).
    let mut v = 0;
    assert_eq!(
        select2(c, idle, false, &mut v, Mode::Try),
        Err(ChanError::WouldBlock)
    );
    assert!(
        c.c().in_exclusive_mode(),
        "'nothing ready' decided outside the mode"
    );
    // A select that waits is served by a plain send. First out of the mode again, so that
    // the waiting select is what puts the ring back in it.
    for _ in 0..super::hchan::CALM_RUN {
        c.try_send(0).expect("room");
        assert_eq!(c.try_recv(), Ok(0));
    }
    assert!(!c.c().in_exclusive_mode(), "plain operations left the mode");
    let got = Ch::new(1);
    go(move || {
        let mut v = 0;
        let r = select2(c, idle, false, &mut v, Mode::Block);
        assert_eq!(r, Ok((1, 0)));
        got.send(v).expect("got");
    });
    while !c.c().in_exclusive_mode() {
        std::thread::yield_now();
    }
    c.send(next_in).expect("send");
    assert_eq!(got.recv(), Ok(next_in));
    // One enabled case: the plain operation, its outcome in the case.
    let mut one = [Case {
        chan: c.0,
        op: Case::recv_op(),
        buf: (&mut v as *mut u64).cast(),
        status: 1,
    }];
    // SAFETY: as in select2.
    assert_eq!(
        unsafe { select(&mut one, Mode::Try) },
        Err(ChanError::WouldBlock)
    );
    assert_eq!(one[0].status, 1, "no status without a case done");
    c.try_send(77).expect("room");
    // SAFETY: as above.
    assert_eq!(unsafe { select(&mut one, Mode::Block) }, Ok(0));
    assert_eq!((one[0].status, v), (0, 77));
    c.c().close().expect("close");
    v = 5;
    // SAFETY: as above.
    assert_eq!(unsafe { select(&mut one, Mode::Block) }, Ok(0));
    assert_eq!(
        (one[0].status, v),
        (-libc::EPIPE, 0),
        "closed: -EPIPE, zero value"
    );
    got.free();
    idle.free();
    c.free();
}

/// Buffers at the threshold of `chan::buf` and below it (mapped, allocated): every slot
/// starts empty (zero pages are the ring's initial state), values keep their order over
/// two laps, and a channel of the same size made after the release of one starts empty
/// too (a mapped buffer is not kept: a fresh mapping).
#[test]
fn mapped_buffer_starts_empty() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mapped = super::buf::MAP_MIN / super::ring::Ring::stride(8);
    for cap in [mapped, mapped - 1] {
        for round in 0..2u64 {
            let c = Ch::new(cap);
            assert_eq!(c.try_recv(), Err(ChanError::WouldBlock), "cap {cap}");
            for lap in 0..2u64 {
                let base = (round * 2 + lap) * cap as u64;
                for v in 0..cap as u64 {
                    c.try_send(base + v).expect("room");
                }
                assert_eq!(c.try_send(0), Err(ChanError::WouldBlock), "cap {cap}");
                assert_eq!(c.c().len(), cap);
                for v in 0..cap as u64 {
                    assert_eq!(c.try_recv(), Ok(base + v), "cap {cap}");
                }
                assert_eq!(c.try_recv(), Err(ChanError::WouldBlock), "cap {cap}");
            }
            c.try_send(7).expect("room");
            c.free();
        }
    }
}
