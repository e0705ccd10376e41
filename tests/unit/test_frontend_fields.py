"""OpenAI fields that do not change the output are accepted (metadata bounded), and reasoning_effort
reaches a chat template that reads it, as vLLM passes it."""

from __future__ import annotations

import json

import pytest

from tests.support.paths import EXAMPLES
from tritonpkg.frontend.catalog import ModelEntry
from tritonpkg.frontend.chat_tokenizer import load_chat_tokenizer
from tritonpkg.frontend.errors import APIError
from tritonpkg.frontend.mapping import chat_plan
from tritonpkg.frontend.prompts import render_chat
from tritonpkg.frontend.protocol import ChatCompletionRequest
from tritonpkg.frontend.routes.models import model_card

USER = [{"role": "user", "content": "hi"}]


def chat(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest(**{"model": "m", "messages": USER, **fields})


def test_metadata_store_false_and_user_ask_nothing():
    plan = chat_plan(chat(metadata={"k": "v"}, store=False, user="u"))
    assert set(plan.params) <= {"n"}


@pytest.mark.parametrize("metadata", [{f"k{i}": "v" for i in range(17)}, {"k" * 65: "v"}, {"k": "v" * 513}, {"k": 1}])
def test_metadata_is_bounded(metadata):
    with pytest.raises((APIError, ValueError)):
        chat(metadata=metadata)


def entry(tmp_path, template: str) -> ModelEntry:
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes((EXAMPLES / "tiny-llm" / "tokenizer" / "tokenizer.json").read_bytes())
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": template, "eos_token": "</s>"}))
    e = ModelEntry(name="m", version="1", kind="generate", backend="vllm", created=0, engine_args={"max_model_len": 64})
    e.tokenizer = load_chat_tokenizer(folder)
    return e


def test_reasoning_effort_reaches_a_template_that_reads_it(tmp_path):
    e = entry(tmp_path, "effort={{ reasoning_effort | default('unset') }}:{{ messages[0]['content'] }}")
    body = chat(reasoning_effort="high")
    prompt, _, _ = render_chat(e, body, chat_plan(body))
    assert prompt == "effort=high:hi"


def test_reasoning_effort_is_refused_by_a_template_that_ignores_it(tmp_path):
    e = entry(tmp_path, "{{ messages[0]['content'] }}")
    body = chat(reasoning_effort="high")
    with pytest.raises(APIError) as info:
        render_chat(e, body, chat_plan(body))
    assert info.value.param == "reasoning_effort" and info.value.status == 400


def test_model_card_fields(tmp_path):
    card = model_card(entry(tmp_path, "x"))
    assert {k: card[k] for k in ("id", "root", "parent", "max_model_len")} == {"id": "m", "root": "m", "parent": None,
                                                                              "max_model_len": 64}


def test_backend_errors_name_the_served_model_and_the_field(tmp_path):
    from tritonpkg.frontend.calls import in_served_terms

    weights = tmp_path / "weights" / "tiny"
    e = ModelEntry(name="tiny_llm", version="1", kind="generate", backend="vllm", created=0,
                   engine_args={"model": str(weights)})
    exc = in_served_terms(e, APIError(400, f"model {weights}: token id 99999 is out of vocabulary "
                                           "(parameter=logit_bias, value=[99999])"))
    assert str(tmp_path) not in exc.message and "model tiny_llm:" in exc.message and exc.param == "logit_bias"
    assert in_served_terms(e, APIError(400, "sampling parameter 'bogus': no")).param == "bogus"
    assert in_served_terms(e, APIError(503, "engine died")).param is None
