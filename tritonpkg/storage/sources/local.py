"""A local directory (or a Hugging Face cache snapshot, whose files are symlinks into blobs/)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

from tritonpkg.safepath import UnsafePathError, open_inside, quote, within
from tritonpkg.storage.errors import SourceChangedError, StorageError, UnsafeKeyError
from tritonpkg.storage.objects import RemoteFile
from tritonpkg.storage.sources import CHUNK

RESERVED = frozenset({"READY", "tritonpkg-manifest.json"})


class LocalSource:
    def __init__(self, directory: Path, *, url: str | None = None, name: str | None = None,
                 revision: str | None = None, link_root: Path | None = None) -> None:
        """`link_root` is where the source's symlinks may lead: by default the directory itself, or, for
        a HF cache snapshot (`models--org--name/snapshots/<commit>`), its repository folder, which holds
        the blobs its links point at."""
        self.directory = directory.expanduser().absolute()
        if link_root is None:
            link_root = _hf_repository_folder(self.directory) or self.directory
        self.link_root = link_root.expanduser().absolute()
        self.url = url or str(self.directory)
        self._name = name
        self._revision = revision
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()
        if not self.directory.is_dir():
            raise StorageError("source directory not found", file=self.directory,
                               expected="an existing directory of model files")

    def default_name(self) -> str:
        return self._name or self.directory.name

    def revision(self) -> str | None:
        return self._revision

    def list_files(self) -> list[RemoteFile]:
        files = []
        for dirpath, dirnames, names in os.walk(self.directory):
            dirnames[:] = sorted(d for d in dirnames if d not in (".git", ".cache"))
            for name in sorted(names):
                full = Path(dirpath) / name
                rel = full.relative_to(self.directory).as_posix()
                if rel in RESERVED:
                    continue  # markers of a materialization used as a source
                self._check_inside(full, rel)
                try:
                    st = full.stat()
                except FileNotFoundError as exc:
                    raise StorageError("broken symlink in the source", file=full,
                                       expected="every file readable (an incomplete HF cache?)") from exc
                except OSError as exc:  # a link loop (ELOOP), a name too long, no permission
                    raise StorageError(f"cannot read {quote(rel)} in the source: {exc.strerror}", file=full,
                                       expected="every file readable") from exc
                files.append(RemoteFile(path=rel, key=str(full), size=st.st_size,
                                        etag=f"{st.st_mtime_ns}:{st.st_ino}", sha256=_lfs_oid(full)))
        if not files:
            raise StorageError("no files in the source directory", file=self.directory,
                               expected="model files (config.json, *.safetensors, ...)")
        return files

    def read(self, f: RemoteFile, start: int, end: int) -> Iterator[bytes]:
        fd = self._fd(f)
        pos = start
        while pos < end:
            data = os.pread(fd, min(CHUNK, end - pos), pos)
            if not data:
                raise SourceChangedError(f"{f.key} is shorter than listed ({f.size} bytes)",
                                         expected="a source that does not change during the copy")
            pos += len(data)
            yield data

    def _check_inside(self, full: Path, rel: str) -> None:
        """A file, or a link whose target (every link on the way followed) stays under `link_root`."""
        if not within(full, self.link_root):
            where = "" if self.link_root == self.directory else f" ({self.link_root})"
            raise UnsafeKeyError(rel, f"a symlink to {quote(os.path.realpath(full))}, outside the source{where}",
                                 source=self.url)

    def _fd(self, f: RemoteFile) -> int:
        with self._lock:
            fd = self._fds.get(f.key)
            if fd is None:
                try:
                    fd = open_inside(f.key, self.link_root, name=f.path, source=self.url)
                except FileNotFoundError as exc:
                    raise SourceChangedError("a listed file disappeared", file=f.key) from exc
                except UnsafePathError as exc:  # changed since the listing
                    raise UnsafeKeyError(f.path, exc.rule, source=self.url) from None
                self._fds[f.key] = fd
            return fd

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()


def _hf_repository_folder(directory: Path) -> Path | None:
    """`models--org--name` when `directory` is one of its snapshots, as huggingface_hub lays them out."""
    repo = directory.parent.parent
    if directory.parent.name == "snapshots" and repo.name.startswith(("models--", "datasets--", "spaces--")) \
            and (repo / "blobs").is_dir():
        return repo
    return None


def _lfs_oid(path: Path) -> str | None:
    """A HF cache blob named by its sha256 (LFS files) promises that digest."""
    if not path.is_symlink():
        return None
    target = os.path.basename(os.readlink(path))
    return target if len(target) == 64 and all(c in "0123456789abcdef" for c in target) else None
