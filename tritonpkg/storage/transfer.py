"""The transfer engine: a thread pool of ranged reads written in place (pwrite) into preallocated staged
files, each part journaled once written, digests computed in order while streaming. Memory stays bounded:
a part holds a slot from submission until it is hashed."""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tritonpkg.safepath import join_under
from tritonpkg.storage.errors import ChecksumError, SourceChangedError
from tritonpkg.storage.hashing import OrderedDigest
from tritonpkg.storage.journal import Journal
from tritonpkg.storage.plan import FilePlan, Part
from tritonpkg.storage.sources import Source
from tritonpkg.storage.throttle import RateLimiter

Progress = Callable[[int, int], None]  # (bytes done, bytes total), called from worker threads

BUFFER_BUDGET = 512 << 20  # parts held between submission and hashing, beyond one per thread


def slot_count(concurrency: int, largest_part: int) -> int:
    """Parts in flight or waiting for their turn to be hashed: two per thread while they fit the budget,
    never fewer than one per thread plus one."""
    return max(concurrency + 1, min(2 * concurrency, BUFFER_BUDGET // max(1, largest_part)))


@dataclass
class TransferStats:
    downloaded: int = 0  # bytes fetched from the source in this run
    resumed: int = 0  # bytes of parts staged by an interrupted run, re-read to hash
    reused: int = 0  # bytes linked from an earlier revision
    files_fetched: int = 0
    files_reused: int = 0
    sha256: dict[str, str] = field(default_factory=dict)


class _Run:
    def __init__(self, source: Source, tree: Path, journal: Journal, slots: int,
                 progress: Progress | None, limiter: RateLimiter, total: int) -> None:
        self.source, self.tree, self.journal = source, tree, journal
        self.progress, self.limiter, self.total = progress, limiter, total
        self.slots = threading.Semaphore(slots)
        self.failed = threading.Event()
        self.error: BaseException | None = None
        self.stats = TransferStats()
        self.done_bytes = 0
        self._lock = threading.Lock()

    def fail(self, exc: BaseException) -> None:
        with self._lock:
            if self.error is None:
                self.error = exc
        self.failed.set()

    def advance(self, n: int, field_name: str) -> None:
        with self._lock:
            setattr(self.stats, field_name, getattr(self.stats, field_name) + n)
            self.done_bytes += n
            done = self.done_bytes
        if self.progress:
            self.progress(done, self.total)


def run(source: Source, plans: list[FilePlan], tree: Path, journal: Journal, *, concurrency: int = 8,
        progress: Progress | None = None, max_bandwidth: float | None = None) -> TransferStats:
    """Stage every planned file under `tree`; raises the first failure after in-flight parts settle."""
    total = sum(p.file.size for p in plans)
    largest = max((part.size for p in plans for part in p.parts), default=0)
    state = _Run(source, tree, journal, slot_count(concurrency, largest), progress, RateLimiter(max_bandwidth),
                 total)
    for plan in plans:
        if plan.reuse is not None:
            _link(plan, tree, state)
    if progress:
        progress(state.done_bytes, total)
    fds: list[int] = []
    try:
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="materialize") as pool:
            for plan in plans:
                if plan.reuse is not None or state.failed.is_set():
                    continue
                fd = _open_staged(tree, plan.file.path, plan.file.size, fresh=not plan.staged)
                fds.append(fd)
                if not plan.parts:
                    md5 = hashlib.md5(usedforsecurity=False)  # compared with the source's ETag, not a secret
                    state.stats.sha256[plan.file.path] = _finish(plan, hashlib.sha256(), md5)
                    state.stats.files_fetched += 1
                    continue
                digest = OrderedDigest(len(plan.parts), plan.file.md5 is not None,
                                       lambda _n: state.slots.release())
                for part in plan.parts:
                    while not state.slots.acquire(timeout=0.2):
                        if state.failed.is_set():
                            break
                    if state.failed.is_set():
                        break
                    pool.submit(_part, state, plan, part, fd, digest)
    finally:
        for fd in fds:
            os.close(fd)
        journal.close()
    if state.error is not None:
        raise state.error
    return state.stats


def _part(state: _Run, plan: FilePlan, part: Part, fd: int, digest: OrderedDigest) -> None:
    if state.failed.is_set():
        return
    try:
        if part.index in plan.staged:
            chunks = [os.pread(fd, part.size, part.start)]
            if len(chunks[0]) != part.size:
                raise ChecksumError(f"staged part {part.index} of {plan.file.path} is truncated",
                                    file=state.tree / plan.file.path, expected="rerun: the staging was discarded")
            state.advance(part.size, "resumed")
        else:
            state.limiter.take(part.size)
            chunks = _stream(state.source.read(plan.file, part.start, part.end), fd, part.start,
                             lambda n: state.advance(n, "downloaded"))
            if sum(map(len, chunks)) != part.size:  # never journal a short part, whatever the source
                raise SourceChangedError(f"{plan.file.key}: {sum(map(len, chunks))} bytes read for part "
                                         f"{part.index} ({part.start}-{part.end - 1})",
                                         expected=f"{part.size} bytes, the size listed at the start; rerun")
            os.fdatasync(fd)  # write back now, beside the other downloads, not all at the end
            state.journal.record(plan.file.path, plan.tag, part.index)
        if digest.feed(part.index, chunks):
            state.stats.sha256[plan.file.path] = _finish(plan, digest.sha256, digest.md5)
            with state._lock:
                state.stats.files_fetched += 1
    except BaseException as exc:
        state.fail(exc)


def _stream(chunks: Iterable[bytes], fd: int, offset: int, progress: Callable[[int], None]) -> list[bytes]:
    """Write each chunk while it is still in cache (one large write of a part read whole cost 5x the CPU
    per byte); the chunks are kept until the part's turn to be hashed."""
    kept = []
    for chunk in chunks:
        view = memoryview(chunk)
        written = 0
        while written < len(chunk):
            written += os.pwrite(fd, view[written:], offset + written)
        offset += len(chunk)
        kept.append(chunk)
        progress(len(chunk))
    return kept


def _finish(plan: FilePlan, sha256, md5) -> str:
    """Check the file's digests against what the source promised."""
    f = plan.file
    got = sha256.hexdigest()
    if f.sha256 and got != f.sha256:
        raise ChecksumError(f"checksum mismatch for {f.key}: sha256 {got}, the source promised {f.sha256}",
                            file=f.path, expected="identical bytes; the staging is discarded, rerun to download again")
    if md5 is not None and f.md5 and md5.hexdigest() != f.md5:
        raise ChecksumError(f"checksum mismatch for {f.key}: MD5 {md5.hexdigest()}, ETag says {f.md5}",
                            file=f.path, expected="identical bytes; the staging is discarded, rerun to download again")
    return got


def _open_staged(tree: Path, name: str, size: int, fresh: bool) -> int:
    """The staged file of `name`, joined under `tree` by the one path rule and never opened through a link."""
    path = join_under(tree, name, source=str(tree))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | (os.O_TRUNC if fresh else 0), 0o644)
    os.ftruncate(fd, size)
    return fd


def _link(plan: FilePlan, tree: Path, state: _Run) -> None:
    """An unchanged file of an earlier revision: hard link (same file system), copy as a fallback."""
    reuse, reuse_sha256 = plan.reuse, plan.reuse_sha256
    if reuse is None or reuse_sha256 is None:
        raise ValueError(f"{plan.file.path} has no earlier revision to link from")
    target = join_under(tree, plan.file.path, source=str(tree))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    try:
        os.link(reuse, target)
    except OSError:
        shutil.copyfile(reuse, target)
    state.stats.sha256[plan.file.path] = reuse_sha256
    state.stats.files_reused += 1
    state.advance(plan.file.size, "reused")
