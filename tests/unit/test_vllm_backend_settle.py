"""The backend's state after engine start, in a fresh interpreter (a frozen heap would outlive the test)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "backends" / "vllm" / "settle.py"

CHILD = """
import gc, importlib.util, json, os, sys
import vllm.envs as envs
spec = importlib.util.spec_from_file_location("settle", sys.argv[1])
settle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(settle)
os.environ["VLLM_LOGGING_PREFIX"] = "before"
read_before = envs.VLLM_LOGGING_PREFIX
frozen_before = gc.get_freeze_count()
settle.settle_after_start()
os.environ["VLLM_LOGGING_PREFIX"] = "after"
print(json.dumps({"read_before": read_before, "read_after": envs.VLLM_LOGGING_PREFIX,
                  "frozen_before": frozen_before, "frozen_after": gc.get_freeze_count()}))
"""


def test_settling_freezes_the_start_up_heap_and_caches_vllms_environment() -> None:
    pytest.importorskip("vllm.envs")
    out = subprocess.run([sys.executable, "-c", CHILD, str(SRC)], capture_output=True, text=True, timeout=120,
                         check=True)
    state = json.loads(out.stdout.strip().splitlines()[-1])
    assert state["read_before"] == "before"
    assert state["read_after"] == "before"  # cached: read once at settling, not from os.environ each time
    assert state["frozen_before"] == 0 and state["frozen_after"] > 10_000
