"""The toolkit's vLLM backend (backends/vllm/model.py) inside a real tritonserver, on the tiny LLM.

One server for the module: the tiny model is made into a tmp dir, packaged from the example spec
with `package_spec`, and served once (a vLLM engine takes tens of seconds to start on a CPU)."""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.conftest import EXAMPLES

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TINY = EXAMPLES / "tiny-llm"
MODEL = "tiny_llm"
PROMPT = "hello world"


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(TINY / "tokenizer" / "tokenizer.json"))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tritonpkg.repository import package_spec
    from tritonpkg.runtime import TritonServer, ensure_runtime
    from tritonpkg.spec import load_spec

    root = tmp_path_factory.mktemp("vllm-backend")
    weights = root / "weights"
    subprocess.run([sys.executable, str(TINY / "make_tiny_llm.py"), "--out", str(weights)], check=True, timeout=300)
    spec_data = yaml.safe_load((TINY / "tritonpkg.yaml").read_text())
    spec_data["weights"] = str(weights)
    spec_dir = root / "spec"
    spec_dir.mkdir()
    (spec_dir / "tritonpkg.yaml").write_text(yaml.safe_dump(spec_data))
    repo = root / "repository"
    package_spec(load_spec(spec_dir), repo)

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
        with TritonServer(repo, runtime=ensure_runtime(), startup_timeout=600) as srv:
            yield srv


def generate(server, body: dict, endpoint: str = "generate") -> tuple[int, dict | list[dict]]:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(
        f"{server.http_url}/v2/models/{MODEL}/{endpoint}", data=json.dumps(body).encode(), method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            status, text = resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read().decode()
    if endpoint == "generate_stream":
        return status, [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]
    return status, json.loads(text)


def grpc_stream(server, prompt: str, params: dict, stream: bool = True, cancel_after: int | None = None):
    """Send one request over a gRPC bidirectional stream; (text chunks, error or None)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    inputs = []
    for name, dtype, value in (
        ("text_input", "BYTES", prompt.encode()),
        ("stream", "BOOL", stream),
        ("sampling_parameters", "BYTES", json.dumps(params).encode()),
        ("exclude_input_in_output", "BOOL", True),
    ):
        tensor = grpcclient.InferInput(name, [1], dtype)
        tensor.set_data_from_numpy(np.array([value], dtype=object if dtype == "BYTES" else bool))
        inputs.append(tensor)
    client.async_stream_infer(MODEL, inputs, enable_empty_final_response=True)
    chunks: list[str] = []
    try:
        while True:
            result, error = results.get(timeout=120)
            if error is not None:
                return chunks, str(error)
            text = result.as_numpy("text_output")
            if text is not None:
                chunks.append(text[0].decode())
            if cancel_after is not None and len(chunks) >= cancel_after:
                client.stop_stream(cancel_requests=True)
                return chunks, None
            if result.get_response().parameters["triton_final_response"].bool_param:
                return chunks, None
    finally:
        client.stop_stream()
        client.close()


def word_token_ids(tokenizer) -> list[int]:
    """Ids of " word" tokens that re-encode to themselves: text made only of them re-tokenizes to
    exactly as many tokens, so counting tokens of the output is exact."""
    ids = []
    for token, idx in tokenizer.get_vocab().items():
        text = tokenizer.decode([idx])
        if re.fullmatch(r" [A-Za-z]+", text) and tokenizer.encode(text).ids == [idx]:
            ids.append(idx)
    return sorted(ids)


def test_generate_returns_text_with_prompt_by_default(server):
    status, body = generate(server, {"text_input": PROMPT, "parameters": {"max_tokens": 8, "temperature": 0}})
    assert status == 200, body
    assert body["text_output"].startswith(PROMPT)
    assert len(body["text_output"]) > len(PROMPT)

    status, only_new = generate(
        server, {"text_input": PROMPT, "parameters": {"max_tokens": "8", "temperature": "0", "exclude_input_in_output": True}}
    )
    assert status == 200, only_new
    assert PROMPT + only_new["text_output"] == body["text_output"]


def test_grpc_stream_deltas_join_to_the_non_stream_text(server):
    params = {"max_tokens": 12, "temperature": 0, "ignore_eos": True}
    chunks, error = grpc_stream(server, PROMPT, params)
    assert error is None
    assert len(chunks) > 1
    whole, error = grpc_stream(server, PROMPT, params, stream=False)
    assert error is None
    assert len(whole) == 1
    assert "".join(chunks) == whole[0]


def test_http_generate_stream_sends_several_events(server):
    status, events = generate(
        server,
        {"text_input": PROMPT, "stream": True, "parameters": {"max_tokens": 6, "temperature": 0, "ignore_eos": True}},
        "generate_stream",
    )
    assert status == 200
    assert len(events) > 1 and all("text_output" in e for e in events), events


def test_unknown_sampling_key_is_an_error_naming_it(server):
    status, body = generate(server, {"text_input": PROMPT, "parameters": {"max_tokens": 4, "temprature": 0.5}})
    assert status != 200
    assert "temprature" in body["error"]

    chunks, error = grpc_stream(server, PROMPT, {"max_tokens": 4, "lora_name": "x"})
    assert chunks == []
    assert error is not None and "lora_name" in error


def test_bad_values_and_too_long_prompts_are_error_responses(server):
    status, body = generate(server, {"text_input": PROMPT, "parameters": {"max_tokens": "many"}})
    assert status != 200 and "max_tokens" in body["error"]
    status, body = generate(server, {"text_input": PROMPT, "parameters": {"temperature": -1}})
    assert status != 200 and "temperature" in body["error"]
    status, body = generate(server, {"text_input": "hello world " * 200, "parameters": {"max_tokens": 4}})
    assert status != 200 and "context length" in body["error"]
    status, body = generate(server, {"text_input": PROMPT, "parameters": {"max_tokens": 2}})
    assert status == 200, body


def test_max_tokens_is_respected(server, tokenizer):
    allowed = word_token_ids(tokenizer)
    assert len(allowed) > 10
    for max_tokens in (1, 5, 17):
        status, body = generate(
            server,
            {
                "text_input": PROMPT,
                "exclude_input_in_output": True,
                "sampling_parameters": json.dumps(
                    {"max_tokens": str(max_tokens), "ignore_eos": True, "allowed_token_ids": allowed, "seed": 7}
                ),
            },
        )
        assert status == 200, body
        ids = tokenizer.encode(body["text_output"]).ids
        assert 1 <= len(ids) <= max_tokens, (max_tokens, body["text_output"])


def test_cancelled_stream_is_aborted_in_vllm(server):
    chunks, error = grpc_stream(server, PROMPT, {"max_tokens": 240, "ignore_eos": True}, cancel_after=2)
    assert error is None and len(chunks) == 2
    deadline = time.monotonic() + 10
    while "cancelled by the client" not in server.log_tail(400) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "cancelled by the client" in server.log_tail(400)
    status, body = generate(server, {"text_input": PROMPT, "parameters": {"max_tokens": 3}})
    assert status == 200, body
