"""A unit's engine dies behind the local target's HAProxy, driven through the real CLI: the tiny LLM deployed as v1,
then v2 rolling out red-black and held at 50% (a long --dwell), so two units share the traffic. Under a unary client
loop through HAProxy, v1's EngineCore is SIGKILLed: HAProxy must mark that unit DOWN (read from its admin socket)
within its check window, no request sent after the unit's model left READY may fail (the dead unit answers 404
once its model is unloaded, which HAProxy retries on the other unit), `deploy status` must show the unit's engine
state, and the unit's watcher (restart policy) must bring the model back so HAProxy marks it UP again. Teardown
leaves nothing.

Only a request that reaches the engine between its death and the model leaving READY (the backend's detection and
self-unload; at most 2 s, issue 44's bar) fails, with the backend's "not ready" error: Triton 2.51's HTTP generate
endpoint answers every error a model sends with 400 (measured: a Python-backend model's UNAVAILABLE is 503 on
/infer, 400 on /generate), which no proxy may replay, and a decoupled model has no /infer over HTTP. Once the model
is unloaded the unit answers 404, which HAProxy replays on the other unit."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import tritonpkg
from tests.support.paths import EXAMPLES
from tests.support.procs import group_pids
from tritonpkg.deploy.drivers import haproxy
from tritonpkg.proc import rest

# alone: its readiness bar (2 s) is not measured beside another module (tests/support/schedule.py)
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.alone]

EXAMPLE = EXAMPLES / "tiny-llm" / "tritonpkg.yaml"
MODEL = "tiny_llm"
CHECKS = haproxy.CheckPolicy()
# readiness falls within ~1 s of the kill (bench/engine_death.py); HAProxy then needs `fall` failed checks
CHECK_WINDOW_S = 1.0 + CHECKS.fall * CHECKS.fast_interval_ms / 1000 + CHECKS.interval_ms / 1000
CLIENTS = 3
ENV = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}


def write_spec(folder: Path, version: int, weights: Path) -> Path:
    spec = yaml.safe_load(EXAMPLE.read_text())
    spec.update(version=version, weights=str(weights))
    spec["deployment"].update(min_requests=0, traffic_steps=[50, 100])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tritonpkg.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return folder / "tritonpkg.yaml"


def tp(state: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(tritonpkg(*args, "--state", str(state)), check=False, capture_output=True, text=True,
                         timeout=900, env=ENV)
    assert not check or res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res


def status(state: Path) -> dict[str, Any]:
    [report] = json.loads(tp(state, "status", MODEL, "--json").stdout)
    return report


def slot_status(admin: haproxy.Admin, slot: int) -> str:
    """HAProxy's view of the slot's checked server in the live HTTP backend (UP, DOWN, ...)."""
    return next((s.get("status", "") for s in admin.stats()
                 if s.get("pxname") == "live_http" and s.get("svname") == f"s{slot}"), "")


def engine_cores(pgid: int) -> list[Any]:
    import psutil

    return [p for p in psutil.Process(pgid).children(recursive=True)
            if p.cmdline() and p.cmdline()[0].startswith("VLLM::EngineCore")]


class Load:
    """Unary generate requests back to back through HAProxy from CLIENTS clients; each outcome with its start and
    end time."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.results: list[tuple[float, float, str | None]] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(CLIENTS)]

    def _loop(self) -> None:
        body = json.dumps({"text_input": "hello", "parameters": {"max_tokens": 2, "temperature": 0}}).encode()
        while not self.stop.is_set():
            req = urllib.request.Request(f"{self.url}/v2/models/{MODEL}/generate", data=body, method="POST")
            error, started = None, time.monotonic()
            try:
                with urllib.request.urlopen(req, timeout=60) as resp:
                    if "text_output" not in json.loads(resp.read()):
                        error = "no text_output"
            except urllib.error.HTTPError as exc:
                error = f"{exc.code} {exc.read()[:200]!r}"
            except OSError as exc:
                error = f"{type(exc).__name__}: {exc}"
            self.results.append((started, time.monotonic(), error))
            time.sleep(0.02)

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=90)


