//! Waiting for readiness: poll, ppoll, select, pselect, epoll_wait and epoll_pwait park
//! the goroutine on the poller.

use super::*;

/// Parks until the one fd of a poll-like call is ready or `deadline` passes; `check` is
/// the call with a zero timeout (its result: > 0 ready, 0 nothing yet, < 0 -errno).
/// None when the fd cannot be waited for on the poller (the caller takes the hand-off).
pub(super) fn wait_one(
    fd: c_int,
    modes: u32,
    deadline: Option<i64>,
    check: &dyn Fn() -> i64,
) -> Option<i64> {
    let pd = match classify(fd) {
        Fd::Managed | Fd::Native => netpoll::lookup(fd).filter(|pd| pd.registered())?,
        Fd::Handoff => return None,
    };
    if !pd.incref() {
        return None;
    }
    let seq = pd.seq();
    // Each direction waited for takes its turn, in a fixed order (as gmp_fd_wait).
    let turns: [crate::sync::mutex::Mutex; 2] =
        core::array::from_fn(|i| crate::sync::mutex::Mutex {
            state: &pd.op_lock[i].0,
            sema: &pd.op_lock[i].1,
        });
    let bound = rt::bind_current(); // same-thread resume
    let mut taken = [false; 2];
    for (i, t) in turns.iter().enumerate() {
        if modes & (1 << i) != 0 {
            if !poll::take_turn(t, deadline) {
                // The deadline passed waiting for another waiter's turn: the call's
                // answer now (0 if nothing is ready), as at any timeout.
                for (t, _) in turns.iter().zip(taken).filter(|(_, k)| *k) {
                    t.unlock();
                }
                drop(bound);
                pd.decref();
                return Some(check());
            }
            taken[i] = true;
        }
    }
    let mut checked = false;
    let r = loop {
        let r = check();
        if r != 0 {
            break r;
        }
        if !checked {
            checked = true;
            if !pd.same_file(fd) {
                // Another file under the number than the one registered (closed where
                // the runtime did not see it): the hand-off, after the registration goes.
                break STALE_REGISTRATION;
            }
        }
        // SAFETY: a goroutine holding a P, with a reference on pd taken at `seq`.
        match unsafe { netpoll::wait(pd, seq, modes, deadline) } {
            Ok(_) => continue,
            Err(WaitError::TimedOut) => break 0,
            // The goroutine's scope ended the wait: the call fails with its errno.
            Err(WaitError::Scope(e)) => break -(e as i64),
            // Closed meanwhile: the call itself reports it (POLLNVAL, ...) once the close
            // is done; woken by a close still in progress, it finds nothing yet
            // (`CLOSED_WAITING`).
            Err(WaitError::Closed) => match check() {
                0 => break CLOSED_WAITING,
                r => break r,
            },
        }
    };
    for (i, t) in turns.iter().enumerate() {
        if modes & (1 << i) != 0 {
            t.unlock();
        }
    }
    drop(bound);
    pd.decref();
    if r == STALE_REGISTRATION {
        netpoll::forget_stale(fd);
        return None;
    }
    Some(r)
}

/// `wait_one`'s loop result for a stale registration (`PollDesc::same_file`).
pub(super) const STALE_REGISTRATION: i64 = i64::MIN + 1;

/// `wait_one`'s result when another goroutine's close of the fd woke it before the close
/// was done (the call, made again, still sees the number open). The caller reports the
/// number closed as its call would find it a moment later, or takes the hand-off.
pub(super) const CLOSED_WAITING: i64 = i64::MIN;

/// Most fds a poll may wait on without the hand-off.
pub(super) const POLL_MANY_MAX: libc::nfds_t = 64;

/// The readiness bits a multi-fd wait asks its epoll instance for (the poll bits of the
/// same values); POLLERR, POLLHUP and POLLNVAL are reported whatever was asked.
pub(super) const POLL_EVENTS: u32 = (libc::EPOLLIN
    | libc::EPOLLPRI
    | libc::EPOLLOUT
    | libc::EPOLLRDNORM
    | libc::EPOLLRDBAND
    | libc::EPOLLWRNORM
    | libc::EPOLLWRBAND
    | libc::EPOLLRDHUP) as u32;

