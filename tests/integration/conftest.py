"""One real tritonserver for the Python-backend integration tests: every Python example and template
packaged into one repository, served once per test session."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tritonpkg.repository import package_spec
from tritonpkg.spec import load_spec
from tests.conftest import EXAMPLES

PYTHON_EXAMPLES = ("sentiment-custom", "reverse-ensemble", "mock-tool-llm")

BATCHED_TOKENIZER = {
    "name": "batched_tokenizer",
    "version": 1,
    "kind": "python",
    "python": {
        "template": "tokenizer",
        "parameters": {"tokenizer": "tokenizer", "add_special_tokens": False},  # copied into the spec's folder
        "max_batch_size": 4,
    },
}
BATCHED_CUSTOM = {
    "name": "double",
    "version": 1,
    "kind": "python",
    "python": {
        "template": "custom",
        "parameters": {"module": "hooks.py"},
        "files": ["hooks.py"],
        "max_batch_size": 8,
        "inputs": [{"name": "X", "data_type": "FP32", "dims": [3]}],
        "outputs": [{"name": "Y", "data_type": "FP32", "dims": [3]}],
    },
}


HOOKS = """
def model(inputs):
    if (inputs["X"] < 0).any():
        raise ValueError("X must be non-negative")
    return {"Y": inputs["X"] * 2}
"""


@pytest.fixture(scope="session")
def python_repo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("python-repo")
    repo = root / "repository"
    for name in PYTHON_EXAMPLES:
        package_spec(load_spec(EXAMPLES / name), repo)
    for data in (BATCHED_TOKENIZER, BATCHED_CUSTOM):
        folder = root / data["name"]
        folder.mkdir()
        (folder / "hooks.py").write_text(HOOKS)
        shutil.copytree(EXAMPLES / "tiny-llm" / "tokenizer", folder / "tokenizer")
        (folder / "tritonpkg.yaml").write_text(yaml.safe_dump(data))
        package_spec(load_spec(folder), repo)
    return repo


@pytest.fixture(scope="session")
def python_server(python_repo):
    from tritonpkg.runtime import TritonServer, ensure_runtime

    with TritonServer(python_repo, runtime=ensure_runtime(), startup_timeout=180) as server:
        yield server


def package_tiny_llm_and_minilm(root: Path, context: int = 512, **engine_args) -> Path:
    """The tiny LLM (weights made offline with a `context`-token maximum, `engine_args` over the example's)
    and MiniLM on vLLM's pooling runner, packaged into one repository under `root`."""
    import subprocess
    import sys

    weights = root / "weights"
    subprocess.run([sys.executable, str(EXAMPLES / "tiny-llm" / "make_tiny_llm.py"), "--out", str(weights),
                    "--context", str(context)], check=True, timeout=300)
    spec = yaml.safe_load((EXAMPLES / "tiny-llm" / "tritonpkg.yaml").read_text())
    spec["weights"] = str(weights)
    spec["engine_args"].update(engine_args)
    (root / "tiny").mkdir()
    (root / "tiny" / "tritonpkg.yaml").write_text(yaml.safe_dump(spec))
    repo = root / "repository"
    package_spec(load_spec(root / "tiny"), repo)
    subprocess.run([sys.executable, str(EXAMPLES / "minilm-embeddings" / "locate_weights.py"), "--write-spec",
                    str(root / "minilm")], check=True, timeout=60)
    package_spec(load_spec(root / "minilm"), repo)
    return repo
