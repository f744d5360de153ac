"""asyncio bridge: ``await ch.recv_async()`` / ``await ch.send_async(v)``.

A coroutine first tries the operation without waiting. If it would block, the operation
goes to the *bridge*: one daemon thread per process that waits in a single
``gmp_select`` over every pending operation of every event loop, plus a wake-up channel
that makes it re-read the set when an operation is added or withdrawn. When a case
fires, the bridge queues the result for the operation's loop and writes that loop's
eventfd (a pipe where there is no eventfd); the loop watches the fd with ``add_reader``
and completes the futures, on its own thread. So the loop never blocks, however many
coroutines wait, and goroutines or threads on the other end see an ordinary channel
peer.

Cancelling a waiting coroutine (``asyncio.wait_for`` timing out, ``task.cancel()``)
withdraws its operation. If the bridge performed it in the same instant, a cancelled
``send_async`` may still have sent its value, and a cancelled ``recv_async`` drops the
value it received (as ``Chan.recv`` interrupted by Ctrl-C).

Cost: an operation that has to wait costs a bridge round trip (a select rebuild, a
futex wake of the bridge thread, an eventfd write and a loop iteration: tens of µs);
one that can proceed at once costs what ``try_recv``/``try_send`` cost. In between, a
receive that would block is first retried over a few loop iterations (at most
:data:`POLL_NS`, 50 µs, during which the loop's other tasks run): a peer that answers
that fast is met without the bridge.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import os
import threading
import time
import weakref
from ctypes import addressof
from typing import Any

from ._chan import Chan, _Codec
from ._errors import EAGAIN, EPIPE, ChannelClosed, raise_errno
from ._lib import GMP_RECV, GMP_SEND, gmp_select_case, lib

_MAX_CASES = 65536


class _Port:
    """One event loop's side: an fd the loop watches and completions to deliver."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.done: collections.deque[_Op] = collections.deque()
        # `closed` and the fds change together under `lock`: `post` (the bridge thread)
        # never writes to a number the loop's collection closed, which may belong to
        # another file by then.
        self.lock = threading.Lock()
        self.closed = False
        if hasattr(os, "eventfd"):
            self.rfd = self.wfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        else:
            self.rfd, self.wfd = os.pipe()
            os.set_blocking(self.rfd, False)
            os.set_blocking(self.wfd, False)
        loop.add_reader(self.rfd, self._drain)
        weakref.finalize(loop, self.close)

    def close(self) -> None:
        """The loop is gone: closes the fds; later completions are dropped."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            _close_fds(self.rfd, self.wfd)

    def post(self, op: "_Op") -> None:
        """Bridge thread: hands a finished operation to the loop. Never raises: the
        bridge thread serves every loop, and an error here would stop it for all."""
        self.done.append(op)
        with self.lock:
            if self.closed:
                return
            try:
                os.write(self.wfd, b"\x01\0\0\0\0\0\0\0")
            except BlockingIOError:
                pass  # the fd is already readable: the loop will drain
            except OSError:
                pass  # the loop's fd is unusable: nobody will drain it

    def _drain(self) -> None:
        """Loop thread: completes the futures of finished operations."""
        try:
            os.read(self.rfd, 4096)
        except BlockingIOError:
            pass
        done = self.done
        while done:
            done.popleft().finish()


def _close_fds(rfd: int, wfd: int) -> None:
    os.close(rfd)
    if wfd != rfd:
        os.close(wfd)


_ports: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Port]" = weakref.WeakKeyDictionary()


def _port(loop: asyncio.AbstractEventLoop) -> _Port:
    port = _ports.get(loop)
    if port is None:
        port = _ports[loop] = _Port(loop)
    return port


class _Op:
    __slots__ = ("chan", "op", "buf", "fut", "port", "status", "withdrawn", "armed")

    def __init__(self, chan: Chan[Any], op: int, buf: Any, fut: asyncio.Future[Any], port: _Port):
        self.chan = chan
        self.op = op
        self.buf = buf
        self.fut = fut
        self.port = port
        self.status = 0
        self.withdrawn = False
        # In the bridge's running gmp_select (set and cleared by the bridge, under its
        # lock): an operation not armed is in no C wait, so a coroutine may take it over.
        self.armed = False

    def deliver(self) -> None:
        """Completes the operation from the thread of whoever performed it."""
        try:
            here = asyncio.get_running_loop() is self.fut.get_loop()
        except RuntimeError:
            here = False
        if here:
            self.finish()
        else:
            self.port.post(self)

    def finish(self) -> None:
        codec: _Codec = self.chan._codec
        if self.fut.done():  # cancelled while the bridge performed it
            if self.op == GMP_RECV and self.status == 0:
                codec.unpack(self.buf)  # gives back an object channel's reference
            elif self.op == GMP_SEND and self.status != 0:
                codec.dropped(self.buf)
            return
        if self.status == -EPIPE:
            if self.op == GMP_SEND:
                codec.dropped(self.buf)
            self.fut.set_exception(ChannelClosed())
        elif self.status < 0:
            self.fut.set_exception(OSError(-self.status, os.strerror(-self.status)))
        elif self.op == GMP_RECV:
            self.fut.set_result(codec.unpack(self.buf))
        else:
            self.fut.set_result(None)


class _Bridge:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ops: list[_Op] = []
        self.wake: Chan[None] = Chan(None, 1)
        self.thread: threading.Thread | None = None

    def submit(self, op: _Op) -> None:
        """Adds `op` to the set. The bridge is woken on the loop's next iteration, not at
        once: a coroutine of the same loop that meets the operation before then (claim)
        spares the bridge thread a wake-up, and the loop thread the GIL it would take."""
        with self.lock:
            self.ops.append(op)
            if self.thread is None:
                self.thread = threading.Thread(target=self.run, name="gmp_sched-aio-bridge", daemon=True)
                self.thread.start()
        op.fut.get_loop().call_soon(self._kick)

    def _kick(self) -> None:
        with self.lock:
            idle = any(not o.armed and not o.withdrawn for o in self.ops)
        if idle:
            self.wake.try_send()

    def withdraw(self, op: _Op) -> None:
        op.withdrawn = True
        self.wake.try_send()

    def claim(self, ch: Chan[Any], kind: int) -> _Op | None:
        """Takes over a pending operation of `kind` on the unbuffered channel `ch` that is
        in no C wait yet (submitted since the bridge last built its select): a coroutine
        whose own try failed meets it directly, without waiting for the bridge thread to
        wake up and offer it. A receive whose coroutine was cancelled is left alone."""
        h = ch.handle
        with self.lock:
            for i, o in enumerate(self.ops):
                if (o.op == kind and not o.armed and not o.withdrawn and o.chan.handle == h
                        and not (kind == GMP_RECV and o.fut.done())):
                    if lib.gmp_chan_cap(h) != 0:
                        return None
                    del self.ops[i]
                    return o
        return None

    def _pair_locked(self) -> list[_Op]:
        """Completes what the select cannot: a pending send and a pending receive on the
        same unbuffered channel (two coroutines talking to each other) both wait inside
        the bridge's one select, and a select never pairs with itself. Each such send is
        offered to the channel first (a real receiver, or a close, takes precedence);
        when nobody else is there the value goes straight to the pending receive.
        Returns the operations finished."""
        sends: dict[int, list[_Op]] = {}
        for o in self.ops:
            if o.op == GMP_SEND:
                sends.setdefault(o.chan.handle, []).append(o)
        if not sends:
            return []
        done: list[_Op] = []
        for o in list(self.ops):
            if o.op != GMP_RECV:
                continue
            h = o.chan.handle
            waiting = sends.get(h)
            if not waiting or lib.gmp_chan_cap(h) != 0:
                continue
            while waiting:
                snd = waiting.pop(0)
                r = lib.gmp_chan_try_send(h, None if snd.buf is None else addressof(snd.buf))
                if r == -EAGAIN:  # only our own receive is there: hand the value over
                    size = o.chan._codec.size
                    if size:
                        ctypes.memmove(addressof(o.buf), addressof(snd.buf), size)
                    snd.status = o.status = 0
                    done += [snd, o]
                    break
                snd.status = r  # sent to a real receiver, or -EPIPE: the channel is closed
                done.append(snd)
        for o in done:
            self.ops.remove(o)
        return done

    def run(self) -> None:
        wake = self.wake.handle
        while True:
            with self.lock:
                if any(o.withdrawn for o in self.ops):
                    for o in self.ops:
                        if o.withdrawn and o.op == GMP_SEND:
                            o.chan._codec.dropped(o.buf)  # never sent
                    self.ops = [o for o in self.ops if not o.withdrawn]
                for o in self.ops:
                    o.armed = False  # the last select has returned
                paired = self._pair_locked()
                ops = self.ops[: _MAX_CASES - 1]
                for o in ops:
                    o.armed = True
            for o in paired:
                o.port.post(o)
            n = len(ops) + 1
            cases = (gmp_select_case * n)()
            cases[0].chan = wake
            cases[0].op = GMP_RECV
            for i, o in enumerate(ops, 1):
                c = cases[i]
                c.chan = o.chan.handle
                c.op = o.op
                c.buf = None if o.buf is None else addressof(o.buf)
            r = lib.gmp_select(addressof(cases), n, -1)
            if r == 0:
                continue
            if r < 0:
                raise_errno(r, "aio bridge: gmp_select")
            op = ops[r - 1]
            op.status = cases[r].status
            with self.lock:
                self.ops.remove(op)
            op.port.post(op)


_bridge_lock = threading.Lock()
_bridge_instance: _Bridge | None = None


def _bridge() -> _Bridge:
    """The process's bridge, made on first use (importing starts no runtime)."""
    global _bridge_instance
    with _bridge_lock:
        if _bridge_instance is None:
            _bridge_instance = _Bridge()
        return _bridge_instance