/// A wait on several fds: a private epoll instance watching them (level-triggered, the
/// events asked for), which is one pollable fd for `wait_one`. None when one of them
/// cannot be watched, or there are too many (the caller takes the hand-off).
///
/// The instance watches duplicates of the fds, so that it holds their files as libc's
/// poll does while it waits: a file another goroutine closes stays watched, and what
/// happens to it next (a write into its pipe) wakes the wait, which then reports the
/// closed number as poll does (POLLNVAL).
pub(super) fn poll_many(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    deadline: Option<i64>,
    check: &dyn Fn() -> i64,
) -> Option<i64> {
    if n > POLL_MANY_MAX {
        return None;
    }
    // SAFETY: plain syscall.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return None;
    }
    // At a high number, as the duplicates below: the lowest free number may be that of an
    // fd the program closed and still lists here, which the call must find closed.
    let high = crate::sys::dup_high(ep);
    let ep = if high >= 0 {
        // SAFETY: our own fd, duplicated.
        unsafe { real::close(ep) };
        high
    } else {
        ep
    };
    forget(ep);
    let mut ok = true;
    // The duplicate watched for each entry (-1: none, a negative fd).
    let mut dups = [-1 as c_int; POLL_MANY_MAX as usize];
    for i in 0..n as usize {
        // SAFETY: i < n, the caller's array.
        let p = unsafe { &*fds.add(i) };
        if p.fd < 0 {
            continue;
        }
        // SAFETY: j < i < n, the caller's array.
        let earlier = (0..i).find(|&j| unsafe { (*fds.add(j)).fd } == p.fd);
        let dup = match earlier {
            Some(j) => dups[j],
            None => {
                let d = crate::sys::dup_high(p.fd);
                if d < 0 {
                    ok = false;
                    break;
                }
                forget(d);
                d
            }
        };
        dups[i] = dup;
        // poll's event bits are epoll's (POLLRDNORM is EPOLLRDNORM, ...). An fd listed
        // more than once is watched for what all its entries ask.
        let mut events = 0u32;
        for j in 0..=i {
            // SAFETY: j <= i < n, the caller's array.
            let q = unsafe { &*fds.add(j) };
            if q.fd == p.fd {
                events |= q.events as u16 as u32;
            }
        }
        let mut ev = libc::epoll_event {
            events: events & POLL_EVENTS,
            u64: i as u64,
        };
        let op = if earlier.is_some() {
            libc::EPOLL_CTL_MOD
        } else {
            libc::EPOLL_CTL_ADD
        };
        // SAFETY: a valid event for our own epoll fd and our duplicate.
        if unsafe { libc::epoll_ctl(ep, op, dup, &mut ev) } < 0 {
            ok = false;
            break;
        }
    }
    // Our own epoll fd is closed by nobody else.
    let r = if ok {
        wait_one(ep, MODE_READ, deadline, check).filter(|&r| r != CLOSED_WAITING)
    } else {
        None
    };
    if let Some(pd) = netpoll::lookup(ep)
        && pd.registered()
    {
        netpoll::close_begin(ep);
        pd.hook.store(0, Ordering::Release);
    }
    // SAFETY: our own fds.
    unsafe {
        real::close(ep);
        for (i, &d) in dups.iter().enumerate().take(n as usize) {
            if d >= 0 && !dups[..i].contains(&d) {
                real::close(d);
            }
        }
    }
    r
}

pub(super) fn poll_modes(events: i16) -> u32 {
    let mut m = 0;
    if events & (libc::POLLIN | libc::POLLPRI | libc::POLLRDNORM | libc::POLLRDBAND) != 0 {
        m |= MODE_READ;
    }
    if events & (libc::POLLOUT | libc::POLLWRNORM | libc::POLLWRBAND) != 0 {
        m |= MODE_WRITE;
    }
    if m == 0 { MODE_READ } else { m }
}

