"""The adapter-name rule (tritonpkg/adapter_names.py) applied wherever a name comes from a file: validate (the
real CLI), serve's adapter plan, the OpenAI catalog and the vLLM backend's own copy of the rule, which must agree
with the toolkit's on every string. And an absolute adapter folder outside the repository is a finding, never
a traceback (issue 41)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.support.cli import tritonpkg
from tritonpkg import adapter_names
from tritonpkg.errors import RuntimeSetupError
from tritonpkg.frontend.catalog import ModelEntry, read_adapter_names
from tritonpkg.serve.weights import ensure_adapters, plan_adapters, read_multi_lora
from tritonpkg.spec import Adapter

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "backends" / "vllm"))
from lora import AdapterError, read_adapters  # backends/vllm, on sys.path above
from lora import name_problem as backend_name_problem

NAMES = st.one_of(
    st.text(alphabet=st.sampled_from("aZ09_.-@\x00\n /é"), max_size=80),
    st.from_regex(r"[A-Za-z][A-Za-z0-9_.-]{0,70}(@[0-9]{1,21})?", fullmatch=True),
    st.text(max_size=20),
)
BAD = ["x\x00y", "", "1abc", "-a", "a b", "a\n", "é", "a/b", "a" * 65, "a@", "a@0", "a@01", "@3", "a@3@4",
       f"a@{2**63}", "a@x"]
GOOD = ["a", "support-bot", "legal.bot_2", "a" * 64, "support-bot@3", f"a@{2**63 - 1}"]


@pytest.mark.parametrize("name", GOOD)
def test_names_the_rule_accepts(name):
    assert adapter_names.name_problem(name) is None and backend_name_problem(name) is None


@pytest.mark.parametrize("name", BAD)
def test_names_the_rule_refuses(name):
    assert adapter_names.name_problem(name) is not None


@settings(derandomize=True, max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(NAMES)
def test_the_backends_copy_agrees_with_the_rule(name):
    assert backend_name_problem(name) == adapter_names.name_problem(name)


@settings(derandomize=True, max_examples=300, deadline=None)
@given(NAMES)
def test_the_spec_takes_exactly_the_rules_names_without_a_version(name):
    try:
        Adapter.model_validate({"name": name, "source": "./a"})
        accepted = True
    except ValidationError:
        accepted = False
    assert accepted == ("@" not in name and adapter_names.name_problem(name) is None)


def _vllm_model(repo: Path, name: str, listing: dict[str, str]) -> Path:
    version = repo / name / "1"
    version.mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text('backend: "vllm"\ninstance_group [ { count: 1 kind: KIND_MODEL } ]\n')
    (version / "model.json").write_text(json.dumps({"model": "facebook/opt-125m", "enable_lora": True}))
    (version / "multi_lora.json").write_text(json.dumps(listing))
    return version


def test_validate_cli_reports_an_outside_folder_and_a_nul_name_as_findings(tmp_path):
    """Before: an absolute folder outside the repository crashed validate with a traceback (ValueError from
    Path.relative_to), so did a `~user` of no user (RuntimeError), and a NUL in a name validated with exit 0."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    repo = tmp_path / "repo"
    _vllm_model(repo, "absolute", {"support-bot": str(outside)})
    _vllm_model(repo, "nul", {"x\x00y": "s3://bucket/legal-bot", "ok-bot@3": "s3://bucket/ok"})
    _vllm_model(repo, "home", {"a": "~no-such-user-41/a"})
    out = subprocess.run(tritonpkg("validate", str(repo), "--json"), capture_output=True, text=True, timeout=120,
                         check=False, env={"TRITONPKG_NO_LIVE_VLLM": "1", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    found = {p["model"]: p for p in json.loads(out.stdout)["problems"] if p["rule"].startswith("lora.")}
    assert set(found) == {"absolute", "nul", "home"}, found
    absolute, nul, home = found["absolute"], found["nul"], found["home"]
    assert (home["rule"], home["severity"], home["field"]) == ("lora.folder", "warning", "a")
    assert (absolute["rule"], absolute["file"]) == ("lora.config_missing", f"{outside}/adapter_config.json")
    assert (nul["rule"], nul["file"], nul["field"]) == ("lora.name", "nul/1/multi_lora.json", "x\\x00y")
    assert "\x00" not in out.stdout


def test_serve_refuses_a_bad_name_naming_the_file_and_field():
    with pytest.raises(RuntimeSetupError) as err:
        plan_adapters({"m/1/multi_lora.json": {"ok": "./adapters/ok", "x\x00y": "./adapters/x"}})
    assert (err.value.file, err.value.field) == ("m/1/multi_lora.json", "x\\x00y")
    assert [a.name for a in plan_adapters({"m/1/multi_lora.json": {"ok@2": "/abs/ok"}})] == ["ok@2"]


def test_serve_refuses_a_home_folder_of_no_user(tmp_path):
    """Before: RuntimeError from Path.expanduser, out of `tritonpkg serve`."""
    repo = tmp_path / "repo"
    (repo / "m" / "1").mkdir(parents=True)
    (repo / "m" / "1" / "multi_lora.json").write_text(json.dumps({"a": "~no-such-user-41/a"}))
    with pytest.raises(RuntimeSetupError, match="home folder of no user") as err:
        ensure_adapters(repo, plan_adapters(read_multi_lora(repo)), tmp_path / "root")
    assert (err.value.file, err.value.field) == (str(repo / "m" / "1" / "multi_lora.json"), "a")


def test_the_catalog_leaves_a_bad_name_out(tmp_path):
    (tmp_path / "multi_lora.json").write_text(json.dumps({"good": "./a", "x\x00y": "./b", "good@2": "./c"}))
    entry = ModelEntry(name="m", version="1", kind="generate", backend="vllm", created=0,
                       engine_args={"enable_lora": True}, source=tmp_path)
    assert read_adapter_names(entry) == ["good", "good@2"]


def test_the_backend_refuses_a_list_with_a_bad_name(tmp_path):
    (tmp_path / "multi_lora.json").write_text(json.dumps({"good": "./a", "x\x00y": "./b"}))
    with pytest.raises(AdapterError, match=r"adapter name 'x\\x00y' holds a character") as err:
        read_adapters(str(tmp_path), {"enable_lora": True})
    assert str(tmp_path / "multi_lora.json") in str(err.value)
