"""materialize(SOURCE, ROOT): list the source, take the revision's lock, reuse a READY copy when it
matches, otherwise stage beside the destination, fetch what is missing, verify, fsync, rename into place."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tritonpkg import safepath
from tritonpkg.repository.atomic import fsync_tree
from tritonpkg.storage import layout, locks, manifest, plan, space, transfer
from tritonpkg.storage.errors import ChecksumError, SourceChangedError, StorageError, UnsafeKeyError
from tritonpkg.storage.journal import Journal
from tritonpkg.storage.objects import RemoteFile, listing_digest
from tritonpkg.storage.sources import Source, open_source

MIN_PART = 64 << 10


@dataclass
class MaterializeResult:
    path: Path  # ROOT/<model>/<revision>: what a model.json should point at
    model: str
    revision: str
    source: str
    files: int
    bytes_total: int
    bytes_downloaded: int  # fetched from the source by this run
    bytes_resumed: int  # staged by an interrupted run and kept
    bytes_reused: int  # linked from an earlier revision, or the whole READY copy when `reused`
    files_skipped: int  # files not fetched: unchanged in an earlier revision or already READY
    reused: bool  # a READY copy of this revision already existed: nothing was fetched
    part_size: int | None  # bytes per ranged read of this run; None when nothing was fetched
    seconds: float
    waited_s: float  # time spent waiting for another materializer of the same revision

    @property
    def mb_per_s(self) -> float:
        return self.bytes_downloaded / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        data = asdict(self)
        data["path"] = str(self.path)
        data["mb_per_s"] = round(self.mb_per_s, 1)
        data["seconds"] = round(self.seconds, 3)
        data["waited_s"] = round(self.waited_s, 3)
        return data


def materialize(source: str, root: str | Path, *, name: str | None = None, revision: str | None = None,
                concurrency: int = 8, part_size: int | None = None, progress: transfer.Progress | None = None,
                hf_cache: str | Path | None = None, max_bandwidth: float | None = None) -> MaterializeResult:
    """Materialize `source` under ROOT/<model>/<revision>/ (complete, verified, or not there at all).
    `part_size=None` picks it from the listing (`plan.auto_part_size`)."""
    start = time.monotonic()
    if concurrency < 1:
        raise StorageError("concurrency must be at least 1", field="concurrency", expected="an integer >= 1")
    if part_size is not None and part_size < MIN_PART:
        raise StorageError(f"part size {part_size} is too small", field="part_size", expected=f">= {MIN_PART} bytes")
    src = open_source(source, revision=revision, hf_cache=Path(hf_cache) if hf_cache else None,
                      concurrency=concurrency)
    try:
        files = src.list_files()
        check_paths(files, source)
        _check_reserved(files, source)
        model = layout.check_name(name or src.default_name(), "name")
        rev = layout.check_name(_revision_name(src, files, revision), "revision")
        where = layout.ModelDir(Path(root).expanduser().absolute(), model)
        with locks.hold(where.lock(rev)) as waited:
            result = _reuse(where, rev, files, source, revision is not None, start, waited)
            if result is None:
                result = _copy(src, source, where, rev, files, concurrency, part_size, progress, max_bandwidth,
                               start, waited)
            _write_latest(where, rev)
            return result
    finally:
        src.close()


def _revision_name(src: Source, files: list[RemoteFile], revision: str | None) -> str:
    own = src.revision()
    if own:
        return own
    return revision or "sha256-" + listing_digest(files)[:16]


def check_paths(files: list[RemoteFile], source: str) -> None:
    """Every listed name passes the one path rule, checked on the whole listing before anything is made
    under ROOT; the error quotes the key as the source spells it. A name that is also another's folder
    (`a` and `a/b`, both objects in S3) could not be written either."""
    names = {f.path for f in files}
    for f in files:
        try:
            safepath.check_name(f.path, source=source)
        except safepath.UnsafePathError as exc:
            rule = exc.rule if f.key == f.path else f"{exc.rule} (path {safepath.quote(f.path)} under the source)"
            raise UnsafeKeyError(f.key, rule, source=source) from None
        parts = f.path.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in names:
                raise UnsafeKeyError(f.key, f"{safepath.quote('/'.join(parts[:i]))} is both a file and a folder",
                                     source=source)


def _check_reserved(files: list[RemoteFile], source: str) -> None:
    clash = sorted({f.path for f in files} & {layout.READY, layout.MANIFEST})
    if clash:
        raise StorageError(f"the source holds {', '.join(clash)}, which materialize writes itself", field=source,
                           expected="a source without those top-level files")


def _reuse(where: layout.ModelDir, rev: str, files: list[RemoteFile], source: str, explicit: bool,
           start: float, waited: float) -> MaterializeResult | None:
    target = where.revision(rev)
    existing = manifest.read_ready(target)
    if existing is None:
        if target.exists():
            _discard(target, where)  # not READY: leftover of a foreign tool or a manual copy
        return None
    if not manifest.matches(existing, files, target):
        if explicit:
            raise StorageError(f"{target} already holds revision {rev!r} with different content than {source}",
                               file=target, expected="a new --revision for new content (or `materialize gc`)")
        _discard(target, where)
        return None
    total = sum(f.size for f in files)
    return MaterializeResult(path=target, model=where.model, revision=rev, source=source, files=len(files),
                             bytes_total=total, bytes_downloaded=0, bytes_resumed=0, bytes_reused=total,
                             files_skipped=len(files), reused=True, part_size=None,
                             seconds=time.monotonic() - start, waited_s=waited)


def _copy(src: Source, source: str, where: layout.ModelDir, rev: str, files: list[RemoteFile], concurrency: int,
          part_size: int | None, progress, max_bandwidth, start: float, waited: float) -> MaterializeResult:
    staging = where.staging(rev)
    tree = staging / "tree"
    tree.mkdir(parents=True, exist_ok=True)
    journal = Journal(staging / "journal")
    part_size = _staged_part_size(staging, part_size, lambda: plan.auto_part_size(files, concurrency))
    earlier = [(where.revision(r), m) for r in where.revisions() if (m := manifest.read_ready(where.revision(r)))]
    plans = plan.build(files, part_size, journal.done(), plan.reusable(files, earlier))
    space.check(staging, sum(p.fetch_bytes for p in plans))
    try:
        stats = transfer.run(src, plans, tree, journal, concurrency=concurrency, progress=progress,
                             max_bandwidth=max_bandwidth)
        _check_unchanged(src, files)
    except (ChecksumError, SourceChangedError):
        shutil.rmtree(staging, ignore_errors=True)  # these bytes must never be resumed
        raise
    versions = {f.path: getattr(src, "version_of", lambda _f: None)(f) for f in files}
    manifest.write(tree, manifest.build(source, where.model, rev, files, stats.sha256, versions))
    _publish(tree, where.revision(rev))
    shutil.rmtree(staging, ignore_errors=True)
    total = sum(f.size for f in files)
    return MaterializeResult(path=where.revision(rev), model=where.model, revision=rev, source=source,
                             files=len(files), bytes_total=total, bytes_downloaded=stats.downloaded,
                             bytes_resumed=stats.resumed, bytes_reused=stats.reused,
                             files_skipped=stats.files_reused, reused=False, part_size=part_size,
                             seconds=time.monotonic() - start, waited_s=waited)


def _staged_part_size(staging: Path, explicit: int | None, auto) -> int:
    """An automatic part size is that of the interrupted run, if any, so a rerun with another
    concurrency still resumes; an explicit one wins (parts of another size are fetched again)."""
    record = staging / "part-size"
    if explicit is None:
        try:
            return int(record.read_text())
        except (FileNotFoundError, ValueError):
            explicit = auto()
    record.write_text(str(explicit))
    return explicit


def _check_unchanged(src: Source, files: list[RemoteFile]) -> None:
    """List again: an object replaced after its last part was read still makes the copy a mix."""
    before = {f.path: f.identity() for f in files}
    after = {f.path: f.identity() for f in src.list_files()}
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    if changed:
        raise SourceChangedError(f"{len(changed)} file(s) changed in the source during the copy: "
                                 f"{', '.join(changed[:5])}", field=src.url,
                                 expected="a source that stays unchanged until the copy ends; rerun to copy it now")


def _publish(tree: Path, target: Path) -> None:
    """fsync every file and folder, then one rename: readers see nothing or everything."""
    fsync_tree(tree)
    os.rename(tree, target)
    _fsync_dir(target.parent)


def _discard(path: Path, where: layout.ModelDir) -> None:
    where.trash.mkdir(parents=True, exist_ok=True)
    doomed = where.trash / f"{path.name}-{uuid.uuid4().hex[:8]}"
    os.rename(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def _write_latest(where: layout.ModelDir, rev: str) -> None:
    tmp = where.path / f".{layout.LATEST}.{uuid.uuid4().hex[:8]}"
    tmp.write_text(rev + "\n")
    os.replace(tmp, where.latest_file)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
