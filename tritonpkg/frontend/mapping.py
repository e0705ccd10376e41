"""OpenAI request -> the vLLM backend's `sampling_parameters` (pure: no server, no tokenizer).

The backend (backends/vllm/request_params.py) accepts every SamplingParams field plus OpenAI's
`response_format`, the `guided_*` spellings, `structured_outputs` and `vllm_xargs`. Here each OpenAI
field is either mapped onto one of those or rejected with an APIError naming it: a request is
never served with a field silently ignored."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Union

from pydantic import BaseModel

from tritonpkg.frontend.errors import APIError, invalid
from tritonpkg.frontend.protocol import (
    HARMLESS,
    INT64_MAX,
    UNSUPPORTED,
    ChatCompletionRequest,
    CompletionRequest,
    ResponseFormat,
    SamplingFields,
)
from tritonpkg.safepath import quote

Prompt = Union[str, list[int]]  # noqa: UP007 - a runtime alias: text, or token ids (vLLM's TokensPrompt)

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

    prompts: list[Prompt]
    params: dict[str, Any]
    stream: bool
    n: int = 1
    include_usage: bool = False
    echo: bool = False
    logprobs: int | None = None  # top-k to report, None: no logprobs
    tool: str | None = None  # the forced function: the output is its arguments
    tool_required: bool = False  # forced by tool_choice "required" (its answer finishes as 'tool_calls')
    tools: list[dict[str, Any]] = field(default_factory=list)  # for the chat template


def stream_requests(plan: Plan, prompts: list[Prompt]) -> list[tuple[Prompt, dict[str, Any]]]:
    """A streamed request as one backend request per choice, in choice order (prompt by prompt, n each):
    the backend's stream carries no choice index, so each choice streams on its own call. These are the
    requests vLLM itself makes of n > 1 (its child requests: n=1, the seed + the choice's index), so a
    seeded stream samples what the same request unstreamed does."""
    out: list[tuple[Prompt, dict[str, Any]]] = []
    for prompt in prompts:
        for i in range(plan.n):
            params = {**plan.params, "n": 1} if plan.n > 1 else plan.params
            if plan.n > 1 and plan.params.get("seed") is not None:
                params["seed"] = plan.params["seed"] + i
            out.append((prompt, params))
    return out


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
    params: dict[str, Any] = {name: getattr(req, name) for name in PASSTHROUGH if getattr(req, name) is not None}
    if max_tokens is not None:
        params["max_tokens"] = max_tokens
    if req.logit_bias:
        params["logit_bias"] = _logit_bias(req.logit_bias)
    if req.guided_json is not None:
        params["guided_json"] = strict_json_strings(req.guided_json)
    if req.structured_outputs is not None:
        params["structured_outputs"] = strict_structured_outputs(req.structured_outputs)
    if req.response_format is not None:
        params["response_format"] = _response_format(req.response_format)
    constraints = [name for name in CONSTRAINT_FIELDS if name in params]
    if len(constraints) > 1:
        raise invalid(f"only one structured-output constraint per request; got {', '.join(constraints)}",
                      constraints[1])
    return params


NO_CONTROL = "[^\\x00-\\x1f]"  # a character RFC 8259 lets a JSON string hold unescaped
STRING_BOUNDS = ("minLength", "maxLength")


def strict_json_strings(schema: Any) -> Any:
    """A JSON schema whose constrained outputs a strict JSON parser accepts. xgrammar writes a string with
    minLength/maxLength as up to n of `[^"\\\r\n]`, which lets U+0000-U+001F through unescaped (RFC 8259
    forbids them; vLLM's offline engine: 28-31 of 50 outputs of the tiny model failed json.loads); such a
    string becomes the same bounds as a `pattern` that excludes them (xgrammar matches a pattern against
    the string's value, escaping what must be). Strings with their own pattern or format, and everything
    else, are left as they are; the caller's schema is not changed."""
    if isinstance(schema, str):  # the schema as JSON text (vLLM takes both); text that is no JSON is vLLM's to refuse
        try:
            parsed = json.loads(schema)
        except ValueError:
            return schema
        return strict_json_strings(parsed) if isinstance(parsed, dict) else schema
    if isinstance(schema, list):
        return [strict_json_strings(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict_json_strings(value) for key, value in schema.items()}
    kinds = schema.get("type")
    is_string = kinds == "string" or (isinstance(kinds, list) and kinds == ["string"])
    if (is_string and any(isinstance(schema.get(b), int) for b in STRING_BOUNDS)
            and "pattern" not in schema and "format" not in schema):
        low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
        for bound in STRING_BOUNDS:
            out.pop(bound, None)
        out["pattern"] = f"^{NO_CONTROL}{{{low},{'' if high is None else int(high)}}}$"
    return out


def strict_structured_outputs(value: dict[str, Any]) -> dict[str, Any]:
    """vLLM's `structured_outputs` with every JSON schema in it made strict (strict_json_strings): its `json`,
    and each `{"type": "json_schema", "json_schema": ...}` in its `structural_tag` (JSON text or an object; in
    the older form, each `structures[i].schema`),
    which is how vLLM's tool parsers constrain a call's arguments (parsing.ChatParse). The client's own, and
    vLLM's."""
    out = dict(value)
    if out.get("json") is not None:
        out["json"] = strict_json_strings(out["json"])
    tag = out.get("structural_tag")
    if isinstance(tag, str):
        try:
            parsed = json.loads(tag)
        except ValueError:
            return out  # not JSON: vLLM's to refuse
        out["structural_tag"] = json.dumps(_strict_tag_schemas(parsed))
    elif isinstance(tag, dict):
        out["structural_tag"] = _strict_tag_schemas(tag)
    return out


def _strict_tag_schemas(node: Any) -> Any:
    if isinstance(node, list):
        return [_strict_tag_schemas(item) for item in node]
    if not isinstance(node, dict):
        return node
    if node.get("type") == "json_schema" and isinstance(node.get("json_schema"), dict):
        return {**node, "json_schema": strict_json_strings(node["json_schema"])}
    if "begin" in node and "end" in node and "schema" in node:  # the older form: structures[i] = {begin, schema, end}
        return {**node, "schema": _strict_schema_or_text(node["schema"])}
    return {key: _strict_tag_schemas(item) for key, item in node.items()}


def _strict_schema_or_text(schema: Any) -> Any:
    if isinstance(schema, dict):
        return strict_json_strings(schema)
    if isinstance(schema, str):
        try:
            parsed = json.loads(schema)
        except ValueError:
            return schema  # not JSON: vLLM's to refuse
        return json.dumps(strict_json_strings(parsed)) if isinstance(parsed, dict) else schema
    return schema


def _logit_bias(bias: dict[str, float]) -> dict[str, float]:
    for key, value in bias.items():
        if not (key.isascii() and key.isdigit() and len(key) <= 19 and int(key) <= INT64_MAX):
            raise invalid(f"logit_bias keys are token ids (non-negative integers as strings); got {quote(key)}",
                          "logit_bias")
        if not -100 <= value <= 100:
            raise invalid(f"logit_bias[{key!r}] = {value}: values must lie in [-100, 100]", "logit_bias")
    return dict(bias)


def _response_format(fmt: ResponseFormat) -> dict[str, Any]:
    if fmt.type == "json_schema":
        if fmt.json_schema is None:
            raise invalid("response_format of type json_schema needs 'json_schema': {'name', 'schema'}",
                          "response_format.json_schema")
        body = fmt.json_schema.model_dump(by_alias=True, exclude_none=True)
        return {"type": "json_schema", "json_schema": {**body, "schema": strict_json_strings(body.get("schema", {}))}}
    if fmt.json_schema is not None:
        raise invalid(f"'json_schema' is only allowed with type json_schema, not {fmt.type}",
                      "response_format.json_schema")
    return {"type": fmt.type}


def completion_plan(req: CompletionRequest) -> Plan:
    reject_unsupported(req)
    prompts = completion_prompts(req.prompt)
    params = sampling_parameters(req, req.max_tokens)
    if req.logprobs is not None:
        params["logprobs"] = req.logprobs
        if req.echo:  # the prompt's own log-probabilities, as loglikelihood evaluators read them
            params["prompt_logprobs"] = req.logprobs
    return Plan(prompts=prompts, params=params, stream=req.stream, n=req.n, include_usage=_usage(req),
                echo=req.echo, logprobs=req.logprobs)


def completion_prompts(prompt: Any) -> list[Prompt]:
    """OpenAI's four prompt shapes (a string, strings, token ids, lists of token ids) -> one Prompt each."""
    if isinstance(prompt, str):
        return [prompt]
    if not prompt:
        raise invalid("'prompt' must not be an empty list", "prompt")
    if all(isinstance(t, int) for t in prompt):
        prompt = [prompt]
    out: list[Prompt] = []
    for i, item in enumerate(prompt):
        if isinstance(item, list):
            if not item:
                raise invalid(f"'prompt.{i}' is an empty list of token ids", f"prompt.{i}")
            if any(isinstance(t, bool) or t < 0 or t >= 2**31 for t in item):
                raise invalid(f"'prompt.{i}' holds a token id that is not a vocabulary index (0 to 2**31-1)",
                              f"prompt.{i}")
        out.append(item)
    return out


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
        params["guided_json"] = strict_json_strings(tool.parameters or {"type": "object"})
    tools = [t.model_dump(exclude_none=True) for t in req.tools or []] if tool is not None else []
    return Plan(prompts=[], params=params, stream=req.stream, n=req.n, include_usage=_usage(req),
                logprobs=logprobs, tool=tool.name if tool else None, tool_required=req.tool_choice == "required",
                tools=tools)


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
