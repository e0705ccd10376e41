"""Folders and files whose contents decide what later commands do (deploy state, serve's state, admin keys)
are trusted only when they are this user's alone: a folder created 0700, refused when it (or a file in it) is a
symlink, owned by another user or writable by group/others (`secure_dir`, `check_file`); files written with
O_NOFOLLOW, atomically (`write_private`), and read the same way (`read_private`)."""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

from tritonpkg.errors import TritonpkgError


class StateDirError(TritonpkgError):
    """A state folder or file that is not safely this user's (another owner, writable by others, a link)."""


def _owner(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def _check_stat(path: Path, st: os.stat_result, kind: str) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise StateDirError(f"is a symlink where the state expects a {kind}", file=path,
                            expected=f"a real {kind} (remove the link; tritonpkg never follows links in its state)")
    if (kind == "folder" and not stat.S_ISDIR(st.st_mode)) or (kind == "file" and not stat.S_ISREG(st.st_mode)):
        raise StateDirError(f"is not a {kind}", file=path, expected=f"a {kind} of the state")
    if st.st_uid != os.geteuid():
        raise StateDirError(f"is owned by {_owner(st.st_uid)}, not by this user ({_owner(os.geteuid())})",
                            file=path, expected=f"a {kind} this user owns (another user could change what it says)")
    if st.st_mode & 0o022:
        raise StateDirError(f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})", file=path,
                            expected=f"a {kind} only its owner can write (chmod go-w)")


def secure_dir(path: str | Path) -> Path:
    """`path` as a folder only this user controls: created 0700 with any missing parents; refused when it
    is a symlink, not a folder, owned by another user, or writable by group/others."""
    path = Path(path).absolute()
    missing = []
    p = path
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            continue
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fchmod(fd, 0o700)  # exactly 0700 whatever the umask
        finally:
            os.close(fd)
    _check_stat(path, os.lstat(path), "folder")
    return path


def check_file(path: str | Path) -> bool:
    """True when `path` is this user's regular file, False when it does not exist; StateDirError otherwise."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    _check_stat(Path(path), st, "file")
    return True


def open_nofollow(path: Path, flags: int, mode: int = 0o600) -> int:
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StateDirError("is a symlink where the state expects a file", file=path,
                                expected="a real file (remove the link)") from exc
        raise


def write_private(path: str | Path, data: bytes | str, mode: int = 0o600) -> Path:
    """Write `path` (in a checked state folder) atomically: a new O_EXCL|O_NOFOLLOW file beside it, fsynced,
    renamed over it. An existing symlink or foreign file at `path` is refused, never followed."""
    path = Path(path)
    secure_dir(path.parent)
    check_file(path)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
    fd = open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def read_private(path: str | Path, limit: int = 1 << 20) -> bytes:
    """At most `limit` bytes of a state file, opened without following a link and checked as `check_file`."""
    path = Path(path)
    fd = open_nofollow(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as fh:
        _check_stat(path, os.fstat(fh.fileno()), "file")
        return fh.read(limit)
