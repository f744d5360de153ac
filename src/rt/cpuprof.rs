//! The CPU profile (Go's `runtime/pprof.StartCPUProfile`, `runtime.SetCPUProfileRate`,
//! `cpuprof.go`): `GMP_CPUPROFILE=file`, `gmp_cpuprofile_start(fd, hz)`,
//! `gmp_cpuprofile_stop()`, written in pprof's `profile.proto` format, which
//! `go tool pprof` reads.
//!
//! **Sampling** is sigprof.rs: a CPU-time timer on every M, whose SIGPROF handler puts
//! the interrupted stack, the goroutine's id and a reference to its labels in the sample
//! ring (profbuf.rs).
//!
//! **Writing.** A writer thread (one of the runtime's own, `threads::register`) drains
//! the ring every 100 ms and counts identical samples (same frames, goroutine and label
//! set) once, giving back the label references of the repeats; at stop it drains the
//! rest, symbolizes every PC, writes the profile to the descriptor given at start (a
//! duplicate kept meanwhile), gives back the references it kept and ends. Samples the
//! ring dropped when full become one sample of the function `lostProfileEvent`, as Go's.
//! Records of an earlier profile (a handler that ran as that profile stopped) are
//! dropped, their references given back.
//!
//! **What the file holds.** Sample types `samples/count` and `cpu/nanoseconds` (period
//! type `cpu/nanoseconds`, period `1e9/hz`); one mapping per executable segment of every
//! loaded object (from `dl_iterate_phdr`) with `has_functions`; one location per PC,
//! with one line naming its function, found as the goroutine dump finds it (`dladdr1`:
//! exported symbols, so link executables with `-rdynamic`; code without a symbol is
//! named after its object, `[libgmp.so.0]`), so `go tool pprof` needs no binary; labels
//! `goid` (numeric) and the goroutine's gmp labels (strings) on samples of goroutines.
//! Plain protobuf, not gzip'd (pprof reads both).

use core::ffi::c_char;
use core::sync::atomic::{AtomicU32, Ordering};
/// Std's map with a fixed hasher: `RandomState` seeds itself with getrandom(2), a glibc
/// 2.25 call the Python wheel's library (linked for glibc 2.17) must not name.
type HashMap<K, V> =
    std::collections::HashMap<K, V, std::hash::BuildHasherDefault<std::hash::DefaultHasher>>;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Mutex;
use std::time::Duration;

use super::sigprof::{MAX_STACK, REC_WORDS};

/// Default sampling rate (Go's `runtime/pprof` rate).
pub(crate) const DEFAULT_HZ: i32 = 100;
/// Highest rate accepted: the kernel checks thread CPU-time timers at the scheduler tick
/// (1–4 ms), so a faster rate only bunches signals up.
pub(crate) const MAX_HZ: i32 = 10_000;

/// How often the writer drains the ring: 512 records last 100 ms for 51 threads at 100 Hz.
const DRAIN_EVERY: Duration = Duration::from_millis(100);

struct Writer {
    done: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<Result<(), i32>>,
}

/// The profile's state. `stop` leaves `Stopping` in place while it waits for the writer,
/// with the lock released: the lock is only ever held for a moment, so a goroutine that
/// waits for it may keep its P (a holder that joined the writer under it needed a P back
/// from whoever waited).
enum State {
    Idle,
    Running(Writer),
    /// `stop` has taken the writer and waits for it to drain the buffer and exit: a
    /// `start` meanwhile would run a second consumer of the single-consumer sample buffer,
    /// and `stop`'s `disable` may end the new profile's sampling.
    Stopping,
}

static WRITER: Mutex<State> = Mutex::new(State::Idle);

/// The last profile's epoch (sigprof.rs tags records with it).
static EPOCH: AtomicU32 = AtomicU32::new(0);

