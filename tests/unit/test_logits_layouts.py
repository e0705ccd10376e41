"""logits_ext against the module layouts of vLLM releases it cannot run here: 0.34 removed
vllm/v1/sample/logits_processor/ (the V1 interface), and is a GPU-only wheel. A stand-in vllm built from each
recorded layout (tests/support/vllm_layout.py) is imported in a fresh interpreter together with the installed
logits_ext; Python's ABC machinery then says whether the processor class implements the interface the
release's loader demands (0.34's loader: a subclass of the V2 LogitsProcessor)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from packaging.version import Version

from tests.support.vllm_layout import build, layout
from tritonpkg import compat

pytest.importorskip("tritonpkg_logits._core", reason="logits_ext is not built (scripts/setup.sh builds it)")
pytest.importorskip("torch")

PROBE = r"""
import importlib.util, json, torch
import vllm
assert vllm.__file__.startswith(STUB), vllm.__file__  # the stand-in, not an installed vLLM
from tritonpkg_logits import vllm_adapter as a
from vllm.v1.worker.gpu.sample.logits_processor.interface import LogitsProcessor as V2
v1 = importlib.util.find_spec("vllm.v1.sample.logits_processor") is not None
proc = a.ConstraintLogitsProcessor(None, object())  # no config: the engine is disabled, the class must still be whole
logits = torch.zeros(2, 4)
cls = a.ConstraintLogitsProcessor
print(json.dumps({"v2": issubclass(cls, V2), "v1_module": v1,
                  "v1_base": a.V1LogitsProcessor is not None and issubclass(cls, a.V1LogitsProcessor),
                  "runner": "v2" if proc.v2 else "v1", "add_request": proc.add_request(0, None),
                  "apply_same": proc.apply(logits, object()) is logits}))
"""


def probe(version: str, tmp_path) -> dict:
    stub = build(version, tmp_path / f"vllm-{version}")
    env = {**os.environ, "PYTHONPATH": str(stub)}
    out = subprocess.run([sys.executable, "-c", f"STUB = {str(stub)!r}\n" + PROBE], env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_logits_ext_imports_on_vllm_034_layout(tmp_path):
    rec = layout("0.34.0")
    assert not any(m.startswith("vllm.v1.sample.logits_processor") for m in rec["modules"])  # V1 is gone
    got = probe("0.34.0", tmp_path)
    assert got == {"v2": True, "v1_module": False, "v1_base": False, "runner": "v2", "add_request": False,
                   "apply_same": True}


def test_logits_ext_keeps_both_runners_on_vllm_032_layout(tmp_path):
    got = probe("0.32.0", tmp_path)
    assert got["v2"] and got["v1_module"] and got["v1_base"] and got["apply_same"]


def test_the_matrix_says_where_logits_ext_holds():
    for version in ("0.32.0", "0.34.0"):
        holds, why = compat.feature_holds("logits_ext", Version(version))  # type: ignore[misc]
        assert holds, why
    assert "V2 only" in compat.feature_holds("logits_ext", Version(layout("0.34.0")["vllm_version"]))[1]  # type: ignore[index]