pub(super) fn deadline_ms(ms: c_int) -> Option<i64> {
    (ms >= 0).then(|| crate::sys::nanotime().saturating_add(ms as i64 * 1_000_000))
}

/// A zero-timeout readiness check before a park, as -errno or the count: made again while
/// it fails with EINTR (a signal — the runtime's own preemption signal, say — landed on
/// the thread during the call; the hooks behave as with SA_RESTART, see `interpose`'s
/// module doc). A "nothing ready" that is not true would park the goroutine until the
/// poller's next edge, which never comes for data already there whose edge an earlier wait
/// took. Linux ends such a check with EINTR only when nothing is ready, but an emulator's
/// call need not: the check is made again rather than trusted.
pub(super) fn check_now(f: impl FnMut() -> c_int) -> i64 {
    raw(|| again_on_eintr(f) as isize)
}

/// A zero-timeout readiness check made in a goroutine, made again while it fails with
/// EINTR: a signal landed in the call's instant, most likely the runtime's own preemption
/// signal (sent to a thread seen computing, which a loop of such checks is). The check
/// never waits, so the program loses no wait to this; its own handler has run, and only
/// the EINTR of that instant is not seen (the ambiguity of any restarted call).
pub(super) fn again_on_eintr(mut f: impl FnMut() -> c_int) -> c_int {
    loop {
        let r = f();
        if r >= 0 || errno() != libc::EINTR {
            return r;
        }
    }
}

/// Interposes poll(2): on a goroutine, a call that would wait on one fd (or on none, a
/// sleep) parks; a wait on several fds takes the syscall hand-off.
///
/// # Safety
/// As poll(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, ms: c_int) -> c_int {
    if !on_goroutine() {
        // SAFETY: the caller's arguments.
        return unsafe { real::poll(fds, n, ms) };
    }
    if ms == 0 {
        // SAFETY: the caller's arguments.
        return again_on_eintr(|| unsafe { real::poll(fds, n, 0) });
    }
    crate::ffi::boundary("interposed poll", || {
        // SAFETY: the caller's arguments, with a zero timeout.
        let now = || check_now(|| unsafe { real::poll(fds, n, 0) });
        if n == 0 {
            if ms > 0 {
                return match park_sleep(ms as i64 * 1_000_000) {
                    Ok(()) => 0,
                    Err((e, _)) => ret(-(e as i64)) as c_int,
                };
            }
        } else {
            let r = now();
            if r != 0 {
                return ret(r) as c_int;
            }
            if n == 1 {
                // SAFETY: n == 1: one pollfd.
                let p = unsafe { &*fds };
                if p.fd >= 0
                    && let Some(r) = wait_one(p.fd, poll_modes(p.events), deadline_ms(ms), &now)
                {
                    if r == CLOSED_WAITING {
                        // SAFETY: n == 1: the caller's one pollfd.
                        unsafe { (*fds).revents = libc::POLLNVAL };
                        return 1;
                    }
                    return ret(r) as c_int;
                }
            } else if let Some(r) = poll_many(fds, n, deadline_ms(ms), &now) {
                return ret(r) as c_int;
            }
        }
        // SAFETY: the caller's arguments.
        ret(blocking_call(&|| unsafe { real::poll(fds, n, ms) } as i64)) as c_int
    })
}

/// Interposes epoll_wait(2): an epoll fd is itself pollable, so a goroutine parks until
/// it is readable.
///
/// # Safety
/// As epoll_wait(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_wait(
    ep: c_int,
    ev: *mut libc::epoll_event,
    n: c_int,
    ms: c_int,
) -> c_int {
    if !on_goroutine() {
        // SAFETY: the caller's arguments.
        return unsafe { real::epoll_wait(ep, ev, n, ms) };
    }
    if ms == 0 {
        // SAFETY: the caller's arguments.
        return again_on_eintr(|| unsafe { real::epoll_wait(ep, ev, n, 0) });
    }
    crate::ffi::boundary("interposed epoll_wait", || {
        // SAFETY: the caller's arguments, with a zero timeout.
        let now = || check_now(|| unsafe { real::epoll_wait(ep, ev, n, 0) });
        let r = now();
        if r != 0 {
            return ret(r) as c_int;
        }
        if let Some(r) = wait_one(ep, MODE_READ, deadline_ms(ms), &now)
            && r != CLOSED_WAITING
        {
            return ret(r) as c_int;
        }
        // SAFETY: the caller's arguments.
        ret(blocking_call(
            &|| unsafe { real::epoll_wait(ep, ev, n, ms) } as i64,
        )) as c_int
    })
}

