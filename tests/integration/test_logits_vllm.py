"""The constraint processor inside a real vLLM CPU engine, loaded only through its entry point.

One engine for the module, on the tiny random Llama (its output is noise, so every constraint is
really doing the work): 32 concurrent requests with different constraints, chunked prefill (a small
max_num_batched_tokens and long prompts), a KV cache too small for the batch (preemption), and async
scheduling left at vLLM's default.
"""

from __future__ import annotations

import itertools
import json
import os
import random

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600),
              pytest.mark.usefixtures("vllm_cpu_layout")]  # the offline engine in processes of its own, not in pytest's
pytest.importorskip("tritonpkg_logits._core", reason="logits_ext is not built (scripts/setup.sh builds it)")
vllm = pytest.importorskip("vllm")

N_REQUESTS, MAX_TOKENS = 32, 24


@pytest.fixture(scope="module")
def llm(tiny_llm_weights):
    from importlib.metadata import entry_points

    assert any(ep.value.startswith("tritonpkg_logits.") for ep in entry_points(group="vllm.logits_processors"))
    model = tiny_llm_weights
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    engine = vllm.LLM(
        model=str(model), enforce_eager=True, max_model_len=256, max_num_seqs=N_REQUESTS,
        max_num_batched_tokens=64, enable_chunked_prefill=True, num_gpu_blocks_override=16, block_size=32,
        seed=0, dtype="bfloat16", async_scheduling=True, disable_log_stats=False,
    )
    yield engine
    del engine


def dfa_walk(spec, ids):
    table = {(f, t): to for f, t, to in spec["transitions"]}
    state = spec["start"]
    for t in ids:
        assert (state, t) in table, (state, t)
        state = table[(state, t)]
    return state


def test_every_output_satisfies_its_constraint(llm):
    from vllm import SamplingParams

    tok = llm.get_tokenizer()
    eos = tok.eos_token_id
    rng = random.Random(7)
    choices = ["Paris", "hello world", "Triton", "yes", "no"]
    cases = []
    for i in range(N_REQUESTS):
        kind = i % 5
        if kind == 0:
            spec = {"type": "allow", "tokens": rng.sample(range(3, 500), 8)}
        elif kind == 1:
            spec = {"type": "ban", "tokens": rng.sample(range(3, 500), 400)}
        elif kind == 2:
            spec = {"type": "choice", "choices": rng.sample(choices, 2)}
        elif kind == 3:
            a, b, c = rng.sample(range(3, 500), 3)
            spec = {"type": "token_dfa", "start": 0, "accept": [0],
                    "transitions": [[0, a, 1], [0, b, 1], [1, c, 0], [1, a, 0]]}
        else:
            spec = {"type": "ngram", "banned": [[t] for t in rng.sample(range(3, 500), 50)], "max_repeat": 1}
        cases.append(spec)
    # long prompts: several prefill chunks each at 64 batched tokens
    prompts = [("The quick brown fox jumps over the lazy dog. " * 8)[: 300 + i] for i in range(N_REQUESTS)]
    params = [SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0,
                             extra_args={"constraint": json.dumps(s) if i % 2 else s})
              for i, s in enumerate(cases)]
    outs = llm.generate(prompts, params, use_tqdm=False)
    assert len(outs) == N_REQUESTS
    for spec, out in zip(cases, outs, strict=False):
        ids = list(out.outputs[0].token_ids)
        body = ids[:-1] if ids and ids[-1] == eos else ids
        assert eos not in body, (spec["type"], ids)
        kind = spec["type"]
        if kind == "allow":
            assert set(body) <= set(spec["tokens"]), ids
        elif kind == "ban":
            assert not set(ids) & set(spec["tokens"]), ids
        elif kind == "choice":
            assert ids[-1] == eos, ids  # a complete choice allows only EOS after it
            assert tok.decode(body) in spec["choices"], tok.decode(body)
        elif kind == "token_dfa":
            state = dfa_walk(spec, body)
            assert ids[-1] != eos or state == 0
        else:
            banned = {g[0] for g in spec["banned"]}
            assert not set(ids) & banned, ids
            assert all(a != b for a, b in itertools.pairwise(ids)), ids
    # the conditions this test exists for really happened in that engine
    # (vLLM's CPU platform forces async scheduling off, so placeholders are covered by unit tests only)
    metrics = {m.name: m for m in llm.get_metrics()}
    assert metrics["vllm:num_preemptions"].value > 0
    # the constrained outputs differ from what the model does unconstrained
    free = llm.generate(prompts[:5], [SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0) for _ in range(5)],
                        use_tqdm=False)
    assert any(not set(f.outputs[0].token_ids) <= set(cases[0]["tokens"]) | {eos} for f in free[:1])


def test_malformed_constraint_is_rejected_at_admission(llm):
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError

    # VLLMValidationError is what vLLM's server answers with HTTP 400
    with pytest.raises((ValueError, VLLMValidationError), match="unknown field"):
        llm.generate(["hi"], SamplingParams(max_tokens=2,
                                            extra_args={"constraint": {"type": "ban", "tokens": [1], "bogus": 0}}),
                     use_tqdm=False)
