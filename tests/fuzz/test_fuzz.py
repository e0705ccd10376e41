"""A short, seeded and deterministic smoke of every fuzz target (derandomized hypothesis, a fixed number of
cases), and the saved corpus replayed: every input a campaign found (`bash scripts/fuzz.sh`) stays a
regression case. The property is the harness's (tests/fuzz/harness.py)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings

from tests.fuzz.harness import check, corpus_cases, load_case
from tests.fuzz.targets import model_stack, targets, use_model_frontend, use_s3

SMOKE_EXAMPLES = int(os.environ.get("TRITONPKG_FUZZ_SMOKE_EXAMPLES", "40"))
TARGETS = targets()


@pytest.fixture(scope="module")
def served_model():
    """A real tritonserver with the mock tool LLM and the frontend in front of it, for `frontend_model`."""
    with model_stack() as url:
        use_model_frontend(url)
        yield url


@pytest.fixture
def session_parts(request, name):
    """The servers a target talks to: the session's moto S3 for `s3`, this module's model stack for
    `frontend_model`."""
    if name == "s3":
        use_s3(request.getfixturevalue("s3_server"))
    if name == "frontend_model":
        request.getfixturevalue("served_model")


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_smoke(name, session_parts):
    target = TARGETS[name]

    @settings(derandomize=True, max_examples=min(SMOKE_EXAMPLES, target.smoke_examples or SMOKE_EXAMPLES),
              deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(target.strategy)
    def run(case):
        check(target, case)

    run()


CORPUS = [(name, path) for name in sorted(TARGETS) for path in corpus_cases(name)]


@pytest.mark.parametrize(("name", "path"), CORPUS, ids=[f"{n}/{p.name}" for n, p in CORPUS])
def test_corpus(name, path, session_parts):
    check(TARGETS[name], load_case(path))


def test_every_target_has_a_corpus():
    """Each target's saved inputs: the crashes a campaign found, and seeds written by hand."""
    assert {name for name, _ in CORPUS} == set(TARGETS)
