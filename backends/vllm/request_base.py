"""What every request kind shares: reading Triton input tensors, the vLLM parameter types, and the life cycle
of one request against the engine (register, watch for cancellation, one error response for any failure,
the response stream ended exactly once). The kinds themselves live in generate_request.py,
score_request.py and embed_request.py."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import traceback
import typing
import uuid
from collections.abc import Awaitable
from typing import Any

import triton_python_backend_utils as pb_utils
from contract import CONTROL_KEYS
from request_params import ParamError, normalize_sampling

INVALID_ARG, UNAVAILABLE = "INVALID_ARG", "UNAVAILABLE"  # pb_utils.TritonError codes (ResponseQueue.error)
MAX_REQUEST_JSON = 4 << 20  # bytes of one JSON input; the engine bounds the prompt itself (max_model_len)
# Keys of SamplingParams that the backend owns or that only vLLM itself may set.
RESERVED_FIELDS = {"output_kind", "skip_clone", "output_text_buffer_length", "detokenize"}
# PoolingParams keys a client may set (task is chosen by the backend: "embed").
POOLING_FIELDS = ("dimensions", "use_activation")


class RequestError(ValueError):
    """A problem with one request: reported to its client, the model keeps serving."""


class VllmTypes:
    """The installed vLLM's parameter classes and exceptions, imported once the stub's locale is fixed."""

    def __init__(self) -> None:
        import importlib

        from vllm import SamplingParams
        from vllm.pooling_params import PoolingParams
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

        def vllm_class(module: str, name: str, default: type[BaseException]) -> type[BaseException]:
            """An exception class that older vLLMs lack."""
            try:
                return getattr(importlib.import_module(module), name)
            except (ImportError, AttributeError):
                return default

        client_error = vllm_class("vllm.exceptions", "VLLMClientError", ValueError)
        self.client_errors: tuple[type[BaseException], ...] = (ValueError, client_error)  # no traceback logged
        self.param_errors: tuple[type[BaseException], ...] = (TypeError, *self.client_errors)
        self.EngineDeadError = vllm_class("vllm.v1.engine.exceptions", "EngineDeadError", RuntimeError)
        self.SamplingParams = SamplingParams
        self.PoolingParams = PoolingParams
        self.RequestOutputKind = RequestOutputKind
        self.sampling_fields = sampling_fields(SamplingParams)
        self.structured_fields = {f.name for f in dataclasses.fields(StructuredOutputsParams)
                                  if not f.name.startswith("_")}

    def sampling_params(self, params: dict[str, Any]) -> Any:
        """JSON object -> SamplingParams with the installed vLLM's field types; unknown keys are errors."""
        import msgspec

        kwargs = normalize_sampling(params, self.sampling_fields, self.structured_fields)
        try:
            return msgspec.convert(kwargs, self.SamplingParams, strict=False)
        except msgspec.ValidationError as exc:
            raise RequestError(f"invalid sampling parameters: {exc}") from exc
        except self.param_errors as exc:
            raise RequestError(f"invalid sampling parameters: {exc}") from exc

    def pooling_params(self, params: dict[str, Any]) -> Any:
        unknown = sorted(k for k in params if k not in POOLING_FIELDS)
        if unknown:
            raise RequestError(
                f"unknown pooling parameter(s) {', '.join(map(repr, unknown))}; accepted: {', '.join(POOLING_FIELDS)}"
            )
        if "dimensions" in params:
            try:
                params = {**params, "dimensions": int(params["dimensions"])}
            except (TypeError, ValueError) as exc:
                raise RequestError(f"pooling parameter 'dimensions' must be an integer, "
                                   f"got {params['dimensions']!r}") from exc
        if "use_activation" in params:
            params = {**params, "use_activation": as_bool(params["use_activation"], "use_activation")}
        try:
            return self.PoolingParams(task="embed", **params)
        except self.param_errors as exc:
            raise RequestError(f"invalid pooling parameters: {exc}") from exc


def sampling_fields(sampling_cls: Any) -> dict[str, bool]:
    """Public SamplingParams fields -> whether the field takes a plain string (JSON strings are not decoded)."""
    hints = typing.get_type_hints(sampling_cls)
    fields = {}
    for name in sampling_cls.__struct_fields__:
        if name.startswith("_") or name in RESERVED_FIELDS:
            continue
        hint = hints.get(name)
        fields[name] = hint is str or str in typing.get_args(hint)
    return fields


class RequestInputs:
    """What every kind reads first: the one prompt string, the JSON parameters (the `sampling_parameters`
    input, else the request parameters, where the control flags may stand in for their inputs)."""

    def __init__(self, request: Any) -> None:
        self.request = request
        prompt = input_string(request, "text_input")
        if prompt is None:
            raise RequestError("input 'text_input' is required (exactly one string)")
        size = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().size
        if size != 1:
            raise RequestError(f"input 'text_input' must hold exactly one string, got {size}")
        self.prompt = prompt
        raw = input_string(request, "sampling_parameters")
        from_request_parameters = raw is None
        if raw is None:
            raw = request.parameters() or "{}"
        params = json_object(raw, "sampling_parameters")
        self.controls: dict[str, Any] = {}
        if from_request_parameters:
            self.controls = {k: params.pop(k) for k in CONTROL_KEYS if k in params}
            params = {k: v for k, v in params.items() if not k.startswith("triton_")}
        self.params: dict[str, Any] = params

    def flag(self, name: str, default: bool = False) -> bool:
        value = input_bool(self.request, name)
        if value is None and name in self.controls:
            value = as_bool(self.controls[name], name)
        return default if value is None else value


