"""tritonpkg.lock.json at the repository root: what each model version was built from (spec hash,
pinned versions) and the sha256 of every file written, so a deployment can verify what it unpacked."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from tritonpkg import __version__, boundedio, safepath
from tritonpkg.errors import PackageError

LOCK_NAME = "tritonpkg.lock.json"
MAX_LOCK_BYTES = 64 << 20
LOCK_VERSION = 1


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read(repo: Path) -> dict[str, Any]:
    path = repo / LOCK_NAME
    if not path.is_file():
        return {"lock_version": LOCK_VERSION, "models": {}}
    try:  # read back from a repository someone else may have written: bounded
        data = boundedio.read_file(path, MAX_LOCK_BYTES)
    except boundedio.FileTooLargeError:
        raise PackageError(f"lock file is larger than {MAX_LOCK_BYTES} bytes", file=path,
                           expected="a tritonpkg lock") from None
    try:
        lock = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PackageError(f"lock file is not JSON: {str(exc)[:200]}", file=path, expected="a tritonpkg lock") from None
    except RecursionError:
        raise PackageError("lock file is nested too deeply", file=path, expected="a tritonpkg lock") from None
    if not isinstance(lock, dict) or not isinstance(lock.get("models"), dict):
        raise PackageError("lock file is not a mapping with a `models` mapping", file=path, field="models",
                           expected="a tritonpkg lock")
    if lock.get("lock_version") != LOCK_VERSION:
        raise PackageError("unsupported lock version", file=path, field="lock_version",
                           expected=str(LOCK_VERSION))
    try:
        _MODELS.validate_python(lock["models"])
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(["models", *(str(part) for part in error["loc"])])
        raise PackageError(f"lock entry {safepath.quote(where)}: {error['msg']}", file=path, field=where,
                           expected="a tritonpkg lock (package writes it)") from None
    return lock


class _Plugin(BaseModel):
    model_config = ConfigDict(extra="allow")
    wheel: str | None = None
    sha256: str | None = None


class _Entry(BaseModel):
    """The parts of a version's lock entry that verification reads; the others are the builder's record."""

    model_config = ConfigDict(extra="allow")
    files: dict[str, str]
    plugins: list[str | _Plugin] = []


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")
    config_sha256: str
    versions: dict[str, _Entry]


_MODELS = TypeAdapter(dict[str, _Model])


def dumps(lock: dict[str, Any]) -> bytes:
    lock = {**lock, "lock_version": LOCK_VERSION, "tritonpkg": __version__}
    return (json.dumps(lock, indent=2, sort_keys=True) + "\n").encode()


def record(lock: dict[str, Any], name: str, version: int, config_sha: str, entry: dict[str, Any]) -> None:
    model = lock["models"].setdefault(name, {"versions": {}})
    model["config_sha256"] = config_sha
    model["versions"][str(version)] = entry


def verify(repo: Path) -> list[str]:
    """Every file the lock names that is missing or differs, as 'path: reason'."""
    lock = read(repo)
    problems: list[str] = []
    for name, model in sorted(lock["models"].items()):
        expected = {f"{name}/config.pbtxt": model["config_sha256"]}
        for entry in model["versions"].values():
            expected.update(entry["files"])
        for rel, digest in sorted(expected.items()):
            try:  # a lock's entries become paths: none may lead out of the repository, nor through a link
                path = safepath.join_under(repo, rel, source=repo / LOCK_NAME, what="lock entry")
            except safepath.UnsafePathError as exc:
                problems.append(f"{safepath.quote(rel)}: breaks the path rule: {exc.rule}")
                continue
            if not safepath.within(path, repo):
                problems.append(f"{safepath.quote(rel)}: a link that leaves the repository")
            elif not path.is_file():
                problems.append(f"{rel}: missing")
            elif sha256(path.read_bytes()) != digest:
                problems.append(f"{rel}: sha256 differs from the lock")
    return problems
