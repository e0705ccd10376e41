"""Multi-LoRA in a real tritonserver with the toolkit's vLLM backend: the tiny Llama and two peft adapters of it
(rank 8, different seeds) packaged from a spec's `adapters:`, served by `tritonpkg serve` in NVIDIA's layout
(multi_lora.json) and picked per request by NVIDIA's `lora_name`. Greedy outputs of the base and of each adapter
differ, and each equals vLLM's offline `LLM.generate` with the same LoRARequest (one offline engine, in a
subprocess, started beside the server). One server for the module.

Adapter alpha is local (copied into the version, `./adapters/alpha`), beta lives in a real S3 API (moto): serve
materializes it before the engine starts and points the serving copy's list at the absolute local folder, the
spelling of NVIDIA's own sample; so the engine reads both spellings."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.support.cli import read_json_document, tritonpkg
from tests.support.lora import make_adapter
from tritonpkg.proc.group import own_group
from tritonpkg.proc.ports import free_ports
from tritonpkg.repository import package_spec
from tritonpkg.spec import load_spec

pytestmark = [pytest.mark.integration, pytest.mark.slow]
pytest.importorskip("peft")

MODEL = "tiny_llm"
BUCKET = "lora-adapters"
PROMPTS = ("hello world", "The quick brown fox")
ENGINE_ARGS = {"enforce_eager": True, "max_model_len": 256, "dtype": "float32", "max_num_seqs": 4,
               "max_num_batched_tokens": 256, "disable_log_stats": True}
SAMPLING = {"max_tokens": 12, "temperature": 0}

OFFLINE = textwrap.dedent('''
    import json, sys
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    def main():
        args, adapters, prompts, sampling = (json.loads(a) for a in sys.argv[1:5])
        llm = LLM(**args)
        params = SamplingParams(**sampling)
        out = {}
        for key, request in [("base", None)] + [(n, LoRARequest(n, i, p)) for i, (n, p) in
                                                enumerate(adapters.items(), start=1)]:
            results = llm.generate(list(prompts), params, lora_request=request, use_tqdm=False)
            out[key] = [r.outputs[0].text for r in results]
        print("RESULT " + json.dumps(out), flush=True)

    if __name__ == "__main__":
        main()
''')


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_llm_weights, s3_server):
    """(server, offline outputs): `tritonpkg serve` of the package (beta materialized from S3 first), and vLLM's
    own answers for the same adapters."""
    root = tmp_path_factory.mktemp("lora-serving")
    spec_dir = root / "spec"
    spec_dir.mkdir()
    make_adapter(tiny_llm_weights, spec_dir / "alpha", seed=1)
    beta = make_adapter(tiny_llm_weights, root / "beta", seed=2)
    s3 = s3_server.client()
    s3.create_bucket(Bucket=BUCKET)
    for path in sorted(beta.iterdir()):
        s3.upload_file(str(path), BUCKET, f"loras/beta/{path.name}")
    spec = {"name": MODEL, "version": 1, "kind": "vllm", "target_release": "24.10", "weights": str(tiny_llm_weights),
            "openai": True, "engine_args": ENGINE_ARGS,
            "adapters": [{"name": "alpha", "source": "./alpha"}, {"name": "beta", "source": f"s3://{BUCKET}/loras/beta"}]}
    (spec_dir / "tritonpkg.yaml").write_text(yaml.safe_dump(spec))
    repo = root / "repository"
    package_spec(load_spec(spec_dir), repo)
    version = repo / MODEL / "1"
    assert json.loads((version / "multi_lora.json").read_text()) == {
        "alpha": "./adapters/alpha", "beta": f"s3://{BUCKET}/loras/beta"}
    engine_args = json.loads((version / "model.json").read_text())

    env = {**os.environ, **s3_server.env, "VLLM_CPU_KVCACHE_SPACE": "1", "NO_COLOR": "1"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    adapters = {"alpha": str(version / "adapters" / "alpha"), "beta": str(beta)}
    (root / "offline.py").write_text(OFFLINE)
    offline = subprocess.Popen(
        [sys.executable, str(root / "offline.py"), json.dumps(engine_args), json.dumps(adapters),
         json.dumps(PROMPTS), json.dumps(SAMPLING)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=env)
    http, grpc, metrics, openai = free_ports(4)
    weights_root = root / "weights-root"
    proc = subprocess.Popen(
        tritonpkg("serve", str(repo), "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port",
                  str(metrics), "--openai-port", str(openai), "--weights-root", str(weights_root),
                  "--state-dir", str(root / "state"), "--json"),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **own_group())
    try:
        try:
            info = read_json_document(proc.stdout)
        except AssertionError:
            proc.wait(timeout=60)
            raise AssertionError(f"serve exited {proc.returncode}:\n{proc.stderr.read()[-4000:]}") from None
        output, _ = offline.communicate(timeout=900)
        lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
        assert offline.returncode == 0 and lines, output[-3000:]
        yield (Served(f"http://127.0.0.1:{http}", f"127.0.0.1:{grpc}", f"http://127.0.0.1:{openai}/v1", info,
                      weights_root), json.loads(lines[-1].removeprefix("RESULT ")))
    finally:
        if offline.poll() is None:
            offline.kill()
            offline.wait()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@dataclass
class Served:
    http_url: str
    grpc_url: str
    openai_url: str
    info: dict
    weights_root: Path


def generate(server, prompt: str, params: dict) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    body = {"text_input": prompt, "parameters": {**params, "exclude_input_in_output": True}}
    req = urllib.request.Request(f"{server.http_url}/v2/models/{MODEL}/generate", data=json.dumps(body).encode(),
                                 method="POST")
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def grpc_generate(server, prompt: str, params: dict) -> str:
    """One request over KServe gRPC (a bidirectional stream: the model is decoupled), sampling_parameters as
    NVIDIA's clients send them (a JSON string input)."""
    import queue

    import numpy as np
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        inputs = []
        for name, dtype, value in (("text_input", "BYTES", prompt.encode()), ("stream", "BOOL", False),
                                   ("sampling_parameters", "BYTES", json.dumps(params).encode()),
                                   ("exclude_input_in_output", "BOOL", True)):
            tensor = grpcclient.InferInput(name, [1], dtype)
            tensor.set_data_from_numpy(np.array([value], dtype=object if dtype == "BYTES" else bool))
            inputs.append(tensor)
        client.async_stream_infer(MODEL, inputs)
        result, error = results.get(timeout=300)
        assert error is None, error
        return result.as_numpy("text_output")[0].decode()
    finally:
        client.stop_stream()
        client.close()


