"""The benches' CPU meter on real processes: a process tree whose members burn known amounts of CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tritonpkg.benchmarks.proccpu import CpuMeter, descendants

BURN = """
import subprocess, sys, time
def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
if sys.argv[1] == "tree-parent":
    child = subprocess.Popen([sys.executable, "-c", sys.argv[2], "tree-child", sys.argv[2]], stdin=subprocess.PIPE)
    print("ready", flush=True)
    sys.stdin.readline()
    burn(0.2)
    child.stdin.write(b"go\\n")
    child.stdin.flush()
    child.wait()
else:
    sys.stdin.readline()
    burn(0.6)
    print("burned", flush=True)
    time.sleep(60)
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads /proc")
def test_each_process_of_a_tree_is_metered_under_its_role() -> None:
    parent = subprocess.Popen([sys.executable, "-c", BURN, "tree-parent", BURN], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "ready"
        time.sleep(0.5)  # the child is up, waiting for its turn
        tree = descendants(parent.pid)
        assert parent.pid in tree and len(tree) == 2
        meter = CpuMeter([parent.pid], {"bench": os.getpid()},
                         {" tree-child ": "the child", " tree-parent ": "the parent"})
        meter.start()
        parent.stdin.write("go\n")
        parent.stdin.flush()
        assert parent.stdout.readline().strip() == "burned"
        burned = dict(meter.seconds)
        meter.stop()  # while the child still exists: an exited process cannot be read
    finally:
        for pid in descendants(parent.pid)[::-1]:
            os.kill(pid, 9)
        parent.wait(timeout=30)
    seconds = dict(meter.seconds)
    assert 0.45 <= seconds["the child"] <= 1.0, seconds
    assert 0.1 <= seconds["the parent"] <= 0.5, seconds
    assert seconds.get("bench", 0.0) < 0.3, seconds
    assert burned == {}
    rows = meter.per_unit(2)
    assert rows[0][0] == "the child" and rows[0][1] == pytest.approx(seconds["the child"] / 2)
    assert sum(value for _, value in rows) == pytest.approx(sum(seconds.values()) / 2)
