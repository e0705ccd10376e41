"""Engine arguments and sampling parameters per release: `validate -r R` judges model.json by the snapshot of
R's own vLLM (made from that vLLM's AsyncEngineArgs, config classes and SamplingParams by the snapshot tool),
and warns that fields may differ only where no snapshot could be made, saying why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support.validate_repos import repo_with
from tritonpkg import compat
from tritonpkg.compat.engine_args import SNAPSHOT_DIR, load_snapshot
from tritonpkg.validate import validate_repository
from tritonpkg.validate.sampling import sampling_problem, smoke_request_problem

pytestmark = pytest.mark.usefixtures("fixture_backends")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def snapshot(release: str) -> dict:
    snap = load_snapshot(str(compat.get_release(release).vllm_base))
    assert snap is not None, f"no snapshot for {release}'s vLLM"
    return snap


def test_every_release_vllm_has_engine_arg_facts_or_a_reason():
    for v in {r.vllm_base for r in compat.releases()} - {None}:
        assert v is not None
        has = load_snapshot(str(v)) is not None
        why = compat.engine_args_unavailable(v)
        assert has != bool(why), f"vLLM {v}: snapshot {has}, recorded reason {why!r}"
    for path in SNAPSHOT_DIR.glob("vllm-*.json"):
        snap = load_snapshot(path.name[len("vllm-"):-len(".json")])
        assert snap is not None and snap["fields"] and snap["sampling_params"]["fields"], path.name
        assert compat.vllm_base_version(snap["vllm_version"]) == compat.vllm_base_version(path.stem[5:])


@pytest.mark.parametrize("release", ["26.08", "26.07"])
def test_validate_checks_the_releases_own_vllm_fields(tmp_path, release):
    vllm = compat.get_release(release).vllm_base
    only_pinned = sorted(set(load_snapshot(str(compat.pinned_vllm()))["fields"]) - set(snapshot(release)["fields"]))
    assert only_pinned, f"vLLM {compat.pinned_vllm()} and {vllm} know the same fields"
    report = validate_repository(repo_with(tmp_path, {"model": "/w", only_pinned[0]: None}), target_release=release)
    assert not [p for p in report.problems if p.rule == "engine_args.version"]
    (p,) = [p for p in report.problems if p.rule == "engine_args.unknown"]
    assert p.field == only_pinned[0] and f"vLLM {vllm}" in p.message
    pinned = validate_repository(repo_with(tmp_path / "pinned", {"model": "/w", only_pinned[0]: None}))
    assert not [p for p in pinned.problems if p.rule.startswith("engine_args")]


def test_the_releases_own_limits_are_checked(tmp_path):
    bounds = {k: v["bounds"] for k, v in snapshot("26.08")["fields"].items() if "bounds" in v}
    key, b = next((k, b) for k, b in sorted(bounds.items()) if "gt" in b or "ge" in b)
    below = b["gt"] if "gt" in b else b["ge"] - 1
    report = validate_repository(repo_with(tmp_path, {"model": "/w", key: below}), target_release="26.08")
    (p,) = [p for p in report.problems if p.rule == "engine_args.range"]
    assert p.field == key and "vLLM 0.27.1" in p.message


def test_may_differ_only_where_no_snapshot_exists(tmp_path):
    report = validate_repository(repo_with(tmp_path, {"model": "/w"}), target_release="25.08")  # vLLM 0.9.2
    (p,) = [p for p in report.problems if p.rule == "engine_args.version"]
    assert "fields may differ" in p.message and compat.engine_args_unavailable(compat.get_release("25.08").vllm_base) \
        in p.message


def test_sampling_parameters_against_the_releases_vllm(tmp_path):
    old, new = snapshot("26.07")["sampling_params"]["fields"], load_snapshot(str(compat.pinned_vllm()))[
        "sampling_params"]["fields"]
    added = sorted(set(new) - set(old))
    assert added, "vLLM 0.24.0 and 0.32.0 have the same SamplingParams fields"
    accepts = new[added[0]]["accepts"]
    params = {"max_tokens": 4, added[0]: [] if "list" in accepts else 1 if "int" in accepts else True}
    assert sampling_problem(params, compat.pinned_vllm()) is None
    why = sampling_problem(json.dumps(params), compat.get_release("26.07").vllm_base)
    assert why and repr(added[0]) in why and "vLLM 0.24.0" in why
    contract = tmp_path / "contract.json"
    contract.write_text(json.dumps({"model": "emb", "inputs": [{"name": "text", "datatype": "BYTES", "shape": [1, 1]}],
                                    "sampling_parameters": params}))
    repo = repo_with(tmp_path / "r", {"model": "/w"})
    found = [p for p in validate_repository(repo, "26.07", contract).problems if p.rule == "contract.sampling"]
    assert [p.field for p in found] == ["requests[0].sampling_parameters"]
    assert not [p for p in validate_repository(repo, "26.08" if added[0] in snapshot("26.08")["sampling_params"][
        "fields"] else None, contract).problems if p.rule == "contract.sampling"]


def test_the_tiny_llm_smoke_request_is_accepted_by_every_snapshotted_release():
    spec = yaml.safe_load((EXAMPLES / "tiny-llm" / "tritonpkg.yaml").read_text())
    request = spec["deployment"]["smoke_request"]
    for r in compat.releases():
        if r.vllm_base is not None and load_snapshot(str(r.vllm_base)) is not None:
            assert smoke_request_problem(request, r.release) is None, r.release
    assert smoke_request_problem({"sampling_parameters": {"max_tokens": 1, "no_such_field": 1}}, "26.08")


def test_compat_shows_what_each_release_is_checked_by():
    from typer.testing import CliRunner

    from tritonpkg.cli import app

    out = CliRunner().invoke(app, ["compat", "--json"])
    assert out.exit_code == 0
    for row in json.loads(out.stdout)["releases"]:
        vllm = compat.get_release(row["release"]).vllm_base
        if vllm is not None and load_snapshot(str(vllm)) is not None:
            assert row["engine_args"] == f"vllm-{vllm}.json"
        else:
            assert row["engine_args"].startswith("none: "), row
