"""Goroutine labels (gmp_sched.set_label, get_label)."""

from __future__ import annotations

import pytest

import gmp_sched as gs


def test_labels_are_set_and_inherited() -> None:
    got: list[tuple[str | None, str | None]] = []
    wg = gs.WaitGroup()

    def child() -> None:
        got.append((gs.get_label("request"), gs.get_label("stage")))
        wg.done()

    def parent() -> None:
        gs.set_label("stage", "parent")
        gs.set_label("request", "7")
        wg.add(1)
        gs.go(child)
        gs.set_label("stage", "later")
        assert gs.get_label("stage") == "later"
        gs.set_label("stage", None)
        assert gs.get_label("stage") is None
        wg.done()

    wg.add(1)
    gs.go(parent)
    wg.wait()
    assert got == [("7", "parent")]


def test_thread_labels_go_to_the_goroutines_it_starts() -> None:
    gs.set_label("origin", "main")
    try:
        h = gs.go(lambda: gs.get_label("origin"))
        assert h.result() == "main"
    finally:
        gs.set_label("origin", None)
    assert gs.get_label("origin") is None


def test_empty_key_is_refused() -> None:
    with pytest.raises(ValueError):
        gs.set_label("", "x")