def test_base_and_each_adapter_answer_as_vllm_offline_does(served):
    server, offline = served
    for prompt_index, prompt in enumerate(PROMPTS):
        answers = {}
        for key in ("base", "alpha", "beta"):
            params = SAMPLING if key == "base" else {**SAMPLING, "lora_name": key}
            status, body = generate(server, prompt, params)
            assert status == 200, body
            answers[key] = body["text_output"]
            assert answers[key] == offline[key][prompt_index], (key, prompt)
        assert len(set(answers.values())) == 3, answers  # each adapter changes the greedy output


def test_lora_name_over_grpc_gives_the_same_answer(served):
    server, offline = served
    assert grpc_generate(server, PROMPTS[0], {**SAMPLING, "lora_name": "beta"}) == offline["beta"][0]
    assert grpc_generate(server, PROMPTS[0], SAMPLING) == offline["base"][0]


def test_unknown_lora_name_is_refused_naming_the_known_adapters(served):
    server, _ = served
    status, body = generate(server, PROMPTS[0], {**SAMPLING, "lora_name": "gamma"})
    assert status == 400, body
    assert "unknown LoRA adapter 'gamma'" in body["error"] and "'alpha', 'beta'" in body["error"]
    status, body = generate(server, PROMPTS[0], {**SAMPLING, "lora_name": 7})
    assert status == 400 and "'lora_name' must be a string" in body["error"], body


def test_serve_materialized_the_s3_adapter_and_the_serving_copy_names_it(served):
    server, _ = served
    [weights, alpha, beta] = server.info["weights"]
    assert weights["model_json"] == f"{MODEL}/1/model.json"
    assert (alpha["kind"], alpha["source"]) == ("local", f"{MODEL}/1/adapters/alpha")
    assert (beta["kind"], beta["source"]) == ("materialized", f"s3://{BUCKET}/loras/beta")
    local = Path(beta["path"])
    assert local.is_relative_to(server.weights_root) and (local / "READY").is_file()
    listing = json.loads((Path(server.info["repository"]) / MODEL / "1" / "multi_lora.json").read_text())
    assert listing == {"alpha": "./adapters/alpha", "beta": str(local)}  # both spellings NVIDIA's backend reads


