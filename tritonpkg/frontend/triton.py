"""The frontend's connection to Triton: one gRPC channel, one long-lived ModelStreamInfer call.

The vLLM model is decoupled, so every request goes through Triton's bidirectional stream. Opening a
stream per request costs about a millisecond of client CPU (measured with tritonclient.grpc.aio's
`stream_infer`: ~1.1-2.2 ms per request vs ~0.5-1.2 ms on an open stream), but Triton writes one
stream's responses one after another, so requests multiplexed on a single stream wait for each other
(+31 ms p50 at 8 concurrent requests, measured). Non-streamed requests therefore take an idle stream
from a pool of long-lived calls (one in-flight request per call), told apart by request id; each asks
for Triton's empty final response (`triton_enable_empty_final_response`), which marks its end.
Streamed generations get a call of their own: cancelling that call is how Triton (and the backend,
which aborts the vLLM request) learns that the client went away. Requests are built as tritonclient's
protobuf messages directly, because tritonclient's aio wrapper drops the request id of error
responses and refuses that parameter.

Control calls (repository index, configs, readiness) use tritonclient.grpc.aio's client."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import grpc
import numpy as np
import tritonclient.grpc.aio as grpcaio
from tritonclient.grpc import InferResult, service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException, triton_to_np_dtype

from tritonpkg import vllm_io
from tritonpkg.frontend.errors import UNAVAILABLE, APIError, from_triton

# The additional outputs parse_output reads; the flags that ask for them are the backend's contract's.
RETURN_FLAGS = vllm_io.load().flags_for(("finish_reason", "num_input_tokens", "num_output_tokens", "logprobs"))
FINAL = "triton_final_response"
ENABLE_FINAL = "triton_enable_empty_final_response"
MAX_MESSAGE = 256 * 1024 * 1024
INT_FORMATS: dict[str, Literal["I", "i", "Q", "q"]] = {
    "UINT32": "I", "INT32": "i", "UINT64": "Q", "INT64": "q"}  # memoryview formats (native order, as numpy's)
Input = tuple[str, Any]  # (tensor name, str, list of str or bool)


@dataclass
class Output:
    """One backend response: per choice text (a delta when streaming), finish reason, token counts."""

    texts: list[str]
    finish_reasons: list[str | None]
    prompt_tokens: int | None
    completion_tokens: list[int] | None
    logprobs: list[list[dict[str, Any]] | None] | None  # per choice, per position: {"sampled": entry, "top": [entries]}
    prompt_logprobs: list[dict[str, Any]] | None = None  # per prompt position, the same shape (sampled: its token)


def build_request(model: str, request_id: str, inputs: Iterable[Input]) -> service_pb2.ModelInferRequest:
    """A KServe v2 request with BYTES (a str: shape [1]; a list of str: [n]), INT64 (a list of int: [n]) and
    BOOL ([1]) inputs in raw form."""
    request = service_pb2.ModelInferRequest(model_name=model, id=request_id)
    for name, value in inputs:
        tensor = request.inputs.add()
        tensor.name = name
        if isinstance(value, bool):
            tensor.shape.append(1)
            tensor.datatype = "BOOL"
            request.raw_input_contents.append(b"\x01" if value else b"\x00")
        elif isinstance(value, list) and value and isinstance(value[0], int):
            tensor.shape.append(len(value))
            tensor.datatype = "INT64"
            request.raw_input_contents.append(np.asarray(value, dtype="<i8").tobytes())
        else:
            items = [value] if isinstance(value, str) else value
            tensor.shape.append(len(items))
            tensor.datatype = "BYTES"
            request.raw_input_contents.append(b"".join(len(d).to_bytes(4, "little") + d
                                                       for d in (s.encode("utf-8") for s in items)))
    request.parameters[ENABLE_FINAL].bool_param = True
    return request


def _raw_outputs(response: service_pb2.ModelInferResponse) -> dict[str, tuple[str, bytes]]:
    """Output name -> (datatype, raw bytes): Triton's gRPC responses carry every output in raw form."""
    return {o.name: (o.datatype, raw) for o, raw in zip(response.outputs, response.raw_output_contents, strict=False)}


