"""Install a model package's bundled plugin wheels into the runtime environment (see the package docstring)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from packaging.utils import canonicalize_name
from pydantic import BaseModel

from tritonpkg import compat
from tritonpkg.plugins.contents import check_footprint
from tritonpkg.plugins.errors import PluginError
from tritonpkg.plugins.records import PluginRecord, recorded_plugins
from tritonpkg.plugins.requires import unmet_requirements
from tritonpkg.plugins.target import TargetEnvironment, default_python, footprint_of, probe
from tritonpkg.plugins.wheel import WheelInfo, read_wheel

DEFAULT_GROUP = "vllm.logits_processors"


class InstalledPlugin(BaseModel):
    name: str
    version: str
    wheel: str
    sha256: str
    action: Literal["installed", "already-installed", "replaced"]
    previous_version: str | None = None
    entry_points: dict[str, dict[str, str]]
    python: str
    site_packages: str


def pinned_packages() -> list[str]:
    return list(compat.toolkit()["pinned_packages"])


def _check_against_lock(infos: list[WheelInfo], records: list[PluginRecord], wheels_dir: Path) -> None:
    by_wheel = {r.wheel: r for r in records if r.wheel}
    for info in infos:
        rec = by_wheel.pop(info.wheel, None)
        if rec is None:
            raise PluginError(f"{info.wheel} is bundled but the lock records no such plugin wheel",
                              file=wheels_dir / info.wheel, expected="only the wheels `tritonpkg package` bundled")
        if rec.sha256 != info.sha256:
            raise PluginError(f"plugin {info.name}: the wheel's sha256 differs from the lock",
                              file=wheels_dir / info.wheel, field="sha256", expected=rec.sha256)
    if by_wheel:
        raise PluginError(f"the lock records plugin wheel(s) missing from the package: {', '.join(sorted(by_wheel))}",
                          file=wheels_dir, expected="the wheels/ folder of the same model package")


def plan_checks(infos: list[WheelInfo], env: TargetEnvironment, pinned: Iterable[str]) -> None:
    """Refuse, before anything is installed, every wheel whose requirements the environment does not meet."""
    seen: dict[str, str] = {}
    for info in infos:
        if info.key in seen:
            raise PluginError(f"two wheels of plugin {info.name}: {seen[info.key]} and {info.wheel}",
                              file=info.wheel, expected="one wheel per plugin")
        seen[info.key] = info.wheel
        unmet = unmet_requirements(info.requires_dist, env.dists, pinned, marker_env=env.markers)
        if unmet:
            lines = "; ".join(f"{u.requirement!r}: {u.reason}" for u in unmet)
            raise PluginError(
                f"plugin {info.name} {info.version} cannot be installed without breaking the runtime: {lines}",
                file=info.wheel, field="Requires-Dist",
                expected=f"requirements the runtime at {env.executable} already satisfies "
                         "(plugins install with --no-deps)",
            )


def footprint_checks(todo: list[tuple[Path, WheelInfo]], env: TargetEnvironment, python: str,
                     pinned: Iterable[str], timeout: float) -> None:
    """Refuse, before anything is installed, a wheel that would write over what another distribution of
    the runtime owns (tritonpkg.plugins.contents), or replace an installed distribution that is no plugin."""
    if not todo:
        return
    fp = footprint_of(python, timeout)
    for path, info in todo:
        prev = env.dists.get(info.key)
        if prev is not None and any(env.owners.values()):
            registers = {g for g, names in env.owners.items()
                         if info.key in {canonicalize_name(d) for d in names.values()}}
            if not registers & (set(info.entry_points) - {"console_scripts", "gui_scripts"}):
                raise PluginError(f"plugin wheel {info.wheel} would replace {info.name} {prev}, an installed "
                                  "distribution that registers none of the plugin's entry-point groups",
                                  file=path, field="Name", expected="a plugin distribution name of its own")
        if info.contents is not None:
            check_footprint(path, info.name, info.contents, fp, pinned, where=f"the runtime at {env.executable}")


def _pip_install(python: str, wheels: list[Path], timeout: float) -> None:
    cmd = [python, "-m", "pip", "install", "--no-deps", "--no-index", "--disable-pip-version-check",
           "--no-input", "--quiet", *map(str, wheels)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PluginError(f"pip did not finish: {exc}", file=python) from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-6:])
        raise PluginError(f"pip could not install {', '.join(w.name for w in wheels)}:\n{tail}", file=python,
                          expected="a wheel built for this interpreter and platform, and pip in the runtime venv")


def install_bundled(
    wheels_dir: Path,
    *,
    python: str | None = None,
    lock: Mapping[str, Any] | Path | None = None,
    pinned: Iterable[str] | None = None,
    timeout: float = 300,
) -> list[InstalledPlugin]:
    """Install every wheel in `wheels_dir` into `python`'s environment; see tritonpkg.plugins."""
    wheels_dir = Path(wheels_dir)
    wheels = sorted(wheels_dir.glob("*.whl")) if wheels_dir.is_dir() else []
    infos = [read_wheel(w) for w in wheels]
    if lock is not None:
        _check_against_lock(infos, recorded_plugins(lock), wheels_dir)
    if not infos:
        return []
    python = python or default_python()
    pins = list(pinned) if pinned is not None else pinned_packages()
    groups = sorted({g for i in infos for g in i.entry_points} | {DEFAULT_GROUP})
    before = probe(python, groups, timeout)
    plan_checks(infos, before, pins)

    todo = [(w, i) for w, i in zip(wheels, infos, strict=True) if before.dists.get(i.key) != i.version]
    footprint_checks(todo, before, python, pins, timeout)
    if todo:
        _pip_install(python, [w for w, _ in todo], timeout)
    after = probe(python, groups, timeout) if todo else before
    out: list[InstalledPlugin] = []
    for info in infos:
        if after.dists.get(info.key) != info.version:
            raise PluginError(f"plugin {info.name}: pip reported success but {after.dists.get(info.key)} is installed",
                              file=python, expected=f"{info.name} {info.version}")
        for group, names in info.entry_points.items():
            missing = sorted(set(names) - set(after.entry_points.get(group, {})))
            if missing:
                raise PluginError(f"plugin {info.name}: entry point(s) {', '.join(missing)} of group {group} are not "
                                  "visible to the runtime interpreter (shadowed by another copy on its sys.path?)",
                                  file=python, field=group, expected=f"{names}")
        prev = before.dists.get(info.key)
        action: Literal["installed", "already-installed", "replaced"] = (
            "already-installed" if prev == info.version else ("replaced" if prev else "installed"))
        out.append(InstalledPlugin(name=info.name, version=info.version, wheel=info.wheel, sha256=info.sha256,
                                   action=action, previous_version=prev if action == "replaced" else None,
                                   entry_points=info.entry_points, python=python, site_packages=after.purelib))
    return out