def test_serving_repository_validates_clean(served):
    server, _ = served
    from tritonpkg.validate import validate_repository

    report = validate_repository(Path(server.info["repository"]))
    assert [p for p in report.problems if p.severity == "error" or p.rule.startswith("lora.")] == []


def test_openai_lists_each_adapter_under_its_base_and_routes_model_to_it(served):
    """/v1/models: each adapter with `parent` = the base; `model: "<adapter>"` answers as `lora_name` does over
    KServe gRPC (and as vLLM offline)."""
    import openai

    server, offline = served
    client = openai.OpenAI(base_url=server.openai_url, api_key="unused", max_retries=0)
    cards = {m.id: m for m in client.models.list().data}
    assert {MODEL, "alpha", "beta"} <= set(cards)
    assert (cards["alpha"].parent, cards["beta"].parent, cards[MODEL].parent) == (MODEL, MODEL, None)
    assert client.models.retrieve("beta").parent == MODEL
    for key in ("alpha", "beta", MODEL):
        answer = client.completions.create(model=key, prompt=PROMPTS[0], max_tokens=SAMPLING["max_tokens"],
                                           temperature=0).choices[0].text
        grpc = grpc_generate(server, PROMPTS[0], SAMPLING if key == MODEL else {**SAMPLING, "lora_name": key})
        assert answer == grpc == offline["base" if key == MODEL else key][0], key


MIXED_PROMPTS = (*PROMPTS, "once upon a time", "a b c d")
MIXED_ROUNDS, MIXED_PER_CLIENT = 4, 40  # per round: 2 base clients and 2 adapter clients, 40 requests each


