"""A decoupled, streaming variant of examples/mock-tool-llm for the session's Python repository: the mock's
spec packaged under another name, then its model.py replaced by tests/support/mock_stream_llm/model.py and
its config made decoupled. Its lock entry keeps the spec's parsers (the frontend reads them there) and records
the replaced files as they are; its role says it is no template's rendering, so `validate` does not
compare its model.py with the `custom` template's."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import yaml

from tests.support.paths import EXAMPLES
from tritonpkg.repository import package_spec
from tritonpkg.spec import load_spec

NAME = "mock_tool_llm_stream"
MODEL = Path(__file__).parent / "mock_stream_llm" / "model.py"


def add_streaming_mock(root: Path, repo: Path) -> str:
    folder = root / NAME
    shutil.copytree(EXAMPLES / "mock-tool-llm", folder)
    spec = yaml.safe_load((folder / "tritonpkg.yaml").read_text())
    spec["name"] = NAME
    (folder / "tritonpkg.yaml").write_text(yaml.safe_dump(spec))
    package_spec(load_spec(folder), repo)
    shutil.copyfile(MODEL, repo / NAME / "1" / "model.py")
    config = repo / NAME / "config.pbtxt"
    config.write_text(config.read_text() + "model_transaction_policy {\n  decoupled: true\n}\n")
    lock_path = repo / "tritonpkg.lock.json"
    lock = json.loads(lock_path.read_text())
    entry = lock["models"][NAME]
    entry["config_sha256"] = _sha256(config)
    version = entry["versions"]["1"]
    version["role"] = "test-decoupled-mock"
    version.pop("template_sha256", None)
    version["files"][f"{NAME}/1/model.py"] = _sha256(repo / NAME / "1" / "model.py")
    lock_path.write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
    return NAME


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
