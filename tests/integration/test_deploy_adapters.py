"""An adapter rollout into a running engine, on the local target (real HAProxy, real Triton + the toolkit's vLLM
backend, the tiny Llama and peft adapters made offline): a spec whose only change is its adapters is deployed
under steady base and adapter traffic through HAProxy. The new adapter answers under its versioned name and
then under its own, a new one joins; a release whose adapter is corrupt is rolled back to the live list. Every
request of the traffic succeeds and no process of the unit restarts through both."""

from __future__ import annotations

import json
import shutil
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.support.deploy import make_executor
from tests.support.lora import make_adapter

pytestmark = [pytest.mark.integration, pytest.mark.slow]
pytest.importorskip("peft")

MODEL = "tiny_llm"
ENGINE_ARGS = {"enforce_eager": True, "max_model_len": 256, "dtype": "float32", "max_num_seqs": 4,
               "max_num_batched_tokens": 256, "disable_log_stats": True}
SMOKE = {"text_input": "hello", "sampling_parameters": '{"max_tokens": 2, "temperature": 0}'}


def write_spec(folder: Path, version: int, weights: Path, adapters: dict[str, Path]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tritonpkg.yaml").write_text(yaml.safe_dump({
        "name": MODEL, "version": version, "kind": "vllm", "target_release": "24.10", "weights": str(weights),
        "engine_args": ENGINE_ARGS, "adapters": [{"name": n, "source": str(p)} for n, p in adapters.items()],
        "deployment": {"smoke_request": SMOKE, "min_requests": 0}}))
    return folder


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


def test_an_adapter_only_release_rolls_into_the_running_engine_and_a_corrupt_one_rolls_back(
        tmp_path, deploy_runtime, tiny_llm_weights, monkeypatch):
    from tritonpkg.deploy import service
    from tritonpkg.deploy.executor import release_from

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    made = tmp_path / "made"
    support_1 = make_adapter(tiny_llm_weights, made / "support-1", seed=1)
    support_2 = make_adapter(tiny_llm_weights, made / "support-2", seed=2)
    legal = make_adapter(tiny_llm_weights, made / "legal", seed=3)
    corrupt = shutil.copytree(support_2, made / "support-corrupt")
    (corrupt / "adapter_model.safetensors").write_bytes(b"\xff" * 64)
    ex, driver, store = make_executor(tmp_path, deploy_runtime)
    driver.startup_timeout = None  # a vLLM engine on a busy host: wait while Triton reports it loading
    ex.adapter_grace_s = 1.0
    work = tmp_path / "work"
    try:
        first = ex.deploy(release_from(write_spec(tmp_path / "v1", 1, tiny_llm_weights, {"support-bot": support_1}),
                                       work))
        assert first.ok and first.strategy == "red-black", first.error
        entry = driver.entry().http_url
        assert entry is not None
        [unit] = [r for r in store.units_table(MODEL) if r["status"] != "retired"]
        before = unit_processes(unit["endpoints"]["pgid"])
        code, answer_1 = generate(entry, "support-bot")
        assert code == 200, answer_1

        stop, counts, failures = threading.Event(), {"base": 0, "support-bot": 0}, []

        def traffic() -> None:
            for i in range(5000):
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
            second = ex.deploy(release_from(write_spec(tmp_path / "v2", 2, tiny_llm_weights,
                                                       {"support-bot": support_2, "legal-bot": legal}), work))
            assert second.ok and second.strategy == "adapters", (second.error, second.steps)
            assert "only the LoRA adapters changed" in second.reason
            code, answer_2 = generate(entry, "support-bot")
            assert code == 200 and answer_2 != answer_1, answer_2
            assert generate(entry, "support-bot@2") == (200, answer_2)
            code, legal_answer = generate(entry, "legal-bot")
            assert code == 200 and legal_answer not in (answer_1, answer_2), legal_answer

            third = ex.deploy(release_from(write_spec(tmp_path / "v3", 3, tiny_llm_weights,
                                                      {"support-bot": corrupt, "legal-bot": legal}), work))
            assert not third.ok and third.rolled_back and third.strategy == "adapters", third
            assert "support-bot@3" in (third.error or "") and "could not be loaded" in (third.error or ""), third.error
            assert generate(entry, "support-bot") == (200, answer_2)  # the live list is back
            code, text = generate(entry, "support-bot@3")
            assert code == 400 and "unknown LoRA adapter 'support-bot@3'" in text, text
        finally:
            stop.set()
            load.join(timeout=300)
        print(f"requests during the two rollouts: {counts}, failed: {len(failures)}")
        assert counts["base"] > 0 and counts["support-bot"] > 0 and failures == [], failures[:3]
        after = unit_processes(unit["endpoints"]["pgid"])
        assert {pid: t for pid, t in after.items() if pid in before} == before, (before, after)
        [status] = service.status(tmp_path, MODEL)  # make_executor keeps its store at tmp_path/state.db
        [shown] = [u for u in status.units if u.status != "retired"]
        assert shown.name == unit["name"] and shown.adapter_release == 2
        assert set(shown.adapters) == {"support-bot", "support-bot@2", "legal-bot", "legal-bot@2"}
    finally:
        driver.shutdown([r["endpoints"] for r in store.units_table(MODEL) if r["status"] != "retired"])
