"""A lock is read back from a repository someone else may have edited: its entries obey the path rule
before `verify` reads them, for every caller (serve's unpack and the stack's own verify step)."""

from __future__ import annotations

import json
import os

from tests.support.paths import EXAMPLES
from tritonpkg.repository import lock as lock_mod
from tritonpkg.repository import package_spec
from tritonpkg.spec import load_spec


def _packaged(tmp_path):
    repo = tmp_path / "repo"
    package_spec(load_spec(EXAMPLES / "sentiment-custom" / "tritonpkg.yaml"), repo)
    return repo


def _add_entry(repo, rel, digest):
    path = repo / lock_mod.LOCK_NAME
    lock = json.loads(path.read_text())
    model = next(iter(lock["models"].values()))
    next(iter(model["versions"].values()))["files"][rel] = digest
    path.write_text(json.dumps(lock))


def test_an_entry_leading_out_of_the_repository_is_a_problem_not_a_read(tmp_path):
    repo = _packaged(tmp_path)
    secret = tmp_path / "host-secret"
    secret.write_bytes(b"secret")
    assert lock_mod.verify(repo) == []
    _add_entry(repo, "../host-secret", lock_mod.sha256(b"secret"))
    problems = lock_mod.verify(repo)
    assert problems == ["'../host-secret': breaks the path rule: a '..' segment"]


def test_an_entry_through_a_folder_link_is_a_problem(tmp_path):
    repo = _packaged(tmp_path)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "f").write_bytes(b"x")
    os.symlink(tmp_path / "outside", repo / "via")
    _add_entry(repo, "via/f", lock_mod.sha256(b"x"))
    assert lock_mod.verify(repo) == [
        "'via/f': breaks the path rule: a folder on the way is a link that leaves the root"]


def test_a_lock_of_another_shape_is_an_error_naming_it_not_a_traceback(tmp_path):
    import pytest

    from tritonpkg.errors import PackageError

    repo = _packaged(tmp_path)
    lock = repo / lock_mod.LOCK_NAME
    for text, match in (('{"lock_version": 1, "models": []}', "`models` mapping"),
                        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
                        ("\xff", "not JSON")):
        lock.write_text(text, encoding="latin-1")
        with pytest.raises(PackageError, match=match) as err:
            lock_mod.read(repo)
        assert err.value.file == str(lock)
        with pytest.raises(PackageError, match=match):  # packaging into that repository says the same
            package_spec(load_spec(EXAMPLES / "sentiment-custom" / "tritonpkg.yaml"), repo)


def test_validate_reports_a_lock_whose_models_is_a_list(tmp_path):
    from tritonpkg.validate import validate_repository

    repo = _packaged(tmp_path)
    (repo / lock_mod.LOCK_NAME).write_text('{"lock_version": 1, "models": []}')
    report = validate_repository(repo)
    assert any(p.rule == "lock.invalid" for p in report.problems)
