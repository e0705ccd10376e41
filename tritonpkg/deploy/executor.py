"""Carries a plan out through a driver, recording every step in the state file. A failing step runs
the plan's rollback (best effort, each step recorded); a run that a killed command left `running` is
rolled back by the next command (`recover`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from tritonpkg.deploy import adapters as adapters_mod
from tritonpkg.deploy import gate as gate_mod
from tritonpkg.deploy import iodiff, strategy
from tritonpkg.deploy.checks import DeployError
from tritonpkg.deploy.defaults import ADAPTER_GRACE_S
from tritonpkg.deploy.driver import AdapterRollouts, Driver, Endpoints
from tritonpkg.deploy.plan import (
    Plan,
    PlanError,
    Step,
    StepKind,
    Unit,
    plan_gc,
    plan_rollback,
)
from tritonpkg.deploy.release import Release, build
from tritonpkg.deploy.state import Snapshot, StateStore


@dataclass(frozen=True)
class _Ctx:
    """One step being carried out: the model, the step, the release (None while rolling back or in gc)."""

    model: str
    step: Step
    release: Release | None


def _named_unit(step: Step) -> str:
    if not step.unit:
        raise DeployError(f"a {step.kind} step names no unit")
    return step.unit


class Recorded(BaseModel):
    """The executor's own facts about a unit, kept in the unit's JSON object beside its target's (Endpoints): the
    I/O schema it serves (auto's choice), the success count last seen (gc), and its LoRA adapters (the facts of the
    release it was provisioned from, the list it serves and, after an adapter rollout, the release they came from
    with each adapter's identity)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    seen: float | None = None
    adapters: dict[str, str] | None = None
    adapter_release: int | None = None
    adapter_ids: dict[str, str] | None = None
    adapter_facts: dict[str, Any] | None = None

    def facts(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


class Recovery(BaseModel):
    """A run a stopped command left half-done, rolled back before this command's own run."""

    run: int
    new_unit: str | None
    steps: list[str] = Field(default_factory=list, description="the rollback's steps, each with how it went")


class Outcome(BaseModel):
    ok: bool
    model: str
    strategy: str
    reason: str
    run: int | None = None
    seconds: float = 0.0
    error: str | None = None
    rolled_back: bool = False
    steps: list[str] = Field(default_factory=list)
    recovered: list[Recovery] = Field(default_factory=list)


def plan_release(store: StateStore, release: Release, adapter_rollouts: bool = False,
                 adapter_grace_s: float = ADAPTER_GRACE_S) -> Plan:
    """The plan `deploy` would run now against the state in `store` (a dry run needs no driver): the state read
    once, the facts the choice needs found (the release's I/O against the serving unit's, and where an adapter
    rollout is asked about, the rollout computed from the facts recorded of the live unit and the release's), then
    strategy.choose_plan. `adapter_rollouts`: the target can roll adapters into a running engine."""
    snap = store.snapshot(release.model)
    serving, current = snap.live.serving(), snap.live.current()
    rollout: strategy.Rollout = None
    if release.strategy in ("auto", "adapters"):
        rollout = adapters_mod.candidate(current, snap.endpoints.get(current.name, {}) if current else {},
                                         adapter_rollouts, release.adapter_facts, release.version_dir)
    schema = snap.endpoints.get(serving.name, {}).get("schema") if serving else None
    compared = release.strategy == "auto" and not isinstance(rollout, adapters_mod.Lists)  # else no I/O change
    breaking = None
    if compared and schema is not None and release.schema_ is not None:
        breaking = iodiff.diff(iodiff.Schema.model_validate(schema), release.schema_).reasons()
    return strategy.choose_plan(release, snap.live, rollout, breaking, grace_s=adapter_grace_s)


class Executor:
    def __init__(self, store: StateStore, driver: Driver, *, limits: gate_mod.Limits | None = None,
                 dwell_s: float = 1.0, on_step: Callable[[str, Step], None] | None = None,
                 adapter_grace_s: float = ADAPTER_GRACE_S) -> None:
        self.store = store
        self.adapter_grace_s = adapter_grace_s
        self.driver = driver
        self.limits = limits or gate_mod.Limits()  # a field set here wins over the release's (see limits_for)
        self.dwell_s = dwell_s
        self.on_step = on_step  # (phase, step) before each step: progress output, fault injection in tests
        self._baseline: dict[str, gate_mod.Sample] = {}

    # -- entry points ----------------------------------------------------------------------------
    def plan(self, release: Release) -> Plan:
        return plan_release(self.store, release, isinstance(self.driver, AdapterRollouts),
                            self.adapter_grace_s)

    def deploy(self, release: Release) -> Outcome:
        """Recover an interrupted run, then plan: a deploy the plan refuses (PlanError) has written nothing,
        neither the release's repository nor the state nor the proxy. The plan is made once, from the release as
        built in memory (its files and schema are the ones `build` writes); the run records the deployment."""
        recovered = self.recover(release.model)
        plan = self.plan(release)
        outcome = self.run(plan, build(release))
        if outcome.ok and plan.strategy != "adapters":  # an adapter rollout keeps the deployment's own strategy
            self.store.set_deployment(release.model, strategy=plan.strategy)
        outcome.recovered = recovered
        return outcome

    def rollback(self, model: str) -> Outcome:
        """An interrupted run is rolled back first; when that was all there was to undo, that is the outcome."""
        recovered = self.recover(model)
        live = self._sync(model).live
        try:
            plan = plan_rollback(live)
        except PlanError as exc:
            if not recovered:
                raise
            return Outcome(ok=True, model=model, strategy=live.strategy or "red-black", recovered=recovered,
                           reason=f"the interrupted run was rolled back; nothing earlier to go back to ({exc})")
        plan.reason = "tritonpkg rollback"
        outcome = self.run(plan, None)
        outcome.recovered = recovered
        return outcome

    def limits_for(self, release: Release | None) -> gate_mod.Limits:
        """The gate's limits for a release: a minimum set on this executor (the command line) wins over the
        spec's deployment.min_requests, which wins over the default."""
        if release is None or release.min_requests is None or "min_requests" in self.limits.model_fields_set:
            return self.limits
        return self.limits.model_copy(update={"min_requests": release.min_requests})

    def gc(self, model: str, grace_s: float, now: float | None = None) -> list[str]:
        """Retire idle superseded versioned units (see plan_gc); returns the retired unit names. One read of the
        state: a unit whose success count grew since the last look was active now, and gc plans on that."""
        now = time.time() if now is None else now
        snap = self._sync(model)
        active = {}
        for row in snap.rows:
            if row["status"] == "retired" or "metrics_url" not in row["endpoints"]:
                continue
            seen = self._sample(model, Endpoints.of(row["endpoints"])).success  # 0 where no metrics are reachable
            if seen > (Recorded.model_validate(row["endpoints"]).seen or 0.0):
                active[row["name"]] = {**row["endpoints"], "seen": seen}
        units = [u.model_copy(update={"last_active": now}) if u.name in active else u for u in snap.live.units]
        steps = plan_gc(snap.live.model_copy(update={"units": units}), now, grace_s)
        for name, endpoints in active.items():
            self.store.update_unit(model, name, last_active=now, endpoints=endpoints)
        for step in steps:
            self._do(model, step, None)
        return [s.unit for s in steps if s.kind == "retire" and s.unit]

    def recover(self, model: str) -> list[Recovery]:
        """Give the driver the state's picture, then roll back the runs a killed command left half-done."""
        done = []
        for run, plan in self._sync(model).running:
            steps = self._rollback(run, plan, "interrupted: rolled back by the next command")
            self.store.finish_run(run, "rolled_back", "interrupted (the command running it stopped)")
            done.append(Recovery(run=run, new_unit=plan.new_unit, steps=steps))
        return done

    # -- running a plan --------------------------------------------------------------------------
    def run(self, plan: Plan, release: Release | None) -> Outcome:
        started = time.monotonic()
        run = self.store.start_run(plan, self.driver.target)
        done: list[str] = []
        self._baseline.clear()
        for idx, step in enumerate(plan.steps):
            line, error = self._step(run, idx, "forward", step, plan.model, release)
            if error is not None:  # any failure: the plan's rollback, then report
                self._rollback(run, plan, error)
                self.store.finish_run(run, "rolled_back", error)
                return Outcome(ok=False, model=plan.model, strategy=plan.strategy, reason=plan.reason, run=run,
                               seconds=time.monotonic() - started, error=error, rolled_back=True, steps=done)
            done.append(line)
        self.store.finish_run(run, "done")
        return Outcome(ok=True, model=plan.model, strategy=plan.strategy, reason=plan.reason, run=run,
                       seconds=time.monotonic() - started, steps=done)

    def _rollback(self, run: int, plan: Plan, why: str) -> list[str]:
        """Every rollback step, each recorded (`why` for a step that says nothing), on past a failed one."""
        lines = []
        for idx, step in enumerate(plan.rollback):
            lines.append(self._step(run, idx, "rollback", step, plan.model, None, why)[0])
        return lines

    def _step(self, run: int, idx: int, phase: str, step: Step, model: str, release: Release | None,
              why: str = "") -> tuple[str, str | None]:
        """Carry one step out and record how it went: (its line, the error where it failed)."""
        try:
            if self.on_step:
                self.on_step(phase, step)
            message = self._do(model, step, release)
        except Exception as exc:  # the caller decides: a run rolls back, a rollback goes on
            self.store.record_step(run, idx, phase, step, "failed", str(exc))
            return f"{step.describe()}: failed: {exc}", f"{step.describe()}: {exc}"
        self.store.record_step(run, idx, phase, step, "done", message or why)
        return step.describe() + (f": {message}" if message else ""), None

    def _sync(self, model: str) -> Snapshot:
        """Give the driver what the state holds: the local proxy's facts, the kubernetes route's picture (empty
        for a model not deployed yet); returns the state as read."""
        snap = self.store.snapshot(model)
        self.driver.sync(model, snap.rows, snap.live.alias)
        if snap.info.get("proxy") and not self.driver.proxy:
            self.driver.proxy = dict(snap.info["proxy"])
        return snap

    def _save_proxy(self, model: str) -> None:
        if self.driver.proxy:
            dep = self.store.deployment(model) or {"info": {}}
            self.store.set_deployment(model, info={**dep["info"], "proxy": self.driver.proxy})

    def _do(self, model: str, step: Step, release: Release | None) -> str:
        return self._STEPS[step.kind](self, _Ctx(model, step, release))

    def _ep(self, model: str, unit: str) -> Endpoints:
        return Endpoints.of(self.store.endpoints(model, unit))

    def _record(self, model: str, unit: str, facts: Endpoints | Recorded) -> None:
        """Merge `facts` into the unit's recorded JSON object."""
        self.store.update_unit(model, unit, endpoints={**self.store.endpoints(model, unit), **facts.facts()})

    # -- one handler per step kind: the state file's side here, the target's through the driver ------------
    def _provision(self, c: _Ctx) -> str:
        step, release, model = c.step, c.release, c.model
        if release is None or not step.unit or step.version is None:
            raise DeployError(f"a provision step needs a release, a unit and a version (got {step})")
        unit = Unit(name=step.unit, version=step.version, color=step.color,
                    replicas=step.replicas.get(step.unit, release.replicas), status="provisioning",
                    last_active=time.time())
        self.store.put_unit(model, unit)
        taken = {r["endpoints"]["slot"] for r in self.store.units_table(model)
                 if r["status"] != "retired" and "slot" in r["endpoints"]}
        name = step.unit

        def started(facts: Endpoints) -> None:  # recorded before the unit is ready, see Driver.provision
            self._record(model, name, facts)
            self._save_proxy(model)

        ep = self.driver.provision(model, unit, release, taken, started)
        facts = release.adapter_facts if isinstance(release.adapter_facts, adapters_mod.AdapterFacts) else None
        own = Recorded(schema_=release.schema_.model_dump() if release.schema_ else None,
                       adapter_facts=facts.model_dump() if facts else None)
        self.store.update_unit(model, name, status="inactive", endpoints={**ep.facts(), **own.facts()})
        self._save_proxy(model)
        return f"up at {ep.http_url or ep.name or ''}"

    def _health_check(self, c: _Ctx) -> str:
        unit = _named_unit(c.step)
        version = next(u.version for u in self.store.live(c.model).units if u.name == unit)
        return self.driver.health_check(c.model, version, self._ep(c.model, unit),
                                        c.release.smoke_request if c.release else None)

    def _shift(self, c: _Ctx) -> str:
        weights = {name: (self._ep(c.model, name), w) for name, w in c.step.weights.items()}
        self.driver.shift(weights)
        for name, w in c.step.weights.items():
            self.store.update_unit(c.model, name, weight=w, status="serving" if w > 0 else "inactive")
            if w > 0:
                self._baseline[name] = self._sample(c.model, weights[name][0])
        return ""

    def _gate_step(self, c: _Ctx) -> str:
        unit = _named_unit(c.step)
        return self._gate(c.model, unit, self._ep(c.model, unit), self.limits_for(c.release))

    def _scale(self, c: _Ctx) -> str:
        return self.driver.scale(c.step.replicas)

    def _drain(self, c: _Ctx) -> str:
        unit = _named_unit(c.step)
        self.driver.drain(self._ep(c.model, unit))
        self.store.update_unit(c.model, unit, weight=0, status="inactive")
        return ""

    def _retire(self, c: _Ctx) -> str:
        unit = _named_unit(c.step)
        note = self.driver.retire(self._ep(c.model, unit))  # e.g. a recorded group that was not ours to stop
        self.store.update_unit(c.model, unit, weight=0, status="retired", routed=False)
        return note

    def _route(self, c: _Ctx) -> str:
        unit = _named_unit(c.step)
        self.driver.route(self._ep(c.model, unit), str(c.step.version))
        self.store.update_unit(c.model, unit, routed=True)
        return f"version {c.step.version} -> {unit}"

    def _alias(self, c: _Ctx) -> str:
        unit = _named_unit(c.step)
        ep = self.store.endpoints(c.model, unit)
        if ep:  # a unit with nothing recorded (never started) has no route to point at
            self.driver.alias(Endpoints.of(ep))
        self.store.set_deployment(c.model, alias=unit)
        return f"current = {unit}"

    def _adapters(self, c: _Ctx) -> str:
        unit = _named_unit(c.step)
        if c.step.adapters is None:
            raise DeployError("an adapters step carries no list")
        if c.step.wait_s:
            time.sleep(c.step.wait_s)  # requests on the adapters about to be dropped finish
        version = next(u.version for u in self.store.live(c.model).units if u.name == unit)
        served = self._rollouts().adapters(c.model, version, self._ep(c.model, unit), c.step.adapters)
        released = c.step.adapter_ids is not None
        self._record(c.model, unit, Recorded(adapters=served, adapter_ids=c.step.adapter_ids,
                                             adapter_release=c.step.version if released else None))
        return f"serving {', '.join(served) or 'no adapters'}"

    def _adapter_check(self, c: _Ctx) -> str:
        unit = _named_unit(c.step)
        ep, smoke = self._ep(c.model, unit), c.release.smoke_request if c.release else None
        return "; ".join(self._rollouts().adapter_check(c.model, ep, smoke, name) for name in c.step.names)

    def _rollouts(self) -> AdapterRollouts:
        if not isinstance(self.driver, AdapterRollouts):
            raise DeployError(f"the {self.driver.target} target cannot change a running unit's adapters",
                              field="strategy", expected="--target local or kubernetes")
        return self.driver

    _STEPS: ClassVar[dict[StepKind, Callable[[Executor, _Ctx], str]]] = {
        "provision": _provision, "health_check": _health_check, "shift": _shift, "gate": _gate_step,
        "scale": _scale, "drain": _drain, "retire": _retire, "route": _route, "alias": _alias,
        "adapters": _adapters, "adapter_check": _adapter_check,
    }

    def _sample(self, model: str, ep: Endpoints) -> gate_mod.Sample:
        text = self.driver.metrics_text(ep)
        return gate_mod.parse(text, model) if text is not None else gate_mod.Sample()

    def _gate(self, model: str, unit: str, ep: Endpoints, limits: gate_mod.Limits) -> str:
        time.sleep(self.dwell_s)  # let traffic reach the new share
        if not self.driver.alive(ep):
            raise DeployError(f"{unit} is not alive", field="gate")
        text = self.driver.metrics_text(ep)
        if text is None:
            return "no metrics reachable for this target; gate passed on liveness only"
        now = gate_mod.parse(text, model)
        verdict = gate_mod.judge(self._baseline.get(unit, gate_mod.Sample()), now, limits)
        self._baseline[unit] = now
        if not verdict.ok:
            raise DeployError(f"gate failed: {verdict.reason}", field="gate")
        return verdict.reason
