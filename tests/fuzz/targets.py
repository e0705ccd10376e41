"""One fuzz target per parser of outside input: a hypothesis strategy of structured cases (plain JSON data) and
the run that turns a case into files or a request under the harness's root and parses it."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import struct
import sys
import tarfile
import types
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from tests.fuzz.harness import Target, Violation

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_BACKENDS = ROOT / "tests" / "unit" / "validate_fixtures" / "backends"

# -- shared pieces --------------------------------------------------------------------------------------------

NASTY = ["", ".", "..", "../x", "/abs", "~", "~no-such-user-41/x", "a\x00b", "a\nb", "\u202e", "é", "a" * 300,
         "x/../../y", "a//b", "s3://bkt/p", "hf://o/n@r", "file:///etc", "memory://m", " ", "@", "a@3", "1"]
WORDS = st.sampled_from(["m", "model", "tiny_llm", "alpha", "support-bot", "legal.bot", "x", "vllm", "python",
                         "ensemble", "text_input", "1", "-1", "true", "null", "0", "2147483648", "1e309"])
TEXT = st.one_of(WORDS, st.sampled_from(NASTY), st.text(max_size=12))
JSON_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False), TEXT)
JSON = st.recursive(JSON_SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(TEXT, inner, max_size=4)), max_leaves=12)


def _json_text(value: Any) -> st.SearchStrategy[str]:
    """`value` as JSON text, or that text cut short, or not JSON at all."""
    text = json.dumps(value)
    return st.sampled_from([text, text[: len(text) // 2], "{", "[" * 2000, "\ufeff" + text])


def json_file(values: st.SearchStrategy[Any]) -> st.SearchStrategy[str]:
    return values.flatmap(_json_text)


@contextlib.contextmanager
def _env(**values: str) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _write(path: Path, text: str | bytes) -> None:
    """Write a generated file; a name no file system takes is simply not there (the case goes on without it)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.write_bytes if isinstance(text, bytes) else lambda t: path.write_text(t, "utf-8", "surrogatepass"))(
            text)  # type: ignore[operator]
    except (OSError, ValueError):
        pass


