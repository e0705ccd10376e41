"""Triton's auto-complete, applied the way the server applies it, so that rules judge the config Triton
will actually run.

Triton 2.51 auto-completes unless it was started with `--disable-auto-complete-config` (or
`--strict-model-config=true`). For a Python-based backend the Python backend starts a stub that calls
the backend's `TritonPythonModel.auto_complete_config(pb_utils.ModelConfig(json))`; the core then takes
from the answer only max_batch_size, inputs, outputs, a scheduler when the config names none, and the
transaction policy (`TritonModel::UpdateModelConfig`). `pb_utils.ModelConfig` refuses to change what
the config says explicitly (a different max_batch_size, data type, dims, `optional` or decoupled value):
that ValueError fails the load.

Here the same happens with the same code: the toolkit's backend's own `auto_complete_config`, called on
Triton's own `ModelConfig` class (from the installed runtime wheel) in a subprocess, with the config as
the JSON Triton hands the stub. Only backends of the toolkit's backend directory run (trusted code); a
Python-backend model.py of the repository under validation is never executed, so its own
auto_complete_config, if it has one, is reported as not applied."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from tritonclient.grpc import model_config_pb2 as pb

from tritonpkg.validate.loaded import LoadedModel, read_text
from tritonpkg.validate.report import Problem

UTILS = "triton_python_backend_utils.py"
PROBE_TIMEOUT_S = 120.0

_PROBE = r"""
import importlib.util, json, sys, traceback
utils, backend, configs = json.load(sys.stdin)
sys.path.insert(0, utils.rsplit("/", 1)[0])
import triton_python_backend_utils as pb_utils
spec = importlib.util.spec_from_file_location("_tritonpkg_autocomplete_backend", backend)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
cls = module.TritonPythonModel
out = []
for text in configs:
    cfg = pb_utils.ModelConfig(text)
    try:
        if hasattr(cls, "auto_complete_config"):
            cfg = cls.auto_complete_config(cfg)
        if not isinstance(cfg, pb_utils.ModelConfig):
            raise TypeError("auto_complete_config must return a valid pb.ModelConfig object")
        out.append({"config": cfg._model_config})
    except Exception as exc:
        where = {}
        for frame, _ in traceback.walk_tb(exc.__traceback__):
            if frame.f_code.co_filename == pb_utils.__file__:
                loc = frame.f_locals
                where = {"method": frame.f_code.co_name,
                         "proposed": loc.get("input", loc.get("output")),
                         "current": loc.get("current_input", loc.get("current_output"))}
        out.append({"error": f"{type(exc).__name__}: {exc}", **json.loads(json.dumps(where, default=str))})
print(json.dumps(out))
"""


def utils_file() -> Path | None:
    """Triton's triton_python_backend_utils.py from the installed nvidia-pytriton wheel (not imported)."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "tritonserver" / "backends" / "python" / UTILS
    return path if path.is_file() else None


