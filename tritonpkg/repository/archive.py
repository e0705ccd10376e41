"""A reproducible model package: one .tar.gz with the repository entries, the lock and plugin wheels.
Sorted members, zeroed owners and mtimes, a gzip header without time or name: same input, same bytes."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

from tritonpkg.repository.atomic import write_file_atomic

REPO_PREFIX = "repository"
WHEELS_PREFIX = "wheels"


def _info(name: str, size: int = 0, directory: bool = False, mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if directory:
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
    else:
        info.size = size
        info.mode = mode & 0o777
    return info


def build(files: dict[str, bytes], modes: dict[str, int] | None = None) -> bytes:
    """`files` maps archive paths to contents; parent directories are added as members. A file's mode is
    `modes[path]` (permission bits only), 0o644 when not given."""
    modes = modes or {}
    dirs: set[str] = set()
    for name in files:
        parts = name.split("/")[:-1]
        dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(dirs | set(files)):
            if name in files:
                data = files[name]
                tar.addfile(_info(name, len(data), mode=modes.get(name, 0o644)), io.BytesIO(data))
            else:
                tar.addfile(_info(name, directory=True))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def write(path: Path, repo_files: dict[str, bytes], wheels: dict[str, bytes],
          modes: dict[str, int] | None = None) -> None:
    """`modes` maps repository paths (as in `repo_files`) to their permission bits."""
    members = {f"{REPO_PREFIX}/{k}": v for k, v in repo_files.items()}
    members.update({f"{WHEELS_PREFIX}/{k}": v for k, v in wheels.items()})
    write_file_atomic(path, build(members, {f"{REPO_PREFIX}/{k}": m for k, m in (modes or {}).items()}))
