"""`echo` with `logprobs` on /v1/completions (the prompt's own log-probabilities, as loglikelihood
evaluators read them) and token-id prompts, compared with `vllm serve`'s answer to the same requests on
the same weights (greedy).

One engine at a time: `vllm serve` (started as bench/vllm_serving.py starts it, with its engine settings)
answers first and is stopped, then the integration conftest's shared Triton (`vllm_server`: the same weights
and settings) serves the same requests through the frontend."""

from __future__ import annotations

import importlib.util
import json
import urllib.error
import urllib.request

import pytest

from tests.support.paths import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MODEL = "tiny_llm"
PROMPT = "The quick brown fox jumps over"
BASE = {"model": MODEL, "max_tokens": 4, "temperature": 0, "ignore_eos": True}
REQUESTS = {
    "echo": {**BASE, "prompt": PROMPT, "echo": True, "logprobs": 2},
    "echo_k0": {**BASE, "prompt": [PROMPT, "hello world"], "echo": True, "logprobs": 0},
    "ids": {**BASE, "prompt": [5, 17, 99, 230, 7], "logprobs": 1},
    "ids_echo": {**BASE, "prompt": [[5, 17, 99, 230, 7], [300, 12]], "echo": True, "logprobs": 1},
    "stream_echo": {**BASE, "prompt": PROMPT, "echo": True, "logprobs": 2, "stream": True},
}


def _post(url: str, body: dict) -> dict | list:
    request = urllib.request.Request(f"{url}/v1/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            raw = response.read().decode()
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{exc.code}: {exc.read().decode()[:500]}") from None
    if not body.get("stream"):
        return json.loads(raw)
    return [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: ") and line != "data: [DONE]"]


def _joined(chunks: list) -> dict:
    """A streamed completion's chunks of choice 0 -> its text and logprobs, joined."""
    text, lp = "", {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for chunk in chunks:
        for choice in chunk["choices"]:
            text += choice["text"]
            for key in lp:
                lp[key] += (choice["logprobs"] or {}).get(key) or []
    return {"text": text, "logprobs": lp}


@pytest.fixture(scope="module")
def weights(tiny_llm_weights):
    """The tiny LLM the shared server serves."""
    return tiny_llm_weights


@pytest.fixture(scope="module")
def vllm_answers(weights):
    """`vllm serve`'s answers, collected before Triton's engine starts."""
    spec = importlib.util.spec_from_file_location("bench_vllm_serving", ROOT / "bench" / "vllm_serving.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
        with bench.vllm_server(weights) as (url, _pid):
            return {name: _post(url, body) for name, body in REQUESTS.items()}


@pytest.fixture(scope="module")
def frontend(vllm_answers, vllm_server, vllm_repo):
    from tritonpkg.frontend import FrontendServer, FrontendSettings

    with FrontendServer(FrontendSettings(triton_grpc_url=vllm_server.grpc_url, port=0, model_repository=vllm_repo,
                                         triton_admin_key=vllm_server.admin_key)) as fe:
        yield fe


def _same_logprobs(ours: dict, theirs: dict) -> None:
    assert ours["tokens"] == theirs["tokens"]
    assert ours["text_offset"] == theirs["text_offset"]
    assert ours["token_logprobs"] == pytest.approx(theirs["token_logprobs"], abs=1e-4)
    assert [sorted(t or {}) for t in ours["top_logprobs"]] == [sorted(t or {}) for t in theirs["top_logprobs"]]
    for mine, other in zip(ours["top_logprobs"], theirs["top_logprobs"], strict=True):
        assert (mine is None) == (other is None)
        assert mine is None or mine == pytest.approx(other, abs=1e-4)


@pytest.mark.parametrize("name", [n for n in REQUESTS if not n.startswith("stream")])
def test_completions_equal_vllm_serve(frontend, vllm_answers, name):
    """echo + logprobs: the prompt's tokens first (the first one with null logprobs, nothing precedes it), then
    the answer's, text_offset from 0; token-id prompts as vLLM takes them; usage counts the prompt tokens."""
    ours, theirs = _post(frontend.url, REQUESTS[name]), vllm_answers[name]
    assert len(ours["choices"]) == len(theirs["choices"])
    for mine, other in zip(ours["choices"], theirs["choices"], strict=True):
        assert mine["text"] == other["text"] and mine["finish_reason"] == other["finish_reason"]
        _same_logprobs(mine["logprobs"], other["logprobs"])
    assert ours["usage"] == {k: theirs["usage"][k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
    if REQUESTS[name].get("echo"):
        first = ours["choices"][0]["logprobs"]
        assert first["token_logprobs"][0] is None and first["top_logprobs"][0] is None
        assert all(v is not None for v in first["token_logprobs"][1:])


def test_streamed_echo_with_logprobs_joins_to_vllm_serves_stream(frontend, vllm_answers):
    ours, theirs = _joined(_post(frontend.url, REQUESTS["stream_echo"])), _joined(vllm_answers["stream_echo"])
    assert ours["text"] == theirs["text"] and ours["text"].startswith(PROMPT)
    _same_logprobs(ours["logprobs"], theirs["logprobs"])
    whole = _post(frontend.url, REQUESTS["echo"])["choices"][0]
    assert ours["logprobs"] == whole["logprobs"]
