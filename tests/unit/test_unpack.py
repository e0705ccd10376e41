"""Safe unpacking of model packages: crafted hostile archives are refused with a message naming the
member, nothing is written outside the target, and a refused archive leaves no target and no stage."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest

from tests.support.paths import EXAMPLES
from tritonpkg.repository import archive as archive_mod
from tritonpkg.repository import package_spec
from tritonpkg.serve.unpack import LockMismatchError, UnpackLimits, UnsafeArchiveError, unpack_archive, verify_unpacked
from tritonpkg.spec import load_spec


def member(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, link: str = "") -> tuple:
    return name, data, kind, link


def make_tar(path: Path, members: list[tuple], declared_size: dict[str, int] | None = None) -> Path:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, kind, link in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = link
            info.mode = 0o6777 if kind == tarfile.REGTYPE else 0o755
            if kind == tarfile.REGTYPE:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    path.write_bytes(gzip.compress(raw.getvalue()))
    return path


@pytest.fixture
def place(tmp_path: Path) -> Path:
    """A folder holding only the target's parent: anything else appearing there is a leak."""
    (tmp_path / "work").mkdir()
    return tmp_path


def refuse(place: Path, members: list[tuple], match: str, limits: UnpackLimits | None = None) -> str:
    limits = limits or UnpackLimits()
    archive = make_tar(place / "pkg.tar.gz", members)
    target = place / "work" / "pkg"
    with pytest.raises(UnsafeArchiveError, match=match) as info:
        unpack_archive(archive, target, limits)
    assert not target.exists()
    assert list((place / "work").iterdir()) == []  # the stage is gone too
    assert sorted(p.name for p in place.iterdir()) == ["pkg.tar.gz", "work"]  # nothing written beside
    assert info.value.file == str(place / "pkg.tar.gz")
    return str(info.value)


def test_zip_slip_is_refused(place: Path) -> None:
    refuse(place, [member("repository/a.txt", b"ok"), member("../../escaped.txt", b"x")], "'..' segment")


def test_absolute_path_is_refused(place: Path) -> None:
    refuse(place, [member(str(place / "abs.txt"), b"x")], "absolute path")


def test_symlink_leaving_the_target_is_refused(place: Path) -> None:
    refuse(place, [member("repository/l", kind=tarfile.SYMTYPE, link="../../outside")], "points outside")
    refuse(place, [member("repository/l", kind=tarfile.SYMTYPE, link="/etc/passwd")], "points outside")


def test_symlink_chain_that_escapes_once_complete_is_refused(place: Path) -> None:
    # a/l2 -> x/.. looks inside when written; a/x -> .. arrives later and makes a/l2 the target's parent.
    refuse(place, [member("a/l2", kind=tarfile.SYMTYPE, link="x/.."), member("a/x", kind=tarfile.SYMTYPE, link="..")],
           "resolves outside")


def test_writing_through_a_link_is_refused(place: Path) -> None:
    refuse(place, [member("sub/", kind=tarfile.DIRTYPE), member("d", kind=tarfile.SYMTYPE, link="sub"),
                   member("d/f.txt", b"x")], "through the link 'd'")


def test_hardlink_leaving_the_target_is_refused(place: Path) -> None:
    refuse(place, [member("repository/h", kind=tarfile.LNKTYPE, link="../../etc/passwd")], "points outside")
    refuse(place, [member("repository/h", kind=tarfile.LNKTYPE, link="/etc/passwd")], "points outside")


def test_device_and_fifo_members_are_refused(place: Path) -> None:
    refuse(place, [member("repository/null", kind=tarfile.CHRTYPE)], "device file")
    refuse(place, [member("repository/disk", kind=tarfile.BLKTYPE)], "device file")
    refuse(place, [member("repository/pipe", kind=tarfile.FIFOTYPE)], "is a FIFO")


def test_duplicate_member_is_refused(place: Path) -> None:
    refuse(place, [member("a.txt", b"1"), member("a.txt", kind=tarfile.SYMTYPE, link="b")], "appears twice")


def test_size_bomb_is_refused_before_it_is_inflated(place: Path) -> None:
    bomb = b"\0" * (8 << 20)  # 8 MiB of zeros: a few KiB compressed
    archive = make_tar(place / "pkg.tar.gz", [member("small.txt", b"x" * 100), member("bomb.bin", bomb)])
    assert archive.stat().st_size < 64 << 10
    with pytest.raises(UnsafeArchiveError, match=r"expanded size passes 1048576 bytes at member 'bomb.bin'"):
        unpack_archive(archive, place / "work" / "pkg", UnpackLimits(max_bytes=1 << 20))
    assert list((place / "work").iterdir()) == []


def test_member_count_bomb_is_refused(place: Path) -> None:
    text = refuse(place, [member(f"f{i}.txt", b"") for i in range(50)], "more than 10 members",
                  UnpackLimits(max_members=10))
    assert "max_members" in text


def test_not_an_archive_is_refused(place: Path) -> None:
    (place / "pkg.tar.gz").write_bytes(b"this is not gzip")
    with pytest.raises(UnsafeArchiveError, match="not a readable tar archive"):
        unpack_archive(place / "pkg.tar.gz", place / "work" / "pkg")
    assert list((place / "work").iterdir()) == []


