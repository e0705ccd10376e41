"""The request checks made before the engine sees a request: bounds (sequences, prompt bytes, token ids
against the vocabulary and context), the inputs the model's backend has, and parsers that failed to load.
A refusal is an APIError; a 400 names the request's field."""

from __future__ import annotations

from typing import Any

from tritonpkg.frontend.catalog import ModelEntry
from tritonpkg.frontend.errors import APIError
from tritonpkg.frontend.mapping import Plan
from tritonpkg.frontend.parsing import ModelParsers


def model_parsers(entry: ModelEntry) -> ModelParsers | None:
    """The model's vLLM parsers; a model whose spec names parsers that did not load serves no chat (its
    answers would come back unparsed): 500 naming the reason."""
    if entry.parser_names and entry.parsers is None:
        raise APIError(500, entry.parser_error or f"the OpenAI parsers of model '{entry.name}' are not loaded")
    return entry.parsers


def check_sequences(plan: Plan, limit: int) -> None:
    """Every prompt times n is one sequence in the engine: a bound per request, so one request cannot
    fill the engine's batch (vLLM schedules 256 sequences at a time by default)."""
    prompts = max(len(plan.prompts), 1)
    if prompts * plan.n > limit:
        raise APIError(400, f"{prompts} prompt(s) x n={plan.n} ask for {prompts * plan.n} sequences; at most {limit} "
                            "per request", param="n" if plan.n > 1 and prompts <= limit else "prompt")


def check_prompt_bytes(entry: ModelEntry, text: str, param: str, which: str = "") -> None:
    """Refuse, before tokenizing it, a prompt too long in bytes to fit the context in any tokenization
    (entry.max_prompt_bytes: the context times the most bytes one token of this tokenizer covers)."""
    bound = entry.max_prompt_bytes
    if bound is None or len(text) * 4 <= bound:  # a character is at most 4 bytes of UTF-8
        return
    if len(text) > bound:
        size = f"at least {len(text)}"
    else:
        encoded = len(text.encode("utf-8"))
        if encoded <= bound:
            return
        size = str(encoded)
    raise APIError(400, f"the prompt{which} has {size} bytes; model '{entry.name}' has a context of "
                        f"{entry.max_model_len} tokens, and no text of more than {bound} bytes fits in it", param=param)


def check_backend_inputs(entry: ModelEntry, plan: Plan) -> None:
    """Token-id prompts and prompt log-probabilities need inputs the vLLM backend has (NVIDIA's does not)."""
    if any(not isinstance(p, str) for p in plan.prompts) and "prompt_token_ids" not in entry.inputs:
        raise APIError(400, f"model '{entry.name}' takes text prompts only (its backend has no 'prompt_token_ids' "
                            "input)", param="prompt")
    if "prompt_logprobs" in plan.params and "return_prompt_logprobs" not in entry.inputs:
        raise APIError(400, f"'echo' with 'logprobs' needs prompt log-probabilities, which model '{entry.name}''s "
                            "backend does not return (no 'return_prompt_logprobs' input)", param="echo")


def check_token_ids(entry: ModelEntry, prompts: list[Any], field: str) -> None:
    """Token-id prompts against the model's vocabulary and context, before the engine sees them (vLLM
    would refuse them too, naming no field or `input_tokens`)."""
    for i, ids in enumerate(prompts):
        if isinstance(ids, str):
            continue
        where = f"{field}.{i}" if len(prompts) > 1 else field
        vocab, context = entry.vocab_size, entry.max_model_len
        if vocab is not None and (top := max(ids)) >= vocab:
            raise APIError(400, f"'{where}' holds token id {top}; model '{entry.name}' has a vocabulary of {vocab} "
                                f"ids (0 to {vocab - 1})", param=field)
        if context is not None and len(ids) >= context:
            raise APIError(400, f"'{where}' has {len(ids)} tokens; model '{entry.name}''s context is {context}",
                           param=field)
