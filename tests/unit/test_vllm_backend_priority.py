"""The backend's engine-priority step, on real processes (a parent standing in for the stub, a child
and a grandchild standing in for EngineCore and its worker)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "backends" / "vllm" / "priority.py"
spec = importlib.util.spec_from_file_location("vllm_backend_priority", SRC)
priority = importlib.util.module_from_spec(spec)
spec.loader.exec_module(priority)

# A process with a second thread; on a line from stdin it starts one more and prints every thread's nice.
ENGINE = """
import os, sys, threading, time, subprocess, json
def nices():
    return sorted(int(open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()[16])
                  for t in os.listdir("/proc/self/task"))
if sys.argv[1] == "child":
    grandchild = subprocess.Popen([sys.executable, "-c", sys.argv[2], "grandchild", sys.argv[2]],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert grandchild.stdout.readline().strip() == "ready"
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
tid = []
def already_nicer():
    tid.append(threading.get_native_id()); os.setpriority(os.PRIO_PROCESS, 0, 15); time.sleep(60)
threading.Thread(target=already_nicer, daemon=True).start()
print("ready", flush=True)
sys.stdin.readline()
if sys.argv[1] == "child":
    grandchild.stdin.write("go\\n"); grandchild.stdin.flush()
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
time.sleep(0.2)
out = {sys.argv[1]: nices()}
if sys.argv[1] == "child":
    out.update(json.loads(grandchild.stdout.readline()))
print(json.dumps(out), flush=True)
"""

STUB = """
import importlib.util, json, os, subprocess, sys
spec = importlib.util.spec_from_file_location("priority", sys.argv[1])
priority = importlib.util.module_from_spec(spec); spec.loader.exec_module(priority)
child = subprocess.Popen([sys.executable, "-c", sys.argv[2], "child", sys.argv[2]],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
assert child.stdout.readline().strip() == "ready"
changed = priority.lower_engine_priority(int(sys.argv[3]))
child.stdin.write("go\\n"); child.stdin.flush()
result = json.loads(child.stdout.readline())
result["changed"] = len(changed)
result["stub"] = os.getpriority(os.PRIO_PROCESS, 0)
print(json.dumps(result))
"""


def run_stub(niceness: int) -> dict:
    out = subprocess.run([sys.executable, "-c", STUB, str(SRC), ENGINE, str(niceness)], capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_thread_of_every_engine_process_is_reniced_and_new_threads_inherit() -> None:
    pytest.importorskip("psutil")
    result = run_stub(10)
    assert result["stub"] == 0  # the stub itself (the response path) keeps its priority
    assert result["changed"] == 2
    for name in ("child", "grandchild"):
        # main thread, a sleeper, the already-nicer thread (kept at 15), one started after the change
        assert result[name] == [10, 10, 10, 15], result


def test_niceness_zero_changes_nothing() -> None:
    pytest.importorskip("psutil")
    result = run_stub(0)
    assert result["changed"] == 0
    assert result["child"] == [0, 0, 0, 15] and result["grandchild"] == [0, 0, 0, 15]


@pytest.mark.parametrize(("setting", "on_cpu", "expected"), [
    (None, True, 10), (None, False, 0), ("auto", True, 10), (" AUTO ", False, 0), ("", True, 10),
    ("0", True, 0), ("19", False, 19), ("5", True, 5),
])
def test_niceness_setting(setting, on_cpu, expected) -> None:
    assert priority.engine_niceness(setting, on_cpu) == expected


@pytest.mark.parametrize("setting", ["-1", "20", "high", "1.5"])
def test_bad_niceness_setting_names_the_variable_and_the_range(setting) -> None:
    with pytest.raises(ValueError, match=r"TRITONPKG_VLLM_ENGINE_NICE=.*'auto' or a nice value from 0 to 19"):
        priority.engine_niceness(setting, True)
