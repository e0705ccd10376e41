"""The strategy choice as plain values in, a plan out: no state file, no repository, no process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tritonpkg.deploy.iodiff import Schema, Tensor
from tritonpkg.deploy.plan import LiveState, PlanError, Unit
from tritonpkg.deploy.release import Release
from tritonpkg.deploy.strategy import Observed, adapter_candidate, choose_plan

X = Tensor(name="X", data_type="TYPE_FP32", dims=[2])
LIVE = LiveState(model="bot", units=[Unit(name="bot-blue", version=1, color="blue", weight=100, status="serving")])
EP = {"repository": "/state/releases/v1", "serving_repository": "/state/units/bot-blue/repository"}


def release(version: int = 2, strategy: str = "auto", inputs: list[Tensor] | None = None) -> Release:
    schema = Schema(model="bot", version=version, inputs=inputs if inputs is not None else [X], outputs=[])
    return Release(model="bot", version=version, repository=Path("/state/releases/new"), strategy=strategy,
                   schema_=schema, traffic_steps=[50, 100])


def files(version: int, adapter: bytes, **args: object) -> dict[str, bytes]:
    v = f"bot/{version}/"
    return {"bot/config.pbtxt": b'name: "bot"', v + "model.json": json.dumps({"enable_lora": "true", **args}).encode(),
            v + "multi_lora.json": b'{"a": "./adapters/a"}', v + "adapters/a/adapter_model.bin": adapter}


def seen(**kw: object) -> Observed:
    base: dict[str, object] = {"serving_schema": Schema(model="bot", version=1, inputs=[X], outputs=[]).model_dump(),
                               "endpoints": EP, "live_files": files(1, b"old"), "new_files": files(2, b"new"),
                               "served": {"a": "/state/units/bot-blue/repository/bot/1/adapters/a"}}
    return Observed(**{**base, **kw})  # type: ignore[arg-type]


def test_nothing_live_is_red_black_and_a_requested_strategy_is_taken() -> None:
    empty = LiveState(model="bot")
    plan = choose_plan(release(1), empty, Observed(), adapter_rollouts=True, grace_s=30)
    assert (plan.strategy, plan.reason) == ("red-black", "auto: nothing live to compare with, red-black")
    plan = choose_plan(release(2, "versioned"), LIVE, seen(), adapter_rollouts=True, grace_s=30)
    assert (plan.strategy, plan.reason) == ("versioned", "--strategy versioned")


def test_auto_compares_the_io_with_the_serving_unit() -> None:
    no_lora = seen(new_files={"bot/config.pbtxt": b'name: "bot"'})
    plan = choose_plan(release(2), LIVE, no_lora, adapter_rollouts=True, grace_s=30)
    assert (plan.strategy, plan.reason) == ("red-black", "auto: I/O compatible with the live version, red-black")
    plan = choose_plan(release(2, inputs=[]), LIVE, no_lora, adapter_rollouts=True, grace_s=30)
    assert plan.strategy == "versioned" and "input X: removed" in plan.reason


def test_only_the_adapters_changed_is_an_adapter_rollout_into_the_live_engine() -> None:
    plan = choose_plan(release(2), LIVE, seen(), adapter_rollouts=True, grace_s=12)
    assert plan.strategy == "adapters" and plan.reason.endswith("rolled into the live engine of bot-blue")
    loads = [s for s in plan.steps if s.kind == "adapters"]
    assert loads[0].adapters == {"a": "/state/units/bot-blue/repository/bot/1/adapters/a",
                                 "a@2": "/state/releases/new/bot/2/adapters/a"}
    assert [s.wait_s for s in loads] == [0, 0, 12]
    assert [s.names for s in plan.steps if s.kind == "adapter_check"] == [["a@2"]]


def test_why_a_release_is_no_adapter_rollout() -> None:
    other_args = seen(new_files=files(2, b"new", max_model_len=64))
    plan = choose_plan(release(2), LIVE, other_args, adapter_rollouts=True, grace_s=30)
    assert plan.strategy == "red-black" and "(not an adapter rollout: engine arguments differ: max_model_len)" \
        in plan.reason
    plan = choose_plan(release(2), LIVE, seen(unreadable="disk gone", live_files=None), adapter_rollouts=True,
                       grace_s=30)
    assert "the releases cannot be compared: disk gone" in plan.reason
    with pytest.raises(PlanError, match="this target cannot change a running unit's adapters"):
        choose_plan(release(2, "adapters"), LIVE, seen(), adapter_rollouts=False, grace_s=30)
    with pytest.raises(PlanError, match="version 1 is not above the live adapters' 1"):
        choose_plan(release(1, "adapters"), LIVE, seen(new_files=files(1, b"new")), adapter_rollouts=True, grace_s=30)
    two = LiveState(model="bot", units=[LIVE.units[0].model_copy(update={"replicas": 2})])
    assert adapter_candidate(release(2), two, True, EP) is None  # nothing to read: the choice needs no files
    assert adapter_candidate(release(2), LIVE, True, EP) == Path(EP["serving_repository"]) / "bot" / "1"
    assert choose_plan(release(2), two, seen(), adapter_rollouts=True, grace_s=30).reason.endswith("red-black")


def test_a_unit_whose_pods_follow_a_recorded_list_is_a_candidate_at_any_replica_count() -> None:
    """kubernetes: every pod of the unit follows the ConfigMap its driver writes, so the served list is the one the
    driver recorded, and the replica count does not matter; a unit without a recorded list (its pods follow none)
    is no candidate."""
    two = LiveState(model="bot", units=[LIVE.units[0].model_copy(update={"replicas": 2})])
    listing = {"a": "s3://store/bot/" + "ab" * 8 + "/bot-v1.tar.gz#sha256=" + "ab" * 32 + "&path=bot/1/adapters/a"}
    followed = {"repository": "/state/releases/v1", "adapter_list": "bot-blue-adapters", "adapters": listing}
    assert adapter_candidate(release(2), two, True, followed) == listing
    assert adapter_candidate(release(2), two, True, {**followed, "adapters": None}) is None
    assert adapter_candidate(release(2), two, False, followed) is None
