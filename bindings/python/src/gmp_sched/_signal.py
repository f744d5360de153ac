"""Signals as channels (Go's ``os/signal``): libgmp's ``gmp_signal_notify`` and
``gmp_signal_stop`` for a ``Chan(ctypes.c_int)``."""

from __future__ import annotations

import ctypes
import signal as _signal
from typing import Any, Union

from ._errors import check
from ._lib import lib

SignalLike = Union[int, _signal.Signals]


def signal_notify(chan: Any, *signals: SignalLike) -> None:
    """Relays each of ``signals``, when the process receives it, to ``chan`` (a
    ``Chan(ctypes.c_int)``) as its number, as Go's ``signal.Notify``: without waiting, so a
    channel with no room misses it (give it a buffer). Several channels may watch one
    signal; calling again with the same channel adds signals. The signal's previous
    handler (Python's own for SIGINT: KeyboardInterrupt) stays out of play until
    :func:`signal_stop`. ValueError for a channel of another element type, no signals, or
    a signal libgmp refuses (SIGURG, SIGKILL, SIGSTOP, synchronous faults)."""
    if getattr(getattr(chan, "_codec", None), "ctype", None) is not ctypes.c_int:
        raise ValueError("signal_notify needs a Chan(ctypes.c_int)")
    if not signals:
        raise ValueError("signal_notify needs at least one signal")
    arr = (ctypes.c_int * len(signals))(*(int(s) for s in signals))
    r = lib.gmp_signal_notify(chan._ptr, arr, len(signals))
    if r == -22:
        raise ValueError(f"signal_notify: a signal of {signals} cannot be relayed")
    check(r, "gmp_signal_notify")


def signal_stop(chan: Any) -> None:
    """Stops relaying signals to ``chan`` (Go's ``signal.Stop``): once it returns, nothing
    more arrives on it, and a signal no channel watches any more gets its previous handler
    back."""
    check(lib.gmp_signal_stop(chan._ptr), "gmp_signal_stop")
