"""Plans are pure: state + new version in, steps out. No process is started here."""

from __future__ import annotations

import pytest

from tritonpkg.deploy.plan import (
    LiveState,
    PlanError,
    Unit,
    plan_gc,
    plan_red_black,
    plan_rollback,
    plan_versioned,
)
from tritonpkg.deploy.strategy import choose


def live_blue(version: int = 1) -> LiveState:
    return LiveState(model="m", strategy="red-black", alias="m-blue",
                     units=[Unit(name="m-blue", version=version, color="blue", weight=100, status="serving")])


def test_first_red_black_deploy_takes_all_traffic_at_once():
    plan = plan_red_black(LiveState(model="m"), 1, [10, 50, 100])
    assert [s.describe() for s in plan.steps] == [
        "provision m-blue", "health_check m-blue (live, ready, model ready, canary)", "shift m-blue 100%",
        "alias m-blue"]
    assert [s.kind for s in plan.rollback] == ["retire"]


def test_red_black_shifts_in_steps_with_a_gate_after_each_then_retires_the_old():
    plan = plan_red_black(live_blue(), 2, [10, 25, 50, 100])
    kinds = [s.kind for s in plan.steps]
    assert kinds == ["provision", "health_check"] + ["shift", "gate"] * 4 + ["drain", "retire", "alias"]
    shifts = [s.weights for s in plan.steps if s.kind == "shift"]
    assert shifts == [{"m-blue": 90, "m-green": 10}, {"m-blue": 75, "m-green": 25},
                      {"m-blue": 50, "m-green": 50}, {"m-blue": 0, "m-green": 100}]
    assert plan.steps[0].color == "green" and plan.steps[0].version == 2
    assert [s.unit for s in plan.steps[-3:]] == ["m-blue", "m-blue", "m-green"]


def test_red_black_rollback_is_one_weight_change_then_the_new_unit_goes():
    plan = plan_red_black(live_blue(), 2, [50, 100])
    first = plan.rollback[0]
    assert first.kind == "shift" and first.weights == {"m-blue": 100, "m-green": 0}
    assert [(s.kind, s.unit) for s in plan.rollback[1:]] == [("drain", "m-green"), ("retire", "m-green"),
                                                              ("alias", "m-blue")]


def test_red_black_alternates_colors_and_refuses_the_live_version():
    green = LiveState(model="m", units=[Unit(name="m-green", version=2, color="green", weight=100,
                                             status="serving")])
    assert plan_red_black(green, 3, [100]).new_unit == "m-blue"
    with pytest.raises(PlanError, match="already serving"):
        plan_red_black(live_blue(), 1, [100])


def test_replicas_scale_with_the_traffic_share():
    plan = plan_red_black(live_blue(), 2, [25, 100], replicas=4)
    scales = [s.replicas for s in plan.steps if s.kind == "scale"]
    assert scales == [{"m-green": 1, "m-blue": 3}, {"m-green": 4, "m-blue": 1}]
    assert plan.steps[0].replicas == {"m-green": 1}


def test_versioned_adds_a_route_and_an_alias_without_touching_the_old():
    live = LiveState(model="m", alias="m-v1", units=[Unit(name="m-v1", version=1, weight=100, status="serving",
                                                          routed=True)])
    plan = plan_versioned(live, 2)
    assert [(s.kind, s.unit) for s in plan.steps] == [("provision", "m-v2"), ("health_check", "m-v2"),
                                                      ("route", "m-v2"), ("alias", "m-v2")]
    assert all("m-v1" not in s.weights for s in plan.steps)
    assert [(s.kind, s.unit) for s in plan.rollback] == [("drain", "m-v2"), ("retire", "m-v2"), ("alias", "m-v1")]
    with pytest.raises(PlanError, match="already deployed"):
        plan_versioned(plan_state_with(live, "m-v2", 2), 2)


def plan_state_with(live: LiveState, name: str, version: int) -> LiveState:
    return live.model_copy(update={"units": [*live.units, Unit(name=name, version=version, status="inactive")]})


def test_gc_retires_idle_superseded_units_and_always_keeps_the_latest():
    units = [Unit(name="m-v1", version=1, weight=100, status="serving", last_active=0),
             Unit(name="m-v2", version=2, status="inactive", last_active=100),
             Unit(name="m-v3", version=3, status="inactive", last_active=0),
             Unit(name="m-v4", version=4, status="inactive", last_active=0)]
    live = LiveState(model="m", alias="m-v3", units=units)
    assert plan_gc(live, now=150, grace_s=100) == []  # v2 active 50 s ago
    steps = plan_gc(live, now=1000, grace_s=100)
    assert [(s.kind, s.unit) for s in steps] == [("drain", "m-v2"),
                                                 ("retire", "m-v2")]  # v1 routed, v3 alias, v4 latest
    assert plan_gc(LiveState(model="m"), now=1, grace_s=0) == []


def test_rollback_needs_an_earlier_unit():
    with pytest.raises(PlanError, match="no earlier unit"):
        plan_rollback(live_blue())
    mid = live_blue().model_copy(update={"units": [
        Unit(name="m-blue", version=1, color="blue", weight=50, status="serving"),
        Unit(name="m-green", version=2, color="green", weight=50, status="serving")]})
    # equal weights: the newer unit counts as the serving one and traffic goes back to the older
    plan = plan_rollback(mid)
    assert plan.steps[0].weights == {"m-blue": 100, "m-green": 0}
    assert [s.kind for s in plan.steps] == ["shift", "drain", "retire", "alias"]


def test_versioned_rollback_moves_the_alias_back_and_retires_the_newer():
    live = LiveState(model="m", strategy="versioned", alias="m-v2", units=[
        Unit(name="m-v1", version=1, weight=100, status="serving", routed=True),
        Unit(name="m-v2", version=2, status="inactive", routed=True)])
    plan = plan_rollback(live)
    assert [(s.kind, s.unit) for s in plan.steps] == [("alias", "m-v1"), ("drain", "m-v2"), ("retire", "m-v2")]
    with pytest.raises(PlanError, match="no earlier version"):
        plan_rollback(live.model_copy(update={"alias": "m-v1"}))


def test_auto_picks_by_compatibility_and_says_why():
    assert choose("auto", True, [])[0] == "red-black"
    strategy, why = choose("auto", False, ["input X: removed"])
    assert strategy == "versioned" and "input X: removed" in why
    assert choose("auto", None, [])[0] == "red-black"
    assert choose("versioned", True, []) == ("versioned", "--strategy versioned")
