"""Remove old revisions: keep the newest N, always keep the latest one materialized, and never touch a
revision whose lock is held (being materialized or reused right now)."""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tritonpkg.storage import layout, locks
from tritonpkg.storage.errors import StorageError


@dataclass
class GcResult:
    removed: list[str] = field(default_factory=list)  # "<model>/<revision>"
    kept: list[str] = field(default_factory=list)
    in_use: list[str] = field(default_factory=list)
    freed_bytes: int = 0


def gc(root: str | Path, *, keep: int = 1, model: str | None = None, dry_run: bool = False) -> GcResult:
    if keep < 1:
        raise StorageError("--keep must be at least 1", field="keep",
                           expected="an integer >= 1 (the latest is always kept)")
    root = Path(root).expanduser().absolute()
    if not root.is_dir():
        raise StorageError("materialization root not found", file=root, expected="the --to ROOT of materialize")
    models = [model] if model else sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    result = GcResult()
    for name in models:
        where = layout.ModelDir(root, name)
        revisions = where.revisions()
        latest = where.latest()
        keep_set = set(revisions[:keep]) | ({latest} if latest else set())
        for rev in revisions:
            label = f"{name}/{rev}"
            if rev in keep_set:
                result.kept.append(label)
                continue
            lock = locks.try_hold(where.lock(rev))
            if lock is None:
                result.in_use.append(label)
                continue
            try:
                size = _size(where.revision(rev))
                if not dry_run:
                    where.trash.mkdir(parents=True, exist_ok=True)
                    doomed = where.trash / f"{rev}-{uuid.uuid4().hex[:8]}"
                    os.rename(where.revision(rev), doomed)  # disappears in one step
                    shutil.rmtree(doomed, ignore_errors=True)
                result.removed.append(label)
                result.freed_bytes += size
            finally:
                lock.release()
    return result


def _size(path: Path) -> int:
    return sum(os.lstat(os.path.join(d, n)).st_size for d, _, names in os.walk(path) for n in names)
