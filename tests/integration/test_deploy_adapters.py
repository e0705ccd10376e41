"""Adapter rollouts from the CLI, as a user runs them on examples/tiny-llm-lora (real HAProxy, real Triton + the
toolkit's vLLM backend, the tiny Llama and peft adapters made offline; each command its own process sharing one
state folder): v1 deployed from its spec with --unit-port-base, then under steady base and adapter traffic through
HAProxy a v2 whose only change is its adapters (auto picks `adapters`), then a v3 whose adapter is truncated
(--strategy adapters), rolled back to the live list, then teardown. Every request of the traffic succeeds, no
process of the unit restarts, the packaged releases stay as packaged, and nothing is left running."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import tritonpkg
from tests.support.deploy import free_port_base
from tests.support.lora import make_adapter
from tests.support.paths import EXAMPLES
from tests.support.procs import group_pids

pytestmark = [pytest.mark.integration, pytest.mark.slow]
pytest.importorskip("peft")

EXAMPLE = EXAMPLES / "tiny-llm-lora" / "tritonpkg.yaml"
MODEL = yaml.safe_load(EXAMPLE.read_text())["name"]


def write_spec(folder: Path, version: int, weights: Path, adapters: dict[str, Path]) -> Path:
    """The example's spec with this test's weights, adapters and version (and no gate minimum: the traffic
    through HAProxy is the test's, not the gate's)."""
    spec = yaml.safe_load(EXAMPLE.read_text())
    spec.update(version=version, weights=str(weights),
                adapters=[{"name": n, "source": str(p)} for n, p in adapters.items()])
    spec["deployment"]["min_requests"] = 0
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tritonpkg.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return folder / "tritonpkg.yaml"


def tp(state: Path, *args: str, ok: bool = True) -> dict[str, Any]:
    """`tritonpkg ARGS --state STATE --json` in its own process; its JSON document (exit 0 expected, or 1)."""
    res = subprocess.run(tritonpkg(*args, "--state", str(state), "--json"), check=False, capture_output=True,
                         text=True, timeout=900, env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"})
    assert res.returncode == (0 if ok else 1), res.stdout[-3000:] + res.stderr[-3000:]
    return json.loads(res.stdout)


def status(state: Path) -> dict[str, Any]:
    res = subprocess.run(tritonpkg("status", MODEL, "--state", str(state), "--json"), check=True,
                         capture_output=True, text=True, timeout=60)
    [report] = json.loads(res.stdout)
    return report


def generate(url: str, lora: str | None, max_tokens: int = 12) -> tuple[int, str]:
    params = {"max_tokens": max_tokens, "temperature": 0, **({"lora_name": lora} if lora else {})}
    body = json.dumps({"text_input": "The quick brown fox", "parameters": {**params, "exclude_input_in_output": True}})
    req = urllib.request.Request(f"{url}/v2/models/{MODEL}/generate", data=body.encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:
            return resp.status, json.loads(resp.read())["text_output"]
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def unit_processes(pgid: int) -> dict[int, float]:
    """The unit's tritonserver and everything under it (the stub, its EngineCore, the watchdog)."""
    import psutil

    root = psutil.Process(pgid)
    return {p.pid: p.create_time() for p in [root, *root.children(recursive=True)]}


