"""The one reader of a packaged version's files: what serve, the frontend, validate and deploy read back from a
model version folder, each file bounded and each bad content a ValueError saying why."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tritonpkg import boundedio, version_files
from tritonpkg.errors import RuntimeSetupError
from tritonpkg.frontend import catalog
from tritonpkg.serve import weights
from tritonpkg.validate.loaded import load_model


def _version(tmp_path: Path, files: dict[str, bytes]) -> Path:
    version = tmp_path / "repo" / "m" / "1"
    version.mkdir(parents=True)
    for name, data in files.items():
        (version / name).write_bytes(data)
    return version


def test_the_names_are_the_backend_contract_s() -> None:
    contract = json.loads(Path("backends/vllm/io_contract.json").read_text())["adapter_list"]
    assert (contract["file"], contract["served"]) == (version_files.MULTI_LORA, version_files.SERVED)


def test_a_name_written_twice_is_kept_twice_in_pairs_and_once_in_the_list() -> None:
    data = b'{"a": "./adapters/a", "b": "s3://x/b", "a": "./adapters/a2"}'
    assert version_files.adapter_pairs(data) == [("a", "./adapters/a"), ("b", "s3://x/b"), ("a", "./adapters/a2")]
    assert version_files.adapter_list(data) == json.loads(data) == {"a": "./adapters/a2", "b": "s3://x/b"}


@pytest.mark.parametrize(("data", "error", "why"), [
    (b"[1]", version_files.NotAnObjectError, "not a JSON object"),
    (b"{", ValueError, "not valid JSON"),
    (b"\xff{}", ValueError, "not valid JSON"),
    (b"[" * 100_000 + b"]" * 100_000, ValueError, "nested too deeply"),
])
def test_bad_content_is_a_value_error_saying_why(data: bytes, error: type[Exception], why: str) -> None:
    for parse in (version_files.engine_args, version_files.adapter_list, version_files.adapter_pairs):
        with pytest.raises(error, match=why):
            parse(data)


@pytest.mark.parametrize(("value", "on"), [(True, True), ("TRUE", True), ("true", True), (False, False),
                                           ("yes", False), (None, False)])
def test_lora_enabled_as_nvidia_s_backend_reads_it(value: object, on: bool) -> None:
    assert version_files.lora_enabled({"enable_lora": value}) is on
    assert version_files.lora_enabled({}) is False and version_files.lora_enabled(None) is False


def test_every_reader_refuses_a_list_past_its_bound(tmp_path: Path) -> None:
    """serve fails naming the file; the frontend serves no adapters; validate reports lora.list_json."""
    big = b'{"a": "' + b"x" * version_files.MAX_ADAPTER_LIST_BYTES + b'"}'
    version = _version(tmp_path, {version_files.ENGINE_ARGS: b'{"model": "/w", "enable_lora": true}',
                                  version_files.MULTI_LORA: big})
    with pytest.raises(boundedio.FileTooLargeError):
        version_files.read_adapter_list(version)
    with pytest.raises(RuntimeSetupError, match="cannot read the adapter list") as caught:
        weights.read_multi_lora(tmp_path / "repo")
    assert "multi_lora.json" in str(caught.value)
    entry = catalog.ModelEntry(name="m", version="1", kind="generate", backend="vllm", created=0,
                               engine_args=version_files.read_engine_args(version), source=version)
    assert catalog.read_adapter_names(entry) == []
    (version / version_files.MULTI_LORA).write_bytes(b'{"a": "./adapters/a"}')
    assert catalog.read_adapter_names(entry) == ["a"]


def test_engine_args_read_alike_by_serve_frontend_and_validate(tmp_path: Path) -> None:
    version = _version(tmp_path, {version_files.ENGINE_ARGS: b'{"model": "org/name", "max_model_len": 64}'})
    want = {"model": "org/name", "max_model_len": 64}
    assert weights.read_engine_args(tmp_path / "repo") == {"m/1/model.json": want}
    assert catalog.read_engine_args(version) == want
    assert load_model(tmp_path / "repo", version.parent).engine_args == want
    (version / version_files.ENGINE_ARGS).write_bytes(b'["model"]')
    assert catalog.read_engine_args(version) is None
    loaded = load_model(tmp_path / "repo", version.parent)
    assert loaded.engine_args_error == "must be a JSON object of engine arguments"
    with pytest.raises(RuntimeSetupError, match="cannot read engine arguments: not a JSON object"):
        weights.read_engine_args(tmp_path / "repo")


def test_served_digest_is_the_acknowledged_list_s_sha256(tmp_path: Path) -> None:
    body = b'{"a": "/adapters/a"}\n'
    version = _version(tmp_path, {version_files.MULTI_LORA: body})
    assert version_files.served_digest(version) is None  # no acknowledgement yet
    ack = version / version_files.SERVED
    for garbage in (b"{", b"[]", b'{"list_sha256": 3}'):
        ack.write_bytes(garbage)
        assert version_files.served_digest(version) is None
    digest = hashlib.sha256(body).hexdigest()
    ack.write_text(json.dumps({"list_sha256": digest, "served": ["a"], "refused": {}}))
    assert version_files.served_digest(version) == digest


def test_version_folders_are_numeric_versions_holding_the_file(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    for rel in ("a/1/model.json", "a/2/other.txt", "b/config/model.json", "c/10/model.json"):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text("{}")
    assert version_files.version_folders(repo, "model.json") == [repo / "a" / "1", repo / "c" / "10"]