/// A timespec timeout in milliseconds for poll (rounded up; None: invalid).
pub(super) fn ts_ms(ts: *const libc::timespec) -> Option<c_int> {
    if ts.is_null() {
        return Some(-1);
    }
    // SAFETY: non-null, the caller's timespec.
    let ns = timespec_ns(unsafe { &*ts })?;
    Some((ns.saturating_add(999_999) / 1_000_000).min(i32::MAX as i64) as c_int)
}

/// Interposes ppoll(2): without a signal mask, as poll; with one, the hand-off (the mask
/// must be the thread's while it waits).
///
/// # Safety
/// As ppoll(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ppoll(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    ts: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    if !on_goroutine() {
        // SAFETY: the caller's arguments.
        return unsafe { real::ppoll(fds, n, ts, mask) };
    }
    match ts_ms(ts) {
        // SAFETY: the caller's arguments.
        Some(ms) if mask.is_null() => unsafe { poll(fds, n, ms) },
        // SAFETY: the caller's arguments.
        _ => handoff_here(&|| unsafe { real::ppoll(fds, n, ts, mask) } as i64) as c_int,
    }
}

/// Interposes epoll_pwait(2): without a signal mask, as epoll_wait; with one, the
/// hand-off.
///
/// # Safety
/// As epoll_pwait(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_pwait(
    ep: c_int,
    ev: *mut libc::epoll_event,
    n: c_int,
    ms: c_int,
    mask: *const libc::sigset_t,
) -> c_int {
    if !on_goroutine() {
        // SAFETY: the caller's arguments.
        return unsafe { real::epoll_pwait(ep, ev, n, ms, mask) };
    }
    if mask.is_null() {
        // SAFETY: the caller's arguments.
        return unsafe { epoll_wait(ep, ev, n, ms) };
    }
    // SAFETY: the caller's arguments.
    handoff_here(&|| unsafe { real::epoll_pwait(ep, ev, n, ms, mask) } as i64) as c_int
}

/// select's sets as pollfds for the wait (the answer comes from select itself): None when
/// there are more than `POLL_MANY_MAX` fds (or one beyond FD_SETSIZE).
pub(super) fn select_pollfds(
    n: c_int,
    sets: [*mut libc::fd_set; 3],
    out: &mut [libc::pollfd; POLL_MANY_MAX as usize],
) -> Option<usize> {
    if n < 0 || n as usize > libc::FD_SETSIZE {
        return None;
    }
    let mut k = 0;
    for fd in 0..n {
        let mut events = 0;
        for (set, ev) in sets
            .iter()
            .zip([libc::POLLIN, libc::POLLOUT, libc::POLLPRI])
        {
            // SAFETY: a non-null caller's fd_set, fd < FD_SETSIZE.
            if !set.is_null() && unsafe { libc::FD_ISSET(fd, *set) } {
                events |= ev;
            }
        }
        if events != 0 {
            if k == out.len() {
                return None;
            }
            out[k] = libc::pollfd {
                fd,
                events,
                revents: 0,
            };
            k += 1;
        }
    }
    Some(k)
}

