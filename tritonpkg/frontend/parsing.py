"""Tool calls and reasoning in chat answers, parsed by the pinned vLLM's own parsers (`vllm.parser`:
the tool-call parser composed with the reasoning parser, as `vllm serve --tool-call-parser X
--reasoning-parser Y` composes them), chosen per model in the spec (`openai: {tool_call_parser: ...}`).

Importing vLLM imports torch and transformers (seconds, hundreds of MB), so this module loads it only
for a model that names a parser, once, in a worker thread while the model is discovered; a frontend
whose models name none never imports it. The parsers get vLLM's own tokenizer of the model (what
`vllm serve` gives them): some look up marker tokens in its vocabulary. The backend returns text, not
token ids; the ids a parser sees are that text encoded again (added tokens such as `<think>` or
`<tool_call>` encode to their own id, which is what the parsers look for).

Per request, vLLM's `adjust_request` decides the constraint (a structural tag or a JSON schema for
`required` and named tools) and `skip_special_tokens`; `parse` / `parse_delta` split the output into
reasoning, content and tool calls."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from tritonpkg.frontend.errors import APIError
from tritonpkg.frontend.mapping import CONSTRAINT_FIELDS, strict_structured_outputs

if TYPE_CHECKING:
    from vllm.tokenizers import TokenizerLike

REQUEST_FIELDS = ("messages", "tools", "tool_choice", "parallel_tool_calls", "response_format", "structured_outputs",
                  "skip_special_tokens")


@dataclass
class ModelParsers:
    """A model's composed vLLM Parser class and the tokenizer it is built with."""

    tool_call_parser: str | None
    reasoning_parser: str | None
    parser_cls: Any
    tokenizer: Any

    @property
    def tools(self) -> bool:
        return self.tool_call_parser is not None


def load_parsers(names: dict[str, str], tokenizer_path: str, model: str) -> ModelParsers:
    """vLLM's Parser for `names` ({tool_call_parser, reasoning_parser}), checked against the model's
    tokenizer as vLLM checks it at start-up (a reasoning parser whose marker tokens the vocabulary lacks
    fails here). Slow: imports vLLM."""
    from vllm.parser.parser_manager import ParserManager
    from vllm.tokenizers import get_tokenizer

    tool, reasoning = names.get("tool_call_parser"), names.get("reasoning_parser")
    if (Path(tokenizer_path) / "config.json").is_file():
        tokenizer = get_tokenizer(tokenizer_path)
    else:  # a tokenizer folder alone: get_tokenizer would look for the model's config (and retry, sleeping)
        from vllm.tokenizers.hf import CachedHfTokenizer

        # vLLM's tokenizer registry hands this class's tokenizers out as TokenizerLike too
        tokenizer = cast("TokenizerLike", CachedHfTokenizer.from_pretrained(tokenizer_path))
    parser_cls = ParserManager.get_parser(tool_parser_name=tool, reasoning_parser_name=reasoning,
                                          enable_auto_tools=tool is not None, model_name=model, tokenizer=tokenizer)
    return ModelParsers(tool, reasoning, parser_cls, tokenizer)


def _structured(params: Any) -> dict[str, Any] | None:
    """vLLM's StructuredOutputsParams -> the backend's `structured_outputs` dict (set fields only)."""
    if params is None:
        return None
    return {f.name: getattr(params, f.name) for f in dataclasses.fields(params)
            if not f.name.startswith("_") and getattr(params, f.name) not in (None, False)}


