"""The strategy choice as plain values in, a plan out: no state file, no repository, no process. What the
executor finds (an adapter rollout, or why there is none; the breaking I/O changes) comes from `adapters.rollout`
over plain files here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tritonpkg.deploy import adapters
from tritonpkg.deploy.iodiff import Schema, Tensor, diff
from tritonpkg.deploy.plan import LiveState, PlanError, Unit
from tritonpkg.deploy.release import Release
from tritonpkg.deploy.strategy import choose_plan

X = Tensor(name="X", data_type="TYPE_FP32", dims=[2])
LIVE = LiveState(model="bot", units=[Unit(name="bot-blue", version=1, color="blue", weight=100, status="serving")])
SERVED = {"a": "/state/units/bot-blue/repository/bot/1/adapters/a"}
EP = {"adapter_list": "bot-blue-adapters", "adapters": SERVED}


def release(version: int = 2, strategy: str = "auto", inputs: list[Tensor] | None = None) -> Release:
    schema = Schema(model="bot", version=version, inputs=inputs if inputs is not None else [X], outputs=[])
    return Release(model="bot", version=version, repository=Path("/state/releases/new"), strategy=strategy,
                   schema_=schema, traffic_steps=[50, 100])


def files(version: int, adapter: bytes, **args: object) -> dict[str, bytes]:
    v = f"bot/{version}/"
    return {"bot/config.pbtxt": b'name: "bot"', v + "model.json": json.dumps({"enable_lora": "true", **args}).encode(),
            v + "multi_lora.json": b'{"a": "./adapters/a"}', v + "adapters/a/adapter_model.bin": adapter}


def rollout(version: int = 2, new: dict[str, bytes] | None = None) -> adapters.Lists | adapters.Refusal:
    new_files = new if new is not None else files(version, b"new")
    return adapters.rollout("bot-blue", adapters.facts("bot", 1, files(1, b"old")), EP,
                            adapters.facts("bot", version, new_files), Path(f"/state/releases/new/bot/{version}"))


def breaking(rel: Release) -> list[str]:
    assert rel.schema_ is not None
    return diff(Schema(model="bot", version=1, inputs=[X], outputs=[]), rel.schema_).reasons()


def test_nothing_live_is_red_black_and_a_requested_strategy_is_taken() -> None:
    empty = LiveState(model="bot")
    plan = choose_plan(release(1), empty, adapters.Refusal(why=["no live unit"], quiet=True), None, grace_s=30)
    assert (plan.strategy, plan.reason) == ("red-black", "auto: nothing live to compare with, red-black")
    plan = choose_plan(release(2, "versioned"), LIVE, None, None, grace_s=30)
    assert (plan.strategy, plan.reason) == ("versioned", "--strategy versioned")


def test_auto_compares_the_io_with_the_serving_unit() -> None:
    no_lora = rollout(new={"bot/config.pbtxt": b'name: "bot"'})
    assert isinstance(no_lora, adapters.Refusal) and no_lora.quiet
    plan = choose_plan(release(2), LIVE, no_lora, breaking(release(2)), grace_s=30)
    assert (plan.strategy, plan.reason) == ("red-black", "auto: I/O compatible with the live version, red-black")
    plan = choose_plan(release(2, inputs=[]), LIVE, no_lora, breaking(release(2, inputs=[])), grace_s=30)
    assert plan.strategy == "versioned" and "input X: removed" in plan.reason


def test_only_the_adapters_changed_is_an_adapter_rollout_into_the_live_engine() -> None:
    plan = choose_plan(release(2), LIVE, rollout(), breaking(release(2)), grace_s=12)
    assert plan.strategy == "adapters" and plan.reason.endswith("rolled into the live engine of bot-blue")
    loads = [s for s in plan.steps if s.kind == "adapters"]
    assert loads[0].adapters == {**SERVED, "a@2": "/state/releases/new/bot/2/adapters/a"}
    assert [s.wait_s for s in loads] == [0, 0, 12]
    assert [s.names for s in plan.steps if s.kind == "adapter_check"] == [["a@2"]]
    assert plan.rollback[0].adapters == SERVED  # the served list written back


def test_why_a_release_is_no_adapter_rollout() -> None:
    other_args = rollout(new=files(2, b"new", max_model_len=64))
    plan = choose_plan(release(2), LIVE, other_args, [], grace_s=30)
    assert plan.strategy == "red-black" and "(not an adapter rollout: engine arguments differ: max_model_len)" \
        in plan.reason
    unreadable = adapters.Refusal(why=["the releases cannot be compared: disk gone"])
    assert "the releases cannot be compared: disk gone" in choose_plan(release(2), LIVE, unreadable, [],
                                                                      grace_s=30).reason
    no_target = adapters.Refusal(why=["this target cannot change a running unit's adapters"], quiet=True)
    with pytest.raises(PlanError, match="this target cannot change a running unit's adapters"):
        choose_plan(release(2, "adapters"), LIVE, no_target, None, grace_s=30)
    assert choose_plan(release(2), LIVE, no_target, [], grace_s=30).reason.endswith("red-black")  # quiet
    with pytest.raises(PlanError, match="version 1 is not above the live adapters' 1"):
        choose_plan(release(1, "adapters"), LIVE, rollout(1, files(1, b"new")), None, grace_s=30)
