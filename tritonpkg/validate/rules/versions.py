"""version_policy against the version directories present (real server: a specific version that is
missing is logged and skipped; when nothing is left: "at least one version must be available")."""

from __future__ import annotations

from collections.abc import Iterator

from tritonpkg.validate.context import Context
from tritonpkg.validate.loaded import LoadedModel
from tritonpkg.validate.report import Problem


def loaded_versions(m: LoadedModel) -> set[int]:
    """The versions Triton will load under the model's version policy."""
    present = sorted(m.versions)
    if m.config is None:
        return set(present[-1:])  # Triton's default policy: the latest version
    policy = m.config.version_policy
    which = policy.WhichOneof("policy_choice")
    if which == "all":
        return set(present)
    if which == "specific":
        return set(policy.specific.versions) & set(present)
    n = policy.latest.num_versions if which == "latest" else 1
    return set(present[-n:]) if n > 0 else set()


def version_policy(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    if m.config is None:
        return
    policy = m.config.version_policy
    which = policy.WhichOneof("policy_choice")
    if which == "specific":
        for i, v in enumerate(policy.specific.versions):
            if v not in m.versions:
                yield m.problem("version.missing", "warning" if loaded_versions(m) else "error",
                                f"version_policy names version {v}, but there is no directory {v}/",
                                field=f"version_policy.specific.versions[{i}]",
                                expected=f"one of the version directories: {sorted(m.versions) or 'none'}")
    if which == "specific" and not policy.specific.versions:
        yield m.problem("version.specific-empty", "error", "version_policy specific lists no versions",
                        field="version_policy.specific",
                        expected=f"versions: [...] from {sorted(m.versions) or 'the version directories'}")
    if which == "latest" and policy.latest.num_versions < 1:
        yield m.problem("version.latest", "error", "latest.num_versions must be at least 1",
                        field="version_policy.latest.num_versions", expected=">= 1")
    if not m.versions:
        yield m.problem("version.none", "error", "no numeric version directory: Triton has nothing to load",
                        file=m.path, expected=f"{m.rel(m.path)}/1/")


RULES = [version_policy]
