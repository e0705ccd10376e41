"""The toolkit's own vLLM backend against the target release's vLLM (rules/toolkit_backend.py): a repository that
only that backend can serve (the packager's embedding I/O) is refused for a release whose vLLM is outside the range
the matrix declares (toolkit_features), by validate -r, and by refuse_release (for the commands that put a
repository on a release's image) with the same line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

from tests.support.minilm import MINILM
from tests.support.paths import EXAMPLES
from tritonpkg import compat, vllm_io
from tritonpkg.errors import CompatError
from tritonpkg.repository import package_spec
from tritonpkg.spec import Spec
from tritonpkg.validate import validate_repository
from tritonpkg.validate.rules.toolkit_backend import refuse_release

RULE = "toolkit_backend.vllm-range"


def packaged(tmp_path: Path, release: str, embed: bool) -> Path:
    """The real packager's repository of the MiniLM embedding example (toolkit-only I/O) or of a generating
    model (NVIDIA's I/O), aimed at `release`. The packager refuses the embedding I/O for a release outside the
    range (test_package_refuses_...), so that repository is packaged for 26.08 (inside) and judged against
    `release`: a repository packaged elsewhere, or renamed, reaches validate and serve that way."""
    data = yaml.safe_load((EXAMPLES / "minilm-embeddings" / "tritonpkg.yaml").read_text())
    inside = not embed or compat.toolkit_backend_refusal(release) is None
    data.update(weights=str(MINILM), target_release=release if inside else "26.08")
    if not embed:
        data["engine_args"].pop("runner")
    spec = Spec.model_validate(data)
    return package_spec(spec, tmp_path / f"repo-{release}-{embed}").repository


def errors(repo: Path, release: str | None) -> list:
    report = validate_repository(repo, target_release=release)
    return [p for p in report.problems if p.rule == RULE]


@pytest.fixture(autouse=True)
def _no_live_vllm(monkeypatch):
    monkeypatch.setenv("TRITONPKG_NO_LIVE_VLLM", "1")


def test_range_comes_from_the_refused_rows_of_toolkit_features():
    refused = [r for r in compat.toolkit_features() if r["feature"] == "toolkit_backend" and r.get("refused")]
    assert refused, "the matrix declares no vLLM the toolkit's backend cannot run on"
    floor = max(Version(r["vllm_before"]) for r in refused)
    assert compat.toolkit_backend_range() == compat.SpecifierSet(f">={floor}")
    assert compat.pinned_vllm() in compat.toolkit_backend_range()
    for r in refused:  # a refused row is one where the backend does not hold
        assert compat.feature_holds("toolkit_backend", Version(r["vllm_from"])) == (False, r["why"])


@pytest.mark.parametrize("release", ["24.10", "25.09", "25.10"])
def test_the_refusal_names_the_release_its_vllm_the_range_and_what_to_do(release):
    line = compat.toolkit_backend_refusal(release)
    vllm = compat.get_release(release).vllm_base
    assert line is not None
    assert f"release {release} runs vLLM {vllm}" in line
    assert f"needs vLLM {compat.toolkit_backend_range()}" in line
    assert "target a release whose vLLM is" in line and "NVIDIA's backend" in line


def test_no_refusal_where_the_vllm_is_not_published():
    unknown = [r.release for r in compat.releases() if r.vllm is None]
    assert unknown
    assert all(compat.toolkit_backend_refusal(r) is None for r in unknown)


def test_the_contract_marks_tensors_nvidias_backend_never_had():
    only = vllm_io.load().toolkit_only()
    assert {"embedding", "pooling_parameters", "candidates", "candidate_logprobs"} <= only
    generate = vllm_io.load().packaged["generate"]
    assert not only & {*generate.inputs, *generate.outputs}, "NVIDIA's I/O marked toolkit-only"


def test_validate_refuses_an_embedding_repository_for_25_10(tmp_path):
    repo = packaged(tmp_path, "25.10", embed=True)
    (p,) = errors(repo, "25.10")
    assert p.severity == "error" and p.model == "minilm" and p.file.endswith("config.pbtxt")
    assert re.match(r"(input|output)\[\d+\]$", p.field or "")
    assert "embedding" in p.message and compat.toolkit_backend_refusal("25.10") in p.message  # type: ignore[operator]


def test_validate_passes_it_where_the_toolkits_backend_runs_and_a_generating_model_anywhere(tmp_path):
    assert errors(packaged(tmp_path, "25.10", embed=True), None) == []  # local: the pinned vLLM
    assert errors(packaged(tmp_path, "25.10", embed=False), "25.10") == []  # NVIDIA's I/O only
    assert errors(packaged(tmp_path, "26.09", embed=True), "26.09") == []  # vLLM not published: target.unknown


def test_a_toolkit_tensor_written_by_hand_is_found_too(tmp_path):
    repo = packaged(tmp_path, "25.09", embed=False)
    cfg = repo / "minilm" / "config.pbtxt"
    cfg.write_text(cfg.read_text() + '\ninput [{ name: "candidates" data_type: TYPE_STRING dims: [-1] '
                                      'optional: true }]\n')
    (p,) = errors(repo, "25.09")
    assert "candidates" in p.message and "0.10.1.1" in p.message


def test_refuse_release_raises_the_same_line_naming_the_config(tmp_path):
    """What a command that puts the repository on release R's image calls (config.pbtxt as written, nothing else)."""
    repo = packaged(tmp_path, "25.10", embed=True)
    with pytest.raises(CompatError) as caught:
        refuse_release(repo, "25.10")
    assert compat.toolkit_backend_refusal("25.10") in caught.value.message  # type: ignore[operator]
    assert caught.value.file and caught.value.file.endswith("minilm/config.pbtxt")
    assert caught.value.field and caught.value.expected
    refuse_release(packaged(tmp_path, "25.10", embed=False), "25.10")  # NVIDIA's I/O: nothing to refuse


def test_serve_docker_ngc_refuses_it_with_the_same_line(tmp_path):
    from tritonpkg.serve import docker

    repo = packaged(tmp_path, "25.10", embed=True)
    prepared = docker.prepare(repo, "ngc", tmp_path / "state")
    with pytest.raises(CompatError) as caught:
        docker.ngc_command(prepared, "25.10")
    assert compat.toolkit_backend_refusal("25.10") in caught.value.message  # type: ignore[operator]
    fine = docker.prepare(packaged(tmp_path, "25.10", embed=False), "ngc", tmp_path / "state2")
    assert docker.ngc_command(fine, "25.10")[0] == "docker"


@pytest.mark.parametrize("release", ["26.07", "26.08"])
def test_no_refusal_inside_the_range(tmp_path, release):
    """26.08's vLLM (0.27.1) is proved by its lane, 26.07's (0.24.0) is inside the range, not proved: neither is
    refused, and an embedding repository for either validates without the range error."""
    assert compat.toolkit_backend_refusal(release) is None
    assert errors(packaged(tmp_path, release, embed=True), release) == []


@pytest.mark.parametrize("release", ["24.10", "25.10"])
def test_package_refuses_the_embedding_io_outside_the_range_and_writes_nothing(tmp_path, release):
    data = yaml.safe_load((EXAMPLES / "minilm-embeddings" / "tritonpkg.yaml").read_text())
    data.update(weights=str(MINILM), target_release=release)
    spec = Spec.model_validate(data)
    with pytest.raises(CompatError) as caught:
        package_spec(spec, tmp_path / "repo")
    assert caught.value.field == "target_release"
    assert compat.toolkit_backend_refusal(release) in caught.value.message  # type: ignore[operator]
    assert "embedding" in caught.value.message
    assert not (tmp_path / "repo").exists()
    data["engine_args"].pop("runner")  # NVIDIA's I/O: nothing to refuse
    assert package_spec(Spec.model_validate(data), tmp_path / "repo").models == ["minilm"]