/// Starts a profile sampling at `hz` (<= 0: `DEFAULT_HZ`) that `stop` writes to `fd`.
/// Err: EINVAL (hz above `MAX_HZ`), EBADF (fd not open), EBUSY (a profile runs, or the
/// program has its own SIGPROF handler or profiling timer), or EAGAIN (no thread).
///
/// Made as a blocking call (the trace's `start` is too): `WRITER` is held across calls
/// into libc (the writer thread's creation, allocations) that can wait inside libc, where
/// the unseen-call path would hand the P on; a goroutine that then waited for `WRITER`
/// holding that P, as a runtime lock's waiter does, would keep it from the holder for
/// good (a hang the fuzzer found at GOMAXPROCS=1). Inside the blocking call neither holds
/// a P.
pub(crate) fn start(fd: i32, hz: i32) -> Result<(), i32> {
    super::syscall::blocking(|| start_blocking(fd, hz))
}

fn start_blocking(fd: i32, hz: i32) -> Result<(), i32> {
    let hz = if hz <= 0 { DEFAULT_HZ } else { hz };
    if hz > MAX_HZ {
        return Err(libc::EINVAL);
    }
    let mut w = WRITER.lock().unwrap_or_else(|e| e.into_inner());
    if !matches!(*w, State::Idle) {
        return Err(libc::EBUSY);
    }
    // SAFETY: F_DUPFD_CLOEXEC on any number: a closed one answers EBADF.
    let dup = unsafe { crate::sys::real::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(libc::EBADF);
    }
    // SAFETY: a descriptor we just made and own.
    let out = unsafe { OwnedFd::from_raw_fd(dup) };
    super::sigprof::install()?;
    let buf = super::sigprof::buf();
    let mut epoch = EPOCH.load(Ordering::Relaxed).wrapping_add(1);
    if epoch == 0 {
        epoch = 1;
    }
    EPOCH.store(epoch, Ordering::Relaxed);
    let period = 1_000_000_000 / hz as u64;
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let started = std::time::SystemTime::now();
    let t0 = std::time::Instant::now();
    let thread = std::thread::Builder::new()
        .name("gmp-cpuprof".into())
        .spawn(move || {
            super::threads::register();
            let mut agg = Samples::default();
            loop {
                agg.drain(buf, epoch);
                match rx.recv_timeout(DRAIN_EVERY) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    _ => break,
                }
            }
            agg.drain(buf, epoch);
            let lost = super::sigprof::take_lost();
            let bytes = agg.encode(period, lost, started, t0.elapsed());
            agg.release();
            super::threads::unregister();
            write_all(&out, &bytes)
        })
        .map_err(|_| libc::EAGAIN)?;
    super::sigprof::enable(epoch, period);
    *w = State::Running(Writer { done: tx, thread });
    Ok(())
}

/// Stops the profile and writes it. Err: EINVAL (none runs), or the errno of the write.
/// A blocking call, as `start`.
pub(crate) fn stop() -> Result<(), i32> {
    super::syscall::blocking(stop_blocking)
}

fn stop_blocking() -> Result<(), i32> {
    let w = {
        let mut guard = WRITER.lock().unwrap_or_else(|e| e.into_inner());
        match core::mem::replace(&mut *guard, State::Stopping) {
            State::Running(w) => w,
            other => {
                *guard = other;
                return Err(libc::EINVAL);
            }
        }
    };
    super::sigprof::disable();
    let _ = w.done.send(());
    let r = w.thread.join().unwrap_or(Err(libc::EIO));
    *WRITER.lock().unwrap_or_else(|e| e.into_inner()) = State::Idle;
    r
}

/// Reads `GMP_CPUPROFILE` (from `init_once`).
pub(crate) fn init() {
    let Some(path) = std::env::var_os("GMP_CPUPROFILE").filter(|p| !p.is_empty()) else {
        return;
    };
    use std::os::fd::AsRawFd;
    // `start` keeps a duplicate; the file closes when `f` goes.
    let r = std::fs::File::create(&path)
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
        .and_then(|f| start(f.as_raw_fd(), DEFAULT_HZ));
    match r {
        // Write the file when the program exits normally.
        // SAFETY: registers a plain extern "C" function.
        Ok(()) => unsafe {
            libc::atexit(stop_at_exit);
        },
        Err(e) => crate::sys::write_stderr(
            format!("gmp: GMP_CPUPROFILE={path:?}: cannot profile (errno {e})\n").as_bytes(),
        ),
    }
}

