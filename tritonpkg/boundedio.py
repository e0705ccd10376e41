"""Bounded reads: a file read back from a repository, a cache or a key file may be hostile or still growing,
so it is read up to a bound and refused beyond it, never loaded whole first.

`read_at_most` is the one place the bound is applied (read bound + 1 bytes: one more than allowed says the
file is larger, whatever its size said when it was checked); `read_file` opens a path for it. Callers turn
`FileTooLargeError` into their own error where they have one."""

from __future__ import annotations

import errno
import os
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
    """The bytes of `path`, at most `limit`; FileTooLargeError beyond it, OSError when it cannot be opened."""
    with open(path, "rb") as fh:
        return read_at_most(fh, limit, path)
