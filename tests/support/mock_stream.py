"""A decoupled, streaming variant of examples/mock-tool-llm for the session's Python repository: the mock's
spec packaged under another name, then its model.py replaced by tests/support/mock_stream_llm/model.py and
its config made decoupled. Its lock entry keeps the spec's parsers (the frontend reads them there) and records
the replaced files as they are; its role says it is no template's rendering, so `validate` does not
compare its model.py with the `custom` template's. `add_pythonic_mocks` adds two more: answers in the pythonic
tool-call format, with vLLM's pythonic parser and with none."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from tests.support.paths import EXAMPLES
from tritonpkg.repository import package_spec
from tritonpkg.spec import load_spec

NAME = "mock_tool_llm_stream"
PYTHONIC = "mock_pythonic_llm"  # answers in the pythonic format, parsed by vLLM's pythonic parser
PLAIN = "mock_plain_llm"  # the same answers served with no parser (`openai: true`)
MODEL = Path(__file__).parent / "mock_stream_llm" / "model.py"
PYTHONIC_ANSWERS = Path(__file__).parent / "mock_stream_llm" / "pythonic_llm.py"


def add_streaming_mock(root: Path, repo: Path, name: str = NAME, openai: Any = None,
                       answers: Path | None = None) -> str:
    """The mock as `name`, decoupled; `openai` replaces the spec's parsers, `answers` its answers module."""
    folder = root / name
    shutil.copytree(EXAMPLES / "mock-tool-llm", folder)
    spec = yaml.safe_load((folder / "tritonpkg.yaml").read_text())
    spec["name"] = name
    if openai is not None:
        spec["openai"] = openai
    (folder / "tritonpkg.yaml").write_text(yaml.safe_dump(spec))
    if answers is not None:
        shutil.copyfile(answers, folder / "mock_llm.py")
    package_spec(load_spec(folder), repo)
    shutil.copyfile(MODEL, repo / name / "1" / "model.py")
    config = repo / name / "config.pbtxt"
    config.write_text(config.read_text() + "model_transaction_policy {\n  decoupled: true\n}\n")
    lock_path = repo / "tritonpkg.lock.json"
    lock = json.loads(lock_path.read_text())
    entry = lock["models"][name]
    entry["config_sha256"] = _sha256(config)
    version = entry["versions"]["1"]
    version["role"] = "test-decoupled-mock"
    version.pop("template_sha256", None)
    version["files"][f"{name}/1/model.py"] = _sha256(repo / name / "1" / "model.py")
    lock_path.write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
    return name


def add_pythonic_mocks(root: Path, repo: Path) -> list[str]:
    """The pythonic answers streamed, once with vLLM's pythonic parser and once with no parser."""
    return [add_streaming_mock(root, repo, PYTHONIC, {"tool_call_parser": "pythonic"}, PYTHONIC_ANSWERS),
            add_streaming_mock(root, repo, PLAIN, True, PYTHONIC_ANSWERS)]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
