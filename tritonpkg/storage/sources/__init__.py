"""Where weights come from. A source lists files with their identity and reads byte ranges; the
transfer engine needs nothing else, so every kind of store goes through the same verified path."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from tritonpkg.storage.objects import RemoteFile

CHUNK = 1 << 20  # bytes per read of a stream: each chunk is still in the core's cache when it is written


class Source(Protocol):
    url: str

    def default_name(self) -> str:
        """Folder name under ROOT when --name is not given."""

    def revision(self) -> str | None:
        """A revision the source names itself (a Hub commit); None: use the listing's digest."""

    def list_files(self) -> list[RemoteFile]:
        """Every file, with size and identity; raises StorageError when there is none."""

    def read(self, f: RemoteFile, start: int, end: int) -> Iterable[bytes]:
        """Bytes [start, end) of `f`, in order, in one or more chunks (a stream yields them as they arrive);
        raises SourceChangedError when `f` is no longer what was listed."""

    def close(self) -> None: ...


def open_source(url: str, *, revision: str | None = None, hf_cache: Path | None = None,
                concurrency: int = 8) -> Source:
    """The source for `url`: s3://, hf://, a local directory (or file://), or any other fsspec URL.
    Each source module is imported only here: they import botocore, huggingface_hub or fsspec."""
    if url.startswith("s3://"):
        from tritonpkg.storage.sources.s3 import S3Source

        return S3Source(url, concurrency=concurrency)
    if url.startswith("hf://"):
        from tritonpkg.storage.sources.hf import open_hf

        return open_hf(url, revision=revision, cache=hf_cache)
    if "://" not in url or url.startswith("file://"):
        from tritonpkg.storage.sources.local import LocalSource

        return LocalSource(Path(url.removeprefix("file://")))
    from tritonpkg.storage.sources.fsspec_source import FsspecSource

    return FsspecSource(url)