def test_base_and_adapter_requests_at_once_each_answer_as_it_does_alone(served):
    """Mixed batches: base requests beside adapter requests (vLLM batches them into one step) give each request its
    own answer, the one it gets when it runs alone (greedy). On vLLM 0.32's CPU path a base request beside an
    adapter one got the last-loaded adapter applied (vllm#48421; the toolkit's backend corrects it:
    backends/vllm/lora_index_fix.py). 4 clients at once over several rounds, at least 300 requests of each."""
    import threading

    server, _ = served
    params = {key: {**SAMPLING, "max_tokens": 8} if key == "base" else {**SAMPLING, "max_tokens": 8, "lora_name": key}
              for key in ("base", "alpha", "beta")}
    alone = {}
    for key, sampling in params.items():
        for prompt in MIXED_PROMPTS:
            status, body = generate(server, prompt, sampling)
            assert status == 200, body
            alone[key, prompt] = body["text_output"]
    assert len({alone[k, MIXED_PROMPTS[0]] for k in params}) == 3, alone  # the adapters change the answer

    clients = ("base", "base", "alpha", "beta")
    sent = {"base": 0, "adapter": 0}
    wrong: dict[str, list] = {"base": [], "adapter": []}
    failed: list = []
    lock = threading.Lock()

    def client(key: str, offset: int, start: threading.Barrier) -> None:
        start.wait()
        kind = "base" if key == "base" else "adapter"
        for i in range(MIXED_PER_CLIENT):
            prompt = MIXED_PROMPTS[(i + offset) % len(MIXED_PROMPTS)]
            status, body = generate(server, prompt, params[key])
            with lock:
                sent[kind] += 1
                if status != 200:
                    failed.append((key, status, body))
                elif body["text_output"] != alone[key, prompt]:
                    wrong[kind].append((key, prompt, body["text_output"], alone[key, prompt]))

    for _ in range(MIXED_ROUNDS):
        start = threading.Barrier(len(clients))
        threads = [threading.Thread(target=client, args=(key, n, start), daemon=True) for n, key in enumerate(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=600)
    print(f"mixed batches: sent {sent}, wrong base {len(wrong['base'])}, wrong adapter {len(wrong['adapter'])}")
    assert failed == [], failed[:3]
    assert sent["base"] >= 300 and sent["adapter"] >= 300, sent
    assert (len(wrong["base"]), len(wrong["adapter"])) == (0, 0), (wrong["base"][:3], wrong["adapter"][:3])


def engine_processes(server) -> dict[int, float]:
    """Triton's process tree (the stub, its EngineCore, the watchdog): pid -> start time."""
    import psutil

    root = psutil.Process(server.info["pid"])
    return {p.pid: p.create_time() for p in [root, *root.children(recursive=True)]}


def write_list(version: Path, listing: dict[str, str]) -> None:
    """A rollout's one write: the next list renamed onto multi_lora.json."""
    staged = version / ".multi_lora.json.next"
    staged.write_text(json.dumps(listing))
    os.replace(staged, version / "multi_lora.json")


def wait_for(server, name: str, status: int, deadline_s: float = 120.0) -> dict:
    import time

    deadline = time.monotonic() + deadline_s
    while True:
        code, body = generate(server, PROMPTS[0], {**SAMPLING, "lora_name": name})
        if code == status:
            return body
        assert time.monotonic() < deadline, (name, code, body)
        time.sleep(0.5)


def test_rewriting_the_list_rolls_adapters_out_under_load_without_restarting_the_engine(served, tiny_llm_weights,
                                                                                        tmp_path):
    """The running model follows multi_lora.json: a new adapter (a new folder) answers as vLLM offline does, an alias
    (a second name for a folder) shares it, a broken adapter (rank above max_lora_rank, a corrupt safetensors) is
    refused by name with the engine's reason instead of stopping the engine, retired names are refused. Base and
    adapter traffic all the while: 0 failed; no process of Triton's tree restarted."""
    import shutil
    import threading

    from tests.support.lora import make_broken

    server, offline = served
    version = Path(server.info["repository"]) / MODEL / "1"
    original = json.loads((version / "multi_lora.json").read_text())
    alpha = version / "adapters" / "alpha"
    fresh = shutil.copytree(alpha, tmp_path / "alpha-2")  # a new folder: a new adapter to vLLM, alpha's weights
    high_rank = make_broken(alpha, tiny_llm_weights, tmp_path / "broken")["high_rank"]
    corrupt = shutil.copytree(alpha, tmp_path / "corrupt")
    (corrupt / "adapter_model.safetensors").write_bytes(b"\xff" * 64)
    before = engine_processes(server)

    stop, counts, failures = threading.Event(), {"base": 0, "beta": 0}, []

    def load() -> None:
        for i in range(2000):
            if stop.is_set():
                return
            key = ("base", "beta")[i % 2]
            code, body = generate(server, PROMPTS[1], {**SAMPLING, "max_tokens": 4}
                                  if key == "base" else {**SAMPLING, "max_tokens": 4, "lora_name": key})
            counts[key] += 1
            if code != 200:
                failures.append((key, code, body))

    traffic = threading.Thread(target=load, daemon=True)
    traffic.start()
    try:
        write_list(version, {**original, "alpha@2": str(fresh), "high-rank": str(high_rank), "corrupt": str(corrupt)})
        assert wait_for(server, "alpha@2", 200)["text_output"] == offline["alpha"][0]
        for name in ("high-rank", "corrupt"):
            body = wait_for(server, name, 400)
            refused = f"LoRA adapter '{name}' in 'lora_name' is listed in multi_lora.json but its folder could not"
            assert refused + " be loaded (" in body["error"], body
        import openai

        client = openai.OpenAI(base_url=server.openai_url, api_key="unused", max_retries=0)
        assert client.completions.create(model="alpha@2", prompt=PROMPTS[0], max_tokens=SAMPLING["max_tokens"],
                                         temperature=0).choices[0].text == offline["alpha"][0]

        # the alias moves to the new folder (no load: that folder is served already), alpha and alpha@2 retire
        write_list(version, {"beta": original["beta"], "support-bot": str(fresh)})
        assert "unknown LoRA adapter 'alpha'" in wait_for(server, "alpha", 400)["error"]
        assert wait_for(server, "support-bot", 200)["text_output"] == offline["alpha"][0]
        assert {m.id for m in client.models.list().data} >= {MODEL, "beta", "support-bot"}
    finally:
        stop.set()
        traffic.join(timeout=300)
        write_list(version, original)
    assert wait_for(server, "alpha", 200)["text_output"] == offline["alpha"][0]  # and back, for the other tests
    print(f"requests during the rollout: {counts}, failed: {len(failures)}")
    assert counts["base"] > 0 and counts["beta"] > 0 and failures == [], failures[:3]
    after = engine_processes(server)
    assert {pid: t for pid, t in after.items() if pid in before} == before, (before, after)
