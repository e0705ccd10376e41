"""Server-sent events for streamed completions and chat: OpenAI's chunk objects, then `data: [DONE]`.

The route awaits the backend's first response before answering, so a request the backend rejects
still gets its 4xx status; an error after that arrives as an `{"error": ...}` event, which the
openai client raises."""

from __future__ import annotations

from typing import Any, AsyncIterator

from tritonpkg.frontend.errors import APIError
from tritonpkg.frontend.mapping import Plan
from tritonpkg.frontend.parsing import ChatParse
from tritonpkg.frontend.responses import (DONE, chat_logprobs, completion_logprobs, finish_reason, new_id, sse,
                                          tokens_length, usage)
from tritonpkg.frontend.triton import Output


class _Counter:
    def __init__(self) -> None:
        self.prompt: int | None = None
        self.completion: int | None = 0

    def add(self, output: Output) -> None:
        if output.prompt_tokens is not None:
            self.prompt = output.prompt_tokens
        if self.completion is not None:
            self.completion = None if output.completion_tokens is None else self.completion + sum(output.completion_tokens)


async def _outputs(first: Output, rest: AsyncIterator[Output]) -> AsyncIterator[Output]:
    yield first
    async for output in rest:
        yield output


async def _events(base: dict[str, Any], plan: Plan, first: Output, rest: AsyncIterator[Output],
                  head: dict[str, Any] | None, choice) -> AsyncIterator[bytes]:
    """Shared life of a stream: optional head chunk, one chunk per non-empty delta, the finish chunk,
    the usage chunk when asked for, [DONE]; an error ends it with an error event."""
    counter = _Counter()
    extra = {"usage": None} if plan.include_usage else {}
    try:
        if head is not None:
            yield sse({**base, "choices": [head], **extra})
        async for output in _outputs(first, rest):
            counter.add(output)
            text = output.texts[0] if output.texts else ""
            reason = finish_reason(output.finish_reasons[0] if output.finish_reasons else None)
            positions = output.logprobs[0] if output.logprobs and plan.logprobs is not None else None
            if text or positions or reason:
                shaped = choice(text, positions, reason)
                if shaped is not None:  # None: a parser holds the text back for now
                    yield sse({**base, "choices": [shaped], **extra})
        if plan.include_usage:
            yield sse({**base, "choices": [], "usage": usage(counter.prompt, counter.completion)})
    except APIError as exc:
        yield sse(exc.body())
    finally:
        await rest.aclose()  # type: ignore[attr-defined]
    yield DONE


def chat_events(rid: str, created: int, model: str, plan: Plan, first: Output,
                rest: AsyncIterator[Output], parse: ChatParse | None = None) -> AsyncIterator[bytes]:
    base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model}
    call_id = new_id("call")
    if parse is not None:
        return _events(base, plan, first, rest, {"index": 0, "delta": {"role": "assistant", "content": ""},
                                                 "logprobs": None, "finish_reason": None}, _parsed_choice(plan, parse))
    if plan.tool is None:
        head_delta: dict[str, Any] = {"role": "assistant", "content": ""}
    else:
        head_delta = {"role": "assistant", "content": None, "tool_calls": [
            {"index": 0, "id": call_id, "type": "function", "function": {"name": plan.tool, "arguments": ""}}]}
    head = {"index": 0, "delta": head_delta, "logprobs": None, "finish_reason": None}

    def choice(text: str, positions, reason):
        if not text:
            delta: dict[str, Any] = {}
        elif plan.tool is None:
            delta = {"content": text}
        else:
            delta = {"tool_calls": [{"index": 0, "function": {"arguments": text}}]}
        logprobs = chat_logprobs(positions, plan.logprobs or 0) if positions is not None else None
        return {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": reason}

    return _events(base, plan, first, rest, head, choice)


def _parsed_choice(plan: Plan, parse: ChatParse):
    """Deltas as vLLM's parsers split them: content, reasoning, tool-call name and argument fragments."""

    def choice(text: str, positions, reason):
        delta = parse.delta(0, text, finished=reason is not None)
        reason = parse.finish_reason(0, reason)
        logprobs = chat_logprobs(positions, plan.logprobs or 0) if positions is not None else None
        if delta is None and reason is None and logprobs is None:
            return None
        return {"index": 0, "delta": delta or {}, "logprobs": logprobs, "finish_reason": reason}

    return choice


def completion_events(rid: str, created: int, model: str, plan: Plan, first: Output,
                      rest: AsyncIterator[Output]) -> AsyncIterator[bytes]:
    base = {"id": rid, "object": "text_completion", "created": created, "model": model}
    prefix = [plan.prompts[0]] if plan.echo else []
    offset = [0]  # text_offset of the next token, counted as the non-streamed body counts it

    def choice(text: str, positions, reason):
        if prefix:
            head = prefix.pop()
            offset[0] += len(head)
            text = head + text
        logprobs = None
        if positions is not None:
            logprobs = completion_logprobs(positions, plan.logprobs or 0, offset[0])
            offset[0] += tokens_length(positions)
        return {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": reason}

    return _events(base, plan, first, rest, None, choice)
