"""The OpenAI request bodies the frontend accepts, as strict pydantic models.

Every model forbids unknown fields, so a field the backend cannot honour is a 400 naming it instead
of being dropped. Fields OpenAI defines but the vLLM backend cannot honour are listed in
`UNSUPPORTED` (per route): they are still rejected, with a message saying so, rather than "unknown"."""

from __future__ import annotations

import math
from collections import deque
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from tritonpkg.frontend.errors import APIError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # what vLLM's SamplingParams and its tensors carry
MAX_NESTING = 64  # JSON schemas and vLLM extensions included


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def check_json(value: Any) -> None:
    """What no field may carry, wherever it sits in a request body: a lone surrogate (not UTF-8, so
    not sendable to Triton), an integer outside 64 bits, a non-finite number (Python's JSON parser takes
    NaN and Infinity), or nesting deeper than MAX_NESTING. A 400 naming the field ('messages.1.content')."""
    queue: deque[tuple[Any, tuple[Any, ...]]] = deque([(value, ())])
    while queue:
        item, path = queue.popleft()
        if isinstance(item, str):
            _text(item, path)
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if not INT64_MIN <= item <= INT64_MAX:
                where = _dotted(path)
                raise APIError(400, f"'{where}': {item} is outside the 64-bit integer range the backend carries",
                               param=where or None)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise APIError(400, f"'{_dotted(path)}': {item} is not a finite number", param=_dotted(path) or None)
        elif isinstance(item, (dict, list)):
            if len(path) >= MAX_NESTING:
                raise APIError(400, f"the body is nested more than {MAX_NESTING} levels deep",
                               param=str(path[0]) if path else None)
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in pairs:
                if isinstance(key, str):
                    _text(key, path)  # a key of this object
                queue.append((child, (*path, key)))


def _text(text: str, path: tuple[Any, ...]) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise APIError(400, f"'{_dotted(path)}' holds a lone surrogate (\\u{ord(text[exc.start]):04x} at character "
                            f"{exc.start}), which is not valid Unicode text", param=_dotted(path) or None) from None


def _dotted(path: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in path)


class Body(Strict):
    """A request body: check_json runs over the whole of it before the fields are validated."""

    @model_validator(mode="before")
    @classmethod
    def _checked(cls, data: Any) -> Any:
        check_json(data)
        return data


class StreamOptions(Strict):
    include_usage: bool = False


class JSONSchemaFormat(Strict):
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class ResponseFormat(Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None


class SamplingFields(Body):
    """Fields shared by completions and chat: OpenAI's, then vLLM's extensions the backend honours."""

    model: str
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1, le=INT64_MAX)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    n: int = Field(default=1, ge=1, le=16)
    stop: str | list[str] | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)
    logit_bias: dict[str, float] | None = None
    user: str | None = Field(default=None,
                             description="An end-user id; recorded nowhere and does not change the output.")
    response_format: ResponseFormat | None = None
    # vLLM extensions (names as in vLLM's own OpenAI server)
    top_k: int | None = Field(default=None, ge=-1, le=INT64_MAX)
    min_p: float | None = Field(default=None, ge=0, le=1)
    repetition_penalty: float | None = Field(default=None, gt=0, le=2)
    min_tokens: int | None = Field(default=None, ge=0, le=INT64_MAX)
    ignore_eos: bool | None = None
    stop_token_ids: list[int] | None = None
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool | None = None
    include_stop_str_in_output: bool | None = None
    bad_words: list[str] | None = None
    allowed_token_ids: list[int] | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    structured_outputs: dict[str, Any] | None = None
    vllm_xargs: dict[str, Any] | None = None


TokenId = StrictInt  # JSON integers only: not true, 5.0 or "5"


class CompletionRequest(SamplingFields):
    prompt: str | list[str] | list[TokenId] | list[list[TokenId]] = Field(
        description="A string, a list of strings, a token-id prompt (a list of integers) or a list of them.")
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=20)
    suffix: str | None = None
    best_of: int | None = None


class TextPart(Strict):
    type: Literal["text"]
    text: str


class FunctionCall(Strict):
    name: str
    arguments: str


class ToolCall(Strict):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    def text(self) -> str | None:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content


class FunctionDef(Strict):
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(Strict):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(Strict):
    name: str


class NamedToolChoice(Strict):
    type: Literal["function"]
    function: NamedFunction


class ChatCompletionRequest(SamplingFields):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=INT64_MAX)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    # OpenAI fields the backend cannot honour: declared so the error says "not supported"
    functions: list[Any] | None = None
    function_call: Any = None
    audio: Any = None
    modalities: list[str] | None = None
    prediction: Any = None
    store: bool | None = None
    metadata: dict[str, str] | None = Field(default=None, max_length=16,
                                            description="OpenAI's tags for stored completions; accepted, not stored")
    service_tier: str | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = Field(
        default=None, description="passed to the chat template as vLLM does; refused when the template ignores it")
    web_search_options: Any = None


    @model_validator(mode="after")
    def _metadata(self) -> ChatCompletionRequest:
        for key, value in (self.metadata or {}).items():
            if len(key) > 64 or len(value) > 512:
                raise APIError(400, "metadata keys are at most 64 characters and values at most 512",
                               param="metadata")
        return self


class EmbeddingRequest(Body):
    model: str
    input: str | list[str] | list[TokenId] | list[list[TokenId]] = Field(
        description="A string, a list of strings, token ids (a list of integers) or a list of them.")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1, le=INT64_MAX)
    user: str | None = None


class RerankRequest(Body):
    """The rerank body of vLLM's, Jina's and Cohere's APIs."""

    model: str
    query: str
    documents: list[str] = Field(min_length=1, max_length=2048,
                                 description="Texts to rank against the query (strings only, at most 2048).")
    top_n: int | None = Field(default=None, ge=1, le=INT64_MAX,
                              description="Return the best n (default: all, best first).")
    return_documents: bool = Field(default=True, description="Echo each document's text in its result.")


# Values of those fields that ask for nothing (OpenAI's own defaults) pass.
HARMLESS: dict[str, tuple[Any, ...]] = {"best_of": (1,), "store": (False,), "modalities": (["text"],),
                                        "service_tier": ("auto", "default")}

UNSUPPORTED: dict[type[BaseModel], dict[str, str]] = {
    CompletionRequest: {
        "suffix": "insertion (suffix) is not supported by the vLLM backend",
        "best_of": "best_of is not supported by vLLM V1 (use n)",
    },
    ChatCompletionRequest: {
        "functions": "the deprecated 'functions' is not supported; use 'tools' with a forced 'tool_choice'",
        "function_call": "the deprecated 'function_call' is not supported; use 'tool_choice'",
        "audio": "audio output is not supported",
        "modalities": "only text output is supported",
        "prediction": "predicted outputs are not supported",
        "store": "stored completions are not supported",
        "service_tier": "service tiers are not supported",
        "web_search_options": "web search is not supported",
    },
}
