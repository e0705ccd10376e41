"""The one path rule: every name that comes from outside (an S3/fsspec/HF key, a spec's `python.files`
entry, an archive member, a manifest entry, a wheel's RECORD) and becomes a path goes through here.

A name is accepted only as a relative POSIX path of non-empty segments, none of them `.` or `..`, with no
NUL or control character, of bounded length; joined to its root, it must still resolve under that root
with every existing folder on the way followed. A violation names the source, a short quote of the key
and the rule broken, and is raised before anything is written."""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

from tritonpkg.errors import TritonpkgError

MAX_SEGMENT_BYTES = 255  # NAME_MAX of Linux file systems
MAX_NAME_BYTES = 4096  # PATH_MAX
QUOTE_CHARS = 80


class UnsafePathError(TritonpkgError):
    """A name from outside would become a path that leaves its root (or is not a plain relative path)."""

    def __init__(self, name: str, rule: str, *, source: str | Path | None, what: str = "key") -> None:
        self.name, self.rule = name, rule
        super().__init__(f"{quote(name)} breaks the path rule: {rule}", file=source, field=what,
                         expected="a relative path of non-empty segments, without '.', '..', NUL or control "
                                  "characters, that stays under its root")


def quote(name: object, limit: int = QUOTE_CHARS) -> str:
    """`repr` of at most `limit` characters of `name`, so an error line stays one short line."""
    text = str(name)
    if len(text) <= limit:
        return repr(text)
    return repr(text[:limit]) + f"... ({len(text)} characters)"


def check_name(name: object, *, source: str | Path | None, what: str = "key") -> str:
    """`name` normalized to `a/b/c`, or UnsafePathError saying which rule it breaks."""
    if not isinstance(name, str):
        raise UnsafePathError(str(name), f"a {type(name).__name__} is not a name", source=source, what=what)
    if not name:
        raise UnsafePathError(name, "the name is empty", source=source, what=what)
    _check_text(name, source=source, what=what)
    if name.startswith("/"):
        raise UnsafePathError(name, "an absolute path", source=source, what=what)
    segments = name.split("/")
    for segment in segments:
        if segment == "":
            raise UnsafePathError(name, "an empty segment ('//' or a trailing '/')", source=source, what=what)
        if segment in (".", ".."):
            raise UnsafePathError(name, f"a {segment!r} segment", source=source, what=what)
        if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
            raise UnsafePathError(name, f"a segment longer than {MAX_SEGMENT_BYTES} bytes", source=source, what=what)
    return "/".join(segments)


def _check_text(name: str, *, source: str | Path | None, what: str) -> None:
    """The character and size rules: no NUL or control character, valid UTF-8, at most MAX_NAME_BYTES
    (an overlong name is refused before its characters are looked at)."""
    if len(name) > MAX_NAME_BYTES:
        raise UnsafePathError(name, f"longer than {MAX_NAME_BYTES} bytes", source=source, what=what)
    if any(ord(c) < 0x20 or c == "\x7f" for c in name):
        raise UnsafePathError(name, "NUL or a control character", source=source, what=what)
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise UnsafePathError(name, "not valid UTF-8 (a lone surrogate)", source=source, what=what) from None
    if size > MAX_NAME_BYTES:
        raise UnsafePathError(name, f"longer than {MAX_NAME_BYTES} bytes", source=source, what=what)


def is_dir(path: str | Path) -> bool:
    """Path.is_dir for a name that came from outside: False, not an exception, for one the OS refuses to look up
    (longer than NAME_MAX or PATH_MAX, a permission denied on the way)."""
    try:
        return Path(path).is_dir()
    except (OSError, ValueError):
        return False


def is_file(path: str | Path) -> bool:
    """Path.is_file for a name that came from outside (see is_dir)."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False


def within(path: str | Path, root: str | Path) -> bool:
    """`path`, every link followed, is `root` or below it (`root`'s own links followed too)."""
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def lexically_within(path: str | Path, root: str | Path) -> bool:
    """`path` is `root` or below it by its name alone ('..' resolved without touching the disk): for a path
    that need not exist yet, or one checked again with `within` once it does."""
    lexical, base = os.path.normpath(path), os.path.normpath(root)
    return lexical == base or lexical.startswith(base.rstrip(os.sep) + os.sep)


def join_under(root: str | Path, name: object, *, source: str | Path | None, what: str = "key") -> Path:
    """`root/name` after `check_name`, refused when an existing folder or link on the way leads out of
    `root`, or when the name itself is an existing symlink (a write would follow it)."""
    rel = check_name(name, source=source, what=what)
    path = Path(root) / PurePosixPath(rel)
    if not within(path.parent, root):
        raise UnsafePathError(rel, "a folder on the way is a link that leaves the root", source=source, what=what)
    if path.is_symlink():
        raise UnsafePathError(rel, "an existing symlink where a file is written", source=source, what=what)
    return path


def open_inside(path: str | Path, root: str | Path, *, name: str, source: str | Path | None,
                what: str = "key") -> int:
    """A read-only fd of `path`, refused unless the file it opens, every link followed, is a regular file
    under `root`. Checked on the open file where /proc shows it, so a link swapped in after a listing is
    caught too; a FIFO is opened without blocking and refused."""
    if not within(path, root):
        raise UnsafePathError(name, f"a link to {quote(os.path.realpath(path))}, outside {quote(root)}",
                              source=source, what=what)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if _PROC_FD and not within(f"/proc/self/fd/{fd}", root):
            raise UnsafePathError(name, f"a link that now leads outside {quote(root)}", source=source, what=what)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafePathError(name, "not a regular file", source=source, what=what)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def link_target(name: str, target: object, *, symbolic: bool, source: str | Path | None,
                what: str = "link") -> str:
    """Where a link member `name` -> `target` points, as a name under the root ('' for the root itself):
    a symlink resolves against its own folder, a hard link against the root. `..` may climb inside a
    symlink's target but never above the root; the target obeys the rest of the rule (no absolute path,
    empty target, NUL or control character, bounded length)."""
    if not isinstance(target, str) or not target:
        raise UnsafePathError(str(target), "an empty link target", source=source, what=what)
    if target.startswith("/"):
        raise UnsafePathError(target, "an absolute link target", source=source, what=what)
    if not symbolic:
        return check_name(target, source=source, what=what)
    _check_text(target, source=source, what=what)
    stack = check_name(name, source=source, what=what).split("/")[:-1]
    for segment in target.split("/"):
        if segment in ("", "."):
            continue
        if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
            raise UnsafePathError(target, f"a segment longer than {MAX_SEGMENT_BYTES} bytes", source=source, what=what)
        if segment == "..":
            if not stack:
                raise UnsafePathError(target, "a link target above the root", source=source, what=what)
            stack.pop()
        else:
            stack.append(segment)
    return "/".join(stack)


_PROC_FD = os.path.isdir("/proc/self/fd")  # where an open file's real path can be read back (Linux)
