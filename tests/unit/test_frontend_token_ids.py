"""Token-id prompts are checked before the engine sees them: JSON integers only, inside the model's
vocabulary (the larger of its config's and its tokenizer's, as vLLM bounds them), within its context."""

from __future__ import annotations

import json

import pytest

from tests.support.paths import EXAMPLES
from tritonpkg.frontend.catalog import ModelEntry, vocab_size
from tritonpkg.frontend.chat_tokenizer import load_chat_tokenizer
from tritonpkg.frontend.checks import check_token_ids
from tritonpkg.frontend.errors import APIError
from tritonpkg.frontend.protocol import CompletionRequest, EmbeddingRequest

TOKENIZER = EXAMPLES / "tiny-llm" / "tokenizer"


def entry(tmp_path, config_vocab: int | None, context: int = 64) -> ModelEntry:
    weights = tmp_path / "weights"
    weights.mkdir(exist_ok=True)
    if config_vocab is not None:
        (weights / "config.json").write_text(json.dumps({"vocab_size": config_vocab}))
    e = ModelEntry(name="m", version="1", kind="generate", backend="vllm", created=0,
                   engine_args={"model": str(weights), "max_model_len": context})
    e.tokenizer = load_chat_tokenizer(TOKENIZER)
    e.vocab_size = vocab_size(e)
    return e


def test_the_bound_is_the_larger_of_the_models_and_the_tokenizers(tmp_path):
    tokens = load_chat_tokenizer(TOKENIZER).tokenizer.get_vocab_size(with_added_tokens=True)
    assert entry(tmp_path, None).vocab_size == tokens
    assert entry(tmp_path, tokens + 100).vocab_size == tokens + 100
    assert entry(tmp_path, 3).vocab_size == tokens


@pytest.mark.parametrize(("prompts", "message"), [
    ([[5, 600]], "holds token id 600"), ([[5], [5] * 64], "'prompt.1' has 64 tokens")])
def test_out_of_vocabulary_or_context_is_a_400_naming_the_field(tmp_path, prompts, message):
    with pytest.raises(APIError) as info:
        check_token_ids(entry(tmp_path, 600), prompts, "prompt")
    assert info.value.status == 400 and info.value.param == "prompt" and message in info.value.message
    check_token_ids(entry(tmp_path, 600), [[5, 599], "text", [5] * 63], "prompt")


@pytest.mark.parametrize("ids", [[5, True], [5, "6"], [5, 6.0], [[5, False]]])
def test_token_ids_are_json_integers(ids):
    for model, field in ((CompletionRequest, "prompt"), (EmbeddingRequest, "input")):
        with pytest.raises(ValueError, match=field):
            model(model="m", **{field: ids})
