"""The generation routes: /v1/completions and /v1/chat/completions, JSON or server-sent events. A request
is checked (checks.py), planned (mapping.py), its prompt tokenized or rendered (prompts.py), sent
(calls.py) and shaped (responses.py, streaming.py)."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request

from tritonpkg.frontend.calls import (
    generate_each,
    generate_one,
    name_first_prompt_tokens,
    naming_the_prompt,
    start_all,
    unless_client_leaves,
)
from tritonpkg.frontend.checks import (
    check_backend_inputs,
    check_prompt_bytes,
    check_sequences,
    check_token_ids,
    model_parsers,
)
from tritonpkg.frontend.mapping import chat_plan, completion_plan, stream_requests
from tritonpkg.frontend.parsing import ChatParse
from tritonpkg.frontend.prompts import echo_texts, longest_prompt, render_chat, set_default_max_tokens, tokenizing
from tritonpkg.frontend.protocol import ChatCompletionRequest, CompletionRequest
from tritonpkg.frontend.responses import chat_body, completion_body, new_id
from tritonpkg.frontend.routes.common import backend_of, catalog_of, json_response, settings_of, sse
from tritonpkg.frontend.streaming import chat_events, completion_events

router = APIRouter()


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request):
    plan = completion_plan(body)
    check_sequences(plan, settings_of(request).max_sequences)
    entry = await catalog_of(request).get(body.model, ("generate",))
    check_backend_inputs(entry, plan)
    check_token_ids(entry, plan.prompts, "prompt")
    for i, prompt in enumerate(plan.prompts):
        if isinstance(prompt, str):
            check_prompt_bytes(entry, prompt, "prompt", f" (prompt {i})" if len(plan.prompts) > 1 else "")
    if "max_tokens" not in plan.params and entry.tokenizer is not None:
        chars = sum(len(p) for p in plan.prompts if isinstance(p, str))
        longest = await tokenizing(request, chars, longest_prompt, entry.tokenizer, plan.prompts)
        set_default_max_tokens(plan, entry, longest, "prompt")
    texts = echo_texts(entry, plan)
    rid, created = new_id("cmpl"), int(time.time())
    if plan.stream:
        with naming_the_prompt("prompt"):
            streams = await start_all(backend_of(request), entry, stream_requests(plan, plan.prompts))
        name_first_prompt_tokens(entry, [first for first, _ in streams])
        return sse(completion_events(rid, created, body.model, plan, streams, texts))
    with naming_the_prompt("prompt"):
        outputs = await unless_client_leaves(request, generate_each(backend_of(request), entry, plan))
    name_first_prompt_tokens(entry, outputs)
    return json_response(completion_body(rid, created, body.model, texts, outputs, plan.echo, plan.logprobs))


@router.post("/v1/chat/completions")
async def chat(body: ChatCompletionRequest, request: Request):
    entry = await catalog_of(request).get(body.model, ("generate",))
    parsers = model_parsers(entry)
    plan = chat_plan(body, tool_parser=parsers is not None and parsers.tools)
    check_sequences(plan, settings_of(request).max_sequences)
    parse = None
    # a forced tool on a model with a reasoning parser only is answered as before: its arguments, unparsed
    if parsers is not None and (parsers.tools or plan.tool is None):
        tokenizer = entry.tokenizer
        parse = ChatParse(parsers, body, plan.n, lambda text: tokenizer.encode(text, add_special_tokens=False))
        parse.sampling_overrides(plan.params)
    size = sum(len(m.text() or "") for m in body.messages)
    prompt, n_prompt, prompt_ids = await tokenizing(request, size, render_chat, entry, body, plan,
                                                     parse is not None)
    if parse is not None:
        parse.set_prompt(prompt_ids)
    if "max_tokens" not in plan.params:
        set_default_max_tokens(plan, entry, n_prompt, "messages")
    rid, created = new_id("chatcmpl"), int(time.time())
    if plan.stream:
        with naming_the_prompt("messages"):
            streams = await start_all(backend_of(request), entry, stream_requests(plan, [prompt]))
        return sse(chat_events(rid, created, body.model, plan, streams, parse))
    with naming_the_prompt("messages"):
        output = await unless_client_leaves(request, generate_one(backend_of(request), entry, plan, prompt))
    return json_response(chat_body(rid, created, body.model, output, plan.logprobs, plan.tool, parse,
                                   plan.tool_required))

