"""Which backend runs the model, and what that backend demands of the config (after Triton's
auto-complete: autocomplete.py).

Real 2.51 behaviour: no backend/platform in config.pbtxt loads only with a model.py (auto-completed to
python); an unknown backend fails with "unable to find backend library for backend 'x'";
`ensemble_scheduling` on a non-ensemble fails at poll. Decoupled vs a plain python model.py loads
either way (it fails per request), but a backend whose code raises unless decoupled fails at load."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

from tritonpkg.validate.context import Context
from tritonpkg.validate.loaded import MAX_FILE_BYTES, LoadedModel, read_text
from tritonpkg.validate.report import Problem
from tritonpkg.validate.rules.versions import loaded_versions


def backend_known(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    cfg = m.config
    if cfg is None or m.is_ensemble:
        return
    if not cfg.backend and not cfg.platform:
        if m.backend != "python":
            yield m.problem("backend.missing", "error", "neither backend nor platform is set and no model.py exists",
                            field="backend", expected='backend: "python" or backend: "vllm"')
        return
    available = ctx.available_backends()
    if available is not None and m.backend not in available:
        where = "the local runtime" if ctx.is_local else f"the {ctx.target} vLLM image"
        yield m.problem("backend.unavailable", "error" if ctx.is_local else "warning",
                        f"backend {m.backend!r} is not available on {where}",
                        field="backend" if cfg.backend else "platform", expected=" or ".join(sorted(available)))


KNOWN_PLATFORMS = {"ensemble", "tensorrt_plan", "tensorflow_graphdef", "tensorflow_savedmodel",
                   "onnxruntime_onnx", "pytorch_libtorch"}


def platform_known(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    """2.51: "unexpected platform type 'python'" (python is a backend, not a platform); an ensemble
    "must have platform type 'ensemble' and empty backend type"."""
    cfg = m.config
    if cfg is None:
        return
    if cfg.platform and cfg.platform not in KNOWN_PLATFORMS:
        hint = f'; use backend: "{cfg.platform}"' if cfg.platform in ("python", "vllm") else ""
        yield m.problem("backend.platform", "error", f"unknown platform {cfg.platform!r}{hint}",
                        field="platform", expected=" or ".join(sorted(KNOWN_PLATFORMS)))
    if m.is_ensemble and cfg.backend:
        yield m.problem("backend.ensemble-backend", "error", f"an ensemble with backend {cfg.backend!r}",
                        field="backend", expected="no backend on a platform: \"ensemble\" model")


def execution_env(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    """EXECUTION_ENV_PATH must name an existing archive (2.51: "Failed to get the canonical path")."""
    cfg = m.config
    if cfg is None or "EXECUTION_ENV_PATH" not in cfg.parameters:
        return
    raw = cfg.parameters["EXECUTION_ENV_PATH"].string_value
    path = Path(raw.replace("$$TRITON_MODEL_DIRECTORY", str(m.path)))
    if not path.exists():
        yield m.problem("backend.env-path", "error", f"EXECUTION_ENV_PATH {raw!r} does not exist",
                        field="parameters[EXECUTION_ENV_PATH]",
                        expected="a conda-pack archive, e.g. $$TRITON_MODEL_DIRECTORY/env.tar.gz")


def python_model_class(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    """A python model.py must compile and define TritonPythonModel (2.51: SyntaxError /
    "has no attribute 'TritonPythonModel'" at load)."""
    cfg = m.config
    if cfg is None or m.backend != "python":
        return
    name = cfg.default_model_filename or "model.py"
    for v in sorted(loaded_versions(m)):
        src = m.versions[v] / name
        if not src.is_file():
            continue
        try:
            tree = ast.parse(read_text(src), filename=str(src))
        except SyntaxError as exc:
            yield m.problem("backend.python-syntax", "error", f"{exc.msg}", file=src,
                            at=(exc.lineno or 1, exc.offset or 1), expected="a model.py that compiles")
            continue
        except (OSError, RecursionError, MemoryError) as exc:
            yield m.problem("backend.python-syntax", "error", f"{name} cannot be read or parsed: "
                            f"{getattr(exc, 'strerror', None) or type(exc).__name__}", file=src,
                            expected=f"a model.py of at most {MAX_FILE_BYTES} bytes that compiles")
            continue
        if not _defines(tree, "TritonPythonModel"):
            yield m.problem("backend.python-class", "error", "model.py defines no TritonPythonModel",
                            file=src, expected="class TritonPythonModel with initialize/execute")


def _defines(tree: ast.Module, name: str) -> bool:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
            (a.asname or a.name).split(".")[0] == name for a in node.names
        ):
            return True
    return False


def ensemble_scheduling(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    cfg = m.config
    if cfg is None:
        return
    if cfg.HasField("ensemble_scheduling") and not m.is_ensemble:
        yield m.problem("backend.ensemble-scheduling", "error",
                        "ensemble_scheduling is set but the platform is not 'ensemble'",
                        field="ensemble_scheduling", expected='platform: "ensemble"')
    if m.is_ensemble and not cfg.HasField("ensemble_scheduling"):
        yield m.problem("backend.ensemble-scheduling", "error", "platform 'ensemble' without ensemble_scheduling",
                        field="platform", expected="ensemble_scheduling { step [ ... ] }")


def decoupled_policy(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    cfg = m.config
    if cfg is None or m.is_ensemble:
        return
    decoupled = cfg.model_transaction_policy.decoupled
    if m.auto_finding is not None and m.auto_finding.severity == "error":
        return  # auto-complete already fails the load, before the backend's initialize runs
    if m.backend not in ("python", "") and ctx.backends_dir is not None:
        src = ctx.backends_dir / m.backend / "model.py"
        if src.is_file() and _requires_decoupled(src) and not decoupled:
            yield m.problem("backend.decoupled", "error",
                            f"backend {m.backend!r} refuses to load unless the model is decoupled",
                            field="model_transaction_policy", expected="model_transaction_policy { decoupled: true }")
        return
    if m.backend == "python":
        for v in sorted(m.versions):
            src = m.versions[v] / (cfg.default_model_filename or "model.py")
            if not src.is_file():
                continue
            try:
                sends = "get_response_sender" in read_text(src)
            except OSError:
                break  # python_model_class reports it
            if sends and not decoupled:
                yield m.problem("backend.decoupled", "warning",
                                f"{m.rel(src)} uses get_response_sender but the model is not decoupled: "
                                "requests will fail", field="model_transaction_policy",
                                expected="model_transaction_policy { decoupled: true }")
            break


@lru_cache(maxsize=16)
def _requires_decoupled(src: Path) -> bool:
    """True when the backend raises on `not using_decoupled_model_transaction_policy(...)`. Judged on the
    config after auto-complete, which makes the vllm backend's models decoupled unless the config says
    otherwise (then auto-complete fails first: autocomplete.py)."""
    try:
        tree = ast.parse(src.read_text())
    except (SyntaxError, UnicodeDecodeError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not):
            call = node.test.operand
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "using_decoupled_model_transaction_policy"
                    and any(isinstance(n, ast.Raise) for n in ast.walk(node))):
                return True
    return False


RULES = [backend_known, platform_known, ensemble_scheduling, decoupled_policy, execution_env, python_model_class]
