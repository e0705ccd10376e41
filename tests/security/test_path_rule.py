"""The one path rule (tritonpkg.safepath): each rule refused with its name, clean names accepted."""

from __future__ import annotations

import os

import pytest

from tritonpkg import safepath
from tritonpkg.safepath import UnsafePathError


@pytest.mark.parametrize(("name", "rule"), [
    ("../outside/X", "'..' segment"),
    ("a/../../outside", "'..' segment"),
    ("/etc/passwd", "absolute path"),
    ("a//b", "empty segment"),
    ("a/", "empty segment"),
    ("./a", "'.' segment"),
    ("a\x00b", "control character"),
    ("a\nb", "control character"),
    ("", "empty"),
    ("x" * 300, "segment longer"),
    ("a/" * 3000 + "b", "longer than 4096"),
    ("hi \ud800", "surrogate"),
])
def test_bad_names_are_refused_with_the_rule(name, rule):
    with pytest.raises(UnsafePathError) as err:
        safepath.check_name(name, source="s3://bucket/model")
    assert rule in str(err.value)
    assert "s3://bucket/model" in str(err.value)
    assert len(str(err.value)) < 400  # a short quote of the name, never the whole of it


@pytest.mark.parametrize("name", ["config.json", "a/b/c.safetensors", "tok.en/izer..json", "..hidden", "é/ü"])
def test_clean_names_pass_unchanged(name):
    assert safepath.check_name(name, source=None) == name


def test_join_under_refuses_a_folder_link_that_leaves_the_root(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir(), outside.mkdir()
    os.symlink(outside, root / "sub")
    with pytest.raises(UnsafePathError, match="link that leaves the root"):
        safepath.join_under(root, "sub/x", source="test")
    os.symlink(outside / "f", root / "f")
    with pytest.raises(UnsafePathError, match="existing symlink"):
        safepath.join_under(root, "f", source="test")
    (root / "inner").mkdir()
    assert safepath.join_under(root, "inner/x", source="test") == root / "inner" / "x"
    assert list(outside.iterdir()) == []