def _strings(outputs: dict[str, tuple[str, bytes]], name: str) -> list[str] | None:
    """A BYTES output's elements (each a 4-byte little-endian length, then the bytes) as text."""
    if name not in outputs:
        return None
    raw, items, i = outputs[name][1], [], 0
    while i + 4 <= len(raw):
        end = i + 4 + int.from_bytes(raw[i:i + 4], "little")
        items.append(raw[i + 4:end].decode("utf-8", "replace"))
        i = end
    return items


def _integers(outputs: dict[str, tuple[str, bytes]], name: str) -> list[int] | None:
    if name not in outputs:
        return None
    datatype, raw = outputs[name]
    if datatype in INT_FORMATS:  # the token counts: no numpy array for one number
        return memoryview(raw).cast(INT_FORMATS[datatype]).tolist()
    return [int(v) for v in np.frombuffer(raw, dtype=triton_to_np_dtype(datatype))]


def _positions(raw: str) -> list[dict[str, Any]] | None:
    """The backend's logprobs JSON for one choice -> positions; vLLM lists the sampled token first."""
    data = json.loads(raw)
    if data is None:
        return None
    rows: list[dict[str, Any]] = []
    for position in data:
        entries: list[dict[str, Any]] = [
            {"id": int(tid), "token": e["decoded_token"] or "", "logprob": e["logprob"], "rank": e["rank"]}
            for tid, e in position.items()]
        rows.append({"sampled": entries[0], "top": sorted(entries, key=lambda e: e["rank"] or 0)})
    return rows


def parse_output(response: service_pb2.ModelInferResponse) -> Output:
    """One generate response, read from the protobuf directly (InferResult's numpy conversions cost
    more than the rest of the parse, per response)."""
    outputs = _raw_outputs(response)
    texts = _strings(outputs, "text_output") or [""]
    reasons = _strings(outputs, "finish_reason")
    n_in = _integers(outputs, "num_input_tokens")
    logprobs = _strings(outputs, "logprobs")
    prompt_logprobs = _strings(outputs, "prompt_logprobs")
    return Output(
        texts=texts,
        finish_reasons=[r or None for r in reasons] if reasons is not None else [None] * len(texts),
        prompt_tokens=n_in[0] if n_in else None,
        completion_tokens=_integers(outputs, "num_output_tokens"),
        logprobs=[_positions(raw) for raw in logprobs] if logprobs is not None else None,
        prompt_logprobs=_positions(prompt_logprobs[0]) if prompt_logprobs else None,
    )


async def _get(inbox: asyncio.Queue, deadline: float):
    """inbox.get() by a loop-time deadline; asyncio.timeout_at (3.11+) creates no task per wait, wait_for does."""
    timeout_at = getattr(asyncio, "timeout_at", None)
    if timeout_at is not None:
        async with timeout_at(deadline):
            return await inbox.get()
    return await asyncio.wait_for(inbox.get(), max(0.0, deadline - asyncio.get_running_loop().time()))


def _is_final(response) -> bool:
    return bool(response.error_message) or response.infer_response.parameters[FINAL].bool_param