/// The body of select and pselect on a goroutine: a zero-timeout select on copies of the
/// sets until one is ready, parked in between on the fds; the sets are written back as
/// select leaves them. `deadline`: None waits forever. Returns the count or -errno, None
/// for the hand-off.
pub(super) fn select_wait(
    n: c_int,
    sets: [*mut libc::fd_set; 3],
    deadline: Option<i64>,
) -> Option<i64> {
    let mut pfds = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; POLL_MANY_MAX as usize];
    let k = select_pollfds(n, sets, &mut pfds)?;
    // SAFETY: fd_set is plain data.
    let orig: [libc::fd_set; 3] = core::array::from_fn(|i| unsafe {
        if sets[i].is_null() {
            core::mem::zeroed()
        } else {
            *sets[i]
        }
    });
    let last = core::cell::Cell::new(orig);
    let check = || {
        let mut cur = orig;
        let rc = select_now(n, sets, &mut cur);
        last.set(cur);
        rc
    };
    let first = check();
    let mut r = if first != 0 {
        first
    } else if deadline.is_some_and(|d| d <= crate::sys::nanotime()) {
        0
    } else if k == 0 {
        match park_sleep(deadline.map_or(i64::MAX, |d| d - crate::sys::nanotime())) {
            Ok(()) => check(),
            Err((e, _)) => -(e as i64),
        }
    } else if k == 1 {
        match wait_one(pfds[0].fd, poll_modes(pfds[0].events), deadline, &check)? {
            CLOSED_WAITING => {
                let (rc, cur) = closed_ready(n, sets, &orig, pfds[0].fd);
                last.set(cur);
                rc
            }
            r => r,
        }
    } else {
        poll_many(pfds.as_mut_ptr(), k as libc::nfds_t, deadline, &check)?
    };
    if r == -(libc::EBADF as i64) && first == 0 {
        // A number another goroutine closed while this select waited. Linux's select
        // holds the file and, at its next scan, reports the closed number ready in every
        // set it was asked in (select(2): closing it "has no effect" on a select in
        // progress). Woken by the close itself, this one reports that at once.
        let (rc, cur) = closed_ready(n, sets, &orig, -1);
        last.set(cur);
        r = rc;
    }
    if r >= 0 {
        let cur = last.get();
        for i in 0..3 {
            if !sets[i].is_null() {
                // SAFETY: the caller's fd_set.
                unsafe { *sets[i] = cur[i] };
            }
        }
    }
    Some(r)
}

/// A zero-timeout select on copies of the sets (`cur`, left as select leaves them; the
/// caller's null sets stay null): the count or -errno (`check_now`).
pub(super) fn select_now(
    n: c_int,
    sets: [*mut libc::fd_set; 3],
    cur: &mut [libc::fd_set; 3],
) -> i64 {
    let ptr = |i: usize, cur: &mut [libc::fd_set; 3]| {
        if sets[i].is_null() {
            core::ptr::null_mut()
        } else {
            &mut cur[i] as *mut libc::fd_set
        }
    };
    let (r, w, e) = (ptr(0, cur), ptr(1, cur), ptr(2, cur));
    let mut tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    // SAFETY: valid sets (ours, or null where the caller's are) and timeval.
    check_now(|| unsafe { real::select(n, r, w, e, &mut tv) })
}

/// select's result when some of the numbers asked for have been closed (`closing`, whose
/// close is under way, counts as closed): those numbers set in each set they were asked
/// in, plus what a zero-timeout select on the others finds. Returns the count (or -errno)
/// and the sets.
pub(super) fn closed_ready(
    n: c_int,
    sets: [*mut libc::fd_set; 3],
    orig: &[libc::fd_set; 3],
    closing: c_int,
) -> (i64, [libc::fd_set; 3]) {
    let mut open = *orig;
    let mut closed = 0;
    let mut marked = 0;
    for fd in 0..n {
        // SAFETY: fd < n <= FD_SETSIZE (select_pollfds checked), sets are ours.
        let asked = (0..3).any(|i| unsafe { libc::FD_ISSET(fd, &orig[i]) });
        let gone = fd == closing
            // SAFETY: F_GETFD on any number only reads the table.
            || (unsafe { real::fcntl(fd, libc::F_GETFD, 0) } < 0 && errno() == libc::EBADF);
        if asked && gone {
            closed += 1;
            for set in &mut open {
                // SAFETY: as above.
                unsafe {
                    if libc::FD_ISSET(fd, set) {
                        marked += 1;
                        libc::FD_CLR(fd, set);
                    }
                }
            }
        }
    }
    let mut cur = open;
    let found;
    if closed > 0 {
        found = select_now(n, sets, &mut cur);
        if found < 0 {
            return (found, cur);
        }
    } else {
        // Nothing closed after all: the EBADF was the program's own (a number never open).
        return (-(libc::EBADF as i64), cur);
    }
    for fd in 0..n {
        for i in 0..3 {
            // SAFETY: as above.
            unsafe {
                if libc::FD_ISSET(fd, &orig[i]) && !libc::FD_ISSET(fd, &open[i]) {
                    libc::FD_SET(fd, &mut cur[i]);
                }
            }
        }
    }
    (found + marked, cur)
}

