"""Signals relayed to a channel (gmp_sched.signal_notify / signal_stop, Go's os/signal)."""

from __future__ import annotations

import ctypes
import os
import signal

import pytest

import gmp_sched as gs


def test_signal_is_relayed_and_stop_restores_the_handler() -> None:
    calls: list[int] = []
    previous = signal.signal(signal.SIGUSR2, lambda sig, frame: calls.append(sig))
    try:
        ch = gs.Chan(ctypes.c_int, 4)
        gs.signal_notify(ch, signal.SIGUSR2)
        os.kill(os.getpid(), signal.SIGUSR2)
        assert ch.recv(timeout=5) == signal.SIGUSR2
        assert calls == [], "Python's handler is out of play while a channel watches"
        gs.signal_stop(ch)
        os.kill(os.getpid(), signal.SIGUSR2)
        assert calls == [signal.SIGUSR2], "the previous handler is back after stop"
        assert len(ch) == 0
    finally:
        signal.signal(signal.SIGUSR2, previous)


def test_refused_arguments() -> None:
    with pytest.raises(ValueError):
        gs.signal_notify(gs.Chan(ctypes.c_int64, 1), signal.SIGUSR1)
    ch = gs.Chan(ctypes.c_int, 1)
    with pytest.raises(ValueError):
        gs.signal_notify(ch)
    for sig in (signal.SIGURG, signal.SIGKILL, signal.SIGSEGV):
        with pytest.raises(ValueError):
            gs.signal_notify(ch, sig)
    gs.signal_stop(ch)  # watched nothing: a no-op, as Go's Stop
