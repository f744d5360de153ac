"""Stack high-water marks (gmp_sched.stack_usage, gmp_stack_usage)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import gmp_sched as gs


def test_every_goroutine_measured_when_asked() -> None:
    # A fresh process: GMP_DEBUG is read once, when the library starts.
    code = textwrap.dedent(
        """
        import gmp_sched as gs
        wg = gs.WaitGroup()
        wg.add(20)
        for _ in range(20):
            gs.go(wg.done)
        wg.wait()
        while gs.num_goroutine() > 0:
            gs.sleep(0.001)
        marks = gs.stack_usage()
        st = gs.stats()
        page = 4096
        assert marks, "no marks"
        assert sum(m.samples for m in marks) == st.stack_samples >= 20, (marks, st)
        for m in marks:
            assert m.func != 0
            assert 0 < m.high_water <= m.stack_size, m
            assert m.high_water % page == 0, m
        assert st.stack_high_water == max(m.high_water for m in marks)
        print("ok")
        """
    )
    env = dict(os.environ, GMP_DEBUG="stackhwm=1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_stack_usage_is_a_list_of_marks() -> None:
    for m in gs.stack_usage():
        assert isinstance(m, gs.StackMark)
        assert m.samples >= 1
        assert m.high_water <= m.stack_size
