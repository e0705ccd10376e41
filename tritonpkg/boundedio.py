"""Bounded reads: a file read back from a repository, a cache or a key file may be hostile or still growing,
so it is read up to a bound and refused beyond it, never loaded whole first.

`read_at_most` is the one place the bound is applied (read bound + 1 bytes: one more than allowed says the
file is larger, whatever its size said when it was checked); `read_file` opens a path for it, a regular file
only (a FIFO or a device named where a file should be is refused, never waited on). Callers turn
`FileTooLargeError` into their own error where they have one."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO


class FileTooLargeError(OSError):
    """A file beyond its bound: an OSError (EFBIG) naming the file and the bound, so a caller that already
    treats an unreadable file as such needs nothing more."""

    def __init__(self, path: str | os.PathLike[str], limit: int) -> None:
        super().__init__(errno.EFBIG, f"larger than {limit} bytes", str(path))
        self.limit = limit


def read_at_most(fh: BinaryIO, limit: int, path: str | os.PathLike[str]) -> bytes:
    """The rest of the open file `fh`, at most `limit` bytes; FileTooLargeError (naming `path`) when there is more."""
    data = fh.read(limit + 1)
    if len(data) > limit:
        raise FileTooLargeError(path, limit)
    return data


def read_file(path: Path, limit: int) -> bytes:
    """The bytes of the regular file `path`, at most `limit`; FileTooLargeError beyond it, OSError (EINVAL) for
    anything but a regular file, OSError when it cannot be opened."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))  # a FIFO's open does not wait
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        if info.st_size > limit:
            raise FileTooLargeError(path, limit)
        fh = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with fh:
        return read_at_most(fh, limit, path)