def _inside(root: Path, rel: str) -> Path | None:
    """`root/rel` when `rel` stays lexically under root (a generated name must not make the harness itself
    write outside)."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or ".." in parts or "\x00" in rel:
        return None
    return root.joinpath(*parts)


# -- spec loader (YAML + pydantic) -----------------------------------------------------------------------------

_TENSOR = st.fixed_dictionaries({"name": TEXT, "data_type": st.sampled_from(["FP32", "TYPE_INT64", "STRING",
                                                                              "BF16", "X", ""]),
                                 "dims": st.lists(st.integers(-3, 2**64), max_size=3)})
_ADAPTER = st.fixed_dictionaries({"name": TEXT, "source": TEXT},
                                 optional={"revision": TEXT, "extra": JSON_SCALAR})
_SPEC = st.fixed_dictionaries(
    {"name": TEXT, "version": st.one_of(st.integers(-1, 2**64), TEXT),
     "kind": st.sampled_from(["vllm", "python", "x"])},
    optional={
        "weights": TEXT,
        "engine_args": st.dictionaries(st.sampled_from(["max_model_len", "dtype", "enable_lora", "max_lora_rank",
                                                        "gpu_memory_utilization", "model", "x"]), JSON_SCALAR,
                                       max_size=4),
        "adapters": st.lists(_ADAPTER, max_size=3),
        "python": st.fixed_dictionaries({"template": st.sampled_from(["custom", "tokenizer", "ensemble", "..", "x"])},
                                        optional={"inputs": st.lists(_TENSOR, max_size=2),
                                                  "outputs": st.lists(_TENSOR, max_size=2),
                                                  "files": st.lists(TEXT, max_size=2),
                                                  "parameters": st.dictionaries(TEXT, JSON_SCALAR, max_size=2)}),
        "openai": st.one_of(st.booleans(), st.fixed_dictionaries({}, optional={"tool_call_parser": TEXT,
                                                                                "reasoning_parser": TEXT})),
        "target_release": st.sampled_from(["24.10", "26.07", "99.99", ""]),
        "deployment": st.dictionaries(st.sampled_from(["strategy", "traffic_steps", "min_requests", "x"]),
                                      JSON, max_size=2),
        "requirements": st.lists(TEXT, max_size=2),
    })
_RAW_YAML = st.sampled_from([
    "a: &x [1]\nb: *x\n", "!!python/object/apply:os.system ['true']\n", "name: m\nname: n\n", "[" * 500,
    "? [a]\n: 1\n", "name: !!binary aGk=\n", "%YAML 9.9\n---\nname: m\n", "\t- x", "name: m\0\n", "\ufeffname: m\n",
    "- " * 60 + "x", "{" + "a: {" * 40 + "}" * 41, "name: m\nversion: 1\nkind: vllm\nweights: " + "x/" * 3000,
])


_VALID_SPECS = [
    {"name": "m", "version": 1, "kind": "vllm", "weights": "s3://bkt/w", "engine_args": {"max_model_len": 64}},
    {"name": "m", "version": 1, "kind": "vllm", "weights": "hf://o/n@main", "engine_args": {"enable_lora": True},
     "adapters": [{"name": "alpha", "source": "s3://bkt/a"}], "openai": True},
]


def _one_field_changed(base: dict[str, Any], path: list[str], value: Any) -> dict[str, Any]:
    """`base` with the field at `path` (as deep as it exists) set to `value`."""
    spec = json.loads(json.dumps(base))
    node = spec
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            break
        node = node[key]
    node[path[-1]] = value
    return spec


_NEAR_VALID = st.builds(_one_field_changed, st.sampled_from(_VALID_SPECS),
                        st.lists(st.sampled_from(["name", "version", "kind", "weights", "engine_args", "python",
                                                  "template", "inputs", "dims", "adapters", "openai", "max_model_len",
                                                  "deployment", "target_release", "requirements"]),
                                 min_size=1, max_size=2), JSON)


def _spec_text(case: dict[str, Any]) -> str:
    return case["raw"] if "raw" in case else yaml.safe_dump(case["spec"], allow_unicode=True)


SPEC_CASES = st.one_of(st.builds(lambda s: {"spec": s}, _SPEC),
                       st.builds(lambda s: {"spec": s}, _NEAR_VALID), st.builds(lambda r: {"raw": r}, _RAW_YAML),
                       st.builds(lambda r, s: {"raw": r + yaml.safe_dump(s)}, _RAW_YAML, _SPEC))


def _run_spec(case: dict[str, Any], root: Path) -> Any:
    from tritonpkg.spec import load_spec

    folder = root / "spec"
    folder.mkdir()
    path = folder / "tritonpkg.yaml"
    path.write_text(_spec_text(case), "utf-8", "surrogatepass")
    return load_spec(path)


def _spec_errors() -> tuple[type[BaseException], ...]:
    from tritonpkg.errors import SpecError

    return (SpecError,)


# -- repository loading and every validate rule -----------------------------------------------------------------

_PBTXT_LINES = st.sampled_from([
    'backend: "vllm"', 'backend: "python"', 'platform: "ensemble"', 'platform: "onnxruntime_onnx"', 'name: "m"',
    "max_batch_size: 8", "max_batch_size: -1", "max_batch_size: 99999999999", "dynamic_batching { }",
    "sequence_batching { }", "model_transaction_policy { decoupled: true }",
    "model_transaction_policy { decoupled: false }",
    'input [ { name: "text_input" data_type: TYPE_STRING dims: [1] } ]',
    'input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1, 4 ] optional: true } ]',
    'output [ { name: "text_output" data_type: TYPE_STRING dims: [-1] } ]',
    'output [ { name: "OUT" data_type: TYPE_BF16 dims: [ ] } ]',
    "instance_group [ { count: 1 kind: KIND_MODEL } ]", "instance_group [ { count: 0 kind: KIND_GPU gpus: [7] } ]",
    'parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "/x.tar.gz" } }',
    ('ensemble_scheduling { step [ { model_name: "a" model_version: -1 input_map { key: "IN" value: "X" } '
     'output_map { key: "OUT" value: "Y" } } ] }'),
    "ensemble_scheduling { step [ { model_name: \"m\" model_version: 3 } ] }",
    "version_policy { specific { versions: [ 1, 2 ] } }", "optimization { }", "{", "}", "input [", 'backend: "\\x00"',
    "unknown_field: 1", "# comment", "max_batch_size: 8 max_batch_size: 4",
])
_PBTXT = st.one_of(st.lists(_PBTXT_LINES, max_size=8).map("\n".join), st.text(max_size=40))
_ENGINE_ARGS = st.dictionaries(
    st.sampled_from(["model", "enable_lora", "max_lora_rank", "max_loras", "dtype", "max_model_len",
                     "gpu_memory_utilization", "tensor_parallel_size", "logits_processors", "enforce_eager",
                     "stream_interval", "tokenizer", "x"]),
    st.one_of(JSON_SCALAR, st.sampled_from(["./weights", "/nonexistent", "~", "~no-such-user-41"])), max_size=6)
_ADAPTER_CONFIG = st.fixed_dictionaries({}, optional={
    "r": JSON_SCALAR, "lora_alpha": JSON_SCALAR, "peft_type": st.sampled_from(["LORA", "IA3", ""]),
    "target_modules": st.one_of(st.lists(TEXT, max_size=3), st.sampled_from(["(", ".*", "q_proj", "[a-"])),
    "base_model_name_or_path": st.one_of(TEXT, st.sampled_from(["./weights", "/"])),
    "rank_pattern": st.one_of(JSON, st.dictionaries(TEXT, st.integers(-2, 2**40), max_size=2)),
    "modules_to_save": JSON, "use_dora": JSON_SCALAR, "bias": JSON_SCALAR})
_TENSOR_ENTRY = st.fixed_dictionaries({"dtype": st.sampled_from(["F32", "BF16", "X"]),
                                       "shape": st.one_of(st.lists(st.integers(-1, 2**64), max_size=3), JSON),
                                       "data_offsets": st.lists(st.integers(-1, 2**64), max_size=2)})
_SAFETENSORS = st.fixed_dictionaries({
    "header": st.one_of(st.dictionaries(st.sampled_from(
        ["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
         "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight",
         "model.layers.0.self_attn.q_proj.weight", "model.embed_tokens.weight", "__metadata__", "x.lora_A.weight"]),
        st.one_of(_TENSOR_ENTRY, JSON), max_size=4), JSON),
    "size": st.one_of(st.none(), st.integers(0, 2**64 - 1)), "cut": st.integers(0, 3)})
_ADAPTER_DIR = st.fixed_dictionaries({}, optional={"adapter_config.json": json_file(_ADAPTER_CONFIG),
                                                   "adapter_model.safetensors": _SAFETENSORS})
_VERSION = st.fixed_dictionaries({}, optional={
    "model.json": json_file(_ENGINE_ARGS),
    "multi_lora.json": json_file(st.dictionaries(TEXT, st.one_of(st.sampled_from(["./ad", "./ad/", "../ad", "/",
                                                                                  "~", "s3://bkt/x"]), JSON_SCALAR),
                                                 max_size=3)),
    "ad": _ADAPTER_DIR,
    "weights": st.fixed_dictionaries({}, optional={"config.json": json_file(JSON),
                                                   "model.safetensors": _SAFETENSORS}),
    "model.py": st.sampled_from(["", "import os\nos.system('x')\n", "class TritonPythonModel:\n    pass\n",
                                 "def (:\n", "\x00"]),
})
_MODEL = st.fixed_dictionaries({"name": st.one_of(WORDS, st.sampled_from(["a b", "é", ".hidden", "a" * 200])),
                                "config": st.one_of(st.none(), _PBTXT),
                                "versions": st.dictionaries(st.sampled_from(["1", "2", "0", "01", "-1",
                                                                             "9223372036854775808", "x"]),
                                                            _VERSION, max_size=2)})
REPO_CASES = st.fixed_dictionaries({"models": st.lists(_MODEL, max_size=3)},
                                   optional={"lock": json_file(JSON), "stray": TEXT})


def safetensors_bytes(spec: dict[str, Any]) -> bytes:
    header = json.dumps(spec["header"]).encode()
    size = len(header) if spec["size"] is None else spec["size"]
    data = struct.pack("<Q", size) + header + b"\0" * 16
    return data[: len(data) - spec["cut"] * 9] if spec["cut"] < 3 else data[:5]


def _write_tree(folder: Path, tree: dict[str, Any]) -> None:
    for name, value in tree.items():
        if isinstance(value, dict) and name.endswith(".safetensors"):
            _write(folder / name, safetensors_bytes(value))
        elif isinstance(value, dict):
            (folder / name).mkdir(parents=True, exist_ok=True)
            _write_tree(folder / name, value)
        else:
            _write(folder / name, value)


def build_repository(case: dict[str, Any], root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    for model in case["models"]:
        folder = _inside(repo, model["name"])
        if folder is None or "/" in model["name"]:
            continue
        with contextlib.suppress(OSError):
            folder.mkdir(exist_ok=True)
        if not folder.is_dir():
            continue
        if model["config"] is not None:
            _write(folder / "config.pbtxt", model["config"])
        for version, files in model["versions"].items():
            (folder / version).mkdir(exist_ok=True)
            _write_tree(folder / version, files)
    if "lock" in case:
        _write(repo / "tritonpkg.lock.json", case["lock"])
    if "stray" in case and _inside(repo, case["stray"]) is not None:
        _write(repo / case["stray"].replace("/", "_"), "x")
    return repo


def _run_validate(case: dict[str, Any], root: Path) -> Any:
    from tritonpkg.validate import validate_repository

    repo = build_repository(case, root)
    with _env(TRITONPKG_BACKENDS=str(FIXTURE_BACKENDS), TRITONPKG_NO_LIVE_VLLM="1"):
        return validate_repository(repo)


def _check_report(report: Any) -> None:
    for p in report.problems:
        if not p.file or not p.rule or p.severity not in ("error", "warning"):
            raise Violation(f"validate: a finding without a file or rule: {p}")
        for text in (p.file, p.model or "", p.field or "", p.message.replace("\n", ""), p.expected or ""):
            if any((ord(c) < 0x20 and c != "\t") or 0x7f <= ord(c) <= 0x9f for c in text):
                raise Violation(f"validate: a finding carries a raw control character: {p!r}")


# -- archive unpack and lock verification ------------------------------------------------------------------------

_MEMBER_NAMES = st.one_of(st.sampled_from(["repository/tritonpkg.lock.json", "repository/m/config.pbtxt",
                                           "repository/m/1/model.json", "wheels/p-1-py3-none-any.whl",
                                           "repository", "repository/m", "x", "../x", "/abs", "repository/../..",
                                           "repository/m/1/../../../outside/y", "./repository/a", "a\x00b",
                                           "repository/" + "d/" * 60 + "f", "repository//m"]), TEXT)
_MEMBER = st.fixed_dictionaries({"name": _MEMBER_NAMES,
                                 "type": st.sampled_from(["file", "file", "dir", "sym", "hard", "fifo", "chr"]),
                                 "data": st.text(max_size=20),
                                 "link": st.one_of(_MEMBER_NAMES, st.sampled_from(["../outside", "/etc/passwd", ".",
                                                                                   "..", "repository/m"])),
                                 "mode": st.sampled_from([0o644, 0o755, 0o4755, 0o777, 0])})
_LOCK_FILES = st.dictionaries(_MEMBER_NAMES, st.sampled_from(["", "0" * 64, "x"]), max_size=3)
_LOCK_ENTRY = st.fixed_dictionaries({}, optional={"files": st.one_of(_LOCK_FILES, JSON), "plugins": JSON})
_LOCK_MODEL = st.fixed_dictionaries({"versions": st.one_of(JSON, st.dictionaries(st.sampled_from(["1", "x"]),
                                                                                 _LOCK_ENTRY, max_size=2))},
                                    optional={"config_sha256": TEXT})
_LOCK = st.one_of(JSON, st.fixed_dictionaries({"lock_version": st.sampled_from([1, 2, "1", None]),
                                               "models": st.one_of(JSON, st.dictionaries(TEXT, _LOCK_MODEL,
                                                                                         max_size=2))}))
ARCHIVE_CASES = st.fixed_dictionaries({"members": st.lists(_MEMBER, max_size=6), "lock": st.one_of(st.none(), _LOCK),
                                       "gzip": st.booleans()})


def archive_bytes(case: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    kinds = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE,
             "fifo": tarfile.FIFOTYPE, "chr": tarfile.CHRTYPE}
    with tarfile.open(fileobj=buf, mode="w:gz" if case["gzip"] else "w", format=tarfile.PAX_FORMAT) as tar:
        members = list(case["members"])
        if case["lock"] is not None:
            members.append({"name": "repository/tritonpkg.lock.json", "type": "file", "data": json.dumps(case["lock"]),
                            "link": "", "mode": 0o644})
        for m in members:
            info = tarfile.TarInfo(m["name"])
            info.type, info.mode = kinds[m["type"]], m["mode"]
            data = m["data"].encode("utf-8", "surrogatepass")
            if m["type"] in ("sym", "hard"):
                info.linkname = m["link"]
            try:
                if m["type"] == "file":
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                else:
                    tar.addfile(info)
            except (ValueError, UnicodeEncodeError):
                continue
    return buf.getvalue()


def _run_archive(case: dict[str, Any], root: Path) -> Any:
    from tritonpkg.serve.unpack import unpack_archive, verify_unpacked

    archive = root / "pkg.tar.gz"
    archive.write_bytes(archive_bytes(case))
    package = unpack_archive(archive, root / "unpacked")
    verify_unpacked(package, archive)
    return package


def _package_errors() -> tuple[type[BaseException], ...]:
    from tritonpkg.errors import PackageError

    return (PackageError,)


# -- plugin wheel inspection -------------------------------------------------------------------------------------

_DIST = st.sampled_from(["p-1.0.dist-info", "p-1.0.dist-info", "q-2.dist-info", "../p-1.0.dist-info", "p.dist-info",
                         "p-1.0.data", ""])
_WHEEL_NAMES = st.one_of(st.sampled_from(["p/__init__.py", "p/x.so", "../evil.py", "/abs.py", "vllm/__init__.py",
                                          "numpy/__init__.py", "p/../../x", "a\x00b.py", "torch.pth", "p.pth"]), TEXT)
_METADATA = st.builds(lambda name, version, extra: f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{extra}",
                      st.sampled_from(["p", "", "P", "p\nq"]), st.sampled_from(["1.0", "", "x", "1.0\n"]),
                      st.sampled_from(["", "Requires-Dist: numpy>=2\n", "Requires-Dist: [\n", "Requires-Dist: vllm\n"]))
_ENTRY_POINTS = st.sampled_from(["", "[vllm.logits_processors]\np = p:P\n", "[x\n", "[vllm.general_plugins]\n=\n",
                                 "[vllm.logits_processors]\np = ../x:P\n", "[a]\nb = c\n[a]\nd = e\n", "\xff"])
WHEEL_CASES = st.fixed_dictionaries({
    "filename": st.sampled_from(["p-1.0-py3-none-any.whl", "p-1.0-py3-none-any.zip", "x.whl"]),
    "dist": _DIST, "metadata": st.one_of(_METADATA, st.text(max_size=20)), "entry_points": st.one_of(st.none(),
                                                                                                     _ENTRY_POINTS),
    "record": st.one_of(st.just("auto"), st.none(), st.sampled_from(["", "p/__init__.py,,\n",
                                                                     "p/__init__.py,sha256=x,1\n", "\"\n",
                                                                     "../x,,\n"])),
    "files": st.dictionaries(_WHEEL_NAMES, st.text(max_size=10), max_size=4), "zip": st.booleans()})


def _record_line(name: str, text: str) -> str:
    import base64
    import hashlib

    data = text.encode("utf-8", "surrogatepass")
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


def wheel_bytes(case: dict[str, Any]) -> bytes:
    if not case["zip"]:
        return b"PK\x03\x04 not really a zip"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        dist = case["dist"]
        entries = {f"{dist}/METADATA": case["metadata"], **case["files"]}
        if case["entry_points"] is not None:
            entries[f"{dist}/entry_points.txt"] = case["entry_points"]
        if case["record"] == "auto":  # what pip writes: every member with its sha256 and size, RECORD itself bare
            entries[f"{dist}/RECORD"] = "".join(_record_line(n, t) for n, t in entries.items()) + f"{dist}/RECORD,,\n"
        elif case["record"] is not None:
            entries[f"{dist}/RECORD"] = case["record"]
        for name, text in entries.items():
            with contextlib.suppress(ValueError, UnicodeEncodeError, IndexError):  # zipfile refuses an empty name
                zf.writestr(name, text.encode("utf-8", "surrogatepass"))
    return buf.getvalue()


def _run_wheel(case: dict[str, Any], root: Path) -> Any:
    from tritonpkg.plugins.wheel import read_wheel

    path = root / case["filename"]
    path.write_bytes(wheel_bytes(case))
    return read_wheel(path)


def _plugin_errors() -> tuple[type[BaseException], ...]:
    from tritonpkg.plugins.errors import PluginError

    return (PluginError,)


# -- storage listings turned into paths ---------------------------------------------------------------------------

_KEYS = st.one_of(st.sampled_from(["config.json", "model.safetensors", "a/b/c.bin", "../x", "/abs", "a//b", "a/./b",
                                   "a/../../outside/x", ".tritonpkg/x", "MANIFEST.json", "READY", "a\x00b", "a\nb",
                                   "x" * 300, "d/" * 40 + "f", "", "/", "a/", "é/ü", ".journal", "a:b", "\\x"]),
                  TEXT)
STORAGE_CASES = st.fixed_dictionaries({"keys": st.dictionaries(_KEYS, st.text(max_size=16), min_size=1, max_size=5),
                                       "name": st.one_of(st.none(), TEXT)})
_bucket = itertools.count()


def _run_storage(case: dict[str, Any], root: Path) -> Any:
    import fsspec

    from tritonpkg.storage.materialize import materialize

    fs = fsspec.filesystem("memory")
    bucket = f"/fuzz{os.getpid()}-{next(_bucket)}"
    try:
        for key, data in case["keys"].items():
            with contextlib.suppress(Exception):
                fs.pipe(f"{bucket}/m/{key}", data.encode("utf-8", "surrogatepass"))
        return materialize(f"memory://{bucket}/m", root / "weights", name=case["name"], concurrency=1)
    finally:
        with contextlib.suppress(Exception):
            fs.rm(bucket, recursive=True)


_moto: list[Any] = []


def use_s3(server: Any) -> None:
    """Fuzz against this moto server (the test session's own) instead of starting one."""
    if not _moto:
        _moto.extend([server, server.client()])


def _s3_env() -> dict[str, str]:
    """One moto S3 server (a real S3 API on loopback) for the whole process."""
    if not _moto:
        import atexit
        import tempfile

        from tritonpkg.devtools.s3 import MotoS3

        server = MotoS3.start(Path(tempfile.mkdtemp(prefix="fuzz-moto-")) / "moto.log")
        atexit.register(server.stop)
        _moto.extend([server, server.client()])
    return dict(_moto[0].env)


def _run_s3(case: dict[str, Any], root: Path) -> Any:
    """The same listings through S3's own listing (list_objects_v2 keys turned into paths)."""
    from tritonpkg.storage.materialize import materialize

    env = _s3_env()
    client = _moto[1]
    bucket = f"fuzz-{os.getpid()}-{next(_bucket)}"
    client.create_bucket(Bucket=bucket)
    try:
        for key, data in case["keys"].items():
            with contextlib.suppress(Exception):
                client.put_object(Bucket=bucket, Key=f"m/{key}", Body=data.encode("utf-8", "surrogatepass"))
        with _env(**env):
            return materialize(f"s3://{bucket}/m", root / "weights", name=case["name"], concurrency=1)
    finally:
        listed = client.list_objects_v2(Bucket=bucket).get("Contents", [])
        for obj in listed:
            client.delete_object(Bucket=bucket, Key=obj["Key"])
        client.delete_bucket(Bucket=bucket)


COMMIT = "0123456789abcdef0123456789abcdef01234567"
_HF_ENTRY = st.fixed_dictionaries({
    "name": st.one_of(_KEYS, st.sampled_from(["config.json", "model.safetensors", "sub/tokenizer.json"])),
    "kind": st.sampled_from(["file", "link", "link", "dir"]),
    "target": st.sampled_from(["../../blobs/b1", "../../blobs/missing", "../../../../../outside/x", "/etc/hostname",
                               "../../refs/main", ".", "config.json", "../../../models--o--m/blobs/b1"]),
    "data": st.text(max_size=8)})
HF_CASES = st.fixed_dictionaries({
    "rev": st.one_of(st.sampled_from(["main", COMMIT, "v1/../../x", "../main", "", "a\x00b", "refs/pr/1"]), TEXT),
    "ref": st.one_of(st.none(), st.sampled_from([COMMIT + "\n", COMMIT.upper(), "x" * 80, "", "../" * 5])),
    "entries": st.lists(_HF_ENTRY, max_size=5)})


def _run_hf(case: dict[str, Any], root: Path) -> Any:
    """A local Hugging Face cache (what hf:// reads offline): refs, snapshot links into blobs, hostile names."""
    from tritonpkg.storage.materialize import materialize

    repo = root / "hf" / "models--o--n"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "b1").write_text("blob")
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    if case["ref"] is not None and _inside(repo / "refs", case["rev"]) is not None:
        _write(repo / "refs" / case["rev"], case["ref"])
    for entry in case["entries"]:
        path = _inside(snapshot, entry["name"])
        if path is None:
            continue
        with contextlib.suppress(OSError, ValueError):
            path.parent.mkdir(parents=True, exist_ok=True)
            if entry["kind"] == "file":  # never through a link an earlier entry made (it may lead outside)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(entry["data"].encode("utf-8", "surrogatepass"))
            elif entry["kind"] == "dir":
                path.mkdir()
            else:
                os.symlink(entry["target"], path)
    with _env(HF_HUB_OFFLINE="1"):
        return materialize(f"hf://o/n@{case['rev']}", root / "weights", concurrency=1, hf_cache=root / "hf")


