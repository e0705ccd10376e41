"""Prompts before generation: token counts, the chat template's rendering, the default max_tokens; long
texts are tokenized in the tokenizer pool, never on the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi import Request

from tritonpkg.frontend.catalog import ModelEntry
from tritonpkg.frontend.checks import check_prompt_bytes
from tritonpkg.frontend.errors import APIError
from tritonpkg.frontend.mapping import Plan, Prompt, chat_messages, default_max_tokens, without_added_bos
from tritonpkg.frontend.protocol import ChatCompletionRequest

INLINE_TOKENIZE_CHARS = 1024  # shorter prompts are tokenized on the event loop (at most ~1 ms)


async def tokenizing(request: Request, chars: int, fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) in the tokenizer pool; inline for short texts (microseconds, less than the thread hop)."""
    if chars < INLINE_TOKENIZE_CHARS:
        return fn(*args)
    return await asyncio.get_running_loop().run_in_executor(request.app.state.tokenize, fn, *args)


def count_tokens(tokenizer: Any, text: str, add_special_tokens: bool) -> int:
    """Token count without building the id list (a ChatTokenizer can; transformers' cannot)."""
    count = getattr(tokenizer, "count", None)
    if count is not None:
        return count(text, add_special_tokens)
    return len(tokenizer.encode(text, add_special_tokens=add_special_tokens))


def longest_prompt(tokenizer: Any, prompts: list[Prompt]) -> int:
    return max(count_tokens(tokenizer, p, True) if isinstance(p, str) else len(p) for p in prompts)


def set_default_max_tokens(plan: Plan, entry: ModelEntry, prompt_tokens: int, param: str) -> None:
    value = default_max_tokens(entry.max_model_len, prompt_tokens, param)
    if value is not None:
        plan.params["max_tokens"] = value


def render_chat(entry: ModelEntry, body: ChatCompletionRequest, plan: Plan,
                with_ids: bool = False) -> tuple[str, int, list[int] | None]:
    """The model's own chat template over the messages -> (prompt text, its token count, its token ids when
    `with_ids`: what vLLM's parsers get); runs in the tokenizer pool."""
    tokenizer = entry.tokenizer
    if tokenizer is None:
        raise APIError(400, f"chat is unavailable for model '{entry.name}': {entry.tokenizer_error}", param="model")
    if not getattr(tokenizer, "chat_template", None):
        raise APIError(400, f"model '{entry.name}'s tokenizer has no chat template; use /v1/completions",
                       param="messages")
    extra: dict[str, Any] = {}
    if body.reasoning_effort is not None:  # vLLM passes it to the template; a template that ignores it cannot honour it
        if "reasoning_effort" not in str(tokenizer.chat_template):
            raise APIError(400, f"model '{entry.name}'s chat template does not read reasoning_effort",
                           param="reasoning_effort")
        extra["reasoning_effort"] = body.reasoning_effort
    try:
        prompt = tokenizer.apply_chat_template(chat_messages(body), tools=plan.tools or None, tokenize=False,
                                               add_generation_prompt=True, **extra)
    except Exception as exc:
        raise APIError(400, f"the chat template of model '{entry.name}' refused the messages: {exc}",
                       param="messages") from None
    check_prompt_bytes(entry, prompt, "messages", " rendered by the chat template")
    text = without_added_bos(prompt, entry.bos_added)
    if with_ids:
        ids = tokenizer.encode(prompt, add_special_tokens=False)
        return text, len(ids), ids
    return text, count_tokens(tokenizer, prompt, False), None


def echo_texts(entry: ModelEntry, plan: Plan) -> list[str]:
    """Each prompt as echoed: its text, or its token ids decoded (as vLLM's server echoes them)."""
    if not plan.echo or all(isinstance(p, str) for p in plan.prompts):
        return [p if isinstance(p, str) else "" for p in plan.prompts]
    if entry.tokenizer is None:
        raise APIError(400, f"'echo' of token ids needs model '{entry.name}''s tokenizer: {entry.tokenizer_error}",
                       param="echo")
    return [p if isinstance(p, str) else entry.tokenizer.decode(p) for p in plan.prompts]
