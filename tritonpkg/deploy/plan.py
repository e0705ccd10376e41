"""Strategies as pure functions: (live state, new version) -> ordered steps. No I/O here, so every
rollout shape is unit-tested without a process; the executor carries the steps out through a driver.

red-black: the new unit beside the old, health-checked, traffic shifted in steps with a gate after
each, then the old drained and retired. Its rollback is one weight change back to the old unit
(a single proxy operation), then the new one drained and retired.
versioned: one unit per version with its own route; an alias names the current one; superseded
units with no traffic for a grace period are retired, the latest never.
adapters: a release whose only change is its LoRA adapters goes into the live unit's running engine (three
whole adapter lists written in turn: new adapters loaded beside the live ones, a canary per new adapter, the
names moved, the old ones dropped after a grace period); its rollback is the live list written back."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field

from tritonpkg.errors import TritonpkgError

StepKind = Literal["provision", "health_check", "shift", "gate", "scale", "drain", "retire", "route", "alias",
                   "adapters", "adapter_check"]
Strategy = Literal["red-black", "versioned", "adapters"]
COLORS = ("blue", "green")


class PlanError(TritonpkgError):
    """The requested rollout cannot be planned from the current state."""


class Unit(BaseModel):
    """One deployment unit: a version of the model served on its own (a color or a version route)."""

    name: str
    version: int
    color: str | None = None
    weight: int = Field(default=0, ge=0, le=100, description="share of the shared route, percent")
    replicas: int = 1
    status: Literal["provisioning", "serving", "inactive", "retired"] = "provisioning"
    routed: bool = False
    last_active: float | None = Field(default=None, description="unix time the unit last served a request")


class LiveState(BaseModel):
    """What is deployed for one model, as the planner sees it."""

    model: str
    strategy: Strategy | None = None
    units: list[Unit] = Field(default_factory=list)
    alias: str | None = Field(default=None, description="the unit consumers should use (versioned)")

    def active(self) -> list[Unit]:
        return [u for u in self.units if u.status != "retired"]

    def unit(self, name: str) -> Unit | None:
        return next((u for u in self.active() if u.name == name), None)

    def serving(self) -> Unit | None:
        """The unit that takes the shared route's traffic (the largest weight)."""
        live = [u for u in self.active() if u.weight > 0]
        return max(live, key=lambda u: (u.weight, u.version)) if live else None

    def current(self) -> Unit | None:
        """The unit consumers are pointed at: the alias's, else the serving one (an adapter rollout changes it)."""
        return self.unit(self.alias or "") or self.serving()


class Step(BaseModel):
    kind: StepKind
    unit: str | None = None
    version: int | None = None
    color: str | None = None
    weights: dict[str, int] = Field(default_factory=dict, description="unit -> percent, applied in one operation")
    replicas: dict[str, int] = Field(default_factory=dict)
    adapters: dict[str, str] | None = Field(default=None, description="adapters: the whole list to serve")
    names: list[str] = Field(default_factory=list, description="adapter_check: the adapters to ask")
    wait_s: float = Field(default=0.0, ge=0, description="adapters: the grace to wait before writing the list")
    adapter_ids: dict[str, str] | None = Field(default=None, description="adapters: the release's adapter "
                                               "identities, recorded once its list is served (the final one)")
    note: str = ""

    def describe(self) -> str:
        if self.kind == "shift":
            return "shift " + " / ".join(f"{k} {v}%" for k, v in self.weights.items())
        if self.kind == "scale":
            return "scale " + ", ".join(f"{k}={v}" for k, v in self.replicas.items())
        return f"{self.kind} {self.unit or ''}".strip() + (f" ({self.note})" if self.note else "")


class Plan(BaseModel):
    """Steps to run in order, and the steps that undo a failure at any point of them."""

    model: str
    strategy: Strategy
    new_unit: str | None
    steps: list[Step]
    rollback: list[Step]
    reason: str = ""


def _replicas_at(total: int, percent: int) -> int:
    """Replicas a side needs to carry `percent` of the traffic (at least 1 while it carries any)."""
    return 0 if percent <= 0 else max(1, math.ceil(total * percent / 100))


def plan_red_black(live: LiveState, version: int, traffic_steps: list[int], replicas: int = 1) -> Plan:
    old = live.serving()
    if old is not None and old.version == version:
        raise PlanError(f"version {version} of {live.model} is already serving", field="version",
                        expected="a version different from the live one")
    taken = {u.color for u in live.active()}
    color = next((c for c in COLORS if c not in taken), None) if old is None else (
        COLORS[1] if old.color == COLORS[0] else COLORS[0])
    if color is None or (old is not None and live.unit(f"{live.model}-{color}") is not None):
        raise PlanError(f"both colors of {live.model} are in use; finish or roll back the running deploy first")
    new = f"{live.model}-{color}"
    first = 1 if replicas == 1 else _replicas_at(replicas, traffic_steps[0])
    steps = [Step(kind="provision", unit=new, version=version, color=color, replicas={new: first}),
             Step(kind="health_check", unit=new, note="live, ready, model ready, canary")]
    if old is None:
        steps += [Step(kind="scale", replicas={new: replicas})] if replicas > 1 else []
        steps += [Step(kind="shift", weights={new: 100}), Step(kind="alias", unit=new)]
        return Plan(model=live.model, strategy="red-black", new_unit=new, steps=steps,
                    rollback=[Step(kind="retire", unit=new)])
    for percent in traffic_steps:
        if replicas > 1:
            steps.append(Step(kind="scale", replicas={new: _replicas_at(replicas, percent),
                                                      old.name: _replicas_at(replicas, 100 - percent) or 1}))
        steps.append(Step(kind="shift", weights={old.name: 100 - percent, new: percent}))
        steps.append(Step(kind="gate", unit=new, note=f"error rate and p99 at {percent}%"))
    steps += [Step(kind="drain", unit=old.name), Step(kind="retire", unit=old.name), Step(kind="alias", unit=new)]
    rollback = [Step(kind="shift", weights={old.name: 100, new: 0}, note="all traffic back in one operation")]
    rollback += [Step(kind="scale", replicas={old.name: old.replicas})] if replicas > 1 else []
    rollback += [Step(kind="drain", unit=new), Step(kind="retire", unit=new), Step(kind="alias", unit=old.name)]
    return Plan(model=live.model, strategy="red-black", new_unit=new, steps=steps, rollback=rollback)