extern "C" fn stop_at_exit() {
    // A forked child inherits the handler but not the writer's thread, and the file is
    // the parent's to write.
    if super::os_linux::forked() {
        return;
    }
    let _ = std::panic::catch_unwind(|| {
        let _ = stop();
    });
}

fn write_all(fd: &OwnedFd, mut b: &[u8]) -> Result<(), i32> {
    use std::os::fd::AsRawFd;
    while !b.is_empty() {
        // SAFETY: writes from a valid buffer to our own descriptor.
        let n = unsafe { crate::sys::real::write(fd.as_raw_fd(), b.as_ptr().cast(), b.len()) };
        if n < 0 {
            let e = crate::sys::errno();
            if e == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        b = &b[n as usize..];
    }
    Ok(())
}

/// A sample's identity: frames (the PC first), goroutine id, label set.
#[derive(PartialEq, Eq, Hash)]
struct Key {
    frames: Box<[u64]>,
    goid: u64,
    labels: usize,
}

/// The samples counted so far; each key holds one reference to its label set.
#[derive(Default)]
struct Samples {
    counts: HashMap<Key, u64>,
}

impl Samples {
    fn drain(&mut self, buf: &super::sigprof::Buf, epoch: u32) {
        while let Some(r) = buf.pop() {
            self.add(&r, epoch);
        }
    }

    fn add(&mut self, r: &[u64; REC_WORDS], epoch: u32) {
        let labels = r[2] as usize;
        if (r[0] >> 32) as u32 != epoch {
            super::labels::release_set(labels as *mut _);
            return;
        }
        let n = (r[0] as u32 as usize).min(MAX_STACK);
        let key = Key {
            frames: r[3..3 + n].into(),
            goid: r[1],
            labels,
        };
        match self.counts.get_mut(&key) {
            Some(c) => {
                *c += 1;
                // The key holds a reference to this very set already.
                super::labels::release_set(labels as *mut _);
            }
            None => {
                self.counts.insert(key, 1);
            }
        }
    }

    /// Gives back the label references.
    fn release(&mut self) {
        for (k, _) in self.counts.drain() {
            super::labels::release_set(k.labels as *mut _);
        }
    }

    /// The profile as `profile.proto` bytes.
    fn encode(
        &self,
        period: u64,
        lost: u64,
        started: std::time::SystemTime,
        took: Duration,
    ) -> Vec<u8> {
        let mut p = Builder::default();
        p.str(""); // string_table[0] must be ""
        let samples = p.str("samples");
        let count = p.str("count");
        let cpu = p.str("cpu");
        let ns = p.str("nanoseconds");
        let goid = p.str("goid");
        for (t, u) in [(samples, count), (cpu, ns)] {
            let mut vt = Vec::new();
            field_u64(&mut vt, 1, t);
            field_u64(&mut vt, 2, u);
            field_bytes(&mut p.out, 1, &vt);
        }
        p.mappings();
        let mut entries: Vec<(&Key, &u64)> = self.counts.iter().collect();
        entries.sort_by(|a, b| b.1.cmp(a.1));
        for (k, &c) in entries {
            let locs: Vec<u64> = k
                .frames
                .iter()
                .enumerate()
                .map(|(i, &pc)| p.location(pc as usize, i > 0))
                .collect();
            let mut s = Vec::new();
            packed(&mut s, 1, &locs);
            packed(&mut s, 2, &[c, c * period]);
            if k.goid != 0 {
                let mut l = Vec::new();
                field_u64(&mut l, 1, goid);
                field_u64(&mut l, 3, k.goid);
                field_bytes(&mut s, 3, &l);
            }
            if k.labels != 0 {
                let mut pairs = Vec::new();
                // SAFETY: the key holds a reference to its set.
                unsafe {
                    super::labels::for_each_pair(k.labels as *mut _, |key, v| {
                        pairs.push((lossy(key), lossy(v)));
                    })
                };
                for (key, v) in pairs {
                    let mut l = Vec::new();
                    field_u64(&mut l, 1, p.str(&key));
                    field_u64(&mut l, 2, p.str(&v));
                    field_bytes(&mut s, 3, &l);
                }
            }
            field_bytes(&mut p.out, 2, &s);
        }
        if lost > 0 {
            let f = p.function("lostProfileEvent");
            let loc = p.location_of(0, 0, f);
            let mut s = Vec::new();
            packed(&mut s, 1, &[loc]);
            packed(&mut s, 2, &[lost, lost * period]);
            field_bytes(&mut p.out, 2, &s);
        }
        let mut out = core::mem::take(&mut p.out);
        out.extend_from_slice(&p.tables);
        for s in &p.strings {
            field_bytes(&mut out, 6, s.as_bytes());
        }
        let wall = started
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        field_u64(&mut out, 9, wall);
        field_u64(&mut out, 10, took.as_nanos() as u64);
        let mut pt = Vec::new();
        field_u64(&mut pt, 1, cpu);
        field_u64(&mut pt, 2, ns);
        field_bytes(&mut out, 11, &pt);
        field_u64(&mut out, 12, period);
        out
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// One executable segment of a loaded object.
struct Mapping {
    id: u64,
    start: usize,
    limit: usize,
}

/// The profile's tables as they grow: the Sample messages (`out`), the Mapping, Location
/// and Function messages (`tables`), and the string table.
#[derive(Default)]
struct Builder {
    out: Vec<u8>,
    tables: Vec<u8>,
    strings: Vec<String>,
    string_ids: HashMap<String, u64>,
    mappings: Vec<Mapping>,
    locations: HashMap<(usize, bool), u64>,
    functions: HashMap<String, u64>,
    next_location: u64,
}

impl Builder {
    fn str(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.string_ids.get(s) {
            return i;
        }
        let i = self.strings.len() as u64;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), i);
        i
    }

    /// The mappings: every executable PT_LOAD segment of every loaded object.
    fn mappings(&mut self) {
        struct Seg {
            start: usize,
            limit: usize,
            offset: u64,
            path: String,
        }
        unsafe extern "C" fn each(
            info: *mut libc::dl_phdr_info,
            _size: usize,
            data: *mut libc::c_void,
        ) -> libc::c_int {
            // SAFETY: dl_iterate_phdr passes valid info and our Vec.
            unsafe {
                let segs = &mut *(data as *mut Vec<Seg>);
                let info = &*info;
                let mut path = if info.dlpi_name.is_null() {
                    String::new()
                } else {
                    lossy(core::ffi::CStr::from_ptr(info.dlpi_name).to_bytes())
                };
                if path.is_empty() && segs.is_empty() {
                    path = std::fs::read_link("/proc/self/exe")
                        .map(|p| p.to_string_lossy().into_owned())
                        .unwrap_or_default();
                }
                if path.is_empty() {
                    return 0; // the vDSO and other nameless objects
                }
                for i in 0..info.dlpi_phnum as usize {
                    let ph = &*info.dlpi_phdr.add(i);
                    if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_X != 0 {
                        let start = info.dlpi_addr as usize + ph.p_vaddr as usize;
                        segs.push(Seg {
                            start,
                            limit: start + ph.p_memsz as usize,
                            offset: ph.p_offset,
                            path: path.clone(),
                        });
                    }
                }
            }
            0
        }
        let mut segs: Vec<Seg> = Vec::new();
        // SAFETY: the callback only reads the loader's info and pushes onto our Vec.
        unsafe { libc::dl_iterate_phdr(Some(each), (&mut segs as *mut Vec<Seg>).cast()) };
        for (i, s) in segs.iter().enumerate() {
            let id = i as u64 + 1;
            let file = self.str(&s.path);
            let mut m = Vec::new();
            field_u64(&mut m, 1, id);
            field_u64(&mut m, 2, s.start as u64);
            field_u64(&mut m, 3, s.limit as u64);
            field_u64(&mut m, 4, s.offset);
            field_u64(&mut m, 5, file);
            field_u64(&mut m, 7, 1); // has_functions
            field_bytes(&mut self.tables, 3, &m);
            self.mappings.push(Mapping {
                id,
                start: s.start,
                limit: s.limit,
            });
        }
    }

    fn function(&mut self, name: &str) -> u64 {
        if let Some(&id) = self.functions.get(name) {
            return id;
        }
        let id = self.functions.len() as u64 + 1;
        let n = self.str(name);
        let mut f = Vec::new();
        field_u64(&mut f, 1, id);
        field_u64(&mut f, 2, n);
        field_u64(&mut f, 3, n);
        field_bytes(&mut self.tables, 5, &f);
        self.functions.insert(name.to_string(), id);
        id
    }

    /// The location of `pc`; `ret`: a return address, whose call is the instruction
    /// before it.
    fn location(&mut self, pc: usize, ret: bool) -> u64 {
        if let Some(&id) = self.locations.get(&(pc, ret)) {
            return id;
        }
        let at = if ret { pc.saturating_sub(1) } else { pc };
        let name = func_name(at);
        let f = self.function(&name);
        let mapping = self
            .mappings
            .iter()
            .find(|m| m.start <= at && at < m.limit)
            .map_or(0, |m| m.id);
        let id = self.location_of(pc as u64, mapping, f);
        self.locations.insert((pc, ret), id);
        id
    }

    fn location_of(&mut self, address: u64, mapping: u64, function: u64) -> u64 {
        self.next_location += 1;
        let id = self.next_location;
        let mut line = Vec::new();
        field_u64(&mut line, 1, function);
        let mut l = Vec::new();
        field_u64(&mut l, 1, id);
        field_u64(&mut l, 2, mapping);
        field_u64(&mut l, 3, address);
        field_bytes(&mut l, 4, &line);
        field_bytes(&mut self.tables, 4, &l);
        id
    }
}

/// The name of the function at `pc`: its symbol, or `[object]` when no symbol covers it.
fn func_name(pc: usize) -> String {
    let cstr = |p: *const c_char| {
        // SAFETY: a NUL-terminated string from the loader.
        lossy(unsafe { core::ffi::CStr::from_ptr(p) }.to_bytes())
    };
    match super::dump::lookup(pc) {
        None => "[unknown]".to_string(),
        Some(s) => match s.name {
            Some((n, _)) => cstr(n),
            None => format!("[{}]", cstr(super::dump::basename(s.object))),
        },
    }
}

// ---- protobuf's wire format: varints and length-delimited fields ----

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Field `field` as a varint (wire type 0).
fn field_u64(out: &mut Vec<u8>, field: u32, v: u64) {
    varint(out, u64::from(field) << 3);
    varint(out, v);
}

/// Field `field` as length-delimited bytes (wire type 2): strings, messages.
fn field_bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    varint(out, (u64::from(field) << 3) | 2);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Repeated varint field `field`, packed.
fn packed(out: &mut Vec<u8>, field: u32, vs: &[u64]) {
    let mut b = Vec::new();
    for &v in vs {
        varint(&mut b, v);
    }
    field_bytes(out, field, &b);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_fields_are_protobufs() {
        let mut b = Vec::new();
        varint(&mut b, 300);
        assert_eq!(b, [0xac, 0x02]);
        let mut b = Vec::new();
        field_u64(&mut b, 12, 10_000_000);
        assert_eq!(b, [0x60, 0x80, 0xad, 0xe2, 0x04]);
        let mut b = Vec::new();
        field_bytes(&mut b, 6, b"cpu");
        assert_eq!(b, [0x32, 3, b'c', b'p', b'u']);
        let mut b = Vec::new();
        packed(&mut b, 1, &[1, 300]);
        assert_eq!(b, [0x0a, 3, 1, 0xac, 0x02]);
    }
}
