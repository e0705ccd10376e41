"""tritonpkg/safepath.py: lookups of names that came from outside never raise."""

from __future__ import annotations

import pytest


def test_is_dir_and_is_file_say_false_for_a_name_the_os_refuses(tmp_path):
    """A name from outside longer than NAME_MAX (ENAMETOOLONG, which Path.is_dir raises) or with a NUL."""
    from tritonpkg import safepath

    long = tmp_path / ("a" * 300)
    with pytest.raises(OSError, match="too long"):
        long.is_dir()
    assert safepath.is_dir(long) is False and safepath.is_file(long) is False
    assert safepath.is_dir(str(tmp_path) + "/x\x00y") is False
    assert safepath.is_dir(tmp_path) is True and safepath.is_file(tmp_path) is False