def test_adapter_rollouts_from_the_cli_follow_a_spec_deploy_and_a_corrupt_one_rolls_back(
        tmp_path, deploy_runtime, tiny_llm_weights):
    from tritonpkg.deploy.state import StateStore
    from tritonpkg.repository import lock

    made = tmp_path / "made"
    support_1 = make_adapter(tiny_llm_weights, made / "support-1", seed=1)
    support_2 = make_adapter(tiny_llm_weights, made / "support-2", seed=2)
    legal = make_adapter(tiny_llm_weights, made / "legal", seed=3)
    corrupt = shutil.copytree(support_2, made / "support-corrupt")
    data = (corrupt / "adapter_model.safetensors").read_bytes()
    (corrupt / "adapter_model.safetensors").write_bytes(data[: len(data) // 2])  # truncated
    state = Path(tempfile.mkdtemp(prefix="tp-"))  # HAProxy's socket path under it: at most 97 characters
    base = free_port_base(3 * 6)
    groups: list[int] = []
    try:
        first = tp(state, "deploy", str(write_spec(tmp_path / "v1", 1, tiny_llm_weights, {"support-bot": support_1})),
                   "--target", "local", "--unit-port-base", str(base), "--dwell", "0.3")
        assert first["ok"] and first["strategy"] == "red-black", first
        report = status(state)
        [unit] = [u for u in report["units"] if u["status"] != "retired"]
        ep = unit["endpoints"]
        groups += [ep["pgid"], StateStore(state / "state.db").deployment(MODEL)["info"]["proxy"]["pgid"]]
        entry = report["proxy"]["http_url"]
        before = unit_processes(ep["pgid"])
        code, answer_1 = generate(entry, "support-bot")
        assert code == 200, answer_1

        stop, counts, failures = threading.Event(), {"base": 0, "support-bot": 0}, []

        def traffic() -> None:
            for i in range(100000):
                if stop.is_set():
                    return
                key = ("base", "support-bot")[i % 2]
                code, text = generate(entry, None if key == "base" else key, max_tokens=2)
                counts[key] += 1
                if code != 200:
                    failures.append((key, code, text[:300]))

        load = threading.Thread(target=traffic, daemon=True)
        load.start()
        try:
            v2 = write_spec(tmp_path / "v2", 2, tiny_llm_weights, {"support-bot": support_2, "legal-bot": legal})
            second = tp(state, "deploy", str(v2), "--adapter-grace", "1")  # auto
            assert second["ok"] and second["strategy"] == "adapters", second
            assert "only the LoRA adapters changed" in second["reason"]
            assert any("after 1 s of grace" in s for s in second["steps"]), second["steps"]
            code, answer_2 = generate(entry, "support-bot")
            assert code == 200 and answer_2 != answer_1, answer_2
            assert generate(entry, "support-bot@2") == (200, answer_2)
            code, legal_answer = generate(entry, "legal-bot")
            assert code == 200 and legal_answer not in (answer_1, answer_2), legal_answer

            v3 = write_spec(tmp_path / "v3", 3, tiny_llm_weights, {"support-bot": corrupt, "legal-bot": legal})
            third = tp(state, "deploy", str(v3), "--strategy", "adapters", "--adapter-grace", "1", ok=False)
            assert not third["ok"] and third["rolled_back"] and third["strategy"] == "adapters", third
            assert "support-bot@3" in third["error"] and "could not be loaded" in third["error"], third["error"]
            assert generate(entry, "support-bot") == (200, answer_2)  # the live list is back
            code, text = generate(entry, "support-bot@3")
            assert code == 400 and "unknown LoRA adapter 'support-bot@3'" in text, text
        finally:
            stop.set()
            load.join(timeout=300)
        print(f"v2 rolled out in {second['seconds']:.1f} s, v3 rolled back in {third['seconds']:.1f} s; requests "
              f"meanwhile: {counts}, failed: {len(failures)}")
        assert counts["base"] > 0 and counts["support-bot"] > 0 and failures == [], failures[:3]
        after = unit_processes(ep["pgid"])
        assert {pid: t for pid, t in after.items() if pid in before} == before, (before, after)

        report = status(state)
        [shown] = [u for u in report["units"] if u["status"] != "retired"]
        assert shown["name"] == unit["name"] and shown["adapter_release"] == 2
        assert set(shown["adapters"]) == {"support-bot", "support-bot@2", "legal-bot", "legal-bot@2"}
        first_port = base + 3 * ep["slot"]  # the unit's ports as documented: base + 3*slot, +1 gRPC, +2 metrics
        assert (ep["http_url"], ep["grpc_url"]) == (f"http://127.0.0.1:{first_port}", f"127.0.0.1:{first_port + 1}")
        assert ep["metrics_url"] == f"http://127.0.0.1:{first_port + 2}/metrics"
        with urllib.request.urlopen(ep["metrics_url"], timeout=5) as resp:
            assert b"nv_inference_request_success" in resp.read()
        # the unit served a copy of its own: every packaged release is still what was packaged
        serving = Path(shown["endpoints"]["serving_repository"])
        assert serving.is_relative_to(state / "local" / MODEL / "units" / unit["name"]), serving
        for release in sorted((state / "releases").iterdir()):
            assert lock.verify(release / "repository") == [], release

        tp(state, "deploy", MODEL, "--teardown")
        assert [pid for g in groups for pid in group_pids(g)] == []
        with pytest.raises(OSError, match=r"refused|reset|closed"):
            urllib.request.urlopen(entry + "/v2/health/ready", timeout=2)
        assert not (state / "local" / MODEL / "units" / unit["name"]).exists()
    finally:
        subprocess.run(tritonpkg("deploy", MODEL, "--teardown", "--state", str(state)), check=False,
                       capture_output=True, timeout=120)
        for pgid in groups:  # belt and braces: never leave a server behind
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        shutil.rmtree(state, ignore_errors=True)