#: Before a receive that would block goes to the bridge it is retried across event-loop
#: iterations (``await asyncio.sleep(0)``: the loop's other tasks run in between) for up
#: to POLL_NS nanoseconds and POLL_MAX tries: a goroutine or thread that answers within
#: that time is met without the bridge's thread wake-ups. Sends are not retried: two
#: coroutines of one loop would each retry, neither waiting where the other can meet it.
#: POLL_MAX = 0 turns it off.
POLL_NS = 50_000
POLL_MAX = 32

_perf_ns = time.perf_counter_ns


def _take_pending_send(ch: Chan[Any]) -> tuple[bool, Any]:
    """Receives from a coroutine's send_async pending on `ch`, if one is not yet in the
    bridge's select (see _Bridge.claim)."""
    bridge = _bridge_instance
    if bridge is None or not bridge.ops:
        return False, None
    op = bridge.claim(ch, GMP_SEND)
    if op is None:
        return False, None
    value = ch._codec.unpack(op.buf)  # takes over an object channel's reference too
    op.status = 0
    op.deliver()
    return True, value


def _give_pending_recv(ch: Chan[Any], value: Any) -> bool:
    """Sends to a coroutine's recv_async pending on `ch`, if one is not yet in the
    bridge's select (see _Bridge.claim)."""
    bridge = _bridge_instance
    if bridge is None or not bridge.ops:
        return False
    op = bridge.claim(ch, GMP_RECV)
    if op is None:
        return False
    codec = ch._codec
    buf = codec.pack(value)  # try_send packed the same value: this cannot raise
    if codec.size:
        ctypes.memmove(addressof(op.buf), addressof(buf), codec.size)
    op.status = 0
    op.deliver()
    return True