def test_existing_target_is_not_touched(place: Path) -> None:
    archive = make_tar(place / "pkg.tar.gz", [member("a.txt", b"x")])
    (place / "work" / "pkg").mkdir()
    (place / "work" / "pkg" / "keep").write_text("mine")
    with pytest.raises(Exception, match="already exists"):
        unpack_archive(archive, place / "work" / "pkg")
    assert (place / "work" / "pkg" / "keep").read_text() == "mine"


def test_inside_links_and_modes_are_kept_safe(place: Path) -> None:
    archive = make_tar(place / "pkg.tar.gz", [
        member("repository/m/1/model.py", b"print(1)"),
        member("repository/m/1/alias.py", kind=tarfile.SYMTYPE, link="model.py"),
        member("repository/m/1/hard.py", kind=tarfile.LNKTYPE, link="repository/m/1/model.py"),
    ])
    out = unpack_archive(archive, place / "work" / "pkg")
    model = out.repository / "m" / "1" / "model.py"
    assert (out.repository / "m" / "1" / "alias.py").read_text() == "print(1)"
    assert (out.repository / "m" / "1" / "hard.py").stat().st_ino == model.stat().st_ino
    assert model.stat().st_mode & 0o7777 == 0o755  # setuid/setgid/world-write from the archive dropped
    assert out.files == 1 and out.bytes == len(b"print(1)")


@pytest.fixture
def real_package(tmp_path: Path) -> Path:
    result = package_spec(load_spec(EXAMPLES / "sentiment-custom"), tmp_path / "repo", archive=tmp_path / "pkg.tar.gz")
    assert result.archive is not None
    return result.archive


def rewrite(archive: Path, change) -> Path:
    with tarfile.open(archive) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    change(files)
    archive.write_bytes(archive_mod.build(files))
    return archive


def test_a_real_package_unpacks_and_verifies(real_package: Path, tmp_path: Path) -> None:
    out = unpack_archive(real_package, tmp_path / "served")
    verify_unpacked(out, real_package)
    assert (out.repository / "sentiment" / "config.pbtxt").is_file()
    assert (out.repository / "sentiment" / "1" / "lexicon.json").is_file()
    assert out.wheels == []


def test_a_tampered_file_is_named(real_package: Path, tmp_path: Path) -> None:
    rewrite(real_package, lambda f: f.update({"repository/sentiment/1/lexicon.json": b"{}"}))
    out = unpack_archive(real_package, tmp_path / "served")
    with pytest.raises(LockMismatchError, match=r"sentiment/1/lexicon.json: sha256 differs from the lock"):
        verify_unpacked(out, real_package)


def test_an_extra_or_missing_file_is_named(real_package: Path, tmp_path: Path) -> None:
    def change(files: dict) -> None:
        files["repository/sentiment/1/sneaky.py"] = b"import os"
        del files["repository/sentiment/1/hooks.py"]
        files["wheels/evil-1.0-py3-none-any.whl"] = b"PK"

    rewrite(real_package, change)
    out = unpack_archive(real_package, tmp_path / "served")
    with pytest.raises(LockMismatchError) as info:
        verify_unpacked(out, real_package)
    text = str(info.value)
    assert "sentiment/1/sneaky.py: not in the lock" in text
    assert "sentiment/1/hooks.py: missing" in text
    assert "wheels/evil-1.0-py3-none-any.whl: not listed as a plugin" in text


def test_a_package_without_lock_is_refused(real_package: Path, tmp_path: Path) -> None:
    rewrite(real_package, lambda f: f.pop("repository/tritonpkg.lock.json"))
    out = unpack_archive(real_package, tmp_path / "served")
    with pytest.raises(LockMismatchError, match=r"has no repository/tritonpkg.lock.json"):
        verify_unpacked(out, real_package)


def test_a_swapped_plugin_wheel_is_named(write_spec, tmp_path: Path) -> None:
    from tests.support.specs import HOOKS, custom_spec
    from tests.support.wheels import make_wheel

    wheel = "demo_plugin-0.1.0-py3-none-any.whl"
    make_wheel(tmp_path / "spec", entry_points={"vllm.logits_processors": {"demo": "demo_plugin:Processor"}})
    spec = load_spec(write_spec(custom_spec(1, plugins=[{"name": "demo-plugin", "wheel": wheel}]),
                                extra_files={"hooks.py": HOOKS}))
    archive = package_spec(spec, tmp_path / "repo", archive=tmp_path / "pkg.tar.gz").archive
    out = unpack_archive(archive, tmp_path / "good")
    verify_unpacked(out, archive)
    assert [w.name for w in out.wheels] == [wheel]
    other = make_wheel(tmp_path / "other", module_source="import os  # not what was packaged\n")
    rewrite(archive, lambda f: f.update({f"wheels/{wheel}": other.read_bytes()}))
    with pytest.raises(LockMismatchError, match=f"wheels/{wheel}: sha256 differs from the lock"):
        verify_unpacked(unpack_archive(archive, tmp_path / "bad"), archive)
