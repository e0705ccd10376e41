"""A route's calls to Triton: generations started or awaited (cancelled when the client leaves), and the
backend's errors in served terms (the served model's name, the request's field)."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from fastapi import Request

from tritonpkg.frontend.catalog import ModelEntry
from tritonpkg.frontend.errors import APIError
from tritonpkg.frontend.mapping import Plan, Prompt
from tritonpkg.frontend.streaming import Stream
from tritonpkg.frontend.triton import Output, TritonBackend

VLLM_PROMPT_PARAMS = ("input_tokens", "prompt_token_ids")  # what vLLM names a prompt that does not fit


@contextmanager
def naming_the_prompt(field: str) -> Iterator[None]:
    """A backend refusal of the prompt itself (too long for the context, a token id out of vocabulary)
    names the request's field (`prompt`, `messages`, `input`), not vLLM's internal name for it."""
    try:
        yield
    except APIError as exc:
        if exc.status == 400 and (exc.param in VLLM_PROMPT_PARAMS
                                  or (exc.param is None and "out of vocabulary" in exc.message)):
            raise APIError(400, exc.message, param=field, type=exc.type, code=exc.code) from None
        raise


def name_first_prompt_tokens(entry: ModelEntry, outputs: list[Output]) -> None:
    """The backend names a prompt's first token by id only (vLLM scores it with nothing); its text is the
    tokenizer's, as vLLM's server decodes it."""
    for output in outputs:
        first = output.prompt_logprobs[0]["sampled"] if output.prompt_logprobs else None
        if first is not None and not first["token"] and entry.tokenizer is not None:
            first["token"] = entry.tokenizer.decode([first["id"]])


async def start_all(be: TritonBackend, entry: ModelEntry,
                     requests: list[tuple[Prompt, dict[str, Any]]]) -> list[Stream]:
    """Begin every choice's streamed generation at once and wait for each one's first response; a rejection
    of any keeps its status and closes the others."""
    if len(requests) == 1:
        return [await start_stream(be, entry, *requests[0])]
    started = await asyncio.gather(*(start_stream(be, entry, prompt, params) for prompt, params in requests),
                                   return_exceptions=True)
    failed = [s for s in started if isinstance(s, BaseException)]
    if failed:
        for s in started:
            if not isinstance(s, BaseException):
                await s[1].aclose()  # type: ignore[attr-defined]
        raise failed[0]
    return started  # type: ignore[return-value]


async def start_stream(be: TritonBackend, entry: ModelEntry, prompt: Prompt, params: dict[str, Any]) -> Stream:
    """Begin a streamed generation and wait for its first response (so rejections keep their status)."""
    rest = _in_served_terms_streamed(entry, be.generate(entry.triton_name, prompt, entry.with_adapter(params), True,
                                                        entry.returns))
    try:
        first = await rest.__anext__()
    except StopAsyncIteration:
        raise APIError(500, f"model '{entry.name}' closed the stream without a response") from None
    return first, rest


async def _in_served_terms_streamed(entry: ModelEntry, outputs: AsyncIterator[Output]) -> AsyncIterator[Output]:
    """A stream's outputs; an error, at its start or after, in served terms (it reaches the client as an error
    event then)."""
    try:
        async for output in outputs:
            yield output
    except APIError as exc:
        raise in_served_terms(entry, exc) from None
    finally:
        await outputs.aclose()  # type: ignore[attr-defined]


PARAMETER = re.compile(r"\(parameter=([A-Za-z_][A-Za-z0-9_.]*)|sampling parameter '([A-Za-z_][A-Za-z0-9_]*)'"
                       r"|\(received ([A-Za-z_][A-Za-z0-9_]*)=")


def in_served_terms(entry: ModelEntry, exc: APIError) -> APIError:
    """A backend error as the client should read it: the engine's weights and tokenizer paths replaced by the
    served model name (a client never sent, and should not learn, a server path), and `param` the field vLLM
    names (its validation errors end in '(parameter=max_tokens, value=...)'; the backend's say
    "sampling parameter 'x'")."""
    message = exc.message
    paths = {str(p) for p in ((entry.engine_args or {}).get("model"), (entry.engine_args or {}).get("tokenizer"),
                              entry.tokenizer_path(), entry.weights_path()) if p}
    for path in sorted(paths | {os.path.realpath(p) for p in paths}, key=len, reverse=True):
        message = message.replace(path, entry.name)
    param = exc.param
    if param is None and exc.status < 500:
        found = PARAMETER.search(message)
        param = next((g for g in found.groups() if g), None) if found else None
    if message == exc.message and param == exc.param:
        return exc
    return APIError(exc.status, message, param=param, type=exc.type, code=exc.code)


@contextmanager
def served(entry: ModelEntry, mentioned: str | None, default: str) -> Iterator[None]:
    """Backend errors of one route in served terms (in_served_terms); a refusal that names no field names
    `mentioned` where its message speaks of it, else `default` (the input the route sends)."""
    try:
        yield
    except APIError as exc:
        served = in_served_terms(entry, exc)
        if served.status < 500 and served.param is None and served.status != 429:
            param = mentioned if mentioned is not None and mentioned in served.message else default
            served = APIError(served.status, served.message, param=param, type=served.type, code=served.code)
        raise served from None


async def unless_client_leaves(request: Request, work):
    """Await `work`, cancelling it if the client disconnects first (Starlette does not cancel a
    non-streaming handler): the cancellation reaches Triton, which aborts the generation."""
    task = asyncio.ensure_future(work)

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        with suppress(asyncio.CancelledError, APIError):
            await task
        raise APIError(499, "the client closed the connection before the response")
    return task.result()


async def generate_one(be: TritonBackend, entry: ModelEntry, plan: Plan, prompt: Prompt) -> Output:
    try:
        outputs = [o async for o in be.generate(entry.triton_name, prompt, entry.with_adapter(plan.params), False,
                                                entry.returns)]
    except APIError as exc:
        raise in_served_terms(entry, exc) from None
    if len(outputs) != 1:
        raise APIError(500, f"model '{entry.name}' sent {len(outputs)} responses to a non-streamed request")
    return outputs[0]


async def generate_each(be: TritonBackend, entry: ModelEntry, plan: Plan) -> list[Output]:
    """Every prompt's output, in order; one prompt (the usual case) without gather's extra task."""
    if len(plan.prompts) == 1:
        return [await generate_one(be, entry, plan, plan.prompts[0])]
    return list(await asyncio.gather(*(generate_one(be, entry, plan, p) for p in plan.prompts)))
