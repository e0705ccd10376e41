"""NVIDIA's vllm_backend sample (samples/model_repository/vllm_model: `backend: "vllm"` and an instance
group, nothing else) in the real Triton 2.51 beside validate's verdict, with the server's auto-complete on
(Triton's default) and off (--disable-auto-complete-config).

With auto-complete the backend's auto_complete_config makes the model decoupled and supplies its I/O, so
the server loads the sample and validate must call it clean; without it the backend refuses a model that
is not decoupled. Variants that auto-complete may not complete (a written `decoupled: false`, an empty
transaction policy, max_batch_size 8) are refused by both, and validate names the field the server's
message is about. The cases are the corpus's `vs_` cases, loaded as tests/differential loads every case
(one real tritonserver, the stand-in vLLM backend carrying the toolkit backend's own auto_complete_config
and decoupled guard, no engine started); with auto-complete on they are read from the whole corpus's run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from tests.differential.corpus import build_cases
from tests.differential.run import Outcome, markdown_report, run_corpus
from tritonpkg.validate import Problem, validate_repository

# the corpus's outcomes are asked for by name (below): the mark puts this module in their group, on the worker that
# runs the corpus (tests/support/schedule.py), instead of running the whole corpus again on the other
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("corpus_outcomes")]

CASES = [c for c in build_cases() if c.base == "vs"]
FIXTURE = Path(__file__).resolve().parents[1] / "unit" / "validate_fixtures" / "nvidia_vllm_sample"


@pytest.fixture(scope="module", params=[True, False], ids=["auto-complete", "no-auto-complete"])
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[bool, Path, list[Outcome]]:
    """With auto-complete: the sample cases' outcomes from the whole corpus's run (the session's
    `corpus_outcomes`, which tests/integration/test_validate_differential.py judges too); without: a run of its own."""
    if request.param:
        workdir, outcomes = request.getfixturevalue("corpus_outcomes")
        names = {c.name for c in CASES}
        return True, workdir, [o for o in outcomes if o.case in names]
    pytest.importorskip("pytriton", reason="the real server comes from nvidia-pytriton (pip install -e '.[runtime]')")
    workdir = tmp_path_factory.mktemp("autocomplete-off")
    return False, workdir, run_corpus(CASES, workdir, auto_complete=False)


def test_the_corpus_case_is_the_fixture_sample() -> None:
    """The corpus's vs_base and the committed fixture are the same model (one sample, two uses)."""
    (base,) = [c for c in CASES if c.name == "vs_base"]
    files = dict(base.models[0].files)
    fixture = FIXTURE / "vllm_model"
    parse = lambda text: text_format.Parse(text, pb.ModelConfig())  # noqa: E731
    assert parse(str(files["config.pbtxt"])) == parse((fixture / "config.pbtxt").read_text())
    assert json.loads(str(files["1/model.json"])) == json.loads((fixture / "1" / "model.json").read_text())


def test_server_and_validate_agree_on_every_sample_case(run: tuple[bool, Path, list[Outcome]]) -> None:
    _, _, outcomes = run
    assert all(o.agree for o in outcomes), markdown_report(outcomes)


def test_the_sample_loads_exactly_when_auto_complete_is_on(run: tuple[bool, Path, list[Outcome]]) -> None:
    auto, _, outcomes = run
    (base,) = [o for o in outcomes if o.case == "vs_base"]
    assert base.server_ok is auto and base.validate_ok is auto, base


def _token(p: Problem) -> str:
    """The word the server's message uses for the field (or file) validate names."""
    if p.field is None:
        return Path(p.file).name
    if p.field.startswith("model_transaction_policy"):
        return "decoupled"
    return p.field.split(".")[-1].split("[")[0]


def test_refusals_name_the_field_the_server_names(run: tuple[bool, Path, list[Outcome]]) -> None:
    auto, workdir, outcomes = run
    for o in outcomes:
        if o.server_ok:
            continue
        errors = [p for p in validate_repository(workdir / "cases" / o.case, auto_complete=auto).problems
                  if p.severity == "error"]
        tokens = [_token(p) for p in errors]
        assert any(t in o.server_message for t in tokens), (o.case, tokens, o.server_message)
