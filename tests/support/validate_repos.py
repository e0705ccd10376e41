"""Model folders written by hand for the validate tests, and the calls that check them. The toolkit's
real backends/vllm imports vLLM (checking those imports is a slow test of its own), so these tests load
the fixture backends of `FIXTURE_BACKENDS` instead (the conftest's `fixture_backends`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tritonpkg.validate import Problem, Report, validate_repository

FIXTURE_BACKENDS = Path(__file__).resolve().parents[1] / "unit" / "validate_fixtures" / "backends"

PY = ("import triton_python_backend_utils as pb_utils\n"
      "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n")
"""A Python-backend model.py that loads and answers nothing."""
IO = ('input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
      'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')

VLLM_IO = ('input [ { name: "text" data_type: TYPE_STRING dims: [ 1 ] },\n'
           '        { name: "opt" data_type: TYPE_INT32 dims: [ 1 ] optional: true } ]\n'
           'output [ { name: "embedding" data_type: TYPE_FP32 dims: [ -1 ] } ]\n')
VLLM_CFG = 'backend: "vllm"\nmax_batch_size: 8\n' + VLLM_IO + "model_transaction_policy { decoupled: true }\n"
"""config.pbtxt of a vLLM-backend model (`repo_with`)."""


def model(repo: Path, name: str, cfg: str | None, files: dict[str, str] | None = None) -> Path:
    """`repo/name` with `cfg` as config.pbtxt (none when None) and `files` (relative path -> text; a path
    ending in / is a folder), by default a version 1 holding `PY`."""
    d = repo / name
    d.mkdir(parents=True, exist_ok=True)
    if cfg is not None:
        (d / "config.pbtxt").write_text(cfg)
    for rel, text in (files if files is not None else {"1/model.py": PY}).items():
        p = d / rel
        if rel.endswith("/"):
            p.mkdir(parents=True, exist_ok=True)
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return d


def py(extra: str = "", io: str = IO) -> str:
    """A Python-backend config.pbtxt: `io` then `extra`."""
    return 'backend: "python"\n' + io + extra


def repo_with(tmp_path: Path, engine_args: dict[str, Any] | str) -> Path:
    """A repository whose one vLLM model `emb` has `engine_args` as its model.json (a string as it is)."""
    d = tmp_path / "repo" / "emb"
    (d / "1").mkdir(parents=True)
    (d / "config.pbtxt").write_text(VLLM_CFG)
    (d / "1" / "model.json").write_text(engine_args if isinstance(engine_args, str) else json.dumps(engine_args))
    return tmp_path / "repo"


def run(repo: Path, **kw: Any) -> Report:
    return validate_repository(repo, **kw)


def only(report: Report, rule: str) -> list[Problem]:
    """The problems `rule` reported."""
    return [p for p in report.problems if p.rule == rule]
