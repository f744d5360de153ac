# gdb support for libgmp programs: goroutines as gdb sees them.
#
#   info goroutines       every goroutine that is not dead, as the dump lists them:
#                         "  goroutine 7 [chan receive, 12 seconds] entry worker"
#                         (a '*' marks the ones running on a thread now)
#   goroutine N CMD...    runs a gdb command (bt, info frame, ...) on parked or runnable
#                         goroutine N, from the registers it saved when it switched away:
#                         "goroutine 7 bt", "goroutine 7 bt full"
#
# Loading: `source /path/to/gmp-gdb.py`, or let gdb auto-load it: install it beside the
# library as libgmp.so.0-gdb.py (the C tests do) and allow the directory
# (`add-auto-load-safe-path DIR` in ~/.gdbinit).
#
# Works with or without the library's type information: it reads the runtime through a
# table of field offsets the library carries (gmp::rt::dump::GDB_LAYOUT, src/rt/dump.rs)
# and the symbols gmp::rt::SCHED and gmp::rt::coarsetime::COARSE_NOW from the symbol table.
# A goroutine's saved context is the switch frame of src/arch/x86_64.rs: at its saved sp,
# MXCSR/x87 control, r15, r14, r13, r12, rbx, rbp, then the address it resumes at.
# The backtrace uses gdb's own unwinder (CFI), so it names static functions and the
# runtime's Rust frames, with or without frame pointers.

import re
import struct

import gdb

G_IDLE, G_RUNNABLE, G_RUNNING, G_SYSCALL, G_WAITING, G_DEAD = 0, 1, 2, 3, 4, 6
STATUS = {G_IDLE: "idle", G_RUNNABLE: "runnable", G_RUNNING: "running",
          G_SYSCALL: "syscall", G_WAITING: "waiting", G_DEAD: "dead"}
# rt::WaitReason, in its order (src/rt/mod.rs).
WAIT_REASONS = ["", "semacquire", "sync.WaitGroup.Wait", "sleep", "chan send",
                "chan receive", "select", "IO wait"]
LAYOUT_VERSION = 4


def _address(name):
    # With type information (debug builds) the symbol is known by its path.
    try:
        out = gdb.execute("info address " + name, to_string=True)
        m = re.search(r"at address (0x[0-9a-fA-F]+)", out)
        if m:
            return int(m.group(1), 16)
    except gdb.error:
        pass
    # Without it (release), only the symbol table knows it, demangled with its hash:
    # "gmp::rt::SCHED::h0123456789abcdef".
    out = gdb.execute("info variables ^%s" % name, to_string=True)
    m = re.search(r"^(0x[0-9a-fA-F]+)\s+%s(::h[0-9a-f]+)?\s*$" % re.escape(name), out, re.M)
    if not m:
        raise gdb.GdbError("gmp: cannot find %s (is libgmp loaded, and not stripped?)" % name)
    return int(m.group(1), 16)


def _u64(addr):
    return struct.unpack("<Q", bytes(gdb.selected_inferior().read_memory(addr, 8)))[0]


def _u32(addr):
    return struct.unpack("<I", bytes(gdb.selected_inferior().read_memory(addr, 4)))[0]


def _u8(addr):
    return bytes(gdb.selected_inferior().read_memory(addr, 1))[0]


class Layout:
    def __init__(self):
        table = _address("gmp::rt::dump::GDB_LAYOUT")
        words = [_u64(table + 8 * i) for i in range(15)]
        if words[0] != LAYOUT_VERSION:
            raise gdb.GdbError("gmp: layout version %d, this script knows %d"
                               % (words[0], LAYOUT_VERSION))
        (self.allg, self.sp, self.status, self.goid, self.waitreason, self.parentgoid,
         self.lockedm, self.affm, self.waitsince, self.entry, self.g_size,
         self.chunk_gs, self.chunk_len, self.chunk_next) = words[1:]
        self.sched = _address("gmp::rt::SCHED")
        self.coarse_now = _address("gmp::rt::coarsetime::COARSE_NOW")


