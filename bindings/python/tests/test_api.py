"""The Pythonic surface: excepthook as an attribute, values that do not fit, impossible
channels, truthiness, async iteration, and go()'s handle."""

from __future__ import annotations

import asyncio
import ctypes
import errno
import functools
import threading
import time

import pytest

import gmp_sched as gs
from gmp_sched import Chan

from conftest import run_python


def test_excepthook_is_an_assignable_attribute() -> None:
    caught: list[gs.ExceptHookArgs] = []
    gs.excepthook = caught.append
    try:
        g = gs.go(functools.partial(int, "not a number"))
        g.join(10)
    finally:
        gs.set_excepthook(None)
    assert [a.exc_type for a in caught] == [ValueError]
    assert caught[0].goroutine == g
    assert gs.excepthook is gs._go._default_excepthook


@pytest.mark.parametrize("ctype, bad, good", [
    (ctypes.c_int8, [300, -129, 128], [127, -128, 0]),
    (ctypes.c_uint8, [256, -1], [255, 0]),
    (ctypes.c_int32, [2**31, -2**31 - 1], [2**31 - 1, -2**31]),
    (ctypes.c_uint32, [2**32, -1], [2**32 - 1]),
    (ctypes.c_int64, [2**63, 2**70, -2**63 - 1], [2**63 - 1, -2**63]),
    (ctypes.c_uint64, [2**64, -1], [2**64 - 1]),
    (ctypes.c_size_t, [2**64, -1], [2**64 - 1]),
])
def test_integers_that_do_not_fit_raise_overflow_error(ctype: type, bad: list[int], good: list[int]) -> None:
    ch: Chan[int] = Chan(ctype, cap=4)
    for v in bad:
        with pytest.raises(OverflowError):
            ch.send(v)
        with pytest.raises(OverflowError):
            ch.try_send(v)
        with pytest.raises(OverflowError):
            gs.select(gs.Send(ch, v), default=True)
    for v in good:
        ch.send(v)
        assert ch.recv() == v
    assert len(ch) == 0


def test_float_that_does_not_fit_raises_and_other_types_raise_type_error() -> None:
    ch: Chan[float] = Chan(ctypes.c_float, cap=2)
    with pytest.raises(OverflowError):
        ch.send(1e300)
    ch.send(float("inf"))
    assert ch.recv() == float("inf")
    ints: Chan[int] = Chan(ctypes.c_int16, cap=1)
    with pytest.raises(TypeError):
        ints.send("1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ints.send(1.0)  # type: ignore[arg-type]


def test_impossible_channels_raise_value_error() -> None:
    for make in (lambda: Chan(8, cap=2**40), lambda: Chan(ctypes.c_int64, cap=2**64),
                 lambda: Chan(gs._lib.GMP_CHAN_MAX_ELEM + 1),
                 lambda: Chan(ctypes.c_char * (gs._lib.GMP_CHAN_MAX_ELEM + 1))):
        with pytest.raises(ValueError) as ei:
            make()
        # still the OSError(EINVAL) earlier versions raised
        assert isinstance(ei.value, OSError) and ei.value.errno == errno.EINVAL


def test_failed_constructor_prints_nothing_at_collection() -> None:
    r = run_python("import gmp_sched as gs, gc\n"
                   "try:\n    gs.Chan(object, maxsize=10)\nexcept TypeError as e:\n    print('TypeError')\n"
                   "gc.collect()\n")
    assert r.returncode == 0 and r.stdout.strip() == "TypeError"
    assert r.stderr == ""


def test_a_channel_is_always_true() -> None:
    ch: Chan[None] = Chan(None, cap=3)
    assert len(ch) == 0 and bool(ch)
    assert Chan(ctypes.c_int) and Chan(object)


def test_async_for_receives_until_closed() -> None:
    async def main() -> list[int]:
        ch: Chan[int] = Chan(ctypes.c_int64, cap=2)

        def produce() -> None:
            for i in range(10):
                ch.send(i)
            ch.close()

        gs.go(produce)
        return [v async for v in ch]

    assert asyncio.run(main()) == list(range(10))


def test_go_returns_a_handle_with_result_and_keyword_arguments() -> None:
    def body(a: int, b: int = 0, *, scale: int = 1) -> int:
        time.sleep(0.01)
        return (a + b) * scale

    g = gs.go(body, 1, b=2, scale=10)
    assert isinstance(g, int) and g > 0 and int(g) == g.id
    assert g.result(timeout=10) == 30
    assert g.done() and not g.is_alive() and g.exception() is None
    assert "done" in repr(g) and str(g) == str(int(g))


def test_handle_join_timeout_and_exception() -> None:
    release: Chan[None] = Chan(None)
    g = gs.go(release.recv)
    g.join(timeout=0.05)
    assert not g.done()
    with pytest.raises(TimeoutError):
        g.result(timeout=0.01)
    release.send()
    g.join()
    assert g.done() and g.result() is None

    gs.excepthook = lambda args: None
    try:
        bad = gs.go(functools.partial(divmod, 1, 0))
        with pytest.raises(ZeroDivisionError):
            bad.result(timeout=10)
        assert isinstance(bad.exception(), ZeroDivisionError)
    finally:
        gs.set_excepthook(None)


def test_a_goroutine_cannot_join_itself() -> None:
    me: Chan[object] = Chan(object, cap=1)

    def body() -> None:
        me.recv(timeout=10).join()  # type: ignore[attr-defined]

    g = gs.go(body)
    gs.excepthook = lambda args: None
    try:
        me.send(g)
        assert isinstance(g.exception(timeout=10), RuntimeError)
    finally:
        gs.set_excepthook(None)


def test_join_from_threads_and_goroutines() -> None:
    gate = threading.Event()
    g = gs.go(gate.wait, 10)
    results: Chan[object] = Chan(object, cap=4)
    gs.go(lambda: results.send(g.result(10)))
    t = threading.Thread(target=lambda: results.send(g.result(10)))
    t.start()
    gate.set()
    assert [results.recv(timeout=10), results.recv(timeout=10)] == [True, True]
    t.join()


def test_a_c_goroutine_handle_is_only_an_id() -> None:
    wg = gs.WaitGroup()
    wg.add(1)
    g = gs.go(gs.lib.gmp_wg_done, wg)
    wg.wait()
    assert isinstance(g, int) and g > 0
    with pytest.raises(RuntimeError):
        g.join()
    with pytest.raises(TypeError):
        gs.go(gs.lib.gmp_wg_done, wg, extra=1)


def test_exit_right_after_the_last_receive_waits_for_finishing_goroutines() -> None:
    # Each goroutine comes back from its send to Python (and to the trampoline's end)
    # after main got the value: main's exit must not finalize under them.
    code = ("import gmp_sched as gs\n"
            "out = gs.Chan(object, 64)\n"
            "for i in range(32): gs.go(out.send, i)\n"
            "print(sorted(out.recv() for _ in range(32)) == list(range(32)))\n")
    for _ in range(5):
        r = run_python(code)
        assert (r.returncode, r.stdout.strip()) == (0, "True"), r.stderr
