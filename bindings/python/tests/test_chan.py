"""Chan and select: every call, its errors and bad input."""

from __future__ import annotations

import ctypes
import errno
import gc
import sys
import threading
import time

import pytest

import gmp_sched as gs
from gmp_sched import DEFAULT, Chan, ChannelClosed, Recv, Send, select


class Point(ctypes.Structure):
    _fields_ = [("x", ctypes.c_int32), ("y", ctypes.c_double)]


def test_simple_ctype_roundtrip() -> None:
    ch = Chan(ctypes.c_int64, cap=3)
    assert ch.cap == 3 and len(ch) == 0 and ch.elem_size == 8
    ch.send(-5)
    ch.send(ctypes.c_int64(7))
    ch.send(ctypes.c_int32(9))  # another simple ctype: its value
    assert len(ch) == 3
    assert [ch.recv(), ch.recv(), ch.recv()] == [-5, 7, 9]
    dch = Chan(ctypes.c_double, 1)
    dch.send(2.5)
    assert dch.recv() == 2.5


def test_structure_bytes_signal_and_object_elements() -> None:
    ch = Chan(Point, 2)
    ch.send(Point(1, 2.5))
    ch.send((3, 4.0))
    a, b = ch.recv(), ch.recv()
    assert isinstance(a, Point) and (a.x, a.y, b.x, b.y) == (1, 2.5, 3, 4.0)

    bch = Chan(4, 1)
    bch.send(b"abcd")
    assert bch.recv() == b"abcd"
    bch.send(bytearray(b"wxyz"))
    assert bch.recv() == b"wxyz"

    sig = Chan(None, 1)
    assert sig.elem_size == 0
    sig.send()
    assert sig.recv() is None
    assert Chan(0).elem_size == 0

    och = Chan(object, 2)
    payload = {"k": [1, 2, 3]}
    before = sys.getrefcount(payload)
    och.send(payload)
    assert sys.getrefcount(payload) == before + 1  # the reference in flight
    got = och.recv()
    assert got is payload
    del got
    assert sys.getrefcount(payload) == before


def test_object_channel_gives_back_buffered_references() -> None:
    payload = object()
    before = sys.getrefcount(payload)
    och = Chan(object, 4)
    och.send(payload)
    och.send(payload)
    assert sys.getrefcount(payload) == before + 2
    assert not Chan(object, 0).try_send(payload)  # no receiver: dropped, not leaked
    del och
    gc.collect()
    assert sys.getrefcount(payload) == before


def test_object_channel_shared_wrappers_keep_buffered_objects() -> None:
    och = Chan(object, 4)
    other = Chan.from_handle(och.handle, object)
    och.send("kept")
    del och
    gc.collect()
    assert other.recv(timeout=1) == "kept"  # not drained by the first wrapper's death


def test_try_send_try_recv() -> None:
    ch = Chan(ctypes.c_int, 1)
    assert ch.try_recv() == (False, None)
    assert ch.try_send(1) is True
    assert ch.try_send(2) is False
    assert ch.try_recv() == (True, 1)
    unbuf = Chan(ctypes.c_int)
    assert unbuf.try_send(1) is False


def test_close_semantics() -> None:
    ch = Chan(ctypes.c_int, 2)
    ch.send(1)
    ch.close()
    with pytest.raises(ChannelClosed):
        ch.send(2)
    with pytest.raises(ChannelClosed):
        ch.try_send(2)
    assert ch.recv() == 1  # drains first
    with pytest.raises(ChannelClosed):
        ch.recv()
    with pytest.raises(ChannelClosed):
        ch.try_recv()
    with pytest.raises(ChannelClosed):
        ch.recv(timeout=0.5)
    with pytest.raises(ChannelClosed):
        ch.close()  # Go panics on a second close


def test_iteration_until_closed_and_context_manager() -> None:
    with Chan(ctypes.c_int, 10) as ch:
        for i in range(5):
            ch.send(i)
    assert list(ch) == [0, 1, 2, 3, 4]  # closed by the with block
    with Chan(None) as ch2:
        ch2.close()  # closing inside the block is fine too


def test_timeouts() -> None:
    ch = Chan(ctypes.c_int)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError) as ei:
        ch.recv(timeout=0.12)
    assert ei.value.errno == errno.ETIMEDOUT
    assert 0.1 <= time.monotonic() - t0 < 2.0
    with pytest.raises(TimeoutError):
        ch.send(1, timeout=0.05)
    with pytest.raises(TimeoutError):
        ch.recv(timeout=0)
    buf = Chan(ctypes.c_int, 1)
    buf.send(3, timeout=0)
    assert buf.recv(timeout=0) == 3


