"""The embedding models load their checkpoint off the stub's main thread, so that the engine thread's OpenMP
team is the process's only one (libgomp throttles every worker's spin once there are more OpenMP threads
than cores, and a thread that ever ran a parallel region keeps its team until it exits)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tritonpkg.embedding.serving import off_main_thread

pytest.importorskip("torch")


def test_a_joined_loading_thread_takes_its_openmp_team_with_it():
    code = textwrap.dedent("""
        import os, time, torch
        from tritonpkg.embedding.serving import off_main_thread
        torch.set_num_threads(2)
        count = lambda: len(os.listdir("/proc/self/task"))
        a = torch.randn(256, 256)
        before = count()
        value = off_main_thread(lambda: float((a @ a).sum()))
        time.sleep(0.2)
        after = count()
        a @ a  # the same work on the main thread leaves its worker behind
        time.sleep(0.2)
        print(before, after, count(), value == float((a @ a).sum()))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    before, after, main, same = out.stdout.split()
    assert int(after) == int(before) and int(main) == int(before) + 1 and same == "True", out.stdout


def test_errors_of_the_loading_thread_reach_the_caller():
    def broken():
        raise ValueError("config.json: model_type is 'deberta-v2'")

    with pytest.raises(ValueError, match="deberta-v2"):
        off_main_thread(broken)
    assert off_main_thread(lambda: 7) == 7
