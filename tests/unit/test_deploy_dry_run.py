"""`deploy --dry-run` writes nothing but the manifests `-o` names: run through the CLI from a working directory
with the default state folder (none yet), then against a state with a live LoRA unit (so every strategy plans
against it, auto picking adapters), for every strategy and target; every file and folder of the working
directory and the state is listed with its mtime before and after."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tritonpkg.cli import app
from tritonpkg.deploy.adapters import AdapterFacts, read_facts, served_list
from tritonpkg.deploy.driver import Endpoints
from tritonpkg.deploy.plan import Unit
from tritonpkg.deploy.state import StateStore
from tritonpkg.repository import package_spec
from tritonpkg.spec import load_spec

MODEL = "bot"
STRATEGIES = ("auto", "red-black", "versioned", "adapters")
TARGETS = ("local", "kubernetes")


def listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under `root` (itself included): relative path -> (mtime ns, size)."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in [".", *dirs, *files]:
            path = Path(folder, name)
            st = path.lstat()
            out[str(path.relative_to(root))] = (st.st_mtime_ns, st.st_size)
    return out


def write_spec(folder: Path, version: int, seed: int) -> Path:
    """A LoRA spec (remote weights: nothing to fetch) whose versions differ only in their adapter."""
    adapter = folder / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 8, "peft_type": "LORA",
                                                             "target_modules": ["q_proj"]}))
    (adapter / "adapter_model.safetensors").write_bytes(bytes([seed]) * 32)
    (folder / "tritonpkg.yaml").write_text(yaml.safe_dump({
        "name": MODEL, "version": version, "kind": "vllm", "target_release": "24.10",
        "weights": "s3://weights-bucket/tiny", "engine_args": {"max_model_len": 256},
        "adapters": [{"name": "a", "source": "./adapter"}]}))
    return folder


def dry_runs(spec: str, state: list[str], out_root: Path) -> dict[tuple[str, str], dict]:
    """Every strategy on every target: (strategy, target) -> the plan, or {"refused": the output} (exit 1)."""
    runner, seen = CliRunner(), {}
    for target in TARGETS:
        for strategy in STRATEGIES:
            out = out_root / f"{target}-{strategy}"
            res = runner.invoke(app, ["deploy", spec, "--target", target, "--strategy", strategy, "--dry-run",
                                      "-o", str(out), "--adapter-grace", "10", "--json",
                                      "--package-store", "s3://packages/releases", *state])
            if res.exit_code == 1 and "not an adapter rollout" in res.output:
                seen[strategy, target] = {"refused": res.output}
                continue
            assert res.exit_code == 0, (strategy, target, res.output)
            seen[strategy, target] = json.loads(res.output)["plan"]
            if target == "kubernetes":
                plan = seen[strategy, target]
                unit = plan["steps"][0]["unit"]
                names = {p.name for p in out.iterdir()}  # the unit's manifests and the archive its pods fetch
                # an adapter rollout changes only the unit's adapter list (its ConfigMap); the others a new unit
                wrote = (f"configmap-{unit}-adapters.yaml" if plan["strategy"] == "adapters"
                         else f"deployment-{unit}.yaml")
                assert wrote in names and any(n.endswith(".tar.gz") for n in names), names
            else:
                assert not out.exists()  # -o names the Kubernetes manifests: the local target has none
    return seen


def test_a_dry_run_writes_nothing_but_its_manifests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("kubernetes_validate")
    cwd = tmp_path / "work"
    write_spec(cwd / "v1", 1, seed=1)
    monkeypatch.chdir(cwd)
    before = listing(cwd)
    fresh = dry_runs("v1", [], tmp_path / "out-fresh")  # the default state, ./.tritonpkg/deploy: none yet
    assert listing(cwd) == before
    assert [key for key, plan in fresh.items() if "refused" in plan] == [("adapters", t) for t in TARGETS]
    assert fresh["auto", "local"]["strategy"] == "red-black" and fresh["versioned", "kubernetes"]["strategy"] == \
        "versioned"

    # a state with a live LoRA unit, as a local deploy records it
    state = tmp_path / "state"
    store = StateStore(state / "state.db")
    repo = state / "releases" / f"{MODEL}-v1" / "repository"
    package_spec(load_spec(cwd / "v1"), repo)
    store.ensure_deployment(MODEL, "local")
    store.put_unit(MODEL, Unit(name="bot-blue", version=1, color="blue", weight=100, status="serving"))
    facts = read_facts(repo, MODEL, 1)
    assert isinstance(facts, AdapterFacts)
    store.update_unit(MODEL, "bot-blue", endpoints={**Endpoints(repository=str(repo), serving_repository=str(repo),
                                                                name="bot-blue", http_url="http://u").facts(),
                                                    "adapter_facts": facts.model_dump(),
                                                    "adapters": served_list(repo / MODEL / "1")})
    store.set_deployment(MODEL, alias="bot-blue", strategy="red-black")
    write_spec(cwd / "v2", 2, seed=2)
    before, before_state = listing(cwd), listing(state)
    live = dry_runs("v2", ["--state", str(state)], tmp_path / "out-live")
    assert listing(cwd) == before and listing(state) == before_state
    assert live["auto", "local"]["strategy"] == live["adapters", "local"]["strategy"] == "adapters"
    last = live["auto", "local"]["steps"][-1]  # the grace reported is the one asked for and waited
    assert last["wait_s"] == 10 and last["note"].startswith("after 10 s of grace"), last
    assert live["auto", "kubernetes"]["strategy"] == live["adapters", "kubernetes"]["strategy"] == "adapters"
    assert [key for key, plan in live.items() if "refused" in plan] == []
    assert live["versioned", "local"]["steps"][0]["unit"] == "bot-v2"


def test_a_read_only_state_creates_nothing_and_refuses_a_write(tmp_path: Path) -> None:
    missing = StateStore(tmp_path / "none" / "state.db", read_only=True)
    assert missing.models() == [] and missing.live(MODEL).units == []
    assert not (tmp_path / "none").exists()
    StateStore(tmp_path / "s" / "state.db").ensure_deployment(MODEL, "local")
    before = listing(tmp_path / "s")
    store = StateStore(tmp_path / "s" / "state.db", read_only=True)
    assert store.models() == [MODEL]
    with pytest.raises(Exception, match=r"readonly|read-only"):
        store.set_deployment(MODEL, alias="x")
    assert listing(tmp_path / "s") == before and StateStore(tmp_path / "s" / "state.db").deployment(MODEL)["alias"] \
        is None
