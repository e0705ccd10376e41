"""The gate's minimum of observed requests, where it comes from, and an interrupted run's recovery as part
of the next command's outcome: the executor against a driver that records what it is told (no process)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tritonpkg.deploy import gate
from tritonpkg.deploy.driver import Driver, Endpoints, Entry, OnStarted
from tritonpkg.deploy.executor import Executor
from tritonpkg.deploy.plan import Unit, plan_red_black
from tritonpkg.deploy.release import Release, release_from
from tritonpkg.deploy.state import StateStore


def test_a_gate_that_saw_no_request_does_not_pass() -> None:
    quiet = gate.judge(gate.Sample(success=5), gate.Sample(success=5), gate.Limits())
    assert not quiet.ok and quiet.reason == "only 0 requests reached the new version (< 1)"
    assert gate.judge(gate.Sample(success=5), gate.Sample(success=6), gate.Limits()).ok
    assert gate.judge(gate.Sample(), gate.Sample(), gate.Limits(min_requests=0)).ok  # liveness only, by choice
    with pytest.raises(ValueError, match="min_requests"):
        gate.Limits(min_requests=-1)


def test_the_command_line_minimum_wins_over_the_spec_which_wins_over_the_default(write_spec: Any,
                                                                                  tmp_path: Path) -> None:
    path = write_spec({"name": "m", "version": 1, "kind": "python", "deployment": {"min_requests": 50},
                       "python": {"template": "custom", "parameters": {"module": "h.py"}, "files": ["h.py"],
                                  "inputs": [{"name": "X", "data_type": "FP32", "dims": [2]}],
                                  "outputs": [{"name": "Y", "data_type": "FP32", "dims": [2]}]}},
                      extra_files={"h.py": "def model(i):\n    return i\n"})
    release = release_from(path, tmp_path / "work")
    store = StateStore(tmp_path / "s.db")
    assert release.min_requests == 50
    assert Executor(store, Fake()).limits_for(release).min_requests == 50
    assert Executor(store, Fake(), limits=gate.Limits(min_requests=0)).limits_for(release).min_requests == 0
    plain = release.model_copy(update={"min_requests": None})
    assert Executor(store, Fake()).limits_for(plain).min_requests == gate.DEFAULT_MIN_REQUESTS


class Fake:
    """A driver whose units are names: every call is recorded, nothing runs."""

    target = "fake"

    def __init__(self) -> None:
        self.proxy: dict[str, Any] = {}
        self.calls: list[str] = []

    def sync(self, model: str, units: Sequence[Mapping[str, Any]], alias: str | None) -> None:
        pass

    def provision(self, model: str, unit: Unit, release: Release, taken_slots: set[int],
                  on_started: OnStarted) -> Endpoints:
        self.calls.append(f"provision {unit.name}")
        on_started(Endpoints(name=unit.name))
        return Endpoints(name=unit.name)

    def health_check(self, model: str, version: int, ep: Endpoints, smoke: dict[str, Any] | None) -> str:
        return "ok"

    def shift(self, weights: Mapping[str, tuple[Endpoints, int]]) -> None:
        self.calls.append("weights " + " ".join(f"{ep.name}={w}" for ep, w in weights.values()))

    def drain(self, ep: Endpoints) -> None:
        self.calls.append(f"drain {ep.name}")

    def retire(self, ep: Endpoints) -> str:
        self.calls.append(f"retire {ep.name}")
        return ""

    def alive(self, ep: Endpoints) -> bool:
        return True

    def metrics_text(self, ep: Endpoints) -> str | None:
        return None

    def route(self, ep: Endpoints, version: str) -> None:
        self.calls.append(f"route {ep.name} {version}")

    def alias(self, ep: Endpoints) -> None:
        self.calls.append(f"alias {ep.name}")

    def scale(self, replicas: Mapping[str, int]) -> str:
        return ""

    def entry(self) -> Entry:
        return Entry()

    def teardown(self, units: Sequence[Endpoints]) -> list[str]:
        return []


def _implements(driver: Fake) -> Driver:
    return driver  # mypy checks the fake against the protocol


def _interrupted(store: StateStore) -> int:
    """m-blue (v1) serving, and a v2 run that stopped at 25% on m-green with its run left 'running'."""
    store.ensure_deployment("m", "fake")
    store.put_unit("m", Unit(name="m-blue", version=1, color="blue", weight=100, status="serving"), {"name": "m-blue"})
    plan = plan_red_black(store.live("m"), 2, [25, 100])
    run = store.start_run(plan)
    store.put_unit("m", Unit(name="m-green", version=2, color="green", weight=25, status="serving"),
                   {"name": "m-green"})
    store.update_unit("m", "m-blue", weight=75)
    return run


def test_the_next_deploy_reports_the_recovery_it_ran(tmp_path: Path) -> None:
    store, driver = StateStore(tmp_path / "s.db"), Fake()
    run = _interrupted(store)
    out = Executor(store, driver, dwell_s=0).deploy(
        Release(model="m", version=3, repository=tmp_path, strategy="red-black", traffic_steps=[100]))
    assert out.ok, out.error
    [rec] = out.recovered
    assert (rec.run, rec.new_unit) == (run, "m-green")
    assert rec.steps == ["shift m-blue 100% / m-green 0%", "drain m-green", "retire m-green",
                         "alias m-blue: current = m-blue"]
    assert driver.calls[:3] == ["weights m-blue=100 m-green=0", "drain m-green", "retire m-green"]
    assert "provision m-green" in driver.calls  # v3 took the freed color
    assert out.model_dump()["recovered"][0]["run"] == run  # what --json prints


def test_a_rollback_that_only_had_the_interrupted_run_to_undo_says_so(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "s.db")
    run = _interrupted(store)
    out = Executor(store, Fake()).rollback("m")
    assert out.ok and [r.run for r in out.recovered] == [run] and out.steps == []
    assert "interrupted run was rolled back" in out.reason
    assert {u["name"]: u["status"] for u in store.units_table("m")} == {"m-blue": "serving", "m-green": "retired"}
