"""Issue 23 item 6, the archive half: a package archive's extended headers (GNU long-name/long-link, pax)
are bounded by their declared size before tarfile reads them, count towards UnpackLimits.max_bytes, and
an error line quotes at most a short prefix of a name. Real tar files, written by tarfile or crafted from
its own header blocks."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import time
import tracemalloc
from pathlib import Path

import pytest

from tritonpkg.serve.unpack import MAX_HEADER_BYTES, UnpackLimits, UnsafeArchiveError, unpack_archive

END = b"\0" * (2 * tarfile.BLOCKSIZE)


@pytest.fixture
def place(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    return tmp_path


def _pad(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % tarfile.BLOCKSIZE)


def _header(name: str, size: int = 0, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type, info.mode = size, kind, 0o644
    return info.tobuf(format=tarfile.GNU_FORMAT)


def _write_gz(path: Path, raw: bytes) -> Path:
    with gzip.open(path, "wb", compresslevel=6) as gz:
        gz.write(raw)
    return path


def _refuse(place: Path, archive: Path, match: str,
            limits: UnpackLimits | None = None) -> tuple[str, int, float]:
    """Unpack `archive`; the refusal's message, the peak of traced Python memory and the seconds taken.
    Nothing may be left in `work/` or beside the archive."""
    limits = limits or UnpackLimits()
    target = place / "work" / "pkg"
    tracemalloc.start()
    start = time.monotonic()
    try:
        with pytest.raises(UnsafeArchiveError, match=match) as err:
            unpack_archive(archive, target, limits)
        seconds = time.monotonic() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not target.exists() and list((place / "work").iterdir()) == []
    assert sorted(p.name for p in place.iterdir()) == sorted([archive.name, "work"])
    return str(err.value), peak, seconds


def test_huge_gnu_long_name_is_refused_quickly_with_bounded_memory(place):
    """64 MiB of long name compress to ~64 KiB; tarfile alone reads all of it into one buffer (and the old
    unpacker then printed it whole in the error line)."""
    size = 64 << 20
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        tar.addfile(tarfile.TarInfo("repository/" + "a" * (size - len("repository/"))))
    archive = _write_gz(place / "pkg.tar.gz", raw.getvalue())
    del raw
    assert archive.stat().st_size < 1 << 20
    text, peak, seconds = _refuse(place, archive, "GNU long-name header of")
    assert str(size + 1) in text  # the declared size (name + NUL), not the name
    assert len(text) < 400
    assert peak < 4 << 20, f"peak traced memory {peak} bytes"
    assert seconds < 2.0


def test_declared_size_alone_is_refused_before_any_read(place):
    """The 1.9 GB long-name header of the issue, declared in the raw header block; no data has to follow."""
    raw = _header("././@LongLink", 1_900_000_000, tarfile.GNUTYPE_LONGNAME) + b"a" * tarfile.BLOCKSIZE
    _text, peak, _ = _refuse(place, _write_gz(place / "pkg.tar.gz", raw), "GNU long-name header of 1900000000 bytes")
    assert peak < 1 << 20


def test_huge_pax_header_is_refused(place):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(tarfile.TarInfo("repository/" + "b" * (2 * MAX_HEADER_BYTES)))
    text, _, _ = _refuse(place, _write_gz(place / "pkg.tar.gz", raw.getvalue()), "pax header of")
    assert len(text) < 400


def test_long_name_within_the_header_bound_is_refused_by_the_path_rule_with_a_short_quote(place):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(tarfile.TarInfo("repository/" + "c" * 20_000))
    text, _, _ = _refuse(place, _write_gz(place / "pkg.tar.gz", raw.getvalue()), "longer than 4096 bytes")
    assert len(text) < 400 and "20011 characters" in text


def test_header_bytes_count_towards_max_bytes(place):
    """A 10-byte file behind a 30 KB pax header: 10 bytes of content, 30 KB of expansion."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("repository/a.txt")
        info.size = 10
        info.pax_headers = {"comment": "x" * 30_000}
        tar.addfile(info, io.BytesIO(b"0123456789"))
    archive = _write_gz(place / "pkg.tar.gz", raw.getvalue())
    _refuse(place, archive, "expanded size passes 8192 bytes at a pax header", UnpackLimits(max_bytes=8192))
    out = unpack_archive(archive, place / "work" / "ok", UnpackLimits(max_bytes=64 << 10))
    assert (out.root / "repository" / "a.txt").read_bytes() == b"0123456789"