def triton_json(cfg: pb.ModelConfig, name: str) -> dict[str, Any]:
    """The config as Triton's core serialises it for a backend: field names as in the proto, every
    field without presence printed, 64-bit integers as numbers (protobuf's JSON writes them as strings)."""
    data = json_format.MessageToDict(cfg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    data["name"] = data.get("name") or name
    _ints(data, cfg.DESCRIPTOR)
    return data


_INT64 = {FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT64,
          FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64}


def _ints(data: dict[str, Any], desc: Descriptor) -> None:
    for key, value in data.items():
        f = desc.fields_by_name.get(key)
        if f is None:
            continue
        sub = f.message_type
        if sub is not None and sub.GetOptions().map_entry:
            vf = sub.fields_by_name["value"]
            for k, v in value.items():
                if vf.message_type is not None:
                    _ints(v, vf.message_type)
                elif vf.type in _INT64:
                    value[k] = int(v)
            continue
        items = value if isinstance(value, list) else [value]
        if sub is not None:
            for item in items:
                _ints(item, sub)
        elif f.type in _INT64:
            data[key] = [int(v) for v in value] if isinstance(value, list) else int(value)


def apply(models: list[LoadedModel], backends_dir: Path | None, enabled: bool = True) -> None:
    """Complete each model's config in place, as Triton does at load: m.written keeps the config as
    written, m.auto_filled names the fields auto-complete supplied, m.auto_finding is its own finding
    (an error when Triton's auto-complete fails the load). Disabled: the configs stay as written."""
    if not enabled:
        return
    toolkit = _toolkit_backends(backends_dir)
    groups: dict[Path, list[LoadedModel]] = {}
    for m in models:
        if m.config is None or m.is_ensemble or not m.backend:
            continue
        if m.backend == "python":
            _python_model(m)
        elif m.backend in toolkit:
            groups.setdefault(toolkit[m.backend], []).append(m)
    utils = utils_file()
    for src, group in groups.items():
        source = f"the {group[0].backend!r} backend's auto_complete_config"
        if utils is None:
            for m in group:
                m.auto_finding = m.problem(
                    "autocomplete.unavailable", "warning",
                    f"{source} was not applied: Triton's Python backend (nvidia-pytriton) is not installed here, "
                    "so the config is judged as written", expected="pip install -e '.[runtime]'")
            continue
        texts = tuple(json.dumps(triton_json(m.config or pb.ModelConfig(), m.name), sort_keys=True) for m in group)
        stat = src.stat()
        answers = _probe(str(utils), str(src), stat.st_mtime_ns, stat.st_size, texts)
        for m, answer in zip(group, answers, strict=True):
            _merge(m, answer, source)


def _toolkit_backends(backends_dir: Path | None) -> dict[str, Path]:
    """name -> model.py of each backend folder: the only code auto-complete runs. Matched by folder name,
    never by joining the config's `backend` to a path (`backend: "../x"` names no folder here)."""
    if backends_dir is None or not backends_dir.is_dir():
        return {}
    return {p.name: (p / "model.py").resolve() for p in backends_dir.iterdir()
            if not p.name.startswith((".", "_")) and p.name != "python" and (p / "model.py").is_file()}


def _python_model(m: LoadedModel) -> None:
    """A Python-backend model's own auto_complete_config is the repository's code: never run here."""
    if m.config is None:
        return
    name = m.config.default_model_filename or "model.py"
    for v in sorted(m.versions, reverse=True):
        src = m.versions[v] / name
        if not src.is_file():
            continue
        try:
            tree = ast.parse(read_text(src))
        except (SyntaxError, OSError, RecursionError, MemoryError, ValueError):
            return  # backend.python-syntax reports it
        if any(isinstance(c, ast.ClassDef) and c.name == "TritonPythonModel"
               and any(isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == "auto_complete_config"
                       for f in c.body) for c in tree.body):
            m.auto_finding = m.problem(
                "autocomplete.not-run", "warning",
                f"{m.rel(src)} defines auto_complete_config: Triton runs it at load and it may fill max_batch_size, "
                "inputs, outputs, the scheduler or the transaction policy; validate does not run a repository's "
                "code, so those fields are judged as written", file=src,
                expected="the fields written in config.pbtxt (then auto-complete has nothing to add)")
        return


@lru_cache(maxsize=32)
def _probe(utils: str, backend: str, mtime_ns: int, size: int, texts: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    """One subprocess per backend and repository: the backend's module imported by path, its
    auto_complete_config called on each config. (mtime_ns, size) key the cache to the backend's file."""
    failed: dict[str, Any] = {"error": "", "probe": True}
    try:
        res = subprocess.run([sys.executable, "-c", _PROBE], check=False, capture_output=True, text=True,
                             input=json.dumps([utils, backend, list(texts)]), timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        return tuple({**failed, "error": f"{type(exc).__name__}: {exc}"} for _ in texts)
    try:
        answers = json.loads(res.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        tail = (res.stderr.strip().splitlines() or ["no output"])[-1]
        return tuple({**failed, "error": tail[:300]} for _ in texts)
    return tuple(answers)


def _merge(m: LoadedModel, answer: dict[str, Any], source: str) -> None:
    """Take from the backend's answer what Triton's core takes (max_batch_size, inputs, outputs, a
    scheduler when the config names none, the transaction policy), recording what was supplied."""
    written = m.config
    if written is None:
        return
    if answer.get("probe"):
        m.auto_finding = m.problem("autocomplete.unavailable", "warning",
                                   f"{source} could not be run here ({answer['error']}), so the config is judged as "
                                   "written", expected="a backend model.py that imports with this interpreter")
        return
    if "error" in answer:
        m.auto_finding = _conflict(m, answer, source)
        return
    try:
        updated = json_format.ParseDict(answer["config"], pb.ModelConfig(), ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        m.auto_finding = m.problem("autocomplete.result", "error",
                                   f"{source} returned a config Triton cannot read: {exc}",
                                   expected="a ModelConfig in Triton's JSON form")
        return
    filled: dict[str, str] = {}
    completed = pb.ModelConfig()
    completed.CopyFrom(written)
    completed.max_batch_size = updated.max_batch_size
    del completed.input[:]
    completed.input.extend(updated.input)
    del completed.output[:]
    completed.output.extend(updated.output)
    mine, theirs = written.WhichOneof("scheduling_choice"), updated.WhichOneof("scheduling_choice")
    if mine is None and theirs is not None:
        getattr(completed, theirs).CopyFrom(getattr(updated, theirs))
        filled[theirs] = source
    elif theirs is not None and mine != theirs:
        m.auto_finding = m.problem("autocomplete.conflict", "error",
                                   f"{source} sets {theirs} but the config names {mine} (Triton: cannot update "
                                   "scheduling choice when auto-completing)", field=mine, expected=f"no {mine}")
        return
    if updated.HasField("model_transaction_policy"):
        completed.model_transaction_policy.decoupled = updated.model_transaction_policy.decoupled
        if not written.HasField("model_transaction_policy"):
            filled["model_transaction_policy"] = source
    if completed.max_batch_size != written.max_batch_size:
        filled["max_batch_size"] = source
    for kind in ("input", "output"):
        before = {t.name: t for t in getattr(written, kind)}
        for i, t in enumerate(getattr(completed, kind)):
            old = before.get(t.name)
            if old is None:
                filled[f"{kind}[{i}]"] = source
                continue
            for attr in ("data_type", "dims", "optional") if kind == "input" else ("data_type", "dims"):
                if getattr(old, attr) != getattr(t, attr):
                    filled[f"{kind}[{i}].{attr}"] = source
    m.written, m.config, m.auto_filled = written, completed, filled


def _conflict(m: LoadedModel, answer: dict[str, Any], source: str) -> Problem:
    """The ValueError of pb_utils.ModelConfig (or of the backend's own code), located at the field
    the config states and the backend wanted otherwise."""
    cfg = m.config or pb.ModelConfig()
    method, proposed, current = answer.get("method"), answer.get("proposed"), answer.get("current")
    fld, expected = None, f"a config {source} accepts"
    if method == "set_model_transaction_policy":
        fld, expected = "model_transaction_policy", "no model_transaction_policy (auto-complete sets decoupled: true)"
    elif method == "set_max_batch_size":
        fld, expected = "max_batch_size", "no max_batch_size (auto-complete sets it)"
    elif method == "set_dynamic_batching":
        fld = cfg.WhichOneof("scheduling_choice")
        expected = "no scheduler, or dynamic_batching"
    elif method in ("add_input", "add_output") and isinstance(proposed, dict) and isinstance(current, dict):
        kind = method.removeprefix("add_")
        index = next((i for i, t in enumerate(getattr(cfg, kind)) if t.name == proposed.get("name")), None)
        attr = ("data_type" if current.get("data_type") not in ("TYPE_INVALID", proposed.get("data_type"))
                else "dims" if current.get("dims") and current.get("dims") != proposed.get("dims") else "optional")
        if index is not None:
            fld = f"{kind}[{index}].{attr}"
            expected = f"{attr} {proposed.get(attr)!r} (what the backend declares), or leave it out"
    return m.problem("autocomplete.conflict", "error",
                     f"Triton's auto-complete fails: {answer['error']}", field=fld, expected=expected)
