"""`tritonpkg validate`: exit codes 0/1/2 and the JSON shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tritonpkg.cli import app
from tritonpkg.cli._common import console

IO = ('input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
      'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')
PY = "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"


def make(repo: Path, cfg: str) -> Path:
    (repo / "m" / "1").mkdir(parents=True)
    (repo / "m" / "config.pbtxt").write_text(cfg)
    (repo / "m" / "1" / "model.py").write_text(PY)
    return repo


@pytest.fixture(autouse=True)
def wide_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table 1,000 columns wide (its paths are under the test's folder, of any length): a cell rich wrapped
    could split a field name the checks look for. The CLI's console took its width when it was made, at import
    (an xdist worker has COLUMNS=80 then), so COLUMNS set for the call would not reach it."""
    monkeypatch.setattr(console, "_width", 1000)


def invoke(*args: str):
    return CliRunner().invoke(app, ["validate", *args], env={"TRITONPKG_NO_LIVE_VLLM": "1"})


def test_clean_repo_exits_0(tmp_path):
    repo = make(tmp_path, 'backend: "python"\n' + IO + "instance_group [ { kind: KIND_CPU count: 0 } ]\n")
    result = invoke(str(repo), "--target-release", "24.12")
    assert result.exit_code == 0, result.output
    assert "instance.count" in result.output  # the warning is shown, the exit code stays 0


def test_errors_exit_1_with_json(tmp_path):
    repo = make(tmp_path, 'backend: "python"\nname: "x"\n' + IO + "foo: 1\n")
    result = invoke(str(repo), "--json", "--target-release", "24.12")
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["ok"] is False and data["models"] == ["m"] and data["target_release"] == "24.12"
    (p,) = data["problems"]
    assert set(p) == {"rule", "severity", "file", "line", "column", "model", "field", "message", "expected",
                      "auto_complete"}
    assert (p["rule"], p["file"], p["line"], p["column"]) == ("config.syntax", "m/config.pbtxt", 5, 1)


def test_usage_errors_exit_2(tmp_path):
    assert invoke(str(tmp_path / "missing")).exit_code == 2
    make(tmp_path, 'backend: "python"\n' + IO)
    assert invoke(str(tmp_path), "--target-release", "99.99").exit_code == 2
    assert invoke(str(tmp_path), "--contract", str(tmp_path / "nope.json")).exit_code == 2