def test_a_chain_of_extended_headers_is_refused(place):
    """400 GNU long-name headers in a row: tarfile recurses once per header (RecursionError before)."""
    payload = _pad(b"repository/x.txt\0")
    one = _header("././@LongLink", len(b"repository/x.txt\0"), tarfile.GNUTYPE_LONGNAME) + payload
    raw = one * 400 + _header("x.txt") + END
    _refuse(place, _write_gz(place / "pkg.tar.gz", raw), "more than 8 extended headers in a row")


@pytest.mark.parametrize("pax", [{"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": "s"},
                                 {"GNU.sparse.map": "0,10", "GNU.sparse.size": "10"}])
def test_pax_sparse_maps_are_refused_before_they_are_read(place, pax):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("repository/s")
        info.size = 10
        info.pax_headers = pax
        tar.addfile(info, io.BytesIO(b"9" * 10))
    _refuse(place, _write_gz(place / "pkg.tar.gz", raw.getvalue()), "sparse")


def test_escaping_names_are_quoted_short(place):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(tarfile.TarInfo("../" * 1000 + "x"))
    text, _, _ = _refuse(place, _write_gz(place / "pkg.tar.gz", raw.getvalue()), "'..' segment")
    assert len(text) < 400


def test_modes_are_kept_and_never_widened(place):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, mode in (("private", 0o640), ("tool", 0o750), ("wide", 0o6777)):
            info = tarfile.TarInfo(f"repository/{name}")
            info.size, info.mode = 1, mode
            tar.addfile(info, io.BytesIO(b"x"))
    out = unpack_archive(_write_gz(place / "pkg.tar.gz", raw.getvalue()), place / "work" / "pkg")
    modes = {p.name: p.stat().st_mode & 0o7777 for p in (out.root / "repository").iterdir()}
    assert modes == {"private": 0o640, "tool": 0o750, "wide": 0o755}
    assert os.stat(out.root).st_mode & 0o777 == 0o755


def test_lock_entries_leading_out_of_the_repository_are_refused(tmp_path):
    """A lock naming `../../../host/secret` with that file's sha256 verified silently before (and told
    whether a host file exists with given content); its entries now obey the path rule."""
    import hashlib
    import json

    from tests.support.paths import EXAMPLES
    from tritonpkg.repository import archive as archive_mod
    from tritonpkg.repository import package_spec
    from tritonpkg.serve.unpack import LockMismatchError, verify_unpacked
    from tritonpkg.spec import load_spec

    secret = tmp_path / "host" / "secret"
    secret.parent.mkdir()
    secret.write_bytes(b"host secret")
    built = package_spec(load_spec(EXAMPLES / "sentiment-custom"), tmp_path / "repo", archive=tmp_path / "pkg.tar.gz")
    with tarfile.open(built.archive) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    lock = json.loads(files["repository/tritonpkg.lock.json"])
    version = next(iter(lock["models"]["sentiment"]["versions"].values()))
    version["files"]["../../../host/secret"] = hashlib.sha256(b"host secret").hexdigest()
    files["repository/tritonpkg.lock.json"] = json.dumps(lock).encode()
    built.archive.write_bytes(archive_mod.build(files))
    unpacked = unpack_archive(built.archive, tmp_path / "work" / "pkg")
    with pytest.raises(LockMismatchError, match=r"lock entry '\.\./\.\./\.\./host/secret' breaks the path rule"):
        verify_unpacked(unpacked, built.archive)