class _SharedStream:
    """One ModelStreamInfer call for many requests; a reader task routes responses by request id.
    A broken call fails the requests on it; the next request opens a new one. A request left before its
    final response (client gone, timeout) cancels the call when it is the call's only request, so Triton
    cancels it in the backend; on a shared call it cannot be cancelled alone."""

    def __init__(self, stub, error) -> None:
        self._stub = stub
        self._error = error  # grpc.RpcError -> APIError
        self._outbox: asyncio.Queue | None = None
        self._reader: asyncio.Task | None = None
        self._call = None
        self._waiting: dict[str, asyncio.Queue] = {}

    def _open(self) -> asyncio.Queue:
        outbox = self._outbox
        if outbox is None or self._reader is None or self._reader.done():
            outbox = asyncio.Queue()

            async def requests():
                while (item := await outbox.get()) is not None:
                    yield item

            self._outbox = outbox
            self._call = self._stub.ModelStreamInfer(requests())
            self._reader = asyncio.get_running_loop().create_task(self._read(self._call))
        return outbox

    async def _read(self, call) -> None:
        failure: APIError | None = None
        try:
            async for response in call:
                inbox = self._waiting.get(response.infer_response.id)
                if inbox is not None:
                    inbox.put_nowait(response)
        except grpc.RpcError as exc:
            failure = self._error(exc)
        finally:
            failure = failure or APIError(503, "Triton closed the inference stream", type=UNAVAILABLE)
            for inbox in self._waiting.values():
                inbox.put_nowait(failure)

    async def send(self, request, timeout: float) -> AsyncIterator[Any]:
        inbox: asyncio.Queue = asyncio.Queue()
        self._waiting[request.id] = inbox
        settled = False
        try:
            self._open().put_nowait(request)
            deadline = asyncio.get_running_loop().time() + timeout
            while True:
                try:
                    item = await _get(inbox, deadline)
                except asyncio.TimeoutError:
                    raise APIError(504, f"Triton did not answer within {timeout:g} s") from None
                if isinstance(item, APIError):
                    settled = True
                    raise item
                settled = _is_final(item)
                yield item
                if settled:
                    return
        finally:
            if not settled and len(self._waiting) == 1 and self._call is not None:
                self._call.cancel()
            self._waiting.pop(request.id, None)

    @property
    def in_flight(self) -> int:
        return len(self._waiting)

    async def close(self) -> None:
        if self._outbox is not None:
            self._outbox.put_nowait(None)
        if self._reader is not None:
            self._reader.cancel()


class _StreamPool:
    """Long-lived ModelStreamInfer calls, each carrying one request at a time: a request takes an idle
    call or opens one; past `limit` calls it shares the least busy."""

    def __init__(self, stub, error, limit: int = 64) -> None:
        self._stub = stub
        self._error = error
        self._limit = limit
        self._streams: list[_SharedStream] = []

    def _pick(self) -> _SharedStream:
        stream = min(self._streams, key=lambda s: s.in_flight, default=None)
        if stream is None or (stream.in_flight and len(self._streams) < self._limit):
            stream = _SharedStream(self._stub, self._error)
            self._streams.append(stream)
        return stream

    def send(self, request, timeout: float) -> AsyncIterator[Any]:
        return self._pick().send(request, timeout)

    async def close(self) -> None:
        for stream in self._streams:
            await stream.close()


