"""OpenAI request -> the vLLM backend's `sampling_parameters` (pure: no server, no tokenizer).

The backend (backends/vllm/request_params.py) accepts every SamplingParams field plus OpenAI's
`response_format`, the `guided_*` spellings, `structured_outputs` and `vllm_xargs`. Here each OpenAI
field is either mapped onto one of those or rejected with an APIError naming it: a request is
never served with a field silently ignored."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from tritonpkg.frontend.errors import APIError, invalid
from tritonpkg.safepath import quote
from tritonpkg.frontend.protocol import (HARMLESS, INT64_MAX, UNSUPPORTED, ChatCompletionRequest, CompletionRequest,
                                         SamplingFields)

# Request fields copied unchanged into sampling_parameters when set.
PASSTHROUGH = (
    "temperature", "top_p", "n", "stop", "presence_penalty", "frequency_penalty", "seed", "top_k", "min_p",
    "repetition_penalty", "min_tokens", "ignore_eos", "stop_token_ids", "skip_special_tokens",
    "spaces_between_special_tokens", "include_stop_str_in_output", "bad_words", "allowed_token_ids",
    "guided_regex", "guided_choice", "guided_grammar", "structured_outputs", "vllm_xargs",
)
CONSTRAINT_FIELDS = ("response_format", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
                     "structured_outputs")


@dataclass
class Plan:
    """What to send to Triton for one OpenAI request, and how to shape the answer."""

    prompts: list[str]
    params: dict[str, Any]
    stream: bool
    n: int = 1
    include_usage: bool = False
    echo: bool = False
    logprobs: int | None = None  # top-k to report, None: no logprobs
    tool: str | None = None  # the forced function: the output is its arguments
    tools: list[dict[str, Any]] = field(default_factory=list)  # for the chat template


def reject_unsupported(req: BaseModel) -> None:
    """Fields OpenAI defines that the backend cannot honour: 400 unless left at a value that asks nothing."""
    for name, why in UNSUPPORTED.get(type(req), {}).items():
        value = getattr(req, name)
        if value is not None and value not in HARMLESS.get(name, ()):
            raise invalid(f"'{name}' is not supported: {why}", name)


def sampling_parameters(req: SamplingFields, max_tokens: int | None) -> dict[str, Any]:
    """The fields both routes share -> sampling_parameters; one structured-output constraint at most."""
    if req.stream_options is not None and not req.stream:
        raise invalid("'stream_options' is only allowed with 'stream': true", "stream_options")
    if req.stream and req.n > 1:
        raise invalid("'n' > 1 cannot be streamed by the vLLM backend (its stream carries no choice index); "
                      "use n=1 or stream=false", "n")
    params: dict[str, Any] = {name: getattr(req, name) for name in PASSTHROUGH if getattr(req, name) is not None}
    if max_tokens is not None:
        params["max_tokens"] = max_tokens
    if req.logit_bias:
        params["logit_bias"] = _logit_bias(req.logit_bias)
    if req.guided_json is not None:
        params["guided_json"] = req.guided_json
    if req.response_format is not None:
        params["response_format"] = _response_format(req)
    constraints = [name for name in CONSTRAINT_FIELDS if name in params]
    if len(constraints) > 1:
        raise invalid(f"only one structured-output constraint per request; got {', '.join(constraints)}",
                      constraints[1])
    return params


def _logit_bias(bias: dict[str, float]) -> dict[str, float]:
    for key, value in bias.items():
        if not (key.isascii() and key.isdigit() and len(key) <= 19 and int(key) <= INT64_MAX):
            raise invalid(f"logit_bias keys are token ids (non-negative integers as strings); got {quote(key)}",
                          "logit_bias")
        if not -100 <= value <= 100:
            raise invalid(f"logit_bias[{key!r}] = {value}: values must lie in [-100, 100]", "logit_bias")
    return dict(bias)


def _response_format(req: SamplingFields) -> dict[str, Any]:
    fmt = req.response_format
    assert fmt is not None
    if fmt.type == "json_schema":
        if fmt.json_schema is None:
            raise invalid("response_format of type json_schema needs 'json_schema': {'name', 'schema'}",
                          "response_format.json_schema")
        return {"type": "json_schema", "json_schema": fmt.json_schema.model_dump(by_alias=True, exclude_none=True)}
    if fmt.json_schema is not None:
        raise invalid(f"'json_schema' is only allowed with type json_schema, not {fmt.type}",
                      "response_format.json_schema")
    return {"type": fmt.type}


def completion_plan(req: CompletionRequest) -> Plan:
    reject_unsupported(req)
    prompts = [req.prompt] if isinstance(req.prompt, str) else list(req.prompt)
    if not prompts:
        raise invalid("'prompt' must not be an empty list", "prompt")
    if req.stream and len(prompts) > 1:
        raise invalid("streaming takes one prompt; send a string or stream=false", "prompt")
    if req.echo and req.logprobs is not None:
        raise invalid("'echo' with 'logprobs' needs prompt log-probabilities, which the backend does not return",
                      "echo")
    params = sampling_parameters(req, req.max_tokens)
    if req.logprobs is not None:
        params["logprobs"] = req.logprobs
    return Plan(prompts=prompts, params=params, stream=req.stream, n=req.n, include_usage=_usage(req),
                echo=req.echo, logprobs=req.logprobs)


def chat_plan(req: ChatCompletionRequest, tool_parser: bool = False) -> Plan:
    """Everything but the prompt, which the model's chat template renders from the messages. With
    `tool_parser` (the model's spec names vLLM's tool-call parser) every tool_choice is vLLM's to
    handle (parsing.ChatParse); without one, only a forced tool, answered as a structured output."""
    reject_unsupported(req)
    # both given: max_completion_tokens wins, as in OpenAI's API (max_tokens is its deprecated spelling)
    if req.top_logprobs is not None and not req.logprobs:
        raise invalid("'top_logprobs' needs 'logprobs': true", "top_logprobs")
    params = sampling_parameters(req, req.max_completion_tokens or req.max_tokens)
    logprobs = (req.top_logprobs or 0) if req.logprobs else None
    if logprobs is not None:
        params["logprobs"] = logprobs
    if tool_parser:
        _check_tool_choice(req)
        tools = [t.model_dump(exclude_none=True) for t in req.tools or []]
        return Plan(prompts=[], params=params, stream=req.stream, n=req.n, include_usage=_usage(req),
                    logprobs=logprobs, tools=tools)
    tool = forced_tool(req)
    if tool is not None:
        if any(name in params for name in CONSTRAINT_FIELDS):
            raise invalid("a forced tool call is already a structured output; drop the other constraint",
                          next(name for name in CONSTRAINT_FIELDS if name in params))
        params["guided_json"] = tool.parameters or {"type": "object"}
    tools = [t.model_dump(exclude_none=True) for t in req.tools or []] if tool is not None else []
    return Plan(prompts=[], params=params, stream=req.stream, n=req.n, include_usage=_usage(req),
                logprobs=logprobs, tool=tool.name if tool else None, tools=tools)


def _check_tool_choice(req: ChatCompletionRequest) -> None:
    choice, tools = req.tool_choice, req.tools or []
    if choice is not None and choice != "auto" and not tools:
        raise invalid("'tool_choice' needs 'tools'", "tool_choice")
    if choice is not None and not isinstance(choice, str) and choice.function.name not in {
            t.function.name for t in tools}:
        raise invalid(f"tool_choice names {quote(choice.function.name)}, which is not in 'tools'", "tool_choice")


def forced_tool(req: ChatCompletionRequest):
    """The function a request forces (named tool_choice, or "required" with one tool), else None.
    Automatic tool choice needs a tool-call parser for the model's output format, which the backend
    does not have: rejected rather than answered with tools ignored."""
    choice, tools = req.tool_choice, req.tools or []
    if choice is None or choice == "auto":
        if tools:
            raise invalid("automatic tool choice needs a tool-call parser: name vLLM's in the model's spec "
                          "(openai: {tool_call_parser: hermes}), or force a tool with "
                          "tool_choice={'type': 'function', 'function': {'name': ...}} or use 'required' with one tool",
                          "tool_choice" if choice else "tools")
        return None
    if not tools:
        raise invalid("'tool_choice' needs 'tools'", "tool_choice")
    if choice == "none":
        return None
    if choice == "required":
        if len(tools) != 1:
            raise invalid("tool_choice 'required' with several tools needs a tool-call parser (the model's spec: "
                          "openai: {tool_call_parser: ...}); name one tool",
                          "tool_choice")
        return tools[0].function
    for tool in tools:
        if tool.function.name == choice.function.name:
            return tool.function
    raise invalid(f"tool_choice names {choice.function.name!r}, which is not in 'tools'", "tool_choice")


def _usage(req: SamplingFields) -> bool:
    return bool(req.stream_options and req.stream_options.include_usage)


def chat_messages(req: ChatCompletionRequest) -> list[dict[str, Any]]:
    """Messages as chat templates expect them: content flattened to text."""
    out = []
    for msg in req.messages:
        item: dict[str, Any] = {"role": msg.role, "content": msg.text() or ""}
        if msg.name is not None:
            item["name"] = msg.name
        if msg.tool_calls:
            item["tool_calls"] = [c.model_dump() for c in msg.tool_calls]
        if msg.tool_call_id is not None:
            item["tool_call_id"] = msg.tool_call_id
        out.append(item)
    return out


def default_max_tokens(max_model_len: int | None, prompt_tokens: int, param: str) -> int | None:
    """OpenAI's default is "as many as fit": the context left after the prompt (None: backend default)."""
    if max_model_len is None:
        return None
    if prompt_tokens >= max_model_len:
        raise APIError(400, f"the prompt has {prompt_tokens} tokens; this model's context is {max_model_len}",
                       param=param)
    return max_model_len - prompt_tokens


def without_added_bos(prompt: str, bos_added: str | None) -> str:
    """A chat template that writes the BOS token itself, sent to a backend that tokenizes with special
    tokens (vLLM's renderer does), would start with two BOS tokens; vLLM's own OpenAI server avoids that
    by tokenizing chat prompts without special tokens. Dropping the template's BOS text is equivalent."""
    if bos_added and prompt.startswith(bos_added):
        return prompt[len(bos_added):]
    return prompt