class Context:
    """What a running request needs of its model: the engine host, the response queue, the cancel watch,
    the parameter types, and the in-flight registry (request id -> sender) the engine's death answers."""

    def __init__(self, host: Any, responses: Any, cancel_watch: Any, types: VllmTypes, output_dtype: Any,
                 logger: Any) -> None:
        self.host, self.responses, self.cancel_watch = host, responses, cancel_watch
        self.types, self.output_dtype, self.logger = types, output_dtype, logger
        self.inflight: dict[str, Any] = {}
        self.adapters: Any = None  # lora.Adapters: the LoRA adapters the model serves

    def fail_all(self, message: str) -> None:
        """The engine died: every in-flight request gets `message` and is aborted in the engine (one that only
        failed its health check would run it on); their bodies stop at their next output."""
        for request_id, sender in list(self.inflight.items()):
            self.inflight.pop(request_id, None)
            ticket = self.responses.tickets.get(id(sender))
            if ticket is not None:
                ticket.abandon()  # its body stops at its next output, its queued steps are dropped
            self.host.abort(request_id)
            self.responses.error(sender, message, UNAVAILABLE)


class BaseRequest:
    """One parsed request of one kind. `body` runs it against the engine and queues its responses; it returns
    True once it queued the final one."""

    stream = False  # True: its responses are streamed steps, polled for cancellation before each

    def __init__(self) -> None:
        self.request_id = uuid.uuid4().hex

    async def body(self, ctx: Context, sender: Any, ticket: Any) -> bool:
        raise NotImplementedError

    async def run(self, ctx: Context, sender: Any) -> None:
        request_id = self.request_id
        ctx.inflight[request_id] = sender
        ticket = ctx.responses.tickets[id(sender)] = ctx.cancel_watch.register(
            request_id, sender, streamed=self.stream)
        final_sent = False
        try:
            final_sent = await self.body(ctx, sender, ticket)
        except asyncio.CancelledError:
            await quietly(ctx.host.engine.abort(request_id))
            raise
        except Exception as exc:
            await quietly(ctx.host.engine.abort(request_id))
            if not ticket.done():
                if isinstance(exc, ctx.types.EngineDeadError) or ctx.host.dead is not None:
                    ctx.host.mark_dead(f"the vLLM engine died ({type(exc).__name__}: {exc})")
                    if ctx.inflight.pop(request_id, None) is not None:  # not answered by fail_all
                        ctx.responses.error(sender, ctx.host.dead, UNAVAILABLE)
                elif isinstance(exc, (RequestError, ParamError, *ctx.types.client_errors)):
                    ctx.responses.error(sender, f"vLLM rejected the request: {exc}", INVALID_ARG)
                else:
                    ctx.logger.log_error(f"[vllm] request {request_id} failed: {traceback.format_exc()}")
                    ctx.responses.error(sender, f"vLLM failed the request: {type(exc).__name__}: {exc}")
                final_sent = True
        finally:
            ctx.cancel_watch.release(request_id)
            answered = ctx.inflight.pop(request_id, None) is None  # by fail_all
            if not final_sent and not answered:
                ctx.responses.final(sender, cancelled=ticket.done())


def input_string(request: Any, name: str) -> str | None:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    value = tensor.as_numpy().reshape(-1)
    if value.size == 0:
        return None
    return text(value[0], name)


def input_strings(request: Any, name: str) -> list[str] | None:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    return [text(v, name) for v in tensor.as_numpy().reshape(-1)]


def text(value: Any, name: str) -> str:
    """One element of a BYTES input as text; Triton has checked the datatype and shape against the config."""
    if not isinstance(value, bytes):
        raise RequestError(f"input '{name}' must be BYTES (UTF-8 text), got {type(value).__name__}")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError(f"input '{name}' is not UTF-8 text: byte {exc.start} "
                           f"({value[exc.start:exc.start + 1]!r})") from None


def json_object(raw: str, name: str) -> dict[str, Any]:
    if len(raw) > MAX_REQUEST_JSON:
        raise RequestError(f"{name} is longer than {MAX_REQUEST_JSON} characters")
    try:
        value = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        raise RequestError(f"{name} is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise RequestError(f"{name} must be a JSON object")
    return value


def input_bool(request: Any, name: str) -> bool | None:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    value = tensor.as_numpy().reshape(-1)
    return bool(value[0]) if value.size else None


def as_bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
        return value.lower() in ("true", "1")
    raise RequestError(f"parameter {name!r} must be a boolean, got {value!r}")


async def quietly(awaitable: Awaitable[Any]) -> None:
    """Await an engine call whose failure changes nothing (an abort of a request that already ended)."""
    with contextlib.suppress(Exception):
        await awaitable
