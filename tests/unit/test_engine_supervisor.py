"""EngineSupervisor's policy on a stand-in for TritonServer (the real stack: tests/integration/test_engine_death.py):
which model it treats as dead, how many restarts it tries and with which waits, what it reports."""

from __future__ import annotations

import time

from tritonpkg.serve.supervisor import EngineSupervisor, vllm_models


class FakeServer:
    def __init__(self, loads_fail: int = 0) -> None:
        self.states = {"llm": "READY", "other": "READY"}
        self.loads: list[float] = []
        self.loads_fail = loads_fail
        self.running = True
        self.log_path = None

    def repository_index(self) -> list[dict]:
        return [{"name": n, "version": "1", "state": s, "reason": ""} for n, s in self.states.items()]

    def load_model(self, name: str) -> tuple[bool, str]:
        self.loads.append(time.monotonic())
        if len(self.loads) <= self.loads_fail:
            return False, "load failed: no memory\nmore"
        self.states[name] = "READY"
        return True, ""


def _wait(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not cond():
        time.sleep(0.02)


def test_restart_retries_with_backoff_then_ready_and_gauge_follows():
    server = FakeServer(loads_fail=1)
    sup = EngineSupervisor(server, {"llm"}, policy="restart", backoff=0.2, poll=0.02).start()
    try:
        assert 'tritonpkg_engine_alive{model="llm",version="1"} 1' in sup.exposition()
        server.states["llm"] = "UNAVAILABLE"
        _wait(lambda: not sup.alive[("llm", "1")])
        assert 'tritonpkg_engine_alive{model="llm",version="1"} 0' in sup.exposition()
        _wait(lambda: any(e.kind == "restarted" for e in sup.events))
        assert [e.kind for e in sup.events] == ["died", "restarting", "restarting", "restarted"]
        assert len(server.loads) == 2 and server.loads[1] - server.loads[0] >= 0.2
        _wait(lambda: sup.alive[("llm", "1")])
        assert sup.alive[("llm", "1")] and sup.problem is None
    finally:
        sup.stop()


def test_restarts_exhausted_and_exit_policy_report_one_line():
    server = FakeServer(loads_fail=99)
    sup = EngineSupervisor(server, {"llm"}, policy="restart", attempts=2, backoff=0.01, poll=0.02).start()
    server.states["llm"] = "UNAVAILABLE"
    _wait(lambda: sup.problem is not None)
    sup.stop()
    assert sup.problem and "2 restart(s) failed" in sup.problem and "\n" not in sup.problem
    assert len(server.loads) == 2

    server = FakeServer()
    sup = EngineSupervisor(server, {"llm"}, policy="exit", poll=0.02).start()
    server.states["other"] = "UNAVAILABLE"  # not a watched vLLM model: nothing happens
    server.states["llm"] = "UNLOADING"
    _wait(lambda: sup.problem is not None)
    sup.stop()
    assert sup.problem and "'llm'" in sup.problem and "exit" in sup.problem and not server.loads


def test_vllm_models_reads_the_backend(tmp_path):
    for name, backend in (("a", "vllm"), ("b", "python")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "{backend}"\n')
    assert vllm_models(tmp_path) == {"a"}


def test_a_stop_is_clean_only_with_status_0_and_no_segfault_in_the_log():
    from tritonpkg.serve.stack import _stop_problem

    assert _stop_problem(0, "I1204 ... successfully unloaded\n", 35) is None
    segv = _stop_problem(0, "Signal (11) received.\n", 35)
    assert segv and "segfaulted" in segv and "\n" not in segv
    assert "segfaulted" in (_stop_problem(139, "stub: Segfault encountered\n", 35) or "")
    timed_out = _stop_problem(1, "E1204 Exit timeout expired. Exiting immediately.\n", 35)
    assert timed_out and "exit timeout (35 s)" in timed_out
    assert _stop_problem(-9, "", 35) == "tritonserver was killed by signal 9 during the stop"
    assert _stop_problem(134, "", 35) == "tritonserver exited with status 134 during the stop"