def _storage_errors() -> tuple[type[BaseException], ...]:
    from tritonpkg.storage.errors import StorageError

    return (StorageError,)


# -- the vLLM backend's KServe inputs (sampling_parameters JSON, lora_name) ---------------------------------------

_PARAM_KEYS = st.sampled_from(["temperature", "top_p", "max_tokens", "n", "stop", "seed", "logit_bias", "logprobs",
                               "guided_json", "guided_regex", "guided_choice", "guided_grammar",
                               "guided_whitespace_pattern",
                               "response_format", "structured_outputs", "extra_args", "vllm_xargs", "lora_name",
                               "prompt_logprobs", "x", "output_kind", "detokenize"])
BACKEND_CASES = st.fixed_dictionaries({
    "params": st.one_of(json_file(st.dictionaries(_PARAM_KEYS, st.one_of(JSON, st.sampled_from(
        ['{"type": "json_object"}', '{"json": {}}', "[1, 2", '{"a": 1}', "[\"a\"]"])), max_size=5)),
        st.text(max_size=20)),
    "adapters": st.dictionaries(TEXT, st.sampled_from(["./a", "/abs", "./b"]), max_size=3)})


def _backend_modules() -> Any:
    if str(ROOT / "backends" / "vllm") not in sys.path:
        sys.path.insert(0, str(ROOT / "backends" / "vllm"))
    import lora
    import request_params

    return lora, request_params


