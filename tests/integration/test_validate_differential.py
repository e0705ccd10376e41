"""The acceptance bar of `tritonpkg validate`: it must predict the real Triton 2.51 server.

Every case of tests/differential/corpus.py (real configs mutated field by field) is loaded in one real
tritonserver (explicit model control: load, record, unload) and validated in a repository of its own.
Agreement = the server loaded it <=> validate reported no error. Required: at least 95% agreement,
and the disagreeing cases are exactly those listed, with their reasons, in
tests/differential/KNOWN_DISAGREEMENTS.md, so a new disagreement and a fixed one both fail the test
until the list is updated. No mocks: the server decides. The vLLM cases run against a stand-in
Python-based backend (corpus.VLLM_STANDIN_PY) that checks <version>/model.json instead of starting
vLLM. Run `python -m tests.differential.run` for the full table.
"""

from __future__ import annotations

import pytest

from tests.differential.corpus import build_cases
from tests.differential.run import agreement_rate, known_disagreements, markdown_report

MIN_AGREEMENT = 0.95
MIN_CASES = 170


def test_corpus_is_large_mixed_and_deterministic():
    cases = build_cases()
    again = build_cases()
    assert [c.name for c in cases] == [c.name for c in again]
    assert [c.models for c in cases] == [c.models for c in again], "the generator must be deterministic"
    assert len(cases) >= MIN_CASES
    refused = sum(c.expect == "refuse" for c in cases)
    assert 0.35 * len(cases) <= refused <= 0.65 * len(cases), "roughly half the corpus should be invalid"
    assert all(c.description for c in cases)


def test_known_disagreements_name_real_cases():
    names = {c.name for c in build_cases()}
    known = known_disagreements()
    assert set(known) <= names, f"KNOWN_DISAGREEMENTS.md lists cases that do not exist: {set(known) - names}"
    assert all(reason for reason in known.values()), "every known disagreement needs its reason"


@pytest.fixture(scope="module")
def outcomes(corpus_outcomes):
    return corpus_outcomes[1]


@pytest.mark.integration
def test_server_behaves_as_recorded(outcomes):
    """Guards the harness: if the stand-in backend or the runtime broke, the ground truth would shift
    silently (e.g. every vLLM case refused). Each case's `expect` is what Triton 2.51 did."""
    drift = [f"{o.case}: expected {o.expect}, server {'loaded' if o.server_ok else 'refused'}: {o.server_message[:300]}"
             for o in outcomes if not o.server_as_expected]
    assert not drift, "the server did not do what corpus.py records:\n" + "\n".join(drift)


@pytest.mark.integration
def test_validate_agrees_with_server(outcomes):
    rate = agreement_rate(outcomes)
    assert rate >= MIN_AGREEMENT, f"agreement {rate:.1%} < {MIN_AGREEMENT:.0%}\n\n" + markdown_report(outcomes)


@pytest.mark.integration
def test_disagreements_are_the_known_ones(outcomes):
    disagree = {o.case for o in outcomes if not o.agree}
    known = set(known_disagreements())
    new, fixed = sorted(disagree - known), sorted(known - disagree)
    assert not new and not fixed, (
        f"new disagreements (add to KNOWN_DISAGREEMENTS.md with a reason, or fix validate): {new}\n"
        f"listed but now agreeing (remove from KNOWN_DISAGREEMENTS.md): {fixed}\n\n" + markdown_report(outcomes))


CRASH_ONCE_PY = '''\
import os
import signal
from pathlib import Path


class TritonPythonModel:
    """The first load SIGSEGVs the server (the stub's parent), as Triton 2.51 once did under the corpus."""

    def initialize(self, args):
        marker = Path(__file__).parent / "crashed"
        if not marker.exists():
            marker.write_text("once")
            os.kill(os.getppid(), signal.SIGSEGV)

    def execute(self, requests):
        return []
'''


@pytest.mark.integration
def test_a_server_that_dies_under_a_load_is_started_again_for_the_cases_left(tmp_path):
    """The harness must not turn one server crash into refusals of every case after it (a CI run recorded
    17 cases as refused in 0 s after Triton 2.51 SIGSEGVed loading `as_config_empty`)."""
    pytest.importorskip("pytriton", reason="the real server comes from nvidia-pytriton (pip install -e '.[runtime]')")
    from tests.differential.corpus import Case, base_addsub
    from tests.differential.run import run_corpus

    def case(name: str, crash: bool = False) -> Case:
        draft = base_addsub(name)["main"]
        if crash:
            draft.files["1/model.py"] = CRASH_ONCE_PY
        return Case(name, "as", "crash-once harness check" if crash else "base", "load", (draft.render(),), name)

    cases = [case("before"), case("crash_once", crash=True), case("after_one"), case("after_two")]
    outcomes = run_corpus(cases, tmp_path, servers=1)
    assert (tmp_path / "server-0.log").exists() and (tmp_path / "server-0.restart1.log").exists(), \
        "the first server should have died and a second one taken the cases left"
    assert "Signal (11)" in (tmp_path / "server-0.log").read_text(encoding="utf-8", errors="replace")
    assert [(o.case, o.server_ok, o.server_message) for o in outcomes] == [(c.name, True, "") for c in cases]