def _try_recv(ch: Chan[Any]) -> tuple[bool, Any]:
    ok, value = ch.try_recv()
    if ok:
        return ok, value
    return _take_pending_send(ch)


async def _polled_recv(ch: Chan[Any]) -> tuple[bool, Any]:
    if POLL_MAX <= 0:
        return False, None
    deadline = _perf_ns() + POLL_NS
    for _ in range(POLL_MAX):
        await asyncio.sleep(0)
        ok, value = _try_recv(ch)
        if ok or _perf_ns() >= deadline:
            return ok, value
    return False, None


async def recv_async(ch: Chan[Any]) -> Any:
    """Receives from `ch` without blocking the running event loop."""
    ok, value = _try_recv(ch)
    if ok:
        return value
    ok, value = await _polled_recv(ch)
    if ok:
        return value
    loop = asyncio.get_running_loop()
    op = _Op(ch, GMP_RECV, ch._codec.new(), loop.create_future(), _port(loop))
    _bridge().submit(op)
    try:
        return await op.fut
    except asyncio.CancelledError:
        _bridge().withdraw(op)
        raise


async def send_async(ch: Chan[Any], value: Any = None) -> None:
    """Sends `value` on `ch` without blocking the running event loop."""
    if ch.try_send(value) or _give_pending_recv(ch, value):
        return
    loop = asyncio.get_running_loop()
    op = _Op(ch, GMP_SEND, ch._codec.pack(value), loop.create_future(), _port(loop))
    _bridge().submit(op)
    try:
        await op.fut
    except asyncio.CancelledError:
        _bridge().withdraw(op)
        raise
