"""The release rows of the compatibility matrix and what `validate -r R` says about them: every fact parses
or is marked unknown (never guessed), each row names its source, and a release that does not publish a fact
gets a warning naming it and the checks it leaves out."""

from __future__ import annotations

import pytest
from packaging.version import Version

from tests.support.validate_repos import repo_with
from tritonpkg import compat
from tritonpkg.validate import validate_repository

pytestmark = pytest.mark.usefixtures("fixture_backends")


def test_release_facts_parse_are_ordered_and_sourced():
    known_servers = []
    for r in compat.releases():
        for name in ("server_version", "python", "cuda"):
            value = getattr(r, name)
            if value is not None:
                Version(value)
        if r.vllm is not None:
            compat.vllm_base_version(r.vllm)
        assert "server_version" in r.source or "server_version" in r.source.get("unknown", ""), r.release
        assert r.server_version is None or "unknown" not in r.source["server_version"], r.release
        assert "image" in r.source or all(f in r.source.get("unknown", "") for f in r.unknown), r.release
        if r.server_version is not None:
            known_servers.append(Version(r.server_version))
    assert known_servers == sorted(known_servers) and len(set(known_servers)) == len(known_servers)


def test_release_rows_corrected_and_current():
    assert compat.get_release("25.07").server_version == "2.59.1"
    assert compat.get_release("25.08").server_version == "2.60.0"
    r = compat.get_release("26.08")
    assert (r.server_version, r.python, r.vllm_base, r.cuda) == ("2.72.0", "3.12.3", Version("0.27.1"), "13.4.1.012")
    assert r.unknown == ["backend_imports"]  # NVIDIA's newest read backend imports vllm.inputs.data, gone in 0.19
    assert compat.symbol_missing_reason("vllm.inputs.data:TokensPrompt", r.vllm_base)
    assert compat.get_release("26.09").unknown == ["python", "vllm", "cuda_driver", "backend_imports"]
    assert compat.get_release("26.10").unknown == ["server_version", "python", "vllm", "cuda_driver",
                                                   "backend_imports"]


def test_validate_names_the_facts_a_release_does_not_publish(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITONPKG_NO_LIVE_VLLM", "1")
    report = validate_repository(repo_with(tmp_path, {"model": "/w", "no_such_argument": 1}), target_release="26.09")
    (p,) = [p for p in report.problems if p.rule == "target.unknown"]
    assert p.severity == "warning" and "python, vllm, cuda_driver, backend_imports" in p.message
    assert "engine arguments" in p.message
    assert not [p for p in report.problems if p.rule.startswith("engine_args")]


def test_toolkit_features_by_vllm():
    assert compat.feature_holds("logits_ext", Version("0.5.5")) == (False, compat.toolkit_features()[0]["why"])
    assert compat.feature_holds("logits_ext", Version("0.32.0"))[0] is True  # type: ignore[index]
    holds, why = compat.feature_holds("logits_ext", Version("0.34.0"))  # type: ignore[misc]
    assert holds and "V2 only" in why


def test_the_toolkits_backend_declares_the_vllm_it_is_proved_on():
    """Proved where a lane or the suite serves it (0.27.1, 0.32.0), refused where an import it cannot do without is
    missing (before 0.11.0), not proved in between; every row's floor and reason agree with the symbol history."""
    holds = {v: compat.feature_holds("toolkit_backend", Version(v))
             for v in ("0.5.5", "0.10.2", "0.11.0", "0.24.0", "0.27.1", "0.31.0", "0.32.0", "0.34.0")}
    assert {v for v, h in holds.items() if h and h[0]} == {"0.27.1", "0.32.0"}, holds
    assert "served in the 26.08 lane" in holds["0.27.1"][1]  # type: ignore[index]
    assert all("StructuredOutputsParams" in holds[v][1] for v in ("0.5.5", "0.10.2"))  # type: ignore[index]
    assert all(holds[v][1].startswith("not proved") for v in ("0.11.0", "0.24.0", "0.31.0", "0.34.0"))  # type: ignore[index]
    assert str(compat.toolkit_backend_range()) == ">=0.11.0"
    assert compat.symbol_missing_reason("vllm.sampling_params:StructuredOutputsParams", Version("0.10.2"))
    assert compat.symbol_missing_reason("vllm.sampling_params:StructuredOutputsParams", Version("0.11.0")) is None
