from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from packaging.version import Version
from typer.testing import CliRunner

from tritonpkg import compat
from tritonpkg.cli import app
from tritonpkg.errors import CompatError

SHARED_CSV = Path(__file__).resolve().parents[3] / "shared" / "compat" / "triton-vllm-containers.csv"


def test_every_release_has_the_facts_the_toolkit_needs():
    names = compat.release_names()
    assert names == sorted(names, key=lambda r: tuple(map(int, r.split("."))))
    for r in compat.releases():
        assert r.ngc_image == f"nvcr.io/nvidia/tritonserver:{r.release}-vllm-python-py3"
        assert r.python_minor in {"3.10", "3.12", None}
        if r.backend_imports is not None:
            assert compat.backend_imports(r.backend_imports)
        assert r.stub_numpy in {"<2", "any"}
        if r.vllm_base is not None:
            compat.logits_processor_interface(r.vllm_base)


@pytest.mark.skipif(not SHARED_CSV.exists(),
                    reason="NVIDIA's table lives in ../shared/compat, absent outside the workplace")
def test_matrix_agrees_with_nvidias_published_table():
    rows = {r["triton_release"]: r for r in csv.DictReader(SHARED_CSV.open())}
    assert set(rows) <= set(compat.release_names())
    for rel in compat.releases():
        if rel.release in rows:
            assert rel.vllm == rows[rel.release]["vllm"]
            assert rel.python == rows[rel.release]["python"]


def test_known_facts():
    assert compat.get_release("24.10").server_version == "2.51.0"
    assert compat.get_release("24.10").stub_numpy == "<2"
    assert compat.get_release("24.12").stub_numpy == "any"
    assert compat.get_release("26.07").vllm_base == Version("0.24.0")
    assert compat.get_release("25.09").vllm_base == Version("0.10.1.1")
    assert compat.get_release("24.08").vllm_base == Version("0.5.0.post1")


def test_backend_import_sets_expand_references():
    jan = compat.backend_imports("2026-01")
    nov = compat.backend_imports("2025-11")
    assert set(nov) < set(jan)
    assert "vllm.v1.engine.async_llm:AsyncLLM" in jan
    assert not any(s.startswith("vllm.engine.metrics") for s in nov)
    assert "vllm.engine.metrics:Stats" in compat.backend_imports("2025-05")


def test_the_25_09_break_is_predicted():
    """Triton 25.09's backend imports vllm.engine.metrics, which vLLM 0.11.2 removed."""
    imports = compat.backend_imports(compat.get_release("25.09").backend_imports)
    assert all(compat.symbol_missing_reason(s, compat.get_release("25.09").vllm_base) is None for s in imports)
    broken = [s for s in imports if compat.symbol_missing_reason(s, Version("0.11.2"))]
    assert broken and all(s.startswith("vllm.engine.metrics") for s in broken)


def test_logits_processor_interface_by_vllm_and_device():
    assert compat.logits_processor_interface("0.5.5") == "v0-per-request"
    assert compat.logits_processor_interface("0.24.0+092c4842.nv26.7") == "v1"
    assert compat.logits_processor_interface("0.32.0", "gpu") == "v2"
    assert compat.logits_processor_interface("0.32.0", "cpu") == "v1"


def test_check_environment_lists_every_mismatch():
    env = {"vllm": "0.32.0", "numpy": "2.1.0", "python": "3.11"}
    problems = {p.component: p for p in compat.check_environment("24.10", env)}
    assert set(problems) == {"vllm", "numpy", "python"}
    assert problems["numpy"].required == "<2"
    assert problems["vllm"].required == "0.5.5"
    assert compat.check_environment("local", {"vllm": "0.32.0", "numpy": "1.26.4", "python": "3.11"}) == []
    assert [p.component for p in compat.check_environment("local", {"vllm": None, "numpy": "1.26.4",
                                                                     "python": "3.7"})] == ["vllm", "python"]


def test_unknown_release_is_a_clear_error():
    with pytest.raises(CompatError, match=r"unknown Triton release '23.01'.*expected one of 24.04"):
        compat.get_release("23.01")


def test_cli_compat_json_and_check_exit_codes():
    runner = CliRunner()
    out = runner.invoke(app, ["compat", "--json"])
    assert out.exit_code == 0
    data = json.loads(out.stdout)
    assert [r["release"] for r in data["releases"]] == compat.release_names()
    assert data["toolkit"]["vllm"]["version"] == str(compat.pinned_vllm())
    check = runner.invoke(app, ["compat", "check", "--target-release", "26.07", "--json"])
    report = json.loads(check.stdout)
    assert check.exit_code == (1 if report["mismatches"] else 0)
    assert report["required"]["python"] == "3.12"
    bad = runner.invoke(app, ["compat", "check", "--target-release", "1.0"])
    assert bad.exit_code == 1 and "unknown Triton release" in bad.stderr
