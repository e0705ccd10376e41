"""scripts/test.sh --lanes and scripts/lane_snapshot.sh --venv: the lane run names lanes and test modules that exist,
its no-argument path (what CI runs) is the whole suite with every lane's venv and the skip guard, and a vLLM with no
venv of its own is refused before anything is installed."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.integration import test_lane_engine_args as lane_tests
from tritonpkg import compat

ROOT = Path(__file__).resolve().parents[2]
TEST_SH = (ROOT / "scripts" / "test.sh").read_text()


def assigned(name: str) -> list[str]:
    (value,) = re.findall(rf'^{name}="([^"]*)"', TEST_SH, re.MULTILINE)
    return value.split()


def test_the_lanes_run_names_existing_modules_and_each_lane_releases_vllm():
    modules = assigned("LANE_TESTS")
    assert modules and all((ROOT / m).is_file() for m in modules)
    assert assigned("LANE_VLLMS") == [str(compat.get_release(lane_tests.RELEASE).vllm_base)]
    branch = TEST_SH[TEST_SH.index('if [ "$lanes" -eq 1 ]'):TEST_SH.index("\nfi\n")]
    assert "export TRITONPKG_LANES=1" in branch and "lane_snapshot.sh --venv" in branch and "exec " in branch
    assert "TRITONPKG_SKIP_GUARD" not in branch


def test_the_no_argument_path_runs_the_whole_suite_with_the_lanes_and_the_skip_guard():
    tail = TEST_SH[TEST_SH.index("\nfi\n"):]
    whole = tail[tail.index('if [ "$#" -eq 0 ]; then'):]
    whole = whole[:whole.index("\nfi\n")]
    assert "lane_snapshot.sh --venv $LANE_VLLMS" in whole and "export TRITONPKG_LANES=1" in whole
    assert "export TRITONPKG_SKIP_GUARD=1" in whole
    lane_skips = [line for line in (ROOT / "tests" / "allowed_skips.txt").read_text().splitlines()
                  if any(line.startswith(m) for m in assigned("LANE_TESTS"))]
    assert lane_skips == [], "the whole suite runs the lanes: none of their tests may skip"
    assert tail.rstrip().endswith('exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 "$@"')
    assert 'if [ "${1:-}" = "--lanes" ]; then lanes=1; shift; fi' in TEST_SH


def test_lane_venv_refuses_a_vllm_without_a_venv_of_its_own(tmp_path):
    out = subprocess.run(["bash", str(ROOT / "scripts" / "lane_snapshot.sh"), "--venv", "0.24.0"],
                         env={**os.environ, "TRITONPKG_LANES_DIR": str(tmp_path)}, capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 2, out.stderr
    assert "vLLM 0.24.0 has no venv of its own" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wheels"]  # nothing installed