def plan_versioned(live: LiveState, version: int, replicas: int = 1) -> Plan:
    new = f"{live.model}-v{version}"
    if live.unit(new) is not None:
        raise PlanError(f"version {version} of {live.model} is already deployed", field="version",
                        expected="a version not deployed yet")
    steps = [Step(kind="provision", unit=new, version=version, replicas={new: replicas}),
             Step(kind="health_check", unit=new, note="live, ready, model ready, canary"),
             Step(kind="route", unit=new, version=version, note=f"requests for version {version}")]
    shared = live.serving()
    if shared is None:  # the first unit also takes requests that name no version
        steps.append(Step(kind="shift", weights={new: 100}))
    steps.append(Step(kind="alias", unit=new, note="consumers switch when they are ready"))
    rollback = [Step(kind="shift", weights={new: 0})] if shared is None else []
    rollback += [Step(kind="drain", unit=new), Step(kind="retire", unit=new)]
    if live.alias:
        rollback.append(Step(kind="alias", unit=live.alias))
    return Plan(model=live.model, strategy="versioned", new_unit=new, steps=steps, rollback=rollback)


def plan_adapters(live: LiveState, unit: str, version: int, live_list: dict[str, str], load: dict[str, str],
                  alias: dict[str, str], final: dict[str, str], canaries: list[str], grace_s: float,
                  summary: str = "", ids: dict[str, str] | None = None) -> Plan:
    """Release `version`'s adapters into `unit`'s engine: load, canary, alias, grace, final list. Any failure
    before the run ends writes `live_list` back (the engine drops what was loaded; the old names answer again)."""
    if live.unit(unit) is None:
        raise PlanError(f"{unit} is not deployed", field="unit", expected="a live unit of " + live.model)
    steps = [Step(kind="adapters", unit=unit, version=version, adapters=load, note="load: " + summary),
             Step(kind="adapter_check", unit=unit, names=canaries, note="the smoke request per new adapter"),
             Step(kind="adapters", unit=unit, version=version, adapters=alias, note="alias: names move"),
             Step(kind="adapters", unit=unit, version=version, adapters=final, wait_s=grace_s, adapter_ids=ids or {},
                  note=f"after {grace_s:g} s of grace, the old adapters dropped")]
    rollback = [Step(kind="adapters", unit=unit, adapters=live_list, note="the live adapter list back")]
    return Plan(model=live.model, strategy="adapters", new_unit=None, steps=steps, rollback=rollback)


def plan_gc(live: LiveState, now: float, grace_s: float) -> list[Step]:
    """Retire versioned units that have served nothing for `grace_s`; the latest version, the alias and
    the unit taking unversioned traffic are always kept."""
    active = live.active()
    if not active:
        return []
    latest = max(active, key=lambda u: u.version)
    keep = {latest.name, live.alias} | {u.name for u in active if u.weight > 0}
    steps: list[Step] = []
    for u in sorted(active, key=lambda u: u.version):
        idle = now - (u.last_active or 0.0)
        if u.name not in keep and idle >= grace_s:
            steps += [Step(kind="drain", unit=u.name, note=f"idle {idle:.0f} s >= grace {grace_s:g} s"),
                      Step(kind="retire", unit=u.name)]
    return steps


def plan_rollback(live: LiveState) -> Plan:
    """`tritonpkg rollback`. red-black (mid-rollout, or when the old unit still runs): all shared traffic back
    to the older unit in one operation, the newer one retired. versioned: the alias goes back to the
    previous version and the newer version is retired; unversioned traffic stays where it is."""
    if live.strategy == "versioned":
        current = live.unit(live.alias or "")
        older = sorted((u for u in live.active() if current and u.version < current.version),
                       key=lambda u: u.version, reverse=True)
        if current is None or not older:
            raise PlanError(f"{live.model} has no earlier version running to roll back to",
                            expected="a versioned deployment with an older version still deployed")
        steps = [Step(kind="alias", unit=older[0].name)]
        if current.weight > 0:
            steps.append(Step(kind="shift", weights={older[0].name: 100, current.name: 0}, note="one operation"))
        steps += [Step(kind="drain", unit=current.name), Step(kind="retire", unit=current.name)]
        return Plan(model=live.model, strategy="versioned", new_unit=older[0].name, steps=steps, rollback=[])
    serving = live.serving()
    others = sorted((u for u in live.active() if serving is None or u.name != serving.name),
                    key=lambda u: u.version, reverse=True)
    if serving is None or not others:
        raise PlanError(f"{live.model} has no earlier unit running to roll back to (a finished red-black rollout "
                        "retires the old unit)", expected="deploy the previous version again")
    back = others[0]
    steps = [Step(kind="shift", weights={back.name: 100, serving.name: 0}, note="one operation"),
             Step(kind="drain", unit=serving.name), Step(kind="retire", unit=serving.name),
             Step(kind="alias", unit=back.name)]
    return Plan(model=live.model, strategy="red-black", new_unit=back.name, steps=steps, rollback=[])