# The fields vLLM 0.32's SamplingParams declares (name -> takes a plain string), as request_base.sampling_fields
# reads them; fixed here so the target runs without importing vLLM.
_SAMPLING_FIELDS = {**dict.fromkeys((
    "n", "presence_penalty", "frequency_penalty", "repetition_penalty", "temperature", "top_p", "top_k", "min_p",
    "seed", "stop_token_ids", "ignore_eos", "max_tokens", "min_tokens", "logprobs", "prompt_logprobs",
    "skip_special_tokens", "spaces_between_special_tokens", "include_stop_str_in_output", "logit_bias",
    "allowed_token_ids", "bad_words", "extra_args", "structured_outputs", "truncate_prompt_tokens"), False),
                    "stop": True}
_STRUCTURED_FIELDS = {"json", "regex", "choice", "grammar", "json_object", "disable_fallback",
                      "disable_any_whitespace", "disable_additional_properties", "whitespace_pattern",
                      "structural_tag"}


def _run_backend(case: dict[str, Any], root: Path) -> Any:
    """What the backend does with one request's sampling_parameters input: JSON text (bounded), an object, the
    adapter its lora_name picks from the served list, then the normalized SamplingParams keyword arguments."""
    lora, request_params = _backend_modules()
    folder = root / "1"
    folder.mkdir()
    (folder / "multi_lora.json").write_text(json.dumps(case["adapters"]))
    try:
        served = lora.read_adapters(str(folder), {"enable_lora": True})
    except lora.AdapterError:
        served = {}
    adapters = lora.Adapters()  # every folder taken by the engine (a stand-in for vLLM's LoRARequest)
    adapters.commit(served, [types.SimpleNamespace(lora_name=n, lora_path=f) for n, f in served.items()], {})
    try:
        params = json.loads(case["params"])
    except (ValueError, RecursionError):
        return None  # the backend answers INVALID_ARG "not valid JSON" before any of this
    if not isinstance(params, dict):
        return None
    adapters.take(params)
    return request_params.normalize_sampling(params, _SAMPLING_FIELDS, _STRUCTURED_FIELDS)


