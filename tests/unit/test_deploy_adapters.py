"""Adapter rollouts, planned without a process: which release is an adapter-only change (packaged specs compared
as files), the three lists such a rollout writes, and the executor carrying them out through a recording driver,
rolled back to the live list when a new adapter's canary fails. The real engine's side is in
tests/integration/test_deploy_adapters.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.unit.test_deploy_executor import Recorder
from tritonpkg.deploy import adapters as ad
from tritonpkg.deploy.driver import Endpoints
from tritonpkg.deploy.executor import DeployError, Executor, plan_release
from tritonpkg.deploy.plan import PlanError, Unit
from tritonpkg.deploy.release import release_from
from tritonpkg.deploy.state import StateStore
from tritonpkg.repository import package_spec
from tritonpkg.spec import load_spec

MODEL = "bot"


def adapter(folder: Path, seed: int, rank: int = 8) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text(json.dumps({"r": rank, "peft_type": "LORA",
                                                            "target_modules": ["q_proj"]}))
    (folder / "adapter_model.safetensors").write_bytes(bytes([seed]) * 32)
    return str(folder)


def spec(root: Path, version: int, adapters: dict[str, str], **engine_args) -> Path:
    folder = root / f"spec-v{version}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tritonpkg.yaml").write_text(yaml.safe_dump({
        "name": MODEL, "version": version, "kind": "vllm", "target_release": "24.10", "weights": "s3://weights-bucket/tiny",
        "engine_args": {"max_model_len": 256, **engine_args},
        "adapters": [{"name": n, "source": s} for n, s in adapters.items()]}))
    return folder


def packaged_facts(folder: Path, out: Path) -> ad.AdapterFacts:
    loaded = load_spec(folder)
    package_spec(loaded, out)
    facts = ad.read_facts(out, MODEL, loaded.version)
    assert isinstance(facts, ad.AdapterFacts)
    return facts


def test_only_adapter_changes_qualify(tmp_path):
    a1, a2, b = adapter(tmp_path / "a1", 1), adapter(tmp_path / "a2", 2), adapter(tmp_path / "b", 3)
    live = packaged_facts(spec(tmp_path, 1, {"a": a1}), tmp_path / "r1")
    changed = packaged_facts(spec(tmp_path, 2, {"a": a2, "b": b}), tmp_path / "r2")
    assert live.lora and ad.only_adapters_changed(live, changed) == []  # max_loras 1 -> 2 is the adapters' own
    assert changed.adapters["b"] != changed.adapters["a"] != live.adapters["a"]
    same = packaged_facts(spec(tmp_path, 3, {"a": a1}), tmp_path / "r3")
    assert same.adapters == live.adapters and ad.only_adapters_changed(live, same) == ["the adapters are the same"]
    other = packaged_facts(spec(tmp_path, 4, {"a": a2}, max_num_seqs=2), tmp_path / "r4")
    assert ad.only_adapters_changed(live, other) == ["engine arguments differ: max_num_seqs"]
    high = packaged_facts(spec(tmp_path, 5, {"a": adapter(tmp_path / "a16", 4, rank=16)}), tmp_path / "r5")
    assert ad.only_adapters_changed(live, high) == ["max_lora_rank 16 is above the live engine's 8"]


def test_the_three_lists_load_beside_then_move_the_names_then_drop_the_old():
    live = {"a": "/v1/a", "gone": "/v1/gone", "same": "/v1/same"}
    ids = {"a": "1", "gone": "2", "same": "3"}
    lists = ad.rollout_lists(live, ids, {"a": "/v2/a", "same": "/v2/same", "new": "/v2/new"},
                             {"a": "9", "same": "3", "new": "7"}, 2)
    assert lists.load == {**live, "a@2": "/v2/a", "same@2": "/v1/same", "new@2": "/v2/new"}
    assert lists.alias == {**lists.load, "a": "/v2/a", "new": "/v2/new"}  # gone still served through the grace
    assert lists.final == {"a": "/v2/a", "same": "/v1/same", "new": "/v2/new", "a@2": "/v2/a", "same@2": "/v1/same",
                           "new@2": "/v2/new"}
    assert lists.canaries == ["a@2", "new@2"]  # what did not change loads nothing and needs no canary
    assert "retire gone" in lists.summary
    with pytest.raises(Exception, match="spelt like a versioned name"):
        ad.rollout_lists({}, {}, {"x": "/x", "x@2": "/y"}, {"x": "1", "x@2": "2"}, 2)


@pytest.fixture
def live_unit(tmp_path):
    """A store whose unit m-blue serves the packaged v1 (one adapter, a), as a local deploy records it (the facts
    of its release and the list it serves among them: planning compares those, never the files)."""
    first = release_from(spec(tmp_path, 1, {"a": adapter(tmp_path / "a1", 1)}), tmp_path / "work")
    repo = tmp_path / "work" / "releases" / "v1"
    package_spec(first.spec, repo)
    store = StateStore(tmp_path / "s.db")
    store.ensure_deployment(MODEL, "fake")
    store.put_unit(MODEL, Unit(name="bot-blue", version=1, color="blue", weight=100, status="serving"))
    assert isinstance(first.adapter_facts, ad.AdapterFacts) and first.adapter_facts == ad.read_facts(repo, MODEL, 1)
    store.update_unit(MODEL, "bot-blue", endpoints={**Endpoints(repository=str(repo), serving_repository=str(repo),
                                                                name="bot-blue", http_url="http://u").facts(),
                                                    "adapter_facts": first.adapter_facts.model_dump(),
                                                    "adapters": ad.served_list(repo / MODEL / "1")})
    return store, repo


def test_an_adapter_only_release_is_rolled_into_the_live_unit(tmp_path, live_unit):
    store, repo = live_unit
    release = release_from(spec(tmp_path, 2, {"a": adapter(tmp_path / "a2", 2), "b": adapter(tmp_path / "b", 3)}),
                           tmp_path / "work")
    assert plan_release(store, release).strategy == "red-black"  # a target that cannot: a new unit
    graced = plan_release(store, release, adapter_rollouts=True, adapter_grace_s=10).steps[-1]
    assert graced.wait_s == 10 and graced.describe().endswith("(after 10 s of grace, the old adapters dropped)")
    plan = plan_release(store, release, adapter_rollouts=True, adapter_grace_s=0)
    assert plan.strategy == "adapters" and plan.new_unit is None and "only the LoRA adapters" in plan.reason
    assert [s.kind for s in plan.steps] == ["adapters", "adapter_check", "adapters", "adapters"]
    assert plan.steps[1].names == ["a@2", "b@2"]
    assert plan.rollback[0].adapters == {"a": str((repo / MODEL / "1" / "adapters" / "a").resolve())}
    driver = Recorder()
    out = Executor(store, driver, dwell_s=0, adapter_grace_s=0).deploy(release)
    assert out.ok, out.error
    assert [c for c in driver.calls if not c.startswith("sync")] == [
        "adapters bot-blue v1 ['a', 'a@2', 'b@2']", "adapter_check bot-blue a@2", "adapter_check bot-blue b@2",
        "adapters bot-blue v1 ['a', 'a@2', 'b', 'b@2']", "adapters bot-blue v1 ['a', 'a@2', 'b', 'b@2']"]
    ep = store.endpoints(MODEL, "bot-blue")
    assert ep["adapter_release"] == 2 and set(ep["adapter_ids"]) == {"a", "b"}
    assert ep["adapters"]["a"].endswith("releases/bot-v2/repository/bot/2/adapters/a")
    assert store.deployment(MODEL)["strategy"] is None  # the deployment's own strategy is kept
    # the same adapters again: nothing to roll out, and the explicit strategy says why
    again = release_from(spec(tmp_path, 3, {"a": str(tmp_path / "a2"), "b": str(tmp_path / "b")}), tmp_path / "work")
    with pytest.raises(PlanError, match="not an adapter rollout: the adapters are the same"):
        plan_release(store, again.model_copy(update={"strategy": "adapters"}), adapter_rollouts=True)


def test_a_failed_canary_writes_the_live_list_back(tmp_path, live_unit):
    store, _ = live_unit
    release = release_from(spec(tmp_path, 2, {"a": adapter(tmp_path / "a2", 2)}), tmp_path / "work")
    driver = Recorder(fail={"adapter_check": DeployError("adapter a@2: HTTP 400: could not be loaded")})
    out = Executor(store, driver, dwell_s=0, adapter_grace_s=0).deploy(release)
    assert not out.ok and out.rolled_back and "could not be loaded" in (out.error or "")
    calls = [c for c in driver.calls if not c.startswith("sync")]
    assert calls == ["adapters bot-blue v1 ['a', 'a@2']", "adapter_check bot-blue a@2", "adapters bot-blue v1 ['a']"]
    assert "adapter_release" not in store.endpoints(MODEL, "bot-blue")


def test_a_unit_is_a_candidate_only_where_its_served_list_is_known_and_followed(tmp_path, live_unit):
    """Replicas with a list of their own each are no candidate (nothing read, nothing said); kubernetes: every pod
    follows the list its driver recorded, so the replica count does not matter, and without one it is no
    candidate."""
    store, _ = live_unit
    release = release_from(spec(tmp_path, 2, {"a": adapter(tmp_path / "a2", 2)}), tmp_path / "work")
    store.update_unit(MODEL, "bot-blue", replicas=2)
    plan = plan_release(store, release, adapter_rollouts=True)
    assert plan.strategy == "red-black" and "not an adapter rollout" not in plan.reason
    facts = store.endpoints(MODEL, "bot-blue")["adapter_facts"]
    followed = {"adapter_facts": facts, "adapter_list": "bot-blue-adapters", "adapters": {"a": "s3://x/a"}}
    store.update_unit(MODEL, "bot-blue", endpoints=followed)
    plan = plan_release(store, release, adapter_rollouts=True)
    assert plan.strategy == "adapters" and plan.rollback[0].adapters == {"a": "s3://x/a"}
    store.update_unit(MODEL, "bot-blue", endpoints={**followed, "adapters": None})
    assert plan_release(store, release, adapter_rollouts=True).strategy == "red-black"
    store.update_unit(MODEL, "bot-blue", endpoints={**followed, "adapter_facts": None})  # provisioned before facts
    plan = plan_release(store, release, adapter_rollouts=True)
    assert plan.strategy == "red-black" and "not an adapter rollout" not in plan.reason
