"""Pure parts of deploy: the gate on Triton metrics, the I/O diff, the HAProxy configuration, the state file."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tritonpkg.deploy import gate, iodiff
from tritonpkg.deploy.drivers import haproxy
from tritonpkg.deploy.plan import LiveState, Unit, plan_red_black
from tritonpkg.deploy.state import StateStore

METRICS = """# HELP nv_inference_request_success Number of successful inference requests
nv_inference_request_success{model="m",version="1"} 90
nv_inference_request_success{model="m",version="2"} 10
nv_inference_request_success{model="other",version="1"} 500
nv_inference_request_failure{model="m",reason="BACKEND",version="1"} 2
nv_inference_request_duration_us{model="m",version="1"} 200000
nv_inference_request_summary_us{model="m",version="1",quantile="0.5"} 1500
nv_inference_request_summary_us{model="m",version="1",quantile="0.99"} 4200
nv_inference_request_summary_us{model="m",version="2",quantile="0.99"} NaN
"""


def test_metrics_are_summed_per_model():
    s = gate.parse(METRICS, "m")
    assert (s.success, s.failure, s.duration_us, s.p99_us) == (100, 2, 200000, 4200)
    assert gate.parse(METRICS, "nope") == gate.Sample()


def test_gate_on_error_rate_and_p99():
    before = gate.Sample(success=50, failure=0)
    ok = gate.judge(before, gate.Sample(success=150, p99_us=4000), gate.Limits(max_error_rate=0.01, max_p99_ms=10))
    assert ok.ok and ok.requests == 100 and ok.p99_ms == 4.0
    bad = gate.judge(before, gate.Sample(success=140, failure=10, p99_us=4000), gate.Limits(max_error_rate=0.01))
    assert not bad.ok and "error rate 10.00%" in bad.reason
    slow = gate.judge(before, gate.Sample(success=60, p99_us=50_000), gate.Limits(max_p99_ms=20))
    assert not slow.ok and "p99 50.0 ms > 20 ms" in slow.reason
    mean = gate.judge(gate.Sample(), gate.Sample(success=10, duration_us=30_000), gate.Limits(max_p99_ms=2))
    assert not mean.ok and "mean (no latency summary) 3.0 ms" in mean.reason
    idle = gate.judge(before, before, gate.Limits(min_requests=5))
    assert not idle.ok and "only 0 requests" in idle.reason


def schema(inputs, outputs=(("Y", "TYPE_FP32", [2], False),), mbs=0) -> iodiff.Schema:
    def t(n, d, dims, opt):
        return iodiff.Tensor(name=n, data_type=d, dims=dims, optional=opt)
    return iodiff.Schema(model="m", max_batch_size=mbs, inputs=[t(*i) for i in inputs],
                         outputs=[t(*o) for o in outputs])


BASE = [("X", "TYPE_FP32", [2], False)]


@pytest.mark.parametrize(("new_inputs", "new_outputs", "mbs", "compatible", "why"), [
    (BASE, None, 0, True, None),
    ([*BASE, ("MASK", "TYPE_BOOL", [2], True)], None, 0, True, "added as optional"),
    ([*BASE, ("MASK", "TYPE_BOOL", [2], False)], None, 0, False, "added and required"),
    ([("Z", "TYPE_FP32", [2], False)], None, 0, False, "input X: removed"),
    ([("X", "TYPE_FP16", [2], False)], None, 0, False, "dtype changed"),
    ([("X", "TYPE_FP32", [-1], False)], None, 0, True, "dims widened"),
    ([("X", "TYPE_FP32", [3], False)], None, 0, False, "dims no longer match"),
    (BASE, [("Y", "TYPE_FP32", [2], False), ("EXTRA", "TYPE_INT64", [1], False)], 0, True, "added"),
    (BASE, [("Y2", "TYPE_FP32", [2], False)], 0, False, "output Y: removed"),
    (BASE, None, 8, False, "batching on/off"),
])
def test_io_diff_rules(new_inputs, new_outputs, mbs, compatible, why):
    old = schema(BASE)
    new = schema(new_inputs, new_outputs or (("Y", "TYPE_FP32", [2], False),), mbs)
    d = iodiff.diff(old, new)
    assert d.compatible is compatible
    if why:
        assert any(why in f"{c.where}: {c.why}" for c in d.changes), d.changes
    else:
        assert d.changes == []


def test_io_diff_reads_specs(write_spec):
    def spec(name, dtype):
        return write_spec({"name": "m", "version": 1, "kind": "python", "python": {
            "template": "custom", "parameters": {"module": "h.py"}, "files": ["h.py"],
            "inputs": [{"name": name, "data_type": dtype, "dims": [2]}],
            "outputs": [{"name": "Y", "data_type": "FP32", "dims": [2]}]}}, folder=f"{name}{dtype}",
            extra_files={"h.py": "def model(i):\n    return i\n"})
    d = iodiff.diff(iodiff.load(spec("X", "FP32")), iodiff.load(spec("X", "INT32")))
    assert not d.compatible and d.reasons() == ["input X: dtype changed"]
    with pytest.raises(Exception, match="cannot read an I/O schema"):
        iodiff.load(spec("X", "FP32").parent / "h.py")


def test_haproxy_config_is_accepted_by_haproxy(tmp_path):
    text = haproxy.render_config(http_port=18000, grpc_port=18001, socket_path=tmp_path / "s.sock",
                                 map_path=tmp_path / "r.map", slots=3)
    assert text.count("server s") == 3 * 4 and text.count("server b") == 3 * 4
    assert "bind 127.0.0.1:18001 proto h2" in text
    binary = shutil.which("haproxy") or (shutil.which("haproxy", path="/usr/sbin"))
    if binary is None:
        why = "haproxy not installed (scripts/setup.sh installs it as root)"
        (pytest.fail if os.environ.get("CI") else pytest.skip)(why)
    (tmp_path / "r.map").write_text("")
    (tmp_path / "h.cfg").write_text(text)
    res = subprocess.run([binary, "-c", "-f", str(tmp_path / "h.cfg")], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr


def test_weight_changes_raise_before_they_lower():
    cmds = haproxy.weight_commands({0: 0, 1: 100})
    assert cmds == ["set weight live_http/s1 100", "set weight live_grpc/s1 100",
                    "set weight live_http/b1 100", "set weight live_grpc/b1 100",
                    "set weight live_http/s0 0", "set weight live_grpc/s0 0",
                    "set weight live_http/b0 0", "set weight live_grpc/b0 0"]


def test_missing_haproxy_says_how_to_install(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(haproxy.Path, "is_file", lambda self: False)
    with pytest.raises(haproxy.ProxyError, match="apt-get install haproxy"):
        haproxy.find_haproxy()


def test_state_round_trip_and_interrupted_runs(tmp_path):
    store = StateStore(tmp_path / "s.db")
    store.ensure_deployment("m", "local")
    store.put_unit("m", Unit(name="m-blue", version=1, color="blue", weight=100, status="serving"), {"slot": 0})
    live = store.live("m")
    serving = live.serving()
    assert serving is not None and serving.name == "m-blue" and store.endpoints("m", "m-blue") == {"slot": 0}
    plan = plan_red_black(live, 2, [50, 100])
    run = store.start_run(plan)
    assert [r for r, _ in store.running_runs("m")] == [run]
    snap = store.snapshot("m")  # one read: what planning, the driver's sync and recovery each take from it
    assert snap.live == live and snap.rows == store.units_table("m") and snap.endpoints == {"m-blue": {"slot": 0}}
    assert [r for r, _ in snap.running] == [run] and store.snapshot("other").live.units == []
    reopened = StateStore(tmp_path / "s.db")  # a later command sees the half-done run and its rollback
    (_, again), = reopened.running_runs()
    assert again.rollback == plan.rollback
    reopened.finish_run(run, "rolled_back", "interrupted")
    assert reopened.running_runs() == [] and reopened.runs("m")[0]["status"] == "rolled_back"
    store.update_unit("m", "m-blue", status="retired")
    assert store.live("m").units == [] and LiveState(model="m").serving() is None


def test_a_packaged_repository_is_a_release_and_a_diff_side(write_spec, tmp_path):
    from tritonpkg.deploy.release import build, release_from
    from tritonpkg.repository import package_spec
    from tritonpkg.spec import load_spec

    path = write_spec({"name": "m", "version": 3, "kind": "python", "python": {
        "template": "custom", "parameters": {"module": "h.py"}, "files": ["h.py"],
        "inputs": [{"name": "X", "data_type": "FP32", "dims": [2]}],
        "outputs": [{"name": "Y", "data_type": "FP32", "dims": [2]}]}},
        extra_files={"h.py": "def model(i):\n    return i\n"})
    repo = tmp_path / "repo"
    package_spec(load_spec(path), repo)
    rel = release_from(repo, tmp_path / "work")
    assert (rel.model, rel.version, rel.repository) == ("m", 3, repo.absolute())
    assert rel.schema_ is not None and [t.name for t in rel.schema_.inputs] == ["X"]
    from_spec = release_from(path, tmp_path / "work", "versioned")
    assert from_spec.strategy == "versioned" and not from_spec.repository.exists()  # planned before it is built
    built = build(from_spec)
    assert built.built and not from_spec.built and (built.repository / "m" / "3" / "model.py").is_file()
    assert built.schema_ is not None and [t.name for t in built.schema_.inputs] == ["X"]
    assert iodiff.diff(iodiff.load(repo), iodiff.load(path)).changes == []
    assert iodiff.load(repo / "m" / "config.pbtxt").version == 3