def test_engine_killed_under_load_unit_goes_down_traffic_stays_and_it_comes_back(tmp_path, deploy_runtime,
                                                                                tiny_llm_weights):
    state = tmp_path / "state"
    tp(state, "deploy", str(write_spec(tmp_path / "v1", 1, tiny_llm_weights)), "--json")
    rollout = subprocess.Popen(tritonpkg("deploy", str(write_spec(tmp_path / "v2", 2, tiny_llm_weights)),
                                         "--state", str(state), "--dwell", "900", "--json"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    groups: list[int] = []
    try:
        deadline = time.monotonic() + 600
        while True:
            report = status(state)
            live = {u["color"]: u for u in report["units"] if u["status"] != "retired"}
            if len(live) == 2 and all(u["weight"] == 50 for u in live.values()):
                break
            assert rollout.poll() is None and time.monotonic() < deadline, report
            time.sleep(2)
        for u in live.values():
            groups += [u["endpoints"]["pgid"], u["endpoints"]["watch_pgid"]]
        old = next(u for u in live.values() if u["version"] == 1)
        slot, pgid = old["endpoints"]["slot"], old["endpoints"]["pgid"]
        from tritonpkg.deploy.state import StateStore

        proxy = StateStore(state / "state.db").deployment(MODEL)["info"]["proxy"]
        admin = haproxy.Admin(proxy["socket"])
        deadline = time.monotonic() + 60  # the new unit's slot turns UP after HAProxy's `rise` checks
        while not all(slot_status(admin, u["endpoints"]["slot"]) == "UP" for u in live.values()):
            assert time.monotonic() < deadline, [slot_status(admin, u["endpoints"]["slot"]) for u in live.values()]
            time.sleep(0.2)
        with Load(proxy["http_url"]) as load:
            time.sleep(3)
            cores = engine_cores(pgid)
            assert cores
            killed = time.monotonic()
            for core in cores:
                core.send_signal(signal.SIGKILL)
            ready_url = f"{old['endpoints']['http_url']}/v2/models/{MODEL}/ready"
            not_ready = None  # when the unit's own model readiness fell (the backend saw the death, unloaded it)
            while slot_status(admin, slot) != "DOWN":
                assert time.monotonic() - killed < 30, slot_status(admin, slot)
                if not_ready is None and not rest.ok(ready_url, timeout=1.0):
                    not_ready = time.monotonic()
                time.sleep(0.05)
            down_after = time.monotonic() - killed
            not_ready = not_ready or time.monotonic()
            during = status(state)
            engine = next(u["engine"] for u in during["units"] if u["name"] == old["name"])
            deadline = time.monotonic() + 600
            while slot_status(admin, slot) != "UP":
                assert time.monotonic() < deadline, "the unit never came back UP"
                time.sleep(0.5)
            up_after = time.monotonic() - killed
            time.sleep(3)  # traffic on both units again
        after = status(state)
    finally:
        rollout.send_signal(signal.SIGKILL)
        rollout.wait(timeout=30)
        tp(state, "deploy", MODEL, "--teardown", check=False)
    try:
        deadline = time.monotonic() + 60
        while any(group_pids(g) for g in groups) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [g for g in groups if group_pids(g)] == []
    finally:
        for g in groups:  # belt and braces: never leave a server behind
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(g, signal.SIGKILL)
    before = [e for _, end, e in load.results if e and end < killed]
    dying = [e for start, end, e in load.results if e and start < not_ready and end >= killed]
    sent_after = [e for start, _, e in load.results if start >= not_ready]
    failed_after = [e for e in sent_after if e]
    print(f"\n{len(load.results)} requests through HAProxy; the unit's model not ready {not_ready - killed:.2f} s "
          f"after the kill, its slot DOWN {down_after:.2f} s after, UP again {up_after:.1f} s after; failed: "
          f"{len(before)} before the kill, {len(dying)} sent before the model left READY, {len(failed_after)} of "
          f"{len(sent_after)} sent after; status during the death: {engine!r}")
    print("failures while the engine was dying, by kind:", Counter(e[:60] for e in dying))
    assert not before and not failed_after, (before, failed_after)
    assert len(sent_after) > 50, len(sent_after)  # the loop ran on through the death and the restart
    assert not_ready - killed <= 2.0, not_ready - killed  # issue 44's readiness bar
    assert all("is not ready" in e for e in dying), dying
    assert down_after <= CHECK_WINDOW_S, down_after
    assert engine.startswith("not ready") and MODEL in engine, engine
    unit = next(u for u in after["units"] if u["name"] == old["name"])
    assert unit["engine"].startswith("ready") and "restarted" in unit["engine"], unit["engine"]
