"""Directory layout as Triton 2.51 polls it (behaviours observed on the real server):

- no config.pbtxt: loads only when a version dir holds model.py (auto-completed as the python
  backend); otherwise the poll fails with "Could not determine backend for model".
- config name differs from the directory: "unexpected directory name ... must equal model name".
- non-numeric version dirs are ignored ("fails to convert to integral number"); negative ones are
  accepted by the core but the python backend looks for 18446744073709551615/ and never loads.
- a version dir without the backend's file: the python stub fails to preinitialize.
- a version dir beyond int64 (`99999999999999999999999`): the whole server dies of an uncaught
  std::out_of_range when it reads the model's versions (not just that model)."""

from __future__ import annotations

from collections.abc import Iterator

from tritonpkg import safepath
from tritonpkg.validate.context import Context
from tritonpkg.validate.loaded import CONFIG, ENGINE_ARGS, VERSION_RE, LoadedModel
from tritonpkg.validate.report import Problem
from tritonpkg.validate.rules.versions import loaded_versions

MODEL_FILES = {
    "python": "model.py", "vllm": ENGINE_ARGS, "onnxruntime": "model.onnx", "tensorrt": "model.plan",
    "pytorch": "model.pt", "tensorflow": "model.savedmodel", "openvino": "model.xml",
}


def config_missing(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    if m.has_config_file:
        return
    if m.backend == "python":
        yield m.problem("layout.config-missing", "warning",
                        "no config.pbtxt: Triton auto-completes a python-backend config from model.py",
                        expected="an explicit config.pbtxt (inputs, outputs, instance_group)")
    else:
        yield m.problem("layout.config-missing", "error",
                        "no config.pbtxt and no model.py: Triton cannot determine the backend",
                        expected="config.pbtxt with backend or platform")


def name_matches_dir(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    if m.config is not None and m.config.name and m.config.name != m.name:
        yield m.problem("layout.name-mismatch", "error",
                        f"config name {m.config.name!r} differs from the directory name",
                        field="name", expected=f"name: \"{m.name}\" (or no name)")


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def version_dirs(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    for v, d in sorted(m.versions.items()):
        if not INT64_MIN <= v <= INT64_MAX:
            yield m.problem("layout.version-range", "error",
                            f"version directory {safepath.quote(d.name)} is outside Triton's int64 model versions: "
                            "the server crashes (std::out_of_range) when it reads this model's versions",
                            file=d, field="version", expected=f"a version from 1 to {INT64_MAX}")
        elif v < 0:
            yield m.problem("layout.version-dir", "error",
                            f"version directory {d.name!r} is negative: the python backend cannot find its files",
                            file=d, expected="a version number >= 0")


def model_file(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    """The file each backend reads from the version dir (default_model_filename overrides it)."""
    if m.config is None or m.is_ensemble:
        return
    name = m.config.default_model_filename or MODEL_FILES.get(m.backend)
    if not name:
        return
    active = loaded_versions(m)
    for v, d in sorted(m.versions.items()):
        path = d / name
        if v < 0 or path.is_file() or path.is_dir():  # a folder for model.savedmodel
            continue
        loads = v in active
        what = "a FIFO, device or dangling link" if path.exists() or path.is_symlink() else "no"
        yield m.problem("layout.model-file", "error" if loads else "warning",
                        f"version {v} has {what} {name} (backend {m.backend!r})"
                        + ("" if loads else "; the version policy does not load it"),
                        file=d, expected=f"{m.rel(d / name)}")


def stray_entries(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    allowed = {CONFIG, "configs"}
    if m.config is not None:
        allowed |= {o.label_filename for o in m.config.output if o.label_filename}
    for entry in m.entries:
        if entry in allowed or VERSION_RE.match(entry):
            continue
        kind = "directory" if (m.path / entry).is_dir() else "file"
        yield m.problem("layout.stray", "warning", f"stray {kind} {entry!r}: Triton ignores it",
                        file=m.path / entry, expected="only config.pbtxt and numeric version directories")


RULES = [config_missing, name_matches_dir, version_dirs, model_file, stray_entries]