def _backend_errors() -> tuple[type[BaseException], ...]:
    _, request_params = _backend_modules()
    return (request_params.ParamError,)


def _names_a_parameter(exc: BaseException) -> bool:
    return "'" in str(exc) or "sampling parameter" in str(exc)


# -- the OpenAI frontend's request bodies ------------------------------------------------------------------------

_MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "tool", "x"]),
                                  "content": st.one_of(TEXT, st.lists(st.fixed_dictionaries(
                                      {"type": st.sampled_from(["text", "image_url", "x"]), "text": TEXT}), max_size=2),
                                      JSON_SCALAR)},
                                 optional={"tool_calls": JSON, "tool_call_id": TEXT, "name": TEXT})
_TOOL = st.fixed_dictionaries({"type": st.sampled_from(["function", "x"]),
                               "function": st.fixed_dictionaries({"name": TEXT}, optional={"parameters": JSON,
                                                                                          "description": TEXT})})
_BODY = st.fixed_dictionaries({"model": st.one_of(st.sampled_from(["tiny_llm", "", "x\x00"]), JSON_SCALAR)}, optional={
    "messages": st.one_of(st.lists(_MESSAGE, max_size=3), JSON), "prompt": st.one_of(
        TEXT, st.lists(st.integers(-1, 2**64), max_size=3), st.lists(st.lists(st.integers(-1, 70000), max_size=2),
                                                                     max_size=2), JSON),
    "input": st.one_of(TEXT, st.lists(TEXT, max_size=2), st.lists(st.integers(-2, 2**40), max_size=2)),
    "query": TEXT, "documents": st.lists(TEXT, max_size=2),
    "max_tokens": JSON_SCALAR, "n": JSON_SCALAR, "temperature": JSON_SCALAR, "stream": JSON_SCALAR,
    "tools": st.one_of(st.lists(_TOOL, max_size=2), JSON), "tool_choice": st.one_of(
        st.sampled_from(["auto", "none", "required", "x"]), JSON),
    "response_format": st.one_of(st.fixed_dictionaries({"type": st.sampled_from(["json_object", "json_schema",
                                                                                  "text", "x"])},
                                                       optional={"json_schema": JSON}), JSON),
    "logit_bias": JSON, "stop": JSON, "seed": JSON_SCALAR, "structured_outputs": JSON, "x": JSON_SCALAR})