/// Interposes select(2): on a goroutine, parks until one of the fds is ready or the
/// timeout passes (at most 64 fds; more take the hand-off). Like Linux, writes the time
/// left into `tv`.
///
/// # Safety
/// As select(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn select(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    tv: *mut libc::timeval,
) -> c_int {
    // SAFETY: the caller's timeval, if any.
    let zero = !tv.is_null() && unsafe { (*tv).tv_sec == 0 && (*tv).tv_usec == 0 };
    if !on_goroutine() {
        // SAFETY: the caller's arguments.
        return unsafe { real::select(n, r, w, e, tv) };
    }
    if zero {
        // SAFETY: the caller's arguments (select leaves the sets alone when it fails).
        return again_on_eintr(|| unsafe { real::select(n, r, w, e, tv) });
    }
    let deadline = if tv.is_null() {
        None
    } else {
        // SAFETY: non-null, the caller's timeval.
        let t = unsafe { &*tv };
        // Linux carries whole seconds out of tv_usec (1,300,000 µs is 1.3 s); only a
        // negative part is invalid.
        if t.tv_sec < 0 || t.tv_usec < 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        Some(crate::sys::nanotime().saturating_add(timeval_ns(t)))
    };
    crate::ffi::boundary("interposed select", || {
        match select_wait(n, [r, w, e], deadline) {
            Some(rc) => {
                if let Some(d) = deadline {
                    let left = (d - crate::sys::nanotime()).max(0);
                    // SAFETY: non-null (there is a deadline), the caller's timeval.
                    unsafe {
                        (*tv).tv_sec = (left / 1_000_000_000) as libc::time_t;
                        (*tv).tv_usec = ((left % 1_000_000_000) / 1000) as libc::suseconds_t;
                    }
                }
                ret(rc) as c_int
            }
            // SAFETY: the caller's arguments.
            None => ret(blocking_call(
                &|| unsafe { real::select(n, r, w, e, tv) } as i64
            )) as c_int,
        }
    })
}

/// Interposes pselect(2): without a signal mask, as select (the timeout is not written
/// back); with one, the hand-off.
///
/// # Safety
/// As pselect(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pselect(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    ts: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    if !on_goroutine() {
        // SAFETY: the caller's arguments.
        return unsafe { real::pselect(n, r, w, e, ts, mask) };
    }
    let deadline = if ts.is_null() {
        None
    } else {
        // SAFETY: non-null, the caller's timespec.
        match timespec_ns(unsafe { &*ts }) {
            Some(0) => None,
            Some(ns) => Some(crate::sys::nanotime().saturating_add(ns)),
            None => {
                set_errno(libc::EINVAL);
                return -1;
            }
        }
    };
    if !ts.is_null() && deadline.is_none() {
        // A zero timeout: it does not block.
        // SAFETY: the caller's arguments.
        return unsafe { real::pselect(n, r, w, e, ts, mask) };
    }
    if mask.is_null() {
        let rc = crate::ffi::boundary("interposed pselect", || select_wait(n, [r, w, e], deadline));
        if let Some(rc) = rc {
            return ret(rc) as c_int;
        }
    }
    // SAFETY: the caller's arguments.
    handoff_here(&|| unsafe { real::pselect(n, r, w, e, ts, mask) } as i64) as c_int
}
