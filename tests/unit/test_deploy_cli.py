"""`tritonpkg diff`, `deploy --dry-run`, `status` and their errors, through the real CLI (no processes)."""

from __future__ import annotations

import hashlib
import json

import pytest
import yaml
from typer.testing import CliRunner

from tritonpkg.cli import app

runner = CliRunner()


def spec(write_spec, folder: str, version: int, inputs: list[dict], **extra) -> str:
    data = {"name": "m", "version": version, "kind": "python",
            "python": {"template": "custom", "parameters": {"module": "h.py"}, "files": ["h.py"],
                       "inputs": inputs, "outputs": [{"name": "Y", "data_type": "FP32", "dims": [2]}]},
            "deployment": {"traffic_steps": [20, 100], "smoke_request": {"X": [1.0, 2.0]}}, **extra}
    return str(write_spec(data, folder=folder, extra_files={"h.py": "def model(i):\n    return i\n"}))


X = [{"name": "X", "data_type": "FP32", "dims": [2]}]


def test_diff_says_compatible_and_picks_red_black(write_spec):
    old = spec(write_spec, "a", 1, X)
    new = spec(write_spec, "b", 2, [*X, {"name": "MASK", "data_type": "BOOL", "dims": [2], "optional": True}])
    res = runner.invoke(app, ["diff", old, new, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["compatible"] is True and data["strategy"] == "red-black"
    assert [c["where"] for c in data["changes"]] == ["input MASK"]
    table = runner.invoke(app, ["diff", old, new])
    assert "added as optional" in table.output and "compatible" in table.output


def test_diff_says_why_an_incompatible_change_goes_versioned(write_spec):
    old = spec(write_spec, "a", 1, X)
    new = spec(write_spec, "b", 2, [{"name": "X", "data_type": "INT64", "dims": [2]}])
    data = json.loads(runner.invoke(app, ["diff", old, new, "--json"]).output)
    assert data["compatible"] is False and data["strategy"] == "versioned"
    assert "input X: dtype changed" in data["reason"]


def test_diff_names_the_unreadable_file(tmp_path):
    (tmp_path / "x.txt").write_text("hello")
    res = runner.invoke(app, ["diff", str(tmp_path / "x.txt"), str(tmp_path / "x.txt")])
    assert res.exit_code == 1 and "cannot read an I/O schema" in res.output and "x.txt" in res.output


def test_kubernetes_dry_run_writes_validated_manifests(write_spec, tmp_path):
    pytest.importorskip("kubernetes_validate")
    src = spec(write_spec, "a", 1, X, weights="s3://models/m", )
    out = tmp_path / "manifests"
    args = ["deploy", src, "--target", "kubernetes", "--dry-run", "-o", str(out), "--state", str(tmp_path / "state"),
            "--json"]
    refused = runner.invoke(app, args)
    assert refused.exit_code == 1 and "--package-store" in refused.output and not out.exists()
    res = runner.invoke(app, [*args, "--package-store", "s3://packages/releases"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["plan"]["strategy"] == "red-black"
    assert sorted(p.name for p in out.iterdir()) == ["deployment-m-blue.yaml", "httproute-m.yaml", "m-v1.tar.gz",
                                                      "secret-m-triton-admin.yaml", "service-m-blue.yaml"]
    assert len(data["validated"]) == 4
    sha = hashlib.sha256((out / "m-v1.tar.gz").read_bytes()).hexdigest()
    assert data["archive"] == f"s3://packages/releases/m/{sha[:16]}/m-v1.tar.gz"
    fetch = yaml.safe_load((out / "deployment-m-blue.yaml").read_text())["spec"]["template"]["spec"]["initContainers"]
    assert fetch[0]["args"][2] == data["archive"].rsplit("/", 1)[0]
    assert all(p.stat().st_mode & 0o077 == 0 for p in out.iterdir())  # the Secret's key: owner only
    secret = yaml.safe_load((out / "secret-m-triton-admin.yaml").read_text())
    assert len(secret["stringData"]["admin-key"]) >= 32
    route = yaml.safe_load((out / "httproute-m.yaml").read_text())
    assert route["spec"]["rules"][-1]["backendRefs"] == [{"name": "m-blue", "port": 8000, "weight": 100}]


def test_on_engine_death_reaches_the_pods_serve_and_the_local_watchers(write_spec, tmp_path):
    """--on-engine-death: kubernetes pods' `serve` takes it (default exit: the kubelet restarts the container), the
    local driver's engine watchers take it (default restart); anything else is refused naming the option."""
    pytest.importorskip("kubernetes_validate")
    from tritonpkg.deploy import service

    src = spec(write_spec, "a", 1, X, weights="s3://models/m")

    def serve_args(*extra: str) -> list[str]:
        out = tmp_path / f"manifests{len(extra)}"
        res = runner.invoke(app, ["deploy", src, "--target", "kubernetes", "--dry-run", "-o", str(out), "--state",
                                  str(tmp_path / "state"), "--package-store", "s3://packages/r", *extra])
        assert res.exit_code == 0, res.output
        pod = yaml.safe_load((out / "deployment-m-blue.yaml").read_text())["spec"]["template"]["spec"]
        return pod["containers"][0]["args"]

    def policy(args: list[str]) -> str:
        return args[args.index("--on-engine-death") + 1]

    assert policy(serve_args()) == "exit"
    assert policy(serve_args("--on-engine-death", "restart")) == "restart"
    bad = runner.invoke(app, ["deploy", src, "--on-engine-death", "retry", "--dry-run"])
    assert bad.exit_code == 2 and "--on-engine-death" in bad.output
    assert service.local_driver(tmp_path / "s", "m").watchers.policy == "restart"
    assert service.local_driver(tmp_path / "s", "m", on_engine_death="exit").watchers.policy == "exit"


def test_dry_run_prints_the_plan_and_its_rollback(write_spec, tmp_path):
    res = runner.invoke(app, ["deploy", spec(write_spec, "a", 1, X), "--dry-run", "--state", str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    assert "provision m-blue" in res.output and "rollback: retire m-blue" in res.output


def test_status_and_rollback_of_unknown_models(tmp_path):
    state = str(tmp_path / "s")
    assert "no deployments" in runner.invoke(app, ["status", "--state", state]).output
    assert json.loads(runner.invoke(app, ["status", "--state", state, "--json"]).output) == []
    res = runner.invoke(app, ["rollback", "nope", "--state", state])
    assert res.exit_code == 1 and "no deployment of 'nope'" in res.output


def test_bad_strategy_is_a_usage_error(write_spec, tmp_path):
    res = runner.invoke(app, ["deploy", spec(write_spec, "a", 1, X), "--strategy", "canary"])
    assert res.exit_code == 2 and "--strategy" in res.output


def test_command_line_strategy_wins_over_the_spec(write_spec, tmp_path):
    deployment = {"strategy": "versioned", "traffic_steps": [20, 100]}
    path = spec(write_spec, "a", 1, X, deployment=deployment)

    def planned(*args: str) -> tuple[str, str]:
        res = runner.invoke(app, ["deploy", path, "--dry-run", "--json", "--state", str(tmp_path / "s"), *args])
        assert res.exit_code == 0, res.output
        plan = json.loads(res.output)["plan"]
        return plan["strategy"], plan["reason"]

    assert planned() == ("versioned", "--strategy versioned")  # the spec's, with no option given
    assert planned("--strategy", "auto") == ("red-black", "auto: nothing live to compare with, red-black")
    assert planned("--strategy", "red-black")[0] == "red-black"


def test_min_requests_must_not_be_negative(write_spec, tmp_path):
    res = runner.invoke(app, ["deploy", spec(write_spec, "a", 1, X), "--min-requests", "-1", "--dry-run"])
    assert res.exit_code == 2 and "--min-requests" in res.output
