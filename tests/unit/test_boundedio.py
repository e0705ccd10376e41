"""The one bounded read: at the bound it reads, one byte past it refuses naming the file and the bound, and
what grows after a size check is still refused."""

from __future__ import annotations

import errno
import io
import os
import re
from pathlib import Path

import pytest

from tritonpkg import boundedio


def test_at_the_bound_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(b"x" * 16)
    assert boundedio.read_file(path, 16) == b"x" * 16
    assert boundedio.read_file(path, 1 << 20) == b"x" * 16


def test_one_byte_past_is_refused_naming_file_and_bound(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(b"x" * 17)
    with pytest.raises(boundedio.FileTooLargeError) as caught:
        boundedio.read_file(path, 16)
    exc = caught.value
    assert isinstance(exc, OSError) and exc.errno == errno.EFBIG  # callers that catch OSError need nothing more
    assert exc.filename == str(path) and exc.limit == 16
    assert re.search(r"larger than 16 bytes: '.*f\.json'", str(exc)), str(exc)


def test_reads_no_more_than_the_bound_plus_one() -> None:
    """An endless stream (a FIFO, /dev/zero, a file still being written) costs bound + 1 bytes, not its size."""

    asked: list[int] = []

    class Endless(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def read(self, size: int = -1) -> bytes:
            assert size >= 0, "an unbounded read"
            asked.append(size)
            return b"\0" * size

    with pytest.raises(boundedio.FileTooLargeError):
        boundedio.read_at_most(Endless(), 1024, "/dev/zero")  # type: ignore[arg-type]
    assert asked == [1025]


def test_the_rest_of_an_open_file(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_bytes(b"abcdef")
    with open(path, "rb") as fh:
        fh.read(2)
        assert boundedio.read_at_most(fh, 4, path) == b"cdef"


def test_a_missing_file_is_the_open_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        boundedio.read_file(tmp_path / "absent", 16)


def test_a_fifo_or_a_folder_is_refused_without_waiting(tmp_path: Path) -> None:
    """A FIFO named where a file should be would block a plain open until a writer came; it is refused at once."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path):
        with pytest.raises(OSError, match="not a regular file") as caught:
            boundedio.read_file(path, 16)
        assert caught.value.errno == errno.EINVAL
