"""Planning, without side effects: which files to link from an earlier revision, which parts are
already staged, which to fetch, and how many bytes that means."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonpkg.storage.objects import RemoteFile


@dataclass(frozen=True)
class Part:
    index: int
    start: int
    end: int  # exclusive

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass
class FilePlan:
    file: RemoteFile
    tag: str
    parts: list[Part]
    staged: set[int] = field(default_factory=set)  # parts already in the staged file (journal)
    reuse: Path | None = None  # identical file of an earlier revision: link it, fetch nothing
    reuse_sha256: str | None = None

    @property
    def fetch_bytes(self) -> int:
        if self.reuse is not None:
            return 0
        return sum(p.size for p in self.parts if p.index not in self.staged)

    @property
    def staged_bytes(self) -> int:
        if self.reuse is not None:
            return 0
        return sum(p.size for p in self.parts if p.index in self.staged)


MiB = 1 << 20
AUTO_MIN_PART = 8 * MiB
AUTO_MAX_PART = 64 * MiB


def auto_part_size(files: list[RemoteFile], concurrency: int) -> int:
    """Few, large ranged reads that still keep every thread busy: the listing split evenly over the
    threads, within 8-64 MiB (s5cmd and rclone default to 50-64 MiB parts). Each request costs a round
    trip and a signature, and some S3-compatible stores read the whole object per ranged GET (moto does)."""
    total = sum(f.size for f in files)
    even = -(-total // max(1, concurrency))
    return min(AUTO_MAX_PART, max(AUTO_MIN_PART, -(-even // MiB) * MiB))


def split(size: int, part_size: int) -> list[Part]:
    return [Part(i, start, min(start + part_size, size)) for i, start in enumerate(range(0, size, part_size))]


def reusable(files: list[RemoteFile], earlier: list[tuple[Path, dict[str, Any]]]) -> dict[str, tuple[Path, str]]:
    """path -> (existing file, sha256) for files an earlier READY revision already holds unchanged."""
    found: dict[str, tuple[Path, str]] = {}
    for directory, manifest in earlier:
        recorded = manifest.get("files", {})
        for f in files:
            entry = recorded.get(f.path)
            if f.path in found or not entry or not f.etag or not entry.get("sha256"):
                continue
            if entry.get("size") == f.size and entry.get("etag") == f.etag and (
                    not f.version_id or entry.get("version_id") == f.version_id):
                candidate = directory / f.path
                if candidate.is_file() and candidate.stat().st_size == f.size:
                    found[f.path] = (candidate, entry["sha256"])
    return found


def build(files: list[RemoteFile], part_size: int, journaled: dict[tuple[str, str], set[int]],
          reuse: dict[str, tuple[Path, str]]) -> list[FilePlan]:
    plans = []
    for f in sorted(files, key=lambda f: f.path):
        tag = f.identity_tag(part_size)
        plan = FilePlan(file=f, tag=tag, parts=split(f.size, part_size), staged=set(journaled.get((f.path, tag), ())))
        if f.path in reuse:
            plan.reuse, plan.reuse_sha256 = reuse[f.path]
        plans.append(plan)
    return plans
