"""The pure parts of materialize: part splitting, identities, the journal, ordered digests, reuse, sizes."""

from __future__ import annotations

import hashlib
import itertools
import random

import pytest

from tritonpkg.storage.hashing import OrderedDigest
from tritonpkg.storage.journal import Journal
from tritonpkg.storage.objects import RemoteFile, listing_digest
from tritonpkg.storage.plan import build, reusable, split


def test_split_covers_the_file_exactly():
    parts = split(10 * 1024 + 7, 1024)
    assert [p.index for p in parts] == list(range(11))
    assert parts[0].start == 0 and parts[-1].end == 10 * 1024 + 7
    assert all(a.end == b.start for a, b in itertools.pairwise(parts))
    assert split(0, 1024) == []


def test_md5_only_for_single_part_etags():
    assert RemoteFile("a", "a", 1, etag='"5D41402ABC4B2A76B9719D911017C592"').md5 == "5d41402abc4b2a76b9719d911017c592"
    assert RemoteFile("a", "a", 1, etag="e44d4d7ce6fa38bb54da5e6c1e75129c-5").md5 is None


def test_identity_tag_changes_with_etag_and_part_size():
    f = RemoteFile("w.bin", "k", 10, etag="x")
    assert f.identity_tag(8) != RemoteFile("w.bin", "k", 10, etag="y").identity_tag(8)
    assert f.identity_tag(8) != f.identity_tag(16)
    assert listing_digest([f]) != listing_digest([RemoteFile("w.bin", "k", 11, etag="x")])


def test_journal_ignores_torn_lines_and_other_identities(tmp_path):
    j = Journal(tmp_path / "journal")
    j.record("w.bin", "tagA", 0)
    j.record("w.bin", "tagA", 3)
    j.record("w.bin", "tagB", 1)
    j.close()
    with open(tmp_path / "journal", "a") as fh:
        fh.write('{"p": "w.bin", "t": "tagA", "i"')  # torn by a kill -9
    f = RemoteFile("w.bin", "k", 4096, etag="x")
    done = Journal(tmp_path / "journal").done()
    assert done[("w.bin", "tagA")] == {0, 3}
    plans = build([f], 1024, {("w.bin", f.identity_tag(1024)): {1, 2}, ("w.bin", "stale"): {0}}, {})
    assert plans[0].staged == {1, 2} and plans[0].fetch_bytes == 2048 and plans[0].staged_bytes == 2048


def test_ordered_digest_out_of_order_equals_sequential():
    parts = [[bytes([i]) * 700, bytes([100 + i]) * (300 + i)] for i in range(20)]  # each part: its chunks
    released = []
    d = OrderedDigest(len(parts), want_md5=True, on_hashed=released.append)
    order = list(range(20))
    random.Random(4).shuffle(order)
    finished = [d.feed(i, parts[i]) for i in order]
    assert finished.count(True) == 1 and sorted(released) == sorted(1000 + i for i in range(20))
    whole = b"".join(b"".join(chunks) for chunks in parts)
    assert d.sha256.hexdigest() == hashlib.sha256(whole).hexdigest()
    assert d.md5.hexdigest() == hashlib.md5(whole, usedforsecurity=False).hexdigest()


def test_reusable_needs_same_identity_and_file_present(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    (old / "a").write_bytes(b"12345")
    manifest = {"files": {"a": {"size": 5, "etag": "e1", "sha256": "s", "version_id": None},
                          "b": {"size": 5, "etag": "e2", "sha256": "s"}}}
    files = [RemoteFile("a", "a", 5, etag="e1"), RemoteFile("b", "b", 5, etag="e2"),
             RemoteFile("c", "c", 5, etag="e3")]
    assert reusable(files, [(old, manifest)]) == {"a": (old / "a", "s")}  # b is listed but missing on disk
    assert reusable([RemoteFile("a", "a", 5, etag="changed")], [(old, manifest)]) == {}


@pytest.mark.parametrize(("text", "expected"), [("8MiB", 8 << 20), ("512k", 512 << 10), ("1048576", 1 << 20),
                                           ("1.5G", 3 << 29)])
def test_parse_size(text, expected):
    from tritonpkg.cli.materialize_cmd import parse_size

    assert parse_size(text, "--part-size") == expected


def test_parse_size_rejects_garbage():
    import typer

    from tritonpkg.cli.materialize_cmd import parse_size

    with pytest.raises(typer.BadParameter, match=r"expected e.g. 8MiB"):
        parse_size("eight", "--part-size")


def test_auto_part_size_spreads_the_listing_over_the_threads_within_bounds():
    from tritonpkg.storage.plan import AUTO_MAX_PART, AUTO_MIN_PART, MiB, auto_part_size

    def files(*sizes):
        return [RemoteFile(path=f"f{i}", key=f"k{i}", size=s) for i, s in enumerate(sizes)]

    assert auto_part_size(files(*[64 * MiB] * 4), 8) == 32 * MiB  # 256 MiB over 8 threads
    assert auto_part_size(files(100 * MiB + 1), 4) == 26 * MiB  # rounded up to whole MiB
    assert auto_part_size(files(3 * MiB, 1000), 8) == AUTO_MIN_PART
    assert auto_part_size(files(*[5 << 30] * 3), 16) == AUTO_MAX_PART
    assert auto_part_size([], 8) == AUTO_MIN_PART


def test_slot_count_bounds_buffered_parts_by_memory_but_keeps_every_thread_busy():
    from tritonpkg.storage.transfer import BUFFER_BUDGET, slot_count

    assert slot_count(8, 8 << 20) == 16
    assert slot_count(8, 64 << 20) == 9
    assert slot_count(8, 64 << 20) * (64 << 20) <= BUFFER_BUDGET + (64 << 20)
    assert slot_count(1, 1 << 30) == 2
