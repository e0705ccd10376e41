"""Where things live under ROOT. Readers only look at ROOT/<model>/<revision>/ holding READY; everything
in progress lives in dot-folders beside it, on the same file system, so the final rename is atomic."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tritonpkg.storage.errors import StorageError

READY = "READY"
MANIFEST = "tritonpkg-manifest.json"
LATEST = "LATEST"
_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")


def check_name(value: str, what: str) -> str:
    if not _SAFE.match(value):
        raise StorageError(f"{what} {value!r} cannot be a folder name", field=what,
                           expected="letters, digits, '_', '.', '-' (not starting with '.' or '-'); pass --" + what)
    return value


@dataclass(frozen=True)
class ModelDir:
    root: Path
    model: str

    @property
    def path(self) -> Path:
        return self.root / self.model

    def revision(self, rev: str) -> Path:
        return self.path / rev

    def staging(self, rev: str) -> Path:
        return self.path / ".staging" / rev

    def lock(self, rev: str) -> Path:
        return self.path / ".locks" / f"{rev}.lock"

    @property
    def trash(self) -> Path:
        return self.path / ".staging" / ".trash"

    @property
    def latest_file(self) -> Path:
        return self.path / LATEST

    def revisions(self) -> list[str]:
        """Complete revisions (holding READY), newest first."""
        if not self.path.is_dir():
            return []
        found = [(p.joinpath(READY).stat().st_mtime_ns, p.name) for p in self.path.iterdir()
                 if not p.name.startswith(".") and p.is_dir() and p.joinpath(READY).is_file()]
        return [name for _, name in sorted(found, reverse=True)]

    def latest(self) -> str | None:
        try:
            name = self.latest_file.read_text().strip()
        except FileNotFoundError:
            name = ""
        revs = self.revisions()
        return name if name in revs else (revs[0] if revs else None)
