"""Backend outputs -> OpenAI response bodies and stream chunks (pure)."""

from __future__ import annotations

import itertools
import json
import uuid
from typing import Any

from tritonpkg.frontend.errors import APIError
from tritonpkg.frontend.triton import Output

# vLLM's finish reasons that OpenAI names the same; anything else (abort, error) is not a normal end.
FINISH = {"stop": "stop", "length": "length"}
MIN_LOGPROB = -9999.0  # vLLM's stand-in for -inf, which JSON cannot carry


_PROCESS = uuid.uuid4().hex[:12]
_COUNTER = itertools.count()


def new_id(prefix: str) -> str:
    """Unique per process start and request; cheaper than a uuid4 per request (measurable per request)."""
    return f"{prefix}-{_PROCESS}{next(_COUNTER):012x}"


def rerank_body(model: str, documents: list[str], scores: Any, tokens: int, top_n: int | None,
                return_documents: bool) -> dict[str, Any]:
    """Results best first (ties keep document order), at most `top_n`, each with its document's index."""
    order = sorted(range(len(documents)), key=lambda i: -float(scores[i]))[:top_n]
    results = [{"index": i, "relevance_score": float(scores[i]),
                **({"document": {"text": documents[i]}} if return_documents else {})} for i in order]
    return {"id": new_id("rerank"), "model": model, "usage": {"total_tokens": tokens}, "results": results}


def finish_reason(raw: str | None) -> str | None:
    if raw is None:
        return None
    if raw not in FINISH:
        raise APIError(503, f"the backend ended the generation with '{raw}'")
    return FINISH[raw]


def usage(prompt_tokens: int | None, completion_tokens: int | None) -> dict[str, int] | None:
    if prompt_tokens is None or completion_tokens is None:
        return None
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def _lp(value: float | None) -> float:
    return MIN_LOGPROB if value is None else value


def _token(entry: dict[str, Any]) -> dict[str, Any]:
    return {"token": entry["token"], "logprob": _lp(entry["logprob"]), "bytes": list(entry["token"].encode("utf-8"))}


def chat_logprobs(positions: list[dict[str, Any]] | None, k: int) -> dict[str, Any] | None:
    if positions is None:
        return None
    content = []
    for pos in positions:
        item = _token(pos["sampled"])
        item["top_logprobs"] = [_token(e) for e in pos["top"] if e["rank"] is not None and e["rank"] <= k][:k]
        content.append(item)
    return {"content": content}


def completion_logprobs(positions: list[dict[str, Any]] | None, k: int, offset: int = 0) -> dict[str, Any] | None:
    """OpenAI's completions logprobs. `top_logprobs` holds the sampled token and the k most likely (k+1 entries
    when the sampled one is not among them, as OpenAI and vLLM give); `text_offset` advances by each token's
    text, streamed or not (see tokens_length)."""
    if positions is None:
        return None
    tokens: list[str] = []
    token_logprobs: list[float | None] = []
    top: list[dict[str, float] | None] = []
    offsets: list[int] = []
    for pos in positions:
        sampled = pos["sampled"]
        offsets.append(offset)
        offset += len(sampled["token"])
        tokens.append(sampled["token"])
        if sampled["rank"] is None and sampled["logprob"] is None:  # a prompt's first token: nothing precedes it
            token_logprobs.append(None)
            top.append(None)
            continue
        token_logprobs.append(_lp(sampled["logprob"]))
        entries = {sampled["token"]: _lp(sampled["logprob"])}
        for e in pos["top"]:
            if e["rank"] is not None and e["rank"] <= k:
                entries.setdefault(e["token"], _lp(e["logprob"]))
        top.append(entries)
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top, "text_offset": offsets}


def tokens_length(positions: list[dict[str, Any]]) -> int:
    """How far text_offset moves over these positions: the tokens' own text, not the delta's (a token that is
    part of a UTF-8 sequence streams as "" until the sequence completes, but is a character of its own here)."""
    return sum(len(pos["sampled"]["token"]) for pos in positions)


def tool_call(name: str, arguments: str, call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def chat_message(text: str, tool: str | None) -> dict[str, Any]:
    """A forced tool's message has content "" beside its call, as vLLM's server answers one."""
    if tool is None:
        return {"role": "assistant", "content": text}
    return {"role": "assistant", "content": "", "tool_calls": [tool_call(tool, text, new_id("call"))]}


def tool_finish(reason: str | None, called: bool) -> str | None:
    """OpenAI's finish_reason: 'tool_calls' for an answer that ends calling tools (auto or required), never for a
    named tool."""
    return "tool_calls" if called and reason == "stop" else reason


def chat_body(rid: str, created: int, model: str, output: Output, logprobs: int | None,
              tool: str | None, parse: Any = None, tool_required: bool = False) -> dict[str, Any]:
    """`parse` (parsing.ChatParse): the model's vLLM parsers split each answer into reasoning, content and
    tool calls; finish_reason is 'tool_calls' when an answer called tools (not for a named tool)."""
    choices = []
    for i, text in enumerate(output.texts):
        reason = finish_reason(output.finish_reasons[i])
        if parse is not None:
            message, called = parse.message(i, text)
            reason = tool_finish(reason, called)
        else:
            message = chat_message(text, tool)
            reason = tool_finish(reason, tool_required)
        choices.append({
            "index": i,
            "message": message,
            "logprobs": chat_logprobs(output.logprobs[i],
                                      logprobs or 0) if logprobs is not None and output.logprobs else None,
            "finish_reason": reason,
        })
    completion = sum(output.completion_tokens) if output.completion_tokens is not None else None
    return {"id": rid, "object": "chat.completion", "created": created, "model": model, "choices": choices,
            "usage": usage(output.prompt_tokens, completion)}


def completion_body(rid: str, created: int, model: str, prompts: list[str], outputs: list[Output],
                    echo: bool, logprobs: int | None) -> dict[str, Any]:
    choices: list[dict[str, Any]] = []
    prompt_tokens: int | None = 0
    completion_tokens: int | None = 0
    for prompt, output in zip(prompts, outputs, strict=False):
        for i, text in enumerate(output.texts):
            positions = output.logprobs[i] if output.logprobs and logprobs is not None else None
            offset = len(prompt) if echo else 0
            if echo and positions is not None and output.prompt_logprobs is not None:
                positions, offset = output.prompt_logprobs + positions, 0  # the prompt's tokens, then the answer's
            choices.append({
                "index": len(choices),
                "text": prompt + text if echo else text,
                "logprobs": completion_logprobs(positions, logprobs or 0, offset) if positions is not None else None,
                "finish_reason": finish_reason(output.finish_reasons[i]),
            })
        prompt_tokens = (None if prompt_tokens is None or output.prompt_tokens is None
                         else prompt_tokens + output.prompt_tokens)
        completion_tokens = (None if completion_tokens is None or output.completion_tokens is None
                             else completion_tokens + sum(output.completion_tokens))
    return {"id": rid, "object": "text_completion", "created": created, "model": model, "choices": choices,
            "usage": usage(prompt_tokens, completion_tokens)}


def sse(data: dict[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


DONE = sse("[DONE]")
