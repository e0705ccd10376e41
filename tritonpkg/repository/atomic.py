"""Replace a directory as one step: readers see the old tree or the new one, never a half-written one.

The staging folder beside the target is removed however the build ends: an exception, Ctrl-C, or a
SIGTERM/SIGHUP (turned into SystemExit while staging, where the default action would kill the process
without cleaning up). A SIGKILL or a crash can still leave one; its name carries the owner's host and
pid, and the next build of the same target removes those whose owner is gone."""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import signal
import socket
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Linux renameat2(RENAME_EXCHANGE): swap two paths atomically. False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return rc == 0


def fsync_tree(root: Path) -> None:
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fd = os.open(dirpath, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


_TERMINATING = (signal.SIGTERM, signal.SIGHUP)
_SWAP_BLOCKED = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _host_tag() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def _owner_prefix(target: Path, kind: str) -> str:
    """`.<target>.<kind>-<host>-<pid>-`: who made the folder, so a later run can tell it is abandoned."""
    return f".{target.name}.{kind}-{_host_tag()}-{os.getpid()}-"


def _owner_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def remove_abandoned(target: Path) -> list[Path]:
    """Remove staging and old-tree folders beside `target` left by a process of this host that is gone."""
    pattern = re.compile(rf"^\.{re.escape(target.name)}\.(staging|old)-{_host_tag()}-(\d+)-")
    removed: list[Path] = []
    try:
        entries = list(target.parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = pattern.match(entry.name)
        if match is None or int(match.group(2)) == os.getpid() or _owner_alive(int(match.group(2))):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


@contextmanager
def _signals_raise() -> Iterator[None]:
    """While staging, SIGTERM and SIGHUP raise SystemExit (so `finally` blocks run) instead of killing the
    process outright. Only where they would otherwise kill it: a handler someone installed is kept."""
    installed = {}
    if threading.current_thread() is threading.main_thread():
        for sig in _TERMINATING:
            if signal.getsignal(sig) is signal.SIG_DFL:
                installed[sig] = signal.signal(sig, _terminate)
    try:
        yield
    finally:
        for sig, old in installed.items():
            signal.signal(sig, old)


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP across the swap, so an interruption lands after it, not half-way."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _SWAP_BLOCKED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextmanager
def staged_directory(target: Path, copy_existing: bool = True) -> Iterator[Path]:
    """Yield a staging directory beside `target` (same file system), seeded with a copy of `target`;
    on normal exit it replaces `target`; on an exception, Ctrl-C or SIGTERM it is removed and `target`
    is untouched."""
    target = target.absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned(target)
    with _signals_raise():
        staging = Path(tempfile.mkdtemp(prefix=_owner_prefix(target, "staging"), dir=target.parent))
        try:
            if copy_existing and target.is_dir():
                shutil.copytree(target, staging, symlinks=True, dirs_exist_ok=True)
            yield staging
            fsync_tree(staging)
            os.chmod(staging, 0o755)  # noqa: S103  mkdtemp made it 0700; the server may run as another user
            with _signals_deferred():
                _swap_in(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise


def _swap_in(staging: Path, target: Path) -> None:
    if target.exists():
        if _exchange(staging, target):
            shutil.rmtree(staging)
        else:
            old = Path(tempfile.mkdtemp(prefix=_owner_prefix(target, "old"), dir=target.parent))
            os.rename(target, old / "tree")
            os.rename(staging, target)
            shutil.rmtree(old)
    else:
        os.rename(staging, target)


def write_file_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