_RAW_BODIES = st.sampled_from(["", "{", "[]", "null", '{"model": "m", "messages": [' * 100, '"\\ud800"',
                               '{"model": "\\ud800"}', '{"max_tokens": 1e400}', '{"n": 18446744073709551616}',
                               '{"model": "m", "model": "n"}', "\xff\xfe"])
FRONTEND_CASES = st.fixed_dictionaries({
    "route": st.sampled_from(["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/rerank",
                              "/v1/models/x%00y", "/v1/models"]),
    "body": st.one_of(st.builds(json.dumps, _BODY), _RAW_BODIES)})
_frontend: list[Any] = []


def _frontend_url() -> str:
    """One frontend (real uvicorn, the toolkit's app) in front of no Triton, for the whole process."""
    if not _frontend:
        import atexit

        from tritonpkg.frontend import FrontendServer, FrontendSettings

        server = FrontendServer(FrontendSettings(triton_grpc_url="127.0.0.1:1", port=0, max_request_bytes=1 << 20))
        server.start()
        atexit.register(server.stop)
        _frontend.append(server)
    return str(_frontend[0].url)


def _is_object(body: str) -> bool:
    """Whether the body is a JSON object (only then can a 400 name a field of it)."""
    try:
        return isinstance(json.loads(body), dict)
    except (ValueError, RecursionError):
        return False


def _run_frontend(case: dict[str, Any], root: Path) -> Any:
    import httpx

    method = "GET" if case["route"].startswith("/v1/models") else "POST"
    answer = httpx.request(method, _frontend_url() + case["route"], timeout=15,
                           content=case["body"].encode("utf-8", "surrogatepass"),
                           headers={"content-type": "application/json"})
    if answer.status_code < 400:
        return answer.status_code
    try:
        error = answer.json()["error"]
        message = error["message"]
    except (ValueError, KeyError, TypeError):
        raise Violation(f"frontend: {answer.status_code} not in OpenAI's error shape: {answer.text[:300]}") from None
    if answer.status_code >= 500 and answer.status_code != 503:
        raise Violation(f"frontend: {answer.status_code} for a client's body: {message[:300]}")
    if answer.status_code == 400 and not error.get("param") and _is_object(case["body"]):
        raise Violation(f"frontend: a 400 that names no field: {message[:300]}")
    return answer.status_code


# -- the OpenAI frontend's request bodies with a model behind it ---------------------------------------------------

SERVED = ("mock_tool_llm", "mock_tool_llm_stream")  # examples/mock-tool-llm, and its streaming twin
MODEL_BODY_LIMIT = 64 << 10
_MODEL_BODIES = st.builds(lambda body, model: json.dumps({**body, "model": model}), _BODY,
                          st.one_of(st.sampled_from(SERVED), st.sampled_from(SERVED), _BODY.map(lambda b: b["model"])))
_ROUTES = st.sampled_from(["/v1/chat/completions", "/v1/chat/completions", "/v1/completions", "/v1/embeddings",
                           "/v1/rerank", "/v1/models/mock_tool_llm", "/v1/models"])
MODEL_FRONTEND_CASES = st.one_of(
    st.fixed_dictionaries({"route": _ROUTES, "body": st.one_of(_MODEL_BODIES, _MODEL_BODIES, _RAW_BODIES)}),
    st.fixed_dictionaries({"route": _ROUTES, "prompt_bytes": st.sampled_from([MODEL_BODY_LIMIT - 64,
                                                                              MODEL_BODY_LIMIT + 1, 4 << 20])}))


def _model_body(case: dict[str, Any]) -> str:
    """The case's body; a `prompt_bytes` one (kept small in the corpus) is a prompt of that many bytes."""
    if "body" in case:
        return str(case["body"])
    return json.dumps({"model": SERVED[0], "prompt": "x" * int(case["prompt_bytes"])})


_model_frontend: list[Any] = []


def use_model_frontend(url: str) -> None:
    """Fuzz through this frontend (the test module's own stack) instead of starting one."""
    _model_frontend[:] = [url]


@contextlib.contextmanager
def model_stack() -> Iterator[str]:
    """A real tritonserver serving the mock tool LLM (a deterministic Python-backend model that speaks the vLLM
    backend's I/O) and the toolkit's frontend in front of it (64 KiB bodies); yields the frontend's URL."""
    import tempfile

    from tests.support.mock_stream import add_streaming_mock
    from tests.support.paths import EXAMPLES
    from tritonpkg.frontend import FrontendServer, FrontendSettings
    from tritonpkg.repository import package_spec
    from tritonpkg.runtime import TritonServer, ensure_runtime
    from tritonpkg.spec import load_spec

    with tempfile.TemporaryDirectory(prefix="fuzz-frontend-") as tmp:
        root = Path(tmp)
        repo = root / "repository"
        package_spec(load_spec(EXAMPLES / "mock-tool-llm"), repo)
        add_streaming_mock(root, repo)
        with TritonServer(repo, runtime=ensure_runtime(), startup_timeout=180) as server, FrontendServer(
                FrontendSettings(triton_grpc_url=server.grpc_url, port=0, model_repository=repo,
                                 triton_admin_key=server.admin_key, max_request_bytes=MODEL_BODY_LIMIT)) as fe:
            yield str(fe.url)


def _model_frontend_url() -> str:
    if not _model_frontend:
        import atexit

        stack = model_stack()
        _model_frontend.append(stack.__enter__())
        atexit.register(stack.__exit__, None, None, None)
    return str(_model_frontend[0])


