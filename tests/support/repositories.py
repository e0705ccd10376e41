"""Repositories packaged from the examples for the tests that serve them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.support.paths import EXAMPLES
from tritonpkg.repository import package_spec
from tritonpkg.spec import load_spec


def make_tiny_llm(out: Path, context: int = 512) -> Path:
    """The tiny random Llama (examples/tiny-llm/make_tiny_llm.py, offline; `context`-token maximum) in `out`."""
    subprocess.run([sys.executable, str(EXAMPLES / "tiny-llm" / "make_tiny_llm.py"), "--out", str(out),
                    "--context", str(context)], check=True, timeout=300, stdout=subprocess.DEVNULL)
    return out


def package_tiny_llm(root: Path, weights: Path, **engine_args: Any) -> Path:
    """The tiny-llm example's spec on `weights` (`engine_args` over the example's), packaged into
    `root/repository`; returns the repository."""
    spec = yaml.safe_load((EXAMPLES / "tiny-llm" / "tritonpkg.yaml").read_text())
    spec["weights"] = str(weights)
    spec["engine_args"].update(engine_args)
    (root / "tiny").mkdir(parents=True)
    (root / "tiny" / "tritonpkg.yaml").write_text(yaml.safe_dump(spec))
    repo = root / "repository"
    package_spec(load_spec(root / "tiny"), repo)
    return repo


def package_tiny_llm_and_minilm(root: Path, context: int = 512, *, weights: Path | None = None,
                                **engine_args: Any) -> Path:
    """The tiny LLM (on `weights`, or weights made under `root` with a `context`-token maximum; `engine_args`
    over the example's) and MiniLM on vLLM's pooling runner, packaged into one repository under `root`."""
    repo = package_tiny_llm(root, weights or make_tiny_llm(root / "weights", context), **engine_args)
    subprocess.run([sys.executable, str(EXAMPLES / "minilm-embeddings" / "locate_weights.py"), "--write-spec",
                    str(root / "minilm")], check=True, timeout=60)
    package_spec(load_spec(root / "minilm"), repo)
    return repo
