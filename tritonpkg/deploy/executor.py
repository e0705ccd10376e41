"""Carries a plan out through a driver, recording every step in the state file. A failing step runs
the plan's rollback (best effort, each step recorded); a run that a killed command left `running` is
rolled back by the next command (`recover`)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, Field

from tritonpkg.deploy import gate as gate_mod
from tritonpkg.deploy import iodiff
from tritonpkg.deploy.plan import LiveState, Plan, Step, Unit, choose, plan_gc, plan_red_black, plan_rollback, \
    plan_versioned
from tritonpkg.deploy.state import StateStore
from tritonpkg.errors import TritonpkgError


class DeployError(TritonpkgError):
    """A rollout step failed (the rollout was rolled back)."""


class Release(BaseModel):
    """What one deploy brings: a packaged repository holding one version of one model."""

    model: str
    version: int
    repository: Path
    smoke_request: dict[str, Any] | None = None
    traffic_steps: list[int] = Field(default_factory=lambda: [10, 25, 50, 100])
    replicas: int = 1
    gpus: int = 0
    weights: str | None = None
    target_release: str = "24.10"
    strategy: str = "auto"
    schema_: iodiff.Schema | None = Field(default=None, alias="schema")

    model_config = {"populate_by_name": True}


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


def release_from(source: str | Path, workdir: Path, strategy: str | None = None) -> Release:
    """A spec (packaged here into its own repository) or an already packaged repository."""
    from tritonpkg.repository import package_spec
    from tritonpkg.spec import load_spec

    src = Path(source)
    if src.is_dir() and (src / "tritonpkg.lock.json").is_file():
        model_dir, version = iodiff.repository_model(src)
        return Release(model=model_dir.name, version=version, repository=src.absolute(),
                       strategy=strategy or "auto", schema=iodiff.load(model_dir))
    spec = load_spec(src)
    repo = workdir / "releases" / f"{spec.name}-v{spec.version}" / "repository"
    if repo.exists():
        shutil.rmtree(repo)
    package_spec(spec, repo)
    d = spec.deployment
    return Release(model=spec.name, version=spec.version, repository=repo, smoke_request=d.smoke_request,
                   traffic_steps=d.traffic_steps, replicas=d.replicas, gpus=d.gpus,
                   weights=spec.weights_location(), target_release=spec.target_release,
                   strategy=strategy or d.strategy, schema=iodiff.load(repo / spec.name))


def check_triton(http_url: str, model: str, version: int, smoke: dict[str, Any] | None, timeout: float = 30.0) -> str:
    """Server live and ready, the model version ready, then the canary (the spec's smoke request)."""
    from tritonpkg.runtime import rest
    from tritonpkg.smoke import send

    deadline = time.monotonic() + timeout
    probes = ["/v2/health/live", "/v2/health/ready", f"/v2/models/{model}/versions/{version}/ready"]
    for probe in probes:
        while not rest.ok(http_url + probe, timeout=2.0):
            if time.monotonic() > deadline:
                raise DeployError(f"health check {probe} failed on {http_url}", field="health_check")
            time.sleep(0.1)
    if not smoke:
        return "live, ready, model ready (no smoke_request in the spec: no canary)"
    answer = send(http_url, model, smoke, timeout=timeout)
    return f"live, ready, model ready, canary answered {sorted(answer)}"


class Executor:
    def __init__(self, store: StateStore, driver: Any, *, limits: gate_mod.Limits | None = None,
                 dwell_s: float = 1.0, on_step: Callable[[str, Step], None] | None = None) -> None:
        self.store = store
        self.driver = driver
        self.limits = limits or gate_mod.Limits()
        self.dwell_s = dwell_s
        self.on_step = on_step  # (phase, step) before each step: progress output, fault injection in tests
        self._baseline: dict[str, gate_mod.Sample] = {}

    # -- entry points ----------------------------------------------------------------------------
    def plan(self, release: Release) -> Plan:
        """The plan `deploy` would run now, with the strategy auto picked and why."""
        live = self.store.live(release.model)
        strategy, reason = self._strategy(release, live)
        if strategy == "versioned":
            plan = plan_versioned(live, release.version, release.replicas)
        else:
            plan = plan_red_black(live, release.version, release.traffic_steps, release.replicas)
        plan.reason = reason
        return plan

    def deploy(self, release: Release) -> Outcome:
        self.recover(release.model)
        self.store.ensure_deployment(release.model, self.driver.target)
        self._sync_proxy(release.model)
        plan = self.plan(release)
        outcome = self.run(plan, release)
        if outcome.ok:
            self.store.set_deployment(release.model, strategy=plan.strategy)
        return outcome

    def rollback(self, model: str) -> Outcome:
        self.recover(model)
        self._sync_proxy(model)
        plan = plan_rollback(self.store.live(model))
        plan.reason = "tritonpkg rollback"
        return self.run(plan, None)

    def gc(self, model: str, grace_s: float, now: float | None = None) -> list[str]:
        """Retire idle superseded versioned units (see plan_gc); returns the retired unit names."""
        self._sync_proxy(model)
        now = time.time() if now is None else now
        self.refresh_activity(model, now)
        steps = plan_gc(self.store.live(model), now, grace_s)
        for step in steps:
            self._do(model, step, None)
        return [s.unit for s in steps if s.kind == "retire" and s.unit]

    def refresh_activity(self, model: str, now: float) -> None:
        """A unit whose success count grew since the last look was active now."""
        for row in self.store.units_table(model):
            if row["status"] == "retired" or "metrics_url" not in row["endpoints"]:
                continue
            text = self.driver.metrics_text(row["endpoints"])
            if text is None:
                continue
            seen = gate_mod.parse(text, model).success
            ep = row["endpoints"]
            if seen > ep.get("seen", 0.0):
                self.store.update_unit(model, row["name"], last_active=now, endpoints={**ep, "seen": seen})

    def recover(self, model: str | None = None) -> list[int]:
        """Roll back runs a killed command left half-done."""
        done = []
        for run, plan in self.store.running_runs(model):
            self._sync_proxy(plan.model)
            self._rollback(run, plan, "interrupted: rolled back by the next command")
            self.store.finish_run(run, "rolled_back", "interrupted (the command running it stopped)")
            done.append(run)
        return done

    # -- running a plan --------------------------------------------------------------------------
    def run(self, plan: Plan, release: Release | None) -> Outcome:
        started = time.monotonic()
        run = self.store.start_run(plan)
        done: list[str] = []
        self._baseline.clear()
        for idx, step in enumerate(plan.steps):
            try:
                if self.on_step:
                    self.on_step("forward", step)
                message = self._do(plan.model, step, release)
            except Exception as exc:  # any failure: the plan's rollback, then report
                error = f"{step.describe()}: {exc}"
                self.store.record_step(run, idx, "forward", step, "failed", str(exc))
                self._rollback(run, plan, error)
                self.store.finish_run(run, "rolled_back", error)
                return Outcome(ok=False, model=plan.model, strategy=plan.strategy, reason=plan.reason, run=run,
                               seconds=time.monotonic() - started, error=error, rolled_back=True, steps=done)
            self.store.record_step(run, idx, "forward", step, "done", message or "")
            done.append(step.describe() + (f": {message}" if message else ""))
        self.store.finish_run(run, "done")
        return Outcome(ok=True, model=plan.model, strategy=plan.strategy, reason=plan.reason, run=run,
                       seconds=time.monotonic() - started, steps=done)

    def _rollback(self, run: int, plan: Plan, why: str) -> None:
        for idx, step in enumerate(plan.rollback):
            if self.on_step:
                self.on_step("rollback", step)
            try:
                message = self._do(plan.model, step, None)
                self.store.record_step(run, idx, "rollback", step, "done", message or why)
            except Exception as exc:  # keep undoing what can be undone
                self.store.record_step(run, idx, "rollback", step, "failed", str(exc))

    def _sync_proxy(self, model: str) -> None:
        """Give the driver what the state holds: the local proxy's facts, the kubernetes route's picture."""
        dep = self.store.deployment(model)
        if dep is None:
            return
        if hasattr(self.driver, "sync"):
            self.driver.sync(model, self.store.units_table(model), dep.get("alias"))
        if dep["info"].get("proxy") and not self.driver.proxy:
            self.driver.proxy = dict(dep["info"]["proxy"])

    def _save_proxy(self, model: str) -> None:
        if getattr(self.driver, "proxy", None):
            dep = self.store.deployment(model) or {"info": {}}
            self.store.set_deployment(model, info={**dep["info"], "proxy": self.driver.proxy})

    def _strategy(self, release: Release, live: LiveState) -> tuple[str, str]:
        if release.strategy != "auto":
            return choose(release.strategy, None, [])
        current = live.serving()
        old = self.store.endpoints(live.model, current.name).get("schema") if current else None
        if old is None or release.schema_ is None:
            return choose("auto", None, [])
        d = iodiff.diff(iodiff.Schema.model_validate(old), release.schema_)
        return choose("auto", d.compatible, d.reasons())

    def _do(self, model: str, step: Step, release: Release | None) -> str:
        kind = step.kind
        ep = self.store.endpoints(model, step.unit) if step.unit else {}
        if kind == "provision":
            assert release is not None and step.unit and step.version is not None
            unit = Unit(name=step.unit, version=step.version, color=step.color,
                        replicas=step.replicas.get(step.unit, release.replicas), status="provisioning",
                        last_active=time.time())
            self.store.put_unit(model, unit)
            taken = {r["endpoints"]["slot"] for r in self.store.units_table(model)
                     if r["status"] != "retired" and "slot" in r["endpoints"]}
            endpoints = self.driver.provision(model, unit, release, taken)
            schema = release.schema_.model_dump() if release.schema_ else None
            self.store.update_unit(model, step.unit, status="inactive", endpoints={**endpoints, "schema": schema})
            self._save_proxy(model)
            return f"up at {endpoints.get('http_url', endpoints.get('name', ''))}"
        if kind == "health_check":
            version = next(u.version for u in self.store.live(model).units if u.name == step.unit)
            return self.driver.health(model, version, ep, release.smoke_request if release else None)
        if kind == "shift":
            weights = {name: (self.store.endpoints(model, name), w) for name, w in step.weights.items()}
            self.driver.set_weights(weights)
            for name, w in step.weights.items():
                self.store.update_unit(model, name, weight=w, status="serving" if w > 0 else "inactive")
                if w > 0:
                    self._baseline[name] = self._sample(model, weights[name][0])
            return ""
        if kind == "gate":
            return self._gate(model, step.unit or "", ep)
        if kind == "scale":
            return self.driver.scale(step.replicas) or ""
        if kind == "drain":
            self.driver.drain(ep)
            self.store.update_unit(model, step.unit, weight=0, status="inactive")  # type: ignore[arg-type]
            return ""
        if kind == "retire":
            note = self.driver.retire(ep)  # the local driver says when a recorded group was not ours to stop
            self.store.update_unit(model, step.unit, weight=0, status="retired", routed=False)  # type: ignore[arg-type]
            return note if isinstance(note, str) else ""
        if kind == "route":
            self.driver.route(ep, str(step.version))
            self.store.update_unit(model, step.unit, routed=True)  # type: ignore[arg-type]
            return f"version {step.version} -> {step.unit}"
        if kind == "alias":
            if ep:
                self.driver.route(ep, "current")
            self.store.set_deployment(model, alias=step.unit)
            return f"current = {step.unit}"
        raise DeployError(f"unknown step kind {kind!r}")  # pragma: no cover - Step's Literal forbids it

    def _sample(self, model: str, ep: dict[str, Any]) -> gate_mod.Sample:
        text = self.driver.metrics_text(ep)
        return gate_mod.parse(text, model) if text is not None else gate_mod.Sample()

    def _gate(self, model: str, unit: str, ep: dict[str, Any]) -> str:
        time.sleep(self.dwell_s)  # let traffic reach the new share
        if not self.driver.alive(ep):
            raise DeployError(f"{unit} is not alive", field="gate")
        text = self.driver.metrics_text(ep)
        if text is None:
            return "no metrics reachable for this target; gate passed on liveness only"
        now = gate_mod.parse(text, model)
        verdict = gate_mod.judge(self._baseline.get(unit, gate_mod.Sample()), now, self.limits)
        self._baseline[unit] = now
        if not verdict.ok:
            raise DeployError(f"gate failed: {verdict.reason}", field="gate")
        return verdict.reason