def _run_model_frontend(case: dict[str, Any], root: Path) -> Any:
    """A 2xx, or a 4xx in OpenAI's error shape (a 400 for a JSON object names the field); never a 5xx, also not
    as an error event inside a stream, and every answer within the bound."""
    import httpx

    method = "GET" if case["route"].startswith("/v1/models") else "POST"
    body = _model_body(case)
    answer = httpx.request(method, _model_frontend_url() + case["route"], timeout=15,
                           content=body.encode("utf-8", "surrogatepass"), headers={"content-type": "application/json"})
    if answer.status_code < 400:
        for line in answer.text.splitlines():
            if line.startswith("data: {") and '"error"' in line:
                error = json.loads(line.removeprefix("data: ")).get("error") or {}
                if not isinstance(error, dict) or int(error.get("code") or 500) >= 500:
                    raise Violation(f"frontend_model: a stream ended in a server error: {line[:300]}")
        return answer.status_code
    try:
        error = answer.json()["error"]
        message = error["message"]
    except (ValueError, KeyError, TypeError):
        raise Violation(f"frontend_model: {answer.status_code} not in OpenAI's error shape: {answer.text[:300]}") \
            from None
    if answer.status_code >= 500:
        raise Violation(f"frontend_model: {answer.status_code} for a client's body: {message[:300]}")
    if answer.status_code == 400 and not error.get("param") and _is_object(body):
        raise Violation(f"frontend_model: a 400 that names no field: {message[:300]}")
    return answer.status_code


# -- template-rendered model.py and ensemble configs ----------------------------------------------------------

_CODE_TEXT = st.one_of(st.sampled_from(['"', "'", '"""', "'" * 3, "\\", "\\x00", "\n", "\r", "\u2028", "\u2029",
                                        "\ud800", "{{ x }}", "{%", "#", "\x00", "é", "\ufeff", "\x1b[2J",
                                        "'); import os; os.system('x') #", '"""; import os #', "\\N{DASH}"]),
                       st.text(max_size=8))
_WEIGHTS = st.one_of(st.none(), st.builds(lambda a, b: a + b, st.sampled_from(["", "s3://bkt/", "hf://o/n@", "w/",
                                                                              "./", "../", "/abs/"]),
                                          st.lists(_CODE_TEXT, max_size=4).map("".join)))
_MODEL_NAMES = st.one_of(st.sampled_from(["m", "a.b-c", "A_1", "m" * 200, "x" * 201, "-m", ".m", "m\n", "m/x", "é"]),
                         st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,12}", fullmatch=True))
_TENSOR_NAMES = st.one_of(st.sampled_from(["TEXT", "X", "a.b-c", "_", "x\n", "X'", 'X"', "1X", "é", ""]),
                          st.from_regex(r"[A-Za-z_][A-Za-z0-9_.\-]{0,10}", fullmatch=True))
_T_TENSOR = st.fixed_dictionaries({"name": _TENSOR_NAMES, "data_type": st.sampled_from(["FP32", "STRING", "INT64",
                                                                                        "BYTES", "x"]),
                                   "dims": st.lists(st.sampled_from([-1, 1, 3, 2**63 - 1]), min_size=1, max_size=2)},
                                  optional={"optional": st.booleans()})
_IDENT = st.one_of(st.sampled_from(["model", "run", "\u210c", "é", "class", "None", "a b", "", "x\n"]),
                   st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True))
_HOOK_FILES = st.one_of(st.sampled_from(["hooks.py", "a.b.py", "é.py", "x.py\n", "../x.py", "hooks.pyc", ".py"]),
                        st.from_regex(r"[a-z_][a-z0-9_]{0,6}\.py", fullmatch=True))
_T_PARAMS = st.fixed_dictionaries({}, optional={
    "module": _HOOK_FILES, "model": _IDENT, "preprocess": st.one_of(st.none(), _IDENT),
    "postprocess": st.one_of(st.none(), _IDENT), "factory": st.booleans(),
    "tokenizer": st.one_of(st.sampled_from(["tokenizer", "tokenizer/tokenizer.json", "../x", "/etc"]), _CODE_TEXT),
    "mode": st.sampled_from(["encode", "decode", "x"]), "add_special_tokens": st.booleans(),
    "max_length": st.one_of(st.none(), st.integers(-1, 2**64)), "dtype": st.sampled_from(["float32", "x"]),
    "omp_wait_policy": st.one_of(st.none(), st.sampled_from(["PASSIVE", "ACTIVE", "x"])),
    "matryoshka_dimensions": st.one_of(st.none(), st.lists(st.integers(-1, 2**40), max_size=3))})
_TEMPLATE_SPEC = st.fixed_dictionaries({
    "template": st.sampled_from(["custom", "custom", "tokenizer", "ensemble", "ensemble", "embedding", "scoring"]),
    "name": _MODEL_NAMES, "version": st.sampled_from([1, 2, 2**63 - 1]), "weights": _WEIGHTS, "params": _T_PARAMS,
    "max_batch_size": st.sampled_from([0, 4]),
    "inputs": st.one_of(st.none(), st.lists(_T_TENSOR, max_size=2)),
    "outputs": st.one_of(st.none(), st.lists(_T_TENSOR, max_size=2))})
_LITERAL_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-2**80, 2**80), st.just(-0.0),
                            st.floats(), _CODE_TEXT, st.text())
_LITERAL = st.recursive(_LITERAL_SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                                 st.dictionaries(_CODE_TEXT, inner, max_size=3)),
                        max_leaves=10)


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