class TritonBackend:
    """Async calls the routes need; errors come back as APIError, never as gRPC exceptions."""

    def __init__(self, url: str, timeout_s: float, admin_key: str | None = None) -> None:
        from tritonpkg.proc.admin_header import grpc_headers

        self.url = url
        self.timeout_s = timeout_s
        self._admin = grpc_headers(admin_key) or None  # only the repository index needs it
        self.client = grpcaio.InferenceServerClient(url)
        options = [("grpc.max_send_message_length", MAX_MESSAGE), ("grpc.max_receive_message_length", MAX_MESSAGE)]
        self._channel = grpc.aio.insecure_channel(url, options=options)
        self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
        self._pool = _StreamPool(self._stub, self._rpc_error)
        self._ids = itertools.count()

    async def close(self) -> None:
        await self._pool.close()
        await self._channel.close()
        await self.client.close()

    def _rpc_error(self, exc: grpc.RpcError) -> APIError:
        code = exc.code() if hasattr(exc, "code") else None
        details = exc.details() if hasattr(exc, "details") else str(exc)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return APIError(504, f"Triton did not finish within {self.timeout_s:g} s")
        if code == grpc.StatusCode.UNAVAILABLE:
            return APIError(503, f"Triton at {self.url} is unreachable: {details}", type=UNAVAILABLE)
        return from_triton(str(details))

    async def _control(self, coro):
        try:
            return await coro
        except InferenceServerException as exc:
            message = exc.message() or str(exc)
            if "failed to connect" in message.lower() or "unavailable" in message.lower():
                raise APIError(503, f"Triton at {self.url} is unreachable: {message}", type=UNAVAILABLE) from None
            raise from_triton(message) from None

    async def models(self) -> list[dict[str, Any]]:
        index = await self._control(self.client.get_model_repository_index(headers=self._admin, as_json=True))
        return list(index.get("models", []))

    async def config(self, name: str, version: str = "") -> dict[str, Any]:
        data = await self._control(self.client.get_model_config(name, version, as_json=True))
        return data.get("config", {})

    async def server_ready(self) -> bool:
        return bool(await self._control(self.client.is_server_ready()))

    async def infer(self, model: str, inputs: list[Input], own_stream: bool = False) -> AsyncIterator[InferResult]:
        """Send one request; yield each response that carries outputs. With `own_stream`, leaving early
        cancels the request in Triton."""
        async for response in self._responses(model, inputs, own_stream):
            yield InferResult(response)

    async def _responses(self, model: str, inputs: list[Input], own_stream: bool = False):
        """`infer` without the InferResult wrapper: the ModelInferResponse protobufs."""
        request = build_request(model, f"fe-{next(self._ids)}", inputs)
        responses = self._own(request) if own_stream else self._pool.send(request, self.timeout_s)
        try:
            async for response in responses:
                if response.error_message:
                    raise from_triton(response.error_message)
                if response.infer_response.outputs:
                    yield response.infer_response
        finally:
            await responses.aclose()  # type: ignore[attr-defined]

    async def _own(self, request) -> AsyncIterator[Any]:
        async def one():
            yield request

        call = self._stub.ModelStreamInfer(one(), timeout=self.timeout_s)
        try:
            async for response in call:
                yield response
                if _is_final(response):
                    return
        except grpc.RpcError as exc:
            raise self._rpc_error(exc) from None
        finally:
            call.cancel()

    async def generate(self, model: str, prompt: str | list[int], params: dict[str, Any], stream: bool,
                       returns: frozenset[str]) -> AsyncIterator[Output]:
        """A text prompt, or token ids (the backend's `prompt_token_ids` beside an empty text_input); with
        `prompt_logprobs` in params, the backend also returns the prompt's log-probabilities."""
        text, ids = (prompt, None) if isinstance(prompt, str) else ("", prompt)
        inputs: list[Input] = [("text_input", text), ("stream", stream),
                               ("sampling_parameters", json.dumps(params)), ("exclude_input_in_output", True)]
        if ids is not None:
            inputs.append(("prompt_token_ids", ids))
        if "prompt_logprobs" in params:
            inputs.append(("return_prompt_logprobs", True))
        wanted = set(RETURN_FLAGS) if "logprobs" in params else set(RETURN_FLAGS) - {"return_logprobs"}
        inputs += [(flag, True) for flag in RETURN_FLAGS if flag in wanted and flag in returns]
        async for response in self._responses(model, inputs, own_stream=stream):
            yield parse_output(response)

    async def score(self, model: str, query: str, documents: list[str]) -> tuple[Any, int]:
        """A `scoring`-template model: (one relevance score per document, in order; tokens it read). Its
        input errors name the tensor (`DOCUMENTS[3]: ...`) and are the request's: 400."""
        scores, tokens = None, 0
        try:
            async for result in self.infer(model, [("QUERY", query), ("DOCUMENTS", documents)]):
                scores = result.as_numpy("SCORES")
                tokens = int(result.as_numpy("NUM_TOKENS").sum())
        except APIError as exc:
            field = re.match(r"(QUERY|DOCUMENTS)(\[\d+\])?: ", exc.message)
            if exc.status == 500 and field:
                raise APIError(400, exc.message, param=field.group(1).lower()) from None
            raise
        if scores is None:
            raise APIError(500, f"model '{model}' returned no 'SCORES' output")
        return scores.reshape(-1).astype("float32"), tokens

    async def embed(self, model: str, text: str | list[int], pooling: dict[str, Any]) -> tuple[Any, int | None]:
        """A text, or token ids (the backend's `embedding_request`, NVIDIA's input that carries them)."""
        inputs: list[Input]
        if isinstance(text, str):
            inputs = [("text_input", text)]
            if pooling:
                inputs.append(("pooling_parameters", json.dumps(pooling)))
        else:
            inputs = [("text_input", ""), ("embedding_request", json.dumps({"input": text, "pooling_params": pooling}))]
        vector, n_in = None, None
        async for result in self.infer(model, inputs):
            vector = result.as_numpy("embedding")
            count = result.as_numpy("num_input_tokens")
            n_in = int(count.reshape(-1)[0]) if count is not None else None
        if vector is None:
            raise APIError(500, f"model '{model}' returned no 'embedding' output")
        return vector.reshape(-1).astype("float32"), n_in
