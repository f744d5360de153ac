//! The alternate signal stacks the overflow handler and the preemption signal run on, one
//! per scheduler thread, unmapped when the thread exits.

use super::*;

/// Gives the calling thread an alternate signal stack of [`altstack_size`] bytes (mmap'd,
/// above its own guard page) unless it already has one at least that big. Called by every
/// scheduler thread (M) at start; the overflow handler and the preemption signal run on it.
///
/// A smaller existing one (Rust's std gives its threads one of about 12 KiB on x86_64
/// Linux) is
/// replaced; its owner still frees its own memory. Ours is unmapped when the thread exits.
pub fn ensure_altstack() {
    let mut cur: libc::stack_t = libc::stack_t {
        ss_sp: std::ptr::null_mut(),
        ss_flags: 0,
        ss_size: 0,
    };
    // SAFETY: queries the current alternate stack into a valid stack_t.
    if unsafe { libc::sigaltstack(std::ptr::null(), &mut cur) } != 0 {
        return;
    }
    let size = altstack_size();
    if cur.ss_flags & libc::SS_DISABLE == 0 && cur.ss_size >= size {
        return;
    }
    if cur.ss_flags & libc::SS_ONSTACK != 0 {
        return; // running on it (called from a handler): cannot replace it now
    }
    let page = page_size();
    let len = size + page;
    // SAFETY: a fresh private anonymous mapping chosen by the kernel.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return;
    }
    super::arena::name_mapping(base as usize, len, c"gmp signal stack");
    // SAFETY: the lowest page of the mapping just made, holding nothing.
    if unsafe { install_guard(base as usize, page) }.is_err() {
        // SAFETY: unmaps the mapping made above, not yet in use.
        unsafe { libc::munmap(base, len) };
        return;
    }
    let new = libc::stack_t {
        ss_sp: (base as usize + page) as *mut libc::c_void,
        ss_flags: 0,
        ss_size: size,
    };
    // SAFETY: `new` describes the mapped, writable range above the guard page.
    if unsafe { libc::sigaltstack(&new, std::ptr::null_mut()) } != 0 {
        // SAFETY: not installed, so not in use: unmap it.
        unsafe { libc::munmap(base, len) };
        return;
    }
    ALTSTACK_OWNER.with(|o| o.set(base as usize, len));
}

/// Unmaps the thread's alternate stack made by [`ensure_altstack`] when the thread exits.
/// (A destructor only: `thread_local!` is fine here because nothing reads it across a
/// goroutine switch.)
pub(super) struct AltstackOwner {
    pub(super) mapping: std::cell::Cell<(usize, usize)>,
}

impl Drop for AltstackOwner {
    fn drop(&mut self) {
        let (base, len) = self.mapping.get();
        if base == 0 {
            return;
        }
        let page = page_size();
        let mut cur: libc::stack_t = libc::stack_t {
            ss_sp: std::ptr::null_mut(),
            ss_flags: 0,
            ss_size: 0,
        };
        // SAFETY: queries the current alternate stack into a valid stack_t.
        unsafe { libc::sigaltstack(std::ptr::null(), &mut cur) };
        if cur.ss_sp as usize == base + page {
            if cur.ss_flags & libc::SS_ONSTACK != 0 {
                return; // cannot happen in a TLS destructor; leak rather than unmap under us
            }
            let off = libc::stack_t {
                ss_sp: std::ptr::null_mut(),
                ss_flags: libc::SS_DISABLE,
                ss_size: 0,
            };
            // SAFETY: disables the thread's alternate stack, which is ours and unused.
            unsafe { libc::sigaltstack(&off, std::ptr::null_mut()) };
        }
        // SAFETY: our mapping, no longer installed as the alternate stack.
        unsafe { libc::munmap(base as *mut libc::c_void, len) };
    }
}

thread_local! {
    static ALTSTACK_OWNER: AltstackOwner = const {
        AltstackOwner { mapping: std::cell::Cell::new((0, 0)) }
    };
}

impl AltstackOwner {
    pub(super) fn set(&self, base: usize, len: usize) {
        let (old_base, old_len) = self.mapping.replace((base, len));
        if old_base != 0 {
            // Only reached if our own stack was replaced by a smaller one in between and we
            // replaced that in turn; ours is no longer installed, so it is unused.
            // SAFETY: the mapping made by a previous ensure_altstack, no longer installed.
            unsafe { libc::munmap(old_base as *mut libc::c_void, old_len) };
        }
    }
}