TEMPLATE_CASES = st.one_of(st.builds(lambda s: {"spec": s}, _TEMPLATE_SPEC),
                           st.builds(lambda v: {"literal": v}, _LITERAL),
                           st.builds(lambda n: {"literal": _nested(n)}, st.integers(30, 34)),
                           st.builds(lambda n: {"power_of_ten": n}, st.sampled_from([4299, 4300, 10_000])))


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (True is not 1, -0.0 is not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a.hex() == b.hex() if a == a else b != b
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def _literals(source: str) -> dict[str, Any]:
    """Every top-level `NAME = <literal>` of a module, evaluated."""
    import ast

    out: dict[str, Any] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            with contextlib.suppress(ValueError, TypeError, SyntaxError):
                out[node.targets[0].id] = ast.literal_eval(node.value)
    return out


def _run_literal(value: Any) -> Any:
    """pyliteral's own promise: the literal, placed in an assignment, parses and evaluates back to the value."""
    from tritonpkg.repository.templates import pyliteral

    text = pyliteral(value)
    if not text.isascii():
        raise Violation(f"template: pyliteral wrote non-ASCII: {text[:200]!r}")
    got = _literals(f"X = {text}\n").get("X", Violation)
    if not _same(got, value):
        raise Violation(f"template: {value!r:.200} came back as {got!r:.200}")
    return text


def _template_spec(case: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": case["name"], "version": case["version"], "kind": "python",
                            "target_release": "24.10",
                            "python": {"template": case["template"], "parameters": case["params"],
                                       "max_batch_size": case["max_batch_size"]}}
    if case["weights"] is not None:
        spec["weights"] = case["weights"]
    for key in ("inputs", "outputs"):
        if case[key] is not None:
            spec["python"][key] = case[key]
    if "module" in case["params"]:
        spec["python"]["files"] = [case["params"]["module"]]
    return spec


def _run_template(case: dict[str, Any], root: Path) -> Any:
    """A python-kind spec whose values reach generated code, packaged (pure: build_models writes nothing); then
    every template-rendered model.py parses, has its template's statements and carries each value exactly, and
    every config.pbtxt parses in Triton's protobuf with an ensemble's graph whole."""
    if "literal" in case:
        return _run_literal(case["literal"])
    if "power_of_ten" in case:  # an int past Python's 4300-digit str() limit (not JSON the corpus can hold)
        return _run_literal(10 ** case["power_of_ten"])
    from tritonpkg.repository.build import build_models
    from tritonpkg.spec import load_spec

    spec_case = case["spec"]
    folder = root / "spec"
    _write(folder / "tokenizer" / "tokenizer.json", '{"model": {}}')
    module = spec_case["params"].get("module")
    if isinstance(module, str) and _inside(folder, module) is not None:
        _write(folder / module, "def model(inputs):\n    return inputs\n")
    (folder / "tritonpkg.yaml").write_text(yaml.safe_dump(_template_spec(spec_case), allow_unicode=True), "utf-8",
                                           "surrogatepass")
    spec = load_spec(folder)
    models = build_models(spec)
    _check_built(spec, models)
    return models


def _type_name(value: int) -> str:
    from tritonclient.grpc import model_config_pb2 as mc

    return str(mc.DataType.Name(value))


def _check_built(spec: Any, models: list[Any]) -> None:
    from tritonpkg.repository import templates
    from tritonpkg.repository.config import parse_pbtxt

    configs = {}
    for m in models:
        configs[m.name] = parsed = parse_pbtxt(m.files[m.config_path].decode())
        if parsed.name != m.name:
            raise Violation(f"template: config.pbtxt names {parsed.name!r}, the model is {m.name!r}")
        if m.role == "ensemble":
            continue
        source = m.files[f"{m.name}/{m.version}/model.py"].decode()
        if templates.code_shape(source) != list(templates.expected_shape(m.role) or ()):
            raise Violation(f"template: {m.name}/model.py has statements its template ({m.role}) does not make")
        values = _literals(source)
        expected: dict[str, Any] = {"MODEL_NAME": m.name}
        if m.role == "custom":
            expected["INPUTS"] = [{"name": t.name, "data_type": _type_name(t.data_type), "dims": list(t.dims),
                                   "optional": t.optional} for t in parsed.input]
        if m.role == "tokenizer":
            expected["INPUT"] = parsed.input[0].name
            expected["OUTPUTS"] = [t.name for t in parsed.output]
        if m.role in ("embedding", "scoring"):
            expected["SETTINGS"] = {**values.get("SETTINGS", {}), "weights": spec.weights_location()}
        for key, want in expected.items():
            if not _same(values.get(key), want):
                raise Violation(f"template: {m.name}/model.py {key} = {values.get(key)!r:.200}, "
                                f"expected {want!r:.200}")
    for name, parsed in configs.items():
        _check_ensemble(name, parsed, configs)


def _check_ensemble(name: str, parsed: Any, configs: dict[str, Any]) -> None:
    """Each step names a model of the package and only its tensors; each tensor a step reads is the ensemble's
    input or an earlier step's output; each ensemble output is some step's."""
    if parsed.platform != "ensemble":
        return
    known = {t.name for t in parsed.input}
    for step in parsed.ensemble_scheduling.step:
        model = configs.get(step.model_name)
        if model is None:
            raise Violation(f"template: ensemble {name} steps into {step.model_name!r}, not a model of the package")
        if not set(step.input_map) <= {t.name for t in model.input} \
                or not set(step.output_map) <= {t.name for t in model.output}:
            raise Violation(f"template: ensemble {name} maps tensors {step.model_name} does not have")
        if not set(step.input_map.values()) <= known:
            raise Violation(f"template: ensemble {name} reads {sorted(set(step.input_map.values()) - known)} "
                            "before any step writes it")
        known |= set(step.output_map.values())
    missing = sorted({t.name for t in parsed.output} - known)
    if missing:
        raise Violation(f"template: ensemble {name} never writes its outputs {missing}")


def _template_errors() -> tuple[type[BaseException], ...]:
    from tritonpkg.errors import PackageError, SpecError

    return (SpecError, PackageError)


TARGETS: dict[str, Target] = {}


def _targets() -> dict[str, Target]:
    if not TARGETS:
        TARGETS.update({t.name: t for t in (
            Target("spec", SPEC_CASES, _run_spec, _spec_errors()),
            Target("validate", REPO_CASES, _run_validate, (), check_result=_check_report,
                   warm={"models": [{"name": "m", "config": 'backend: "vllm"', "versions": {"1": {
                       "model.json": '{"model": "x", "enable_lora": true}', "multi_lora.json": '{"a": "./ad"}',
                       "ad": {"adapter_config.json": '{"r": 8, "lora_alpha": 8, "target_modules": ["q"]}'}}}}]}),
            Target("archive", ARCHIVE_CASES, _run_archive, _package_errors()),
            Target("wheel", WHEEL_CASES, _run_wheel, _plugin_errors()),
            Target("storage", STORAGE_CASES, _run_storage, _storage_errors()),
            Target("s3", STORAGE_CASES, _run_s3, _storage_errors(), smoke_examples=12),
            Target("hf", HF_CASES, _run_hf, _storage_errors()),
            Target("frontend", FRONTEND_CASES, _run_frontend, ()),
            Target("frontend_model", MODEL_FRONTEND_CASES, _run_model_frontend, (), smoke_examples=25),
            Target("template", TEMPLATE_CASES, _run_template, _template_errors()),
            Target("backend", BACKEND_CASES, _run_backend, _backend_errors(), names_it=_names_a_parameter),
        )})
    return TARGETS


def targets() -> dict[str, Target]:
    return _targets()
