"""`tritonpkg validate`: predict, before deploying, what Triton 2.51 (or the target release) and vLLM
would reject when loading a model repository. Every problem is reported, each with file, line,
column, model and field; error = the server would refuse to load it, warning = it loads but is wrong.

    report = validate_repository(Path("repo"), target_release="24.10", contract=Path("contract.json"))
"""

from __future__ import annotations

from pathlib import Path

from tritonpkg import compat, paths
from tritonpkg.errors import TritonpkgError
from tritonpkg.repository.lock import LOCK_NAME
from tritonpkg.repository.lock import verify as verify_lock
from tritonpkg.validate.context import Context, count_gpus
from tritonpkg.validate.contract import check_contract, load_contract
from tritonpkg.validate.loaded import load_repository, read_json
from tritonpkg.validate.registry import run_rules
from tritonpkg.validate.report import Problem, Report

__all__ = ["Problem", "Report", "ValidateError", "validate_repository"]


class ValidateError(TritonpkgError):
    """The repository or contract cannot be validated at all (missing path, unreadable contract)."""


def validate_repository(repo: Path, target_release: str | None = None, contract: Path | None = None,
                        auto_complete: bool = True) -> Report:
    """Check every model in `repo`. `target_release`: a Triton release from the compatibility matrix,
    or 'local' (default: the toolkit's own runtime, Triton 2.51 + pinned vLLM on this machine).
    `auto_complete`: whether the server auto-completes configs (Triton's default); False for a server
    started with --disable-auto-complete-config (or --strict-model-config=true)."""
    repo = Path(repo)
    if not repo.is_dir():
        raise ValidateError("model repository not found", file=repo, expected="a directory of model directories")
    target = target_release or compat.LOCAL
    if target != compat.LOCAL:
        compat.get_release(target)  # raises CompatError naming the known releases
    models = load_repository(repo.resolve())
    ctx = Context(repo=repo.resolve(), target=target, models={m.name: m for m in models},
                  gpu_count=count_gpus(), backends_dir=paths.backends_dir(), auto_complete=auto_complete)
    problems = _unknown_facts(target) + run_rules(models, ctx)
    problems += _stray_repo_files(repo)
    problems += _lock_drift(repo)
    if contract is not None:
        problems += check_contract(load_contract(Path(contract)), ctx)
    return Report(problems=problems, models=[m.name for m in models], target_release=target)


_UNCHECKED = {
    "vllm": "model.json's engine arguments, the smoke request's sampling parameters and the backend's vLLM imports",
    "backend_imports": "the vLLM symbols NVIDIA's backend of that release imports",
    "python": "the image's Python",
}


def _unknown_facts(target: str) -> list[Problem]:
    """A release row with facts that could not be had (matrix.json null): say which, and the checks they leave out."""
    if target == compat.LOCAL:
        return []
    unknown = compat.get_release(target).unknown
    if not unknown:
        return []
    skipped = [_UNCHECKED[f] for f in unknown if f in _UNCHECKED]
    return [Problem(rule="target.unknown", severity="warning", file=".", field="target_release",
                    message=f"release {target}: {', '.join(unknown)} not known (not published, or not read, "
                            "where they could be)"
                            + (f"; not checked: {'; '.join(skipped)}" if skipped else ""),
                    expected=f"a release whose facts are known (tritonpkg compat), or {target}'s row completed "
                             "in tritonpkg/compat/matrix.json from NVIDIA's published table")]


def _stray_repo_files(repo: Path) -> list[Problem]:
    return [Problem(rule="layout.stray", severity="warning", file=p.name,
                    message=f"stray file {p.name!r} at the repository root: Triton ignores it",
                    expected="only model directories")
            for p in sorted(repo.iterdir())
            if p.is_file() and not p.name.startswith(".") and p.name != LOCK_NAME]


def _lock_drift(repo: Path) -> list[Problem]:
    """Files changed or removed since `tritonpkg package` wrote the lock: what runs is no longer what
    was validated and pinned."""
    if not (repo / LOCK_NAME).is_file():
        return []
    try:
        read_json(repo / LOCK_NAME)  # bounded, before the lock module parses it
        lines = verify_lock(repo)
    except (TritonpkgError, OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return [Problem(rule="lock.invalid", severity="warning", file=LOCK_NAME,
                        message=f"the lock cannot be checked: {str(exc)[:200] or type(exc).__name__}",
                        expected=f"the {LOCK_NAME} tritonpkg package writes; re-run it")]
    return [Problem(rule="lock.drift", severity="warning", file=line.split(":", 1)[0],
                    message=f"{line.split(': ', 1)[1]} (the repository changed after packaging)",
                    expected=f"the file recorded in {LOCK_NAME}; re-run tritonpkg package")
            for line in lines]