def test_timeouts_off_the_main_thread() -> None:
    errors: list[BaseException] = []

    def body() -> None:
        try:
            with pytest.raises(TimeoutError):
                Chan(ctypes.c_int).recv(timeout=0.05)
            with pytest.raises(TimeoutError):
                Chan(ctypes.c_int).send(1, timeout=0.05)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert not errors


def test_bad_input() -> None:
    with pytest.raises(ValueError):
        Chan(-1)
    with pytest.raises(ValueError):
        Chan(ctypes.c_int, cap=-1)
    with pytest.raises(TypeError):
        Chan(ctypes.c_int, cap=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Chan("int")
    with pytest.raises(TypeError):
        Chan(True)
    with pytest.raises(TypeError):
        Chan(list)
    with pytest.raises(OSError) as ei:
        Chan(gs._lib.GMP_CHAN_MAX_ELEM + 1)
    assert ei.value.errno == errno.EINVAL
    with pytest.raises(OSError) as ei:
        Chan(8, cap=2**40)
    assert ei.value.errno == errno.EINVAL
    ch = Chan(ctypes.c_int, 1)
    with pytest.raises(TypeError):
        ch.send("x")
    with pytest.raises(TypeError):
        ch.send(1.5)
    with pytest.raises(ValueError):
        ch.recv(timeout=-1)
    with pytest.raises(TypeError):
        ch.recv(timeout="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Chan(4).send(b"abc")
    with pytest.raises(TypeError):
        Chan(4).send(12)
    with pytest.raises(TypeError):
        Chan(Point).send([1, 2])
    with pytest.raises(TypeError):
        Chan(None).send(1)
    with pytest.raises(ValueError):
        Chan.from_handle(0)
    assert len(ch) == 0  # still usable


def test_handle_retain_and_from_handle() -> None:
    ch = Chan(ctypes.c_int, 2)
    h = ch.retain()
    assert h == ch.handle == gs.as_voidp(ch)
    other = Chan.from_handle(h, ctypes.c_int, retain=False)  # adopts the retained ref
    other.send(42)
    del other
    gc.collect()
    assert ch.recv() == 42  # still alive: ch holds its own reference
    third = Chan.from_handle(ch.handle, ctypes.c_int)
    third.send(1)
    assert ch.recv() == 1


def test_select_recv_send_default_timeout() -> None:
    a, b = Chan(ctypes.c_int, 1), Chan(ctypes.c_int, 1)
    assert select(a, Recv(b), default=True) == (DEFAULT, None)
    b.send(7)
    assert select(a, Recv(b)) == (1, 7)
    assert select(Send(a, 5), Recv(b)) == (0, None)
    assert a.recv() == 5
    with pytest.raises(TimeoutError):
        select(Recv(a), timeout=0.05)
    # A None channel never fires (Go's nil channel).
    assert select(Recv(None), Send(None, 1), default=True) == (DEFAULT, None)
    with pytest.raises(TimeoutError):
        select(Recv(None), timeout=0.01)
    # Both ready: each is chosen sometimes.
    seen = set()
    for _ in range(200):
        a.try_send(1)
        b.try_send(2)
        seen.add(select(a, b)[0])
    assert seen == {0, 1}


def test_select_closed_channel() -> None:
    a, b = Chan(ctypes.c_int), Chan(ctypes.c_int)
    b.close()
    with pytest.raises(ChannelClosed) as ei:
        select(a, Recv(b))
    assert ei.value.index == 1
    with pytest.raises(ChannelClosed) as ei:
        select(Send(b, 1))
    assert ei.value.index == 0


def test_select_bad_input() -> None:
    with pytest.raises(ValueError):
        select()  # waits forever on nothing
    with pytest.raises(ValueError):
        select(Recv(None))
    with pytest.raises(TypeError):
        select(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        select(Recv(42))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        select(Chan(None), default=True, timeout=1)
    with pytest.raises(TypeError):
        select(Send(Chan(ctypes.c_int), "x"))
    assert select(default=True) == (DEFAULT, None)


def test_select_object_send_not_taken_does_not_leak() -> None:
    payload = object()
    before = sys.getrefcount(payload)
    full = Chan(object, 0)
    assert select(Send(full, payload), default=True) == (DEFAULT, None)
    with pytest.raises(TimeoutError):
        select(Send(full, payload), timeout=0.01)
    assert sys.getrefcount(payload) == before


def test_blocking_handoff_between_threads() -> None:
    ch = Chan(ctypes.c_int64)
    n = 2000
    got: list[int] = []

    def consumer() -> None:
        got.extend(ch)

    t = threading.Thread(target=consumer)
    t.start()
    for i in range(n):
        ch.send(i)
    ch.close()
    t.join(10)
    assert got == list(range(n))