class Goroutine:
    def __init__(self, lay, addr):
        self.addr = addr
        self.goid = _u64(addr + lay.goid)
        self.status = _u32(addr + lay.status)
        self.reason = _u8(addr + lay.waitreason)
        self.sp = _u64(addr + lay.sp)
        self.locked = _u64(addr + lay.lockedm) != 0
        self.pinned = _u64(addr + lay.affm) != 0
        self.parent = _u64(addr + lay.parentgoid)
        self.waitsince = _u64(addr + lay.waitsince)
        self.entry = _u64(addr + lay.entry)

    def header(self, now):
        if self.status == G_WAITING:
            r = self.reason
            what = WAIT_REASONS[r] if 0 < r < len(WAIT_REASONS) else "waiting"
            if self.waitsince and now > self.waitsince:
                secs = (now - self.waitsince) // 1_000_000_000
                if secs >= 60:
                    what += ", %d minutes" % (secs // 60)
                elif secs >= 1:
                    what += ", %d seconds" % secs
        else:
            what = STATUS.get(self.status, "status %d" % self.status)
        if self.locked:
            what += ", locked to thread"
        elif self.pinned:
            what += ", pinned to thread"
        return "goroutine %d [%s]" % (self.goid, what)


def goroutines():
    lay = Layout()
    chunk = _u64(lay.sched + lay.allg)
    seen = 0
    while chunk and seen < 10_000_000:
        gs = _u64(chunk + lay.chunk_gs)
        for i in range(_u64(chunk + lay.chunk_len)):
            gr = Goroutine(lay, gs + i * lay.g_size)
            if gr.status not in (G_DEAD, G_IDLE):
                yield gr
            seen += 1
        chunk = _u64(chunk + lay.chunk_next)


def _symbol(addr):
    if not addr:
        return "?"
    out = gdb.execute("info symbol 0x%x" % addr, to_string=True).strip()
    return out.split(" in section ")[0] if "No symbol" not in out else "0x%x" % addr


class InfoGoroutines(gdb.Command):
    """List the goroutines of a libgmp program: id, status or wait reason, entry function."""

    def __init__(self):
        super().__init__("info goroutines", gdb.COMMAND_STACK, gdb.COMPLETE_NONE)

    def invoke(self, arg, from_tty):
        lay = Layout()
        now = _u64(lay.coarse_now)
        for g in goroutines():
            mark = "*" if g.status in (G_RUNNING, G_SYSCALL) else " "
            gdb.write("%s %s entry %s\n" % (mark, g.header(now), _symbol(g.entry)))


REGS = ["r15", "r14", "r13", "r12", "rbx", "rbp"]


class GoroutineCmd(gdb.Command):
    """goroutine N CMD: run a gdb command (e.g. bt) on parked goroutine N's saved context."""

    def __init__(self):
        super().__init__("goroutine", gdb.COMMAND_STACK, gdb.COMPLETE_NONE)

    def invoke(self, arg, from_tty):
        parts = arg.split(None, 1)
        if len(parts) < 2 or not parts[0].isdigit():
            raise gdb.GdbError("usage: goroutine N CMD (e.g. goroutine 7 bt)")
        goid, cmd = int(parts[0]), parts[1]
        g = next((g for g in goroutines() if g.goid == goid), None)
        if g is None:
            raise gdb.GdbError("gmp: no goroutine %d" % goid)
        if g.status not in (G_WAITING, G_RUNNABLE) or g.sp == 0:
            raise gdb.GdbError("gmp: goroutine %d is %s: no saved context (a running one is "
                               "on a thread: see info threads)"
                               % (goid, "not started" if g.sp == 0 else STATUS.get(g.status)))
        saved = {r: _u64(g.sp + 8 * (i + 1)) for i, r in enumerate(REGS)}
        saved["rip"] = _u64(g.sp + 56)
        saved["rsp"] = g.sp + 64
        frame = gdb.selected_frame()
        gdb.newest_frame().select()
        names = REGS + ["rip", "rsp"]
        old = {r: int(gdb.parse_and_eval("$" + r)) & 0xFFFFFFFFFFFFFFFF for r in names}
        try:
            for r in names:
                gdb.execute("set $%s = 0x%x" % (r, saved[r]), to_string=True)
            gdb.execute(cmd, from_tty)
        finally:
            gdb.newest_frame().select()
            for r in names:
                gdb.execute("set $%s = 0x%x" % (r, old[r]), to_string=True)
            try:
                frame.select()
            except gdb.error:
                pass


InfoGoroutines()
GoroutineCmd()
