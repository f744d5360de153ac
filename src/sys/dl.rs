//! What the dynamic loader knows of an address (`dladdr1` with `RTLD_DL_SYMENT`): the
//! object holding it and the nearest exported symbol below it, with the symbol's size.
//! The goroutine dump names frames with it (rt/dump.rs), and the unseen-call path finds
//! the extent of libc's `syscall` wrapper (rt/sigpreempt.rs). `dladdr1` reads the
//! loader's tables under its lock; it is not async-signal-safe.

use core::ffi::{c_char, c_int, c_void};

#[repr(C)]
pub(crate) struct DlInfo {
    pub(crate) dli_fname: *const c_char,
    pub(crate) dli_fbase: *mut c_void,
    pub(crate) dli_sname: *const c_char,
    pub(crate) dli_saddr: *mut c_void,
}

const RTLD_DL_SYMENT: c_int = 1;

unsafe extern "C" {
    fn dladdr1(
        addr: *const c_void,
        info: *mut DlInfo,
        extra: *mut *mut c_void,
        flags: c_int,
    ) -> c_int;
}

/// What dladdr1 knows of `pc` (None: no loaded object holds it), and the size of the
/// symbol it found (None: no symbol).
pub(crate) fn dl_info(pc: usize) -> Option<(DlInfo, Option<usize>)> {
    let mut info = DlInfo {
        dli_fname: core::ptr::null(),
        dli_fbase: core::ptr::null_mut(),
        dli_sname: core::ptr::null(),
        dli_saddr: core::ptr::null_mut(),
    };
    let mut sym: *mut c_void = core::ptr::null_mut();
    // SAFETY: valid out-pointers; dladdr1 only reads the loader's tables.
    let ok = unsafe { dladdr1(pc as *const c_void, &mut info, &mut sym, RTLD_DL_SYMENT) } != 0;
    if !ok || info.dli_fname.is_null() {
        return None;
    }
    let size = (!info.dli_sname.is_null() && !sym.is_null()).then(|| {
        // SAFETY: with RTLD_DL_SYMENT, sym points at the ELF symbol of dli_sname.
        unsafe { (*(sym as *const libc::Elf64_Sym)).st_size as usize }
    });
    Some((info, size))
}

/// The code range `[start, end)` of the function whose symbol starts at `addr`, from the
/// symbol's size (None if the loader knows no sized symbol there).
pub(crate) fn function_range(addr: usize) -> Option<(usize, usize)> {
    let (info, size) = dl_info(addr)?;
    if info.dli_saddr as usize != addr {
        return None;
    }
    size.filter(|&size| size != 0)
        .map(|size| (addr, addr + size))
}
