"""Server-sent events for streamed completions and chat: OpenAI's chunk objects, then `data: [DONE]`.

The route awaits the backend's first response before answering, so a request the backend rejects
still gets its 4xx status; an error after that arrives as an `{"error": ...}` event, which the
openai client raises."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from tritonpkg.frontend.errors import APIError
from tritonpkg.frontend.mapping import Plan
from tritonpkg.frontend.parsing import ChatParse
from tritonpkg.frontend.responses import (
    DONE,
    chat_logprobs,
    completion_logprobs,
    finish_reason,
    new_id,
    sse,
    tokens_length,
    tool_finish,
    usage,
)
from tritonpkg.frontend.triton import Output

Stream = tuple[Output, AsyncIterator[Output]]  # a choice's first response and the rest of its stream


class _Counter:
    """Usage over a stream's choices: each prompt's tokens once (its choices all report them), every
    choice's generated tokens."""

    def __init__(self, choices_per_prompt: int) -> None:
        self.per_prompt = max(choices_per_prompt, 1)
        self.prompts: dict[int, int | None] = {}
        self.completion: int | None = 0

    def add(self, index: int, output: Output) -> None:
        if output.prompt_tokens is not None:
            self.prompts[index // self.per_prompt] = output.prompt_tokens
        if self.completion is not None:
            counted = output.completion_tokens
            self.completion = None if counted is None else self.completion + sum(counted)

    @property
    def prompt(self) -> int | None:
        return sum(self.prompts.values()) if self.prompts else None  # type: ignore[arg-type]


class _Merged:
    """(choice index, response) as each choice's stream answers; `close` closes every stream, which cancels
    its call in Triton. One stream is read in place; several are each read by a task from the start."""

    def __init__(self, streams: list[Stream]) -> None:
        self._streams = streams
        self._inbox: asyncio.Queue[tuple[int, Output | Exception | None]] = asyncio.Queue()
        self._tasks = ([asyncio.ensure_future(self._pump(i, rest)) for i, (_, rest) in enumerate(streams)]
                       if len(streams) > 1 else [])

    async def _pump(self, index: int, rest: AsyncIterator[Output]) -> None:
        try:
            async for output in rest:
                self._inbox.put_nowait((index, output))
            self._inbox.put_nowait((index, None))
        except Exception as exc:
            self._inbox.put_nowait((index, exc))

    async def items(self) -> AsyncGenerator[tuple[int, Output], None]:
        for index, (first, _) in enumerate(self._streams):
            yield index, first
        if not self._tasks:
            async for output in self._streams[0][1]:
                yield 0, output
            return
        open_streams = len(self._tasks)
        while open_streams:
            index, item = await self._inbox.get()
            if item is None:
                open_streams -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield index, item

    async def close(self) -> None:
        if not self._tasks:
            await self._streams[0][1].aclose()  # type: ignore[attr-defined]
        for task in self._tasks:
            task.cancel()  # the pump's stream closes its call (triton.TritonBackend._own)


async def _events(base: dict[str, Any], plan: Plan, streams: list[Stream], head, choice) -> AsyncIterator[bytes]:
    """Shared life of a stream: optional head chunk per choice, one chunk per non-empty delta of a choice,
    each choice's finish chunk, the usage chunk when asked for, [DONE]; an error ends it with an error event."""
    counter = _Counter(plan.n)
    extra = {"usage": None} if plan.include_usage else {}
    merged = _Merged(streams)
    items = merged.items()
    try:
        if head is not None:
            for index in range(len(streams)):
                yield sse({**base, "choices": [head(index)], **extra})
        async for index, output in items:
            counter.add(index, output)
            text = output.texts[0] if output.texts else ""
            reason = finish_reason(output.finish_reasons[0] if output.finish_reasons else None)
            positions = output.logprobs[0] if output.logprobs and plan.logprobs is not None else None
            if plan.echo and output.prompt_logprobs:  # the first response of an echoed, scored prompt
                positions = output.prompt_logprobs + (positions or [])
            if text or positions or reason:
                shaped = choice(index, text, positions, reason)
                if shaped is not None:  # None: a parser holds the text back for now
                    yield sse({**base, "choices": [shaped], **extra})
        if plan.include_usage:
            yield sse({**base, "choices": [], "usage": usage(counter.prompt, counter.completion)})
    except APIError as exc:
        yield sse(exc.body())
    finally:
        await items.aclose()
        await merged.close()
    yield DONE


def chat_events(rid: str, created: int, model: str, plan: Plan, streams: list[Stream],
                parse: ChatParse | None = None) -> AsyncIterator[bytes]:
    base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model}
    if parse is not None:
        return _events(base, plan, streams,
                       lambda index: {"index": index, "delta": {"role": "assistant", "content": ""},
                                      "logprobs": None, "finish_reason": None},
                       _parsed_choice(plan, parse))
    call_ids: list[str | None] = [new_id("call") for _ in streams]  # None once a choice's call is announced

    def head(index: int) -> dict[str, Any]:
        return {"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}

    def choice(index: int, text: str, positions, reason):
        """A forced tool as vLLM streams one: its first text announces the call (index, id, type, name and the
        first argument fragment), the later ones carry argument fragments only."""
        if not text:
            delta: dict[str, Any] = {}
        elif plan.tool is None:
            delta = {"content": text}
        elif call_ids[index] is not None:
            delta = {"tool_calls": [{"id": call_ids[index], "type": "function", "index": 0,
                                     "function": {"name": plan.tool, "arguments": text}}]}
            call_ids[index] = None
        else:
            delta = {"tool_calls": [{"index": 0, "function": {"arguments": text}}]}
        logprobs = chat_logprobs(positions, plan.logprobs or 0) if positions is not None else None
        return {"index": index, "delta": delta, "logprobs": logprobs,
                "finish_reason": tool_finish(reason, plan.tool_required and call_ids[index] is None)}

    return _events(base, plan, streams, head, choice)


def _parsed_choice(plan: Plan, parse: ChatParse):
    """Deltas as vLLM's parsers split them: content, reasoning, tool-call name and argument fragments."""

    def choice(index: int, text: str, positions, reason):
        delta = parse.delta(index, text, finished=reason is not None)
        reason = parse.finish_reason(index, reason)
        logprobs = chat_logprobs(positions, plan.logprobs or 0) if positions is not None else None
        if delta is None and reason is None and logprobs is None:
            return None
        return {"index": index, "delta": delta or {}, "logprobs": logprobs, "finish_reason": reason}

    return choice


def completion_events(rid: str, created: int, model: str, plan: Plan, streams: list[Stream],
                      prompt_texts: list[str]) -> AsyncIterator[bytes]:
    """Choice i streams prompt i // n (as the non-streamed body numbers them); with echo its first chunk
    starts with the prompt's text (and, with logprobs, the prompt's log-probabilities)."""
    base = {"id": rid, "object": "text_completion", "created": created, "model": model}
    per_prompt = max(plan.n, 1)
    prefixes = [prompt_texts[i // per_prompt] if plan.echo else "" for i in range(len(streams))]
    scored = "prompt_logprobs" in plan.params  # text_offset then counts the prompt's tokens from 0
    offsets = [0] * len(streams)  # text_offset of each choice's next token, counted as the non-streamed body counts it

    def choice(index: int, text: str, positions, reason):
        if prefixes[index]:
            head, prefixes[index] = prefixes[index], ""
            offsets[index] += 0 if scored else len(head)
            text = head + text
        logprobs = None
        if positions is not None:
            logprobs = completion_logprobs(positions, plan.logprobs or 0, offsets[index])
            offsets[index] += tokens_length(positions)
        return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": reason}

    return _events(base, plan, streams, None, choice)
