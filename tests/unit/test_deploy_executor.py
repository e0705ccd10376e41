"""The executor against the Driver protocol, with a driver that records every call (no process): each step
kind reaches the driver method of its name with the unit's recorded endpoints, and a failing step runs the
plan's rollback, recorded in the state file."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, get_args

import pytest

from tritonpkg.deploy.driver import AdapterRollouts, Driver, Endpoints, Entry, OnStarted
from tritonpkg.deploy.executor import Executor, Recorded, Release
from tritonpkg.deploy.plan import Plan, Step, StepKind, Unit
from tritonpkg.deploy.state import StateStore

METRICS = ('nv_inference_request_success{{model="m",version="1"}} {n}\n'
           'nv_inference_request_failure{{model="m",version="1"}} 0\n')


class Recorder:
    """Units are names; `fail` maps a method name to the error it raises the first time it is called."""

    target = "fake"

    def __init__(self, fail: Mapping[str, Exception] | None = None) -> None:
        self.proxy: dict[str, Any] = {}
        self.calls: list[str] = []
        self.fail = dict(fail or {})
        self.served: dict[str, int] = {}  # unit -> success count its metrics report

    def _call(self, name: str, detail: str) -> None:
        self.calls.append(f"{name} {detail}".strip())
        if name in self.fail:
            raise self.fail.pop(name)

    def sync(self, model: str, units: Sequence[Mapping[str, Any]], alias: str | None) -> None:
        self.calls.append(f"sync {model} {len(units)} {alias}")

    def provision(self, model: str, unit: Unit, release: Release, taken_slots: set[int],
                  on_started: OnStarted) -> Endpoints:
        on_started(Endpoints(name=unit.name, pgid=4242))  # what a killed command must find
        self._call("provision", unit.name)
        return Endpoints(name=unit.name, pgid=4242, http_url=f"http://{unit.name}")

    def health_check(self, model: str, version: int, ep: Endpoints, smoke: dict[str, Any] | None) -> str:
        self._call("health_check", f"{ep.name} v{version} smoke={smoke}")
        return "healthy"

    def shift(self, weights: Mapping[str, tuple[Endpoints, int]]) -> None:
        self._call("shift", " ".join(f"{ep.name}={w}" for ep, w in weights.values()))

    def alive(self, ep: Endpoints) -> bool:
        self._call("alive", str(ep.name))
        return True

    def metrics_text(self, ep: Endpoints) -> str | None:
        self.served[str(ep.name)] = self.served.get(str(ep.name), 0) + 5  # five new requests per look
        return METRICS.format(n=self.served[str(ep.name)])

    def scale(self, replicas: Mapping[str, int]) -> str:
        self._call("scale", " ".join(f"{u}={n}" for u, n in replicas.items()))
        return "scaled"

    def drain(self, ep: Endpoints) -> None:
        self._call("drain", str(ep.name))

    def retire(self, ep: Endpoints) -> str:
        self._call("retire", f"{ep.name} pgid={ep.pgid}")
        return ""

    def route(self, ep: Endpoints, version: str) -> None:
        self._call("route", f"{ep.name} {version}")

    def alias(self, ep: Endpoints) -> None:
        self._call("alias", str(ep.name))

    def adapters(self, model: str, version: int, ep: Endpoints, listing: Mapping[str, str]) -> dict[str, str]:
        self._call("adapters", f"{ep.name} v{version} {sorted(listing)}")
        return dict(listing)

    def adapter_check(self, model: str, ep: Endpoints, smoke: dict[str, Any] | None, name: str) -> str:
        self._call("adapter_check", f"{ep.name} {name}")
        return f"{name} answered"

    def entry(self) -> Entry:
        return Entry(route="fake")

    def teardown(self, units: Sequence[Endpoints]) -> list[str]:
        return [f"stopped {ep.name}" for ep in units]


def _implements(driver: Recorder) -> tuple[Driver, AdapterRollouts]:
    return driver, driver  # mypy checks the recorder against the protocols


def _release(tmp_path: Path, version: int, **kw: Any) -> Release:
    return Release(model="m", version=version, repository=tmp_path, strategy="red-black", traffic_steps=[50, 100],
                   smoke_request={"X": [1.0]}, **kw)


def test_every_step_kind_has_a_handler() -> None:
    assert set(Executor._STEPS) == set(get_args(StepKind))


def test_each_step_kind_reaches_the_driver_method_of_its_name(tmp_path: Path) -> None:
    store, driver = StateStore(tmp_path / "s.db"), Recorder()
    store.ensure_deployment("m", "fake")
    every = [Step(kind="provision", unit="m-v3", version=3, replicas={"m-v3": 1}),
             Step(kind="health_check", unit="m-v3"),
             Step(kind="shift", weights={"m-v3": 100}),
             Step(kind="gate", unit="m-v3"),
             Step(kind="scale", replicas={"m-v3": 2}),
             Step(kind="route", unit="m-v3", version=3),
             Step(kind="alias", unit="m-v3"),
             Step(kind="adapters", unit="m-v3", adapters={"a": "/x/a", "a@4": "/x/a"}),
             Step(kind="adapter_check", unit="m-v3", names=["a@4"]),
             Step(kind="drain", unit="m-v3"),
             Step(kind="retire", unit="m-v3")]
    assert {s.kind for s in every} == set(get_args(StepKind))
    plan = Plan(model="m", strategy="versioned", new_unit="m-v3", steps=every, rollback=[])
    out = Executor(store, driver, dwell_s=0).run(plan, _release(tmp_path, 3))
    assert out.ok, out.error
    assert driver.calls == ["provision m-v3", "health_check m-v3 v3 smoke={'X': [1.0]}", "shift m-v3=100",
                            "alive m-v3", "scale m-v3=2", "route m-v3 3", "alias m-v3",
                            "adapters m-v3 v3 ['a', 'a@4']", "adapter_check m-v3 a@4", "drain m-v3",
                            "retire m-v3 pgid=4242"]
    assert store.endpoints("m", "m-v3")["adapters"] == {"a": "/x/a", "a@4": "/x/a"}  # status shows them
    assert out.steps[0] == "provision m-v3: up at http://m-v3"
    assert out.steps[3].startswith("gate m-v3: ") and "5 requests" in out.steps[3]  # judged on the metrics
    assert out.steps[5:7] == ["route m-v3: version 3 -> m-v3", "alias m-v3: current = m-v3"]
    [unit] = store.units_table("m")
    assert (unit["status"], unit["weight"], unit["routed"]) == ("retired", 0, False)
    assert unit["endpoints"]["http_url"] == "http://m-v3" and (store.deployment("m") or {})["alias"] == "m-v3"
    assert [r["status"] for r in store.runs("m")] == ["done"]


@pytest.mark.parametrize("failing", ["provision", "health_check", "shift", "alive"])
def test_a_failing_step_rolls_back_to_the_live_unit(tmp_path: Path, failing: str) -> None:
    store = StateStore(tmp_path / "s.db")
    assert Executor(store, Recorder(), dwell_s=0).deploy(_release(tmp_path, 1)).ok
    driver = Recorder(fail={failing: RuntimeError(f"{failing} broke")})
    out = Executor(store, driver, dwell_s=0).deploy(_release(tmp_path, 2))
    assert not out.ok and out.rolled_back and f"{failing} broke" in (out.error or "")
    rollback = driver.calls[driver.calls.index(next(c for c in driver.calls if c.startswith(failing))) + 1:]
    assert rollback == ["shift m-blue=100 m-green=0", "drain m-green", "retire m-green pgid=4242", "alias m-blue"]
    units = {u["name"]: (u["status"], u["weight"]) for u in store.units_table("m")}
    assert units == {"m-blue": ("serving", 100), "m-green": ("retired", 0)}
    assert (store.deployment("m") or {})["alias"] == "m-blue"
    [last, _] = store.runs("m")
    assert last["status"] == "rolled_back" and failing in last["error"]
    steps = store.steps(last["id"])
    assert [(s["phase"], s["status"]) for s in steps if s["status"] == "failed"] == [("forward", "failed")]
    assert [s["kind"] for s in steps if s["phase"] == "rollback"] == ["shift", "drain", "retire", "alias"]


def test_what_provision_records_before_it_returns_reaches_the_rollback(tmp_path: Path) -> None:
    """A unit whose start failed after its process group was recorded is retired with that group."""
    store = StateStore(tmp_path / "s.db")
    driver = Recorder(fail={"provision": RuntimeError("Triton exited")})
    out = Executor(store, driver, dwell_s=0).deploy(_release(tmp_path, 1))
    assert not out.ok
    assert driver.calls[-1] == "retire m-blue pgid=4242"
    assert store.units_table("m")[0]["endpoints"] == {"name": "m-blue", "pgid": 4242}


def test_endpoints_round_trip_the_state_files_json() -> None:
    facts = {"slot": 2, "pgid": 7, "pg_start": 99, "pg_exe": "/bin/x", "schema": {"inputs": []}, "future": [1]}
    ep = Endpoints.of(facts)
    assert (ep.slot, ep.facts()) == (2, facts)  # a field it does not know (the executor's too) is kept
    assert Recorded.model_validate(facts).facts() == {"schema": {"inputs": []}}  # the executor's own, apart


def test_gc_retires_an_idle_superseded_version_and_keeps_one_whose_requests_grew(tmp_path: Path) -> None:
    """A unit whose success count grew since the last look was active now (recorded, then kept); the latest and the
    one taking unversioned traffic are always kept; the idle superseded one is drained and retired."""
    store = StateStore(tmp_path / "s.db")
    store.ensure_deployment("m", "fake")
    for unit, endpoints in [(Unit(name="m-v1", version=1, weight=100, status="serving"), {"name": "m-v1"}),
                            (Unit(name="m-v2", version=2, status="inactive", last_active=0.0),
                             {"name": "m-v2", "metrics_url": "http://m-v2", "seen": 100.0}),  # 5 now: no growth
                            (Unit(name="m-v3", version=3, status="inactive", last_active=0.0),
                             {"name": "m-v3", "metrics_url": "http://m-v3"}),
                            (Unit(name="m-v4", version=4, status="inactive", last_active=0.0), {"name": "m-v4"})]:
        store.put_unit("m", unit, endpoints)
    driver = Recorder()
    assert Executor(store, driver, dwell_s=0).gc("m", grace_s=60, now=1000.0) == ["m-v2"]
    assert [c for c in driver.calls if not c.startswith("sync")] == ["drain m-v2", "retire m-v2 pgid=None"]
    assert store.endpoints("m", "m-v3")["seen"] == 5 and store.live("m").unit("m-v3").last_active == 1000.0
    assert [u.name for u in store.live("m").units] == ["m-v1", "m-v3", "m-v4"]
