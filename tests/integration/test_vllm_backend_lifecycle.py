"""The vLLM backend's health check and shutdown in a real tritonserver (explicit model control), on two
copies of the tiny LLM: `tiny_llm` with the health check on (the default) and `tiny_llm_unchecked` with
NVIDIA's `ENABLE_VLLM_HEALTH_CHECK: false` and `REPORT_CUSTOM_METRICS: false` (no vLLM series although
its model.json keeps disable_log_stats false). The check is made to fail on purpose, with the engine alive,
through TRITONPKG_VLLM_HEALTH_FAULT_FILE. The server is then SIGTERMed while the checked model unloads
itself: issue 30's crash (the stub segfaulted, or the model outlived the exit timeout: exit 1)."""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
import urllib.request

import pytest

from tests.support.repositories import package_tiny_llm

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHECKED, UNCHECKED, MISSPELT = "tiny_llm", "tiny_llm_unchecked", "tiny_llm_misspelt"
# Each repetition starts a server with two engines (~1-2 min here); the suite runs one.
REPS = int(os.environ.get("TRITONPKG_TEST_SHUTDOWN_REPS", "1"))


@pytest.fixture(scope="module")
def repo(tmp_path_factory, tiny_llm_weights):
    repo = package_tiny_llm(tmp_path_factory.mktemp("vllm-lifecycle"), tiny_llm_weights, disable_log_stats=False)
    shutil.copytree(repo / CHECKED, repo / UNCHECKED)
    config = repo / UNCHECKED / "config.pbtxt"
    config.write_text(config.read_text().replace(f'name: "{CHECKED}"', f'name: "{UNCHECKED}"')
                      + "".join(f'parameters {{\n  key: "{key}"\n  value {{ string_value: "false" }}\n}}\n'
                                for key in ("ENABLE_VLLM_HEALTH_CHECK", "REPORT_CUSTOM_METRICS")))
    shutil.copytree(repo / CHECKED, repo / MISSPELT)  # loaded on request only: fails before any engine starts
    config = repo / MISSPELT / "config.pbtxt"
    config.write_text(config.read_text().replace(f'name: "{CHECKED}"', f'name: "{MISSPELT}"')
                      + 'parameters {\n  key: "ENABLE_VLLM_HEALTH_CHECK"\n  value { string_value: "yes please" }\n}\n')
    return repo


def generate(server, model: str) -> tuple[int, dict]:
    body = {"text_input": "hello", "parameters": {"max_tokens": 3, "temperature": 0}}
    req = urllib.request.Request(f"{server.http_url}/v2/models/{model}/generate", data=json.dumps(body).encode(),
                                 method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def metric_models(path) -> set[str]:
    """The `model` label of every vLLM series in the Prometheus multiprocess directory."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(path))
    return {s.labels.get("model", "") for m in registry.collect() for s in m.samples if s.name.startswith("vllm:")}


@pytest.mark.parametrize("rep", range(REPS))
def test_health_check_parameter_and_sigterm_during_the_self_unload_exits_0(repo, tmp_path, rep):
    """Off: a check that would fail is never asked, the model keeps serving. On: the failing check answers
    the next request with the reason, and a SIGTERM right then (the self-unload in flight) exits 0."""
    from tritonpkg.runtime import TritonServer, ensure_runtime

    fault = tmp_path / "health-fault"
    log = tmp_path / "tritonserver.log"
    metrics = tmp_path / "prometheus"
    server = TritonServer(repo, runtime=ensure_runtime(), startup_timeout=600, model_control="explicit",
                          load_models=[CHECKED, UNCHECKED], log_path=log,
                          env={"TRITONPKG_VLLM_HEALTH_FAULT_FILE": str(fault), "VLLM_CPU_KVCACHE_SPACE": "1",
                               "PROMETHEUS_MULTIPROC_DIR": str(metrics)})
    try:
        server.start()
        fault.write_text(UNCHECKED)  # fails the unchecked model's check, were it asked
        time.sleep(3.0)  # three poll intervals
        assert sorted(m["name"] for m in server.ready_models()) == [CHECKED, UNCHECKED]
        for model in (CHECKED, UNCHECKED):
            status, body = generate(server, model)
            assert status == 200 and body["text_output"], (model, body)
        time.sleep(0.5)
        assert metric_models(metrics) == {CHECKED}  # the two share a weights path: only `model` tells them apart

        if rep == 0:
            loaded, message = server.load_model(MISSPELT)
            assert not loaded and "ENABLE_VLLM_HEALTH_CHECK" in message and "yes please" in message, message

        fault.write_text(CHECKED)
        deadline = time.monotonic() + 30
        status, body = 200, {}
        while status == 200 and time.monotonic() < deadline:  # the poll runs every second
            status, body = generate(server, CHECKED)
        # The unload goes out as soon as the check fails, so on a busy host it may finish between two requests:
        # then Triton answers 404 for the unloaded model and the reason is in its log.
        assert status != 200, (status, body)
        reason_logged = "health check failed on purpose" in log.read_text(errors="replace")
        assert ("health check failed on purpose" in body.get("error", "")
                or (status == 404 and reason_logged)), (status, body)
        code = server.stop()
    finally:
        if server.running:
            server.stop(grace=5.0)
    text = log.read_text(errors="replace")
    assert code == 0, text[-4000:]
    for crash in ("Segfault", "Segmentation fault", "Exit timeout expired", "Response sender has been closed"):
        assert crash not in text, (crash, text[-4000:])
