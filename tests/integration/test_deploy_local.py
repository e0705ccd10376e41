"""Rollouts on the local target with real tritonservers (Python-backend models, ~2 s start-ups) behind a
real HAProxy, under steady load through the proxy. Every process is stopped by process group at the end."""

from __future__ import annotations

import http.client
import json
import os
import signal
import threading
import time

import pytest

from tests.support.deploy import make_executor
from tests.support.specs import write_deploy_spec

pytestmark = pytest.mark.integration

RATE = 60.0  # requests/s the load generator aims at (two threads)


class Load:
    """Steady inference traffic through the proxy on loopback, bounded in count and time; every answer
    is recorded as (HTTP status, model_version)."""

    def __init__(self, http_url: str, model: str, *, path_version: int | None = None, input_name: str = "X",
                 rate: float = RATE, threads: int = 2, max_requests: int = 6000, max_seconds: float = 60.0) -> None:
        self.host = http_url.removeprefix("http://")
        v = f"/versions/{path_version}" if path_version else ""
        self.path = f"/v2/models/{model}{v}/infer"
        self.body = json.dumps({"inputs": [{"name": input_name, "shape": [2], "datatype": "FP32",
                                            "data": [5.0, 6.0]}]}).encode()
        self.interval = threads / rate
        self.max_requests, self.max_seconds = max_requests, max_seconds
        self.results: list[tuple[int, str]] = []
        self.errors: list[str] = []
        self._sent = 0  # requests begun: each thread takes one under the lock, so no more than max_requests
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def __enter__(self) -> Load:
        self.started = time.monotonic()
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)
        self.seconds = time.monotonic() - self.started

    def _run(self) -> None:
        conn = http.client.HTTPConnection(self.host, timeout=30)
        next_at = time.monotonic()
        deadline = time.monotonic() + self.max_seconds
        while not self._stop.is_set() and time.monotonic() < deadline:
            with self._lock:
                if self._sent >= self.max_requests:
                    break
                self._sent += 1
            try:
                conn.request("POST", self.path, self.body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
                version = json.loads(data).get("model_version", "") if resp.status == 200 else data.decode()[:200]
                with self._lock:
                    self.results.append((resp.status, version))
            except Exception as exc:  # a failed request: recorded, connection renewed
                with self._lock:
                    self.results.append((0, f"{type(exc).__name__}: {exc}"))
                conn.close()
                conn = http.client.HTTPConnection(self.host, timeout=30)
            next_at += self.interval
            time.sleep(max(0.0, next_at - time.monotonic()))
        conn.close()

    @property
    def failed(self) -> list[tuple[int, str]]:
        return [r for r in self.results if r[0] != 200]

    def versions(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for status, v in self.results:
            if status == 200:
                out[v] = out.get(v, 0) + 1
        return out


def served_versions(http_url: str, model: str, n: int = 20, **kw) -> dict[str, int]:
    with Load(http_url, model, max_requests=n, **kw) as load:
        while len(load.results) < n and time.monotonic() - load.started < 20:
            time.sleep(0.05)
    assert not load.failed, load.failed[:3]
    return load.versions()


def grpc_version(grpc_url: str, model: str, input_name: str, headers: dict | None = None) -> str:
    """One gRPC inference through HAProxy; the model version that answered."""
    import numpy as np
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(grpc_url)
    try:
        tensor = grpcclient.InferInput(input_name, [2], "FP32")
        tensor.set_data_from_numpy(np.array([1.0, 2.0], dtype=np.float32))
        return client.infer(model, [tensor], headers=headers).get_response().model_version
    finally:
        client.close()


REPORT: list[str] = []


@pytest.fixture(scope="module")
def red_black(tmp_path_factory, deploy_runtime):
    """Model `adder` v1 deployed behind HAProxy; the tests below try v2 rollouts against it."""
    from tritonpkg.deploy.release import release_from

    root = tmp_path_factory.mktemp("redblack")
    hooks: dict = {}
    ex, driver, store = make_executor(root, deploy_runtime,
                                      on_step=lambda phase, step: hooks.get("on_step", lambda *a: None)(phase, step))  # noqa: PLW0108 - looked up per step: tests set and pop the hook later
    try:
        out = ex.deploy(release_from(write_deploy_spec(root, "adder", 1), root / "work"))
        assert out.ok, out.error
        yield root, ex, driver, store, hooks
    finally:
        driver.shutdown([r["endpoints"] for r in store.units_table("adder") if r["status"] != "retired"])


def _assert_rolled_back(ex, driver, store, load, out, scenario: str) -> None:
    REPORT.append(f"{scenario}: {out.seconds:.1f} s, {len(load.results)} requests, {len(load.failed)} failed")
    assert not out.ok and out.rolled_back, out
    assert len(load.results) >= 50, len(load.results)
    assert load.failed == [], load.failed[:5]
    units = {r["name"]: r for r in store.units_table("adder")}
    assert units["adder-green"]["status"] == "retired"
    assert units["adder-blue"]["weight"] == 100
    assert served_versions(driver.proxy["http_url"], "adder") == {"1": 20}  # old version serves 100%
    assert store.deployment("adder")["alias"] == "adder-blue"


def test_new_version_crashing_at_start_rolls_back(red_black):
    from tritonpkg.deploy.release import release_from

    root, ex, driver, store, _hooks = red_black
    spec = write_deploy_spec(root, "adder", 2, prelude='raise RuntimeError("broken at load")')
    with Load(driver.proxy["http_url"], "adder") as load:
        time.sleep(0.5)
        out = ex.deploy(release_from(spec, root / "work"))
        time.sleep(0.5)
    assert "provision" in out.error
    _assert_rolled_back(ex, driver, store, load, out, "crash at start")


def test_new_version_failing_the_canary_rolls_back(red_black):
    from tritonpkg.deploy.release import release_from

    root, ex, driver, store, _hooks = red_black
    canary_fails = 'if float(x.reshape(-1)[0]) == 1.0: raise ValueError("canary says no")'
    spec = write_deploy_spec(root, "adder", 2, check=canary_fails)
    with Load(driver.proxy["http_url"], "adder") as load:
        time.sleep(0.5)
        out = ex.deploy(release_from(spec, root / "work"))
        time.sleep(0.5)
    assert "health_check" in out.error and "canary says no" in out.error
    _assert_rolled_back(ex, driver, store, load, out, "canary fails")


def test_new_version_killed_mid_shift_rolls_back(red_black):
    from tritonpkg.deploy.release import release_from

    root, ex, driver, store, hooks = red_black

    def kill_at_second_shift(phase, step):
        if phase == "forward" and step.kind == "shift" and step.weights.get("adder-green") == 50:
            os.killpg(store.endpoints("adder", "adder-green")["pgid"], signal.SIGKILL)

    hooks["on_step"] = kill_at_second_shift
    try:
        with Load(driver.proxy["http_url"], "adder") as load:
            time.sleep(0.5)
            out = ex.deploy(release_from(write_deploy_spec(root, "adder", 2), root / "work"))
            time.sleep(0.5)
    finally:
        hooks.pop("on_step")
    assert "not alive" in out.error or "gate" in out.error, out.error
    assert load.versions().get("2", 0) > 0  # the new version did take traffic before it died
    _assert_rolled_back(ex, driver, store, load, out, "killed mid-shift")


def test_interrupted_deploy_is_rolled_back_by_the_next_command(red_black):
    from tritonpkg.deploy.release import release_from

    root, ex, driver, store, hooks = red_black

    def interrupt(phase, step):
        if phase == "forward" and step.kind == "gate":
            time.sleep(1.0)  # traffic reaches the new unit first
            raise KeyboardInterrupt  # the command dies mid-shift: nothing undone, the run stays 'running'

    hooks["on_step"] = interrupt
    with Load(driver.proxy["http_url"], "adder") as load:
        time.sleep(0.5)
        try:
            with pytest.raises(KeyboardInterrupt):
                ex.deploy(release_from(write_deploy_spec(root, "adder", 2), root / "work"))
        finally:
            hooks.pop("on_step")
        assert [p.new_unit for _, p in store.running_runs("adder")] == ["adder-green"]
        assert store.live("adder").unit("adder-green").weight == 25
        out = ex.rollback("adder")  # an interrupted run is what the next command undoes first
        time.sleep(0.5)
    assert out.ok and len(out.recovered) == 1 and store.running_runs() == []
    assert out.recovered[0].new_unit == "adder-green" and out.recovered[0].steps[0].startswith("shift adder-blue 100%")
    assert store.runs("adder")[0]["status"] == "rolled_back"
    assert load.failed == [] and load.versions().get("2", 0) > 0
    REPORT.append(f"interrupted, recovered: {len(load.results)} requests, {len(load.failed)} failed")
    assert served_versions(driver.proxy["http_url"], "adder") == {"1": 20}


def _files(folder) -> dict[str, tuple[str, int, int]]:
    """path -> (sha256, inode, mtime): a file rewritten with the same bytes still counts as changed."""
    import hashlib
    from pathlib import Path

    return {str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_ino,
                                         p.stat().st_mtime_ns)
            for p in sorted(Path(folder).rglob("*")) if p.is_file()}


def _proxy_picture(driver) -> tuple[bytes, bytes, list[tuple[str, str, str, str]]]:
    from pathlib import Path

    from tritonpkg.deploy.drivers import haproxy

    rows = [(s["pxname"], s["svname"], s.get("weight", ""), s.get("status", "").split(" ")[0])
            for s in haproxy.Admin(driver.proxy["socket"]).stats() if s.get("svname") not in ("FRONTEND", "BACKEND")]
    return Path(driver.proxy["config"]).read_bytes(), Path(driver.proxy["map"]).read_bytes(), rows


def test_refused_deploy_changes_nothing(red_black):
    """v1 again while v1 serves: refused before its repository is rebuilt or the proxy is touched."""
    from tritonpkg.deploy.plan import PlanError
    from tritonpkg.deploy.release import release_from

    root, ex, driver, store, _hooks = red_black
    [live] = [r for r in store.units_table("adder") if r["status"] == "serving"]
    repo, served = live["endpoints"]["repository"], live["endpoints"]["serving_repository"]

    def picture() -> tuple:
        return _files(repo), _files(served), _proxy_picture(driver), store.units_table("adder"), store.runs("adder")

    before = picture()
    with pytest.raises(PlanError, match="already serving"):
        ex.deploy(release_from(write_deploy_spec(root, "adder", 1), root / "work"))
    assert picture() == before
    assert served_versions(driver.proxy["http_url"], "adder") == {"1": 20}


def test_full_red_black_rollout_under_load(red_black):
    from tritonpkg.deploy.release import release_from

    root, ex, driver, store, _hooks = red_black
    with Load(driver.proxy["http_url"], "adder") as load:
        time.sleep(0.5)
        out = ex.deploy(release_from(write_deploy_spec(root, "adder", 2), root / "work"))
        time.sleep(0.5)
    REPORT.append(f"red-black 1->2: {out.seconds:.1f} s, {len(load.results)} requests "
                  f"({len(load.results) / load.seconds:.0f}/s), {len(load.failed)} failed, served {load.versions()}")
    assert out.ok, out.error
    assert out.strategy == "red-black" and "compatible" in out.reason  # auto, same I/O
    assert load.failed == []
    assert len(load.results) >= 50 and len(load.results) / load.seconds >= 50
    assert set(load.versions()) == {"1", "2"}
    assert served_versions(driver.proxy["http_url"], "adder") == {"2": 20}
    units = {r["name"]: r["status"] for r in store.units_table("adder")}
    assert units == {"adder-blue": "retired", "adder-green": "serving"}
    steps = store.steps(out.run)
    kinds = [s["kind"] for s in steps]
    assert kinds.count("gate") == 3 and kinds[-3:] == ["drain", "retire", "alias"]
    gates = [s["message"] for s in steps if s["kind"] == "gate"]
    REPORT.append("gates: " + " | ".join(gates))
    assert all("error rate 0.00%" in g and "p99" in g for g in gates), gates  # Triton's latency summary is read
    assert grpc_version(driver.proxy["grpc_url"], "adder", "X") == "2"  # gRPC goes through the proxy too


def test_versioned_keeps_old_clients_and_gc_keeps_latest(tmp_path, deploy_runtime):
    from tritonpkg.deploy.release import release_from

    ex, driver, store = make_executor(tmp_path, deploy_runtime)
    work = tmp_path / "work"
    try:
        assert ex.deploy(release_from(write_deploy_spec(tmp_path, "echo", 1), work)).ok
        url = driver.proxy["http_url"]
        with Load(url, "echo", path_version=1) as old_clients:
            time.sleep(0.5)
            out = ex.deploy(release_from(write_deploy_spec(tmp_path, "echo", 2, input_name="Z"), work))
            assert out.ok, out.error
            new = served_versions(url, "echo", path_version=2, input_name="Z")
            time.sleep(0.5)
        REPORT.append(f"versioned 1->2: {out.seconds:.1f} s, old-format {len(old_clients.results)} requests, "
                      f"{len(old_clients.failed)} failed; new-format served {new}")
        assert out.strategy == "versioned" and "input X: removed" in out.reason, out.reason
        assert old_clients.failed == [] and len(old_clients.results) >= 50
        assert old_clients.versions() == {"1": len(old_clients.results)}
        assert new == {"2": 20}
        assert (store.deployment("echo") or {}).get("alias") == "echo-v2"
        grpc = driver.proxy["grpc_url"]  # gRPC names its version with a header
        assert grpc_version(grpc, "echo", "Z", {"x-model-version": "2"}) == "2"
        assert grpc_version(grpc, "echo", "X", {"x-model-version": "1"}) == "1"
        assert grpc_version(grpc, "echo", "Z", {"x-model-version": "current"}) == "2"

        assert ex.deploy(release_from(write_deploy_spec(tmp_path, "echo", 3, input_name="Z"), work, "versioned")).ok
        assert ex.gc("echo", grace_s=3600) == []  # all recently active
        retired = ex.gc("echo", grace_s=0.0)
        assert retired == ["echo-v2"]  # v3 is the latest, v1 still takes unversioned traffic
        assert served_versions(url, "echo", path_version=3, input_name="Z") == {"3": 20}
        assert served_versions(url, "echo", path_version=1) == {"1": 20}
    finally:
        driver.shutdown([r["endpoints"] for r in store.units_table("echo") if r["status"] != "retired"])


@pytest.fixture(scope="module", autouse=True)
def _report():
    """Rollout times and request counts, printed once (pytest -s shows them)."""
    yield
    if REPORT:
        print("\n" + "\n".join(REPORT))
