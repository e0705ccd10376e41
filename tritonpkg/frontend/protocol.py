"""The OpenAI request bodies the frontend accepts, as strict pydantic models.

Every model forbids unknown fields, so a field the backend cannot honour is a 400 naming it instead
of being dropped. Fields OpenAI defines but the vLLM backend cannot honour are listed in
`UNSUPPORTED` (per route): they are still rejected, with a message saying so, rather than "unknown"."""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


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


class SamplingFields(Strict):
    """Fields shared by completions and chat: OpenAI's, then vLLM's extensions the backend honours."""

    model: str
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    n: int = Field(default=1, ge=1, le=16)
    stop: str | list[str] | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)
    logit_bias: dict[str, float] | None = None
    user: str | None = Field(default=None, description="An end-user id; recorded nowhere and does not change the output.")
    response_format: ResponseFormat | None = None
    # vLLM extensions (names as in vLLM's own OpenAI server)
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0, le=1)
    repetition_penalty: float | None = Field(default=None, gt=0, le=2)
    min_tokens: int | None = Field(default=None, ge=0)
    ignore_eos: bool | None = None
    stop_token_ids: list[int] | None = None
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool | None = None
    include_stop_str_in_output: bool | None = None
    bad_words: list[str] | None = None
    allowed_token_ids: list[int] | None = None
    guided_json: Union[dict[str, Any], str, None] = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    structured_outputs: dict[str, Any] | None = None
    vllm_xargs: dict[str, Any] | None = None


class CompletionRequest(SamplingFields):
    prompt: str | list[str] = Field(description="A string or a list of strings (token-id prompts are not supported).")
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
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    tools: list[Tool] | None = None
    tool_choice: Union[Literal["none", "auto", "required"], NamedToolChoice, None] = None
    parallel_tool_calls: bool | None = None
    # OpenAI fields the backend cannot honour: declared so the error says "not supported"
    functions: list[Any] | None = None
    function_call: Any = None
    audio: Any = None
    modalities: list[str] | None = None
    prediction: Any = None
    store: bool | None = None
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    reasoning_effort: str | None = None
    web_search_options: Any = None


class EmbeddingRequest(Strict):
    model: str
    input: str | list[str] = Field(description="A string or a list of strings (token-id inputs are not supported).")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None


class RerankRequest(Strict):
    """The rerank body of vLLM's, Jina's and Cohere's APIs."""

    model: str
    query: str
    documents: list[str] = Field(min_length=1, description="Texts to rank against the query (strings only).")
    top_n: int | None = Field(default=None, ge=1, description="Return the best n (default: all, best first).")
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
        "metadata": "stored completions (metadata) are not supported",
        "service_tier": "service tiers are not supported",
        "reasoning_effort": "reasoning_effort is not supported by the served models",
        "web_search_options": "web search is not supported",
    },
}