class ChatParse:
    """One chat request's parsing: one vLLM Parser per choice (they keep streaming state)."""

    def __init__(self, parsers: ModelParsers, body: Any, n: int, encode) -> None:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

        self.parsers = parsers
        self.encode = encode  # text -> token ids (the frontend's own tokenizer, no special tokens added)
        data = body.model_dump(include=set(REQUEST_FIELDS), exclude_none=True, by_alias=True)
        try:
            request = ChatCompletionRequest.model_validate({"model": body.model, **data})
            self._given = _structured(request.structured_outputs)
            self.request = self._new_parser(request).adjust_request(request)
        except APIError:
            raise
        except Exception as exc:  # vLLM's own refusal of the request (its validators)
            raise APIError(400, f"vLLM's parser refused the request: {_short(exc)}", param="tools") from None
        self._choices = [self._new_parser(self.request) for _ in range(n)]
        self._tools_streamed = [False] * n
        self.named = body.tool_choice is not None and not isinstance(body.tool_choice, str)
        self.prompt_ids: list[int] | None = None  # the rendered prompt's token ids (set_prompt)

    def set_prompt(self, token_ids: list[int]) -> None:
        """The rendered prompt's token ids, which vLLM's serving hands every parser: from them a parser
        decides whether the answer starts after the reasoning, and without a reasoning parser its tool-call
        phase starts only once it has seen them (else every delta streams as content)."""
        self.prompt_ids = token_ids
        for parser in self._choices:
            parser.set_prompt_token_ids(token_ids)

    def _new_parser(self, request: Any) -> Any:
        return self.parsers.parser_cls(self.parsers.tokenizer, request.tools)

    def sampling_overrides(self, params: dict[str, Any]) -> None:
        """What vLLM's adjust_request changed, written into the backend's sampling_parameters: the
        constraint (replacing the request's own, as vLLM does) and skip_special_tokens."""
        adjusted = _structured(self.request.structured_outputs)
        if adjusted != self._given or (adjusted and self.request.response_format is None):
            for name in CONSTRAINT_FIELDS:
                params.pop(name, None)
            if adjusted:
                params["structured_outputs"] = strict_structured_outputs(adjusted)
        if self.request.skip_special_tokens is False:
            params["skip_special_tokens"] = False

    @property
    def _forced(self) -> bool:
        return self.named or self.request.tool_choice == "required"

    def message(self, index: int, text: str) -> tuple[dict[str, Any], bool]:
        """A whole answer -> (the assistant message, whether a 'stop' finishes as 'tool_calls'), as vLLM's
        chat_completion_full_generator builds it: a forced choice (named or required) has content "" rather
        than null, `required` finishes as 'tool_calls', auto only when it called tools."""
        from vllm.entrypoints.serve.utils.tool_calls_utils import maybe_filter_parallel_tool_calls
        from vllm.renderers.chat_utils import make_tool_call_id

        reasoning, content, calls = self._choices[index].parse(
            text, self.request, enable_auto_tools=self.parsers.tools, model_output_token_ids=self.encode(text))
        calls = maybe_filter_parallel_tool_calls(list(calls or []), self.request)
        forced = self.parsers.tools and self._forced
        message: dict[str, Any] = {"role": "assistant", "content": (content or "") if forced else content}
        if reasoning is not None:
            message["reasoning"] = message["reasoning_content"] = reasoning
        if calls:
            message["tool_calls"] = [{"id": c.id or make_tool_call_id(), "type": "function",
                                      "function": {"name": c.name, "arguments": c.arguments}} for c in calls]
        called = bool(calls) and self.request.tool_choice in (None, "auto")
        return message, called or (forced and self.request.tool_choice == "required")

    def delta(self, index: int, text: str, finished: bool) -> dict[str, Any] | None:
        """One streamed delta -> OpenAI's delta object, or None while the parser holds text back."""
        from vllm.entrypoints.serve.utils.tool_calls_utils import maybe_filter_parallel_tool_calls

        out = self._choices[index].parse_delta(text, self.encode(text) if text else [], self.request,
                                               prompt_token_ids=self.prompt_ids, finished=finished)
        if out is None:
            return None
        out = maybe_filter_parallel_tool_calls(out, self.request)
        delta: dict[str, Any] = {}
        if out.content:
            delta["content"] = out.content
        if out.reasoning:
            delta["reasoning"] = delta["reasoning_content"] = out.reasoning
        if out.tool_calls:
            self._tools_streamed[index] = True
            delta["tool_calls"] = [call.model_dump(exclude_unset=True) for call in out.tool_calls]  # as vLLM dumps them
        return delta

    def finish_reason(self, index: int, reason: str | None) -> str | None:
        """OpenAI's: 'tool_calls' when the answer called tools (auto or required), not for a named tool."""
        if reason == "stop" and self._tools_streamed[index] and not self.named:
            return "tool_calls"
        return reason


def _short(exc: Exception) -> str:
    text = str(exc)
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first = errors()[0]
            text = f"{'.'.join(map(str, first.get('loc', ())))}: {first.get('msg')}"
        except Exception:  # noqa: S110  an exception's own errors() that fails leaves its str() as the text
            pass
    return json.dumps(text[:300])[1:-1]
