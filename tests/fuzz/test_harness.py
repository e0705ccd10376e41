"""The harness's property catches each kind of failure it promises to (else every fuzz target passes vacuously)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import strategies as st

from tests.fuzz import harness
from tritonpkg.errors import TritonpkgError


def target(run, errors=(TritonpkgError,)) -> harness.Target:
    return harness.Target("t", st.none(), run, errors)


def test_an_own_error_naming_the_file_passes():
    def run(case, root):
        raise TritonpkgError("bad", file=root / "f")

    assert harness.check(target(run), None) == "TritonpkgError"


@pytest.mark.parametrize(("run", "message"), [
    (lambda case, root: {}["x"], "KeyError escaped"),
    (lambda case, root: (_ for _ in ()).throw(TritonpkgError("bad")), "names no file or field"),
    (lambda case, root: (root.parent / "outside" / "x").write_text("x"), "outside the root"),
    (lambda case, root: (root.parent / "stray").mkdir(), "outside the root"),
    (lambda case, root: Path("in-cwd").write_text("x"), "outside the root"),
])
def test_each_kind_of_failure_is_a_violation(run, message):
    with pytest.raises(harness.Violation, match=message):
        harness.check(target(run), None)


def test_a_hang_is_a_violation(monkeypatch):
    monkeypatch.setattr(harness, "CASE_SECONDS", 0.2)
    with pytest.raises(harness.Violation, match="no answer within"):
        harness.check(target(lambda case, root: time.sleep(5)), None)


@pytest.mark.parametrize("case", [{"literal": "a'b"}, {"spec": {
    "template": "embedding", "name": "m", "version": 1, "weights": "s3://bkt/w'x", "params": {}, "max_batch_size": 0,
    "inputs": None, "outputs": None}}])
def test_the_template_target_sees_a_value_that_escapes_its_literal(monkeypatch, case):
    """A filter that quotes without escaping lets a value end its string early: the target says so."""
    from tests.fuzz.targets import targets
    from tritonpkg.repository import templates

    monkeypatch.setattr(templates, "_literal", lambda value, depth: f"'{value}'" if isinstance(value, str)
                        else repr(value))
    templates.expected_shape.cache_clear()  # no shape rendered by the broken filter outlives this test
    try:
        with pytest.raises(harness.Violation, match="template: "):
            harness.check(targets()["template"], case)
    finally:
        templates.expected_shape.cache_clear()
