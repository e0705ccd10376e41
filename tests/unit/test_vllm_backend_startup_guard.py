"""backends/vllm/startup_guard.py: a stub whose parent (tritonserver) waits for it to exit during its start-up
notices and ends, instead of waiting for commands that never come (issue 30, item 5). Real processes: this test
is the parent, a child runs the guard; the parent first does something else, then blocks in waitpid()."""

from __future__ import annotations

import platform
import subprocess
import sys
import time
from pathlib import Path

import pytest

BACKEND = Path(__file__).resolve().parents[2] / "backends" / "vllm"

CHILD = """
import os, sys, time
sys.path.insert(0, sys.argv[1])
from startup_guard import StartupGuard, parent_waits_for

flag = sys.argv[2]
if parent_waits_for(os.getpid(), os.getppid()) is not False:
    sys.exit(3)  # the parent is not waiting yet, and the kernel must say so
open(flag, "w").close()
StartupGuard(lambda: (print("abandoned", flush=True), os._exit(0)), lambda m: (print(m), os._exit(4)), poll_s=0.05)
time.sleep(20)
sys.exit(2)
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64") or not Path("/proc/self/syscall").exists(),
                    reason="reads /proc/<pid>/task/<tid>/syscall (Linux on x86_64 or aarch64)")
def test_the_guard_fires_once_the_parent_waits_for_the_stub_to_exit(tmp_path):
    flag = tmp_path / "checked"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(BACKEND), str(flag)], stdout=subprocess.PIPE,
                             text=True)
    deadline = time.monotonic() + 30
    while not flag.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # the guard polls a few times while the parent is busy elsewhere: nothing happens
    assert child.poll() is None, child.stdout.read() if child.stdout else ""
    began = time.monotonic()
    code = child.wait()  # a blocking waitpid(), as Triton's StubLauncher::WaitForStubProcess
    out = child.stdout.read() if child.stdout else ""
    assert code == 0 and out.strip() == "abandoned", (code, out)
    assert time.monotonic() - began < 5.0


def test_a_parent_that_is_not_waiting_is_not_taken_for_one():
    sys.path.insert(0, str(BACKEND))
    try:
        from startup_guard import parent_waits_for
    finally:
        sys.path.remove(str(BACKEND))
    import os
    import subprocess

    # a child of this process, which is not waiting for it (pytest's own parent may be: flock, timeout, a runner)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert parent_waits_for(child.pid, os.getpid()) in (False, None)
    finally:
        child.kill()
        child.wait()
