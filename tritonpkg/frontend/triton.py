"""The frontend's one connection to Triton: a shared `tritonclient.grpc.aio` client.

Every generation goes through `stream_infer` (the vLLM model is decoupled, so plain `infer` is not
allowed): one bidirectional stream per request carrying one request; Triton ends the stream after
the model's final response, which is how the end of a non-streamed answer is seen too."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, AsyncIterator

import grpc
import numpy as np
import tritonclient.grpc.aio as grpcaio
from tritonclient.grpc import InferInput
from tritonclient.utils import InferenceServerException

from tritonpkg.frontend.errors import UNAVAILABLE, APIError, from_triton

RETURN_FLAGS = ("return_finish_reason", "return_num_input_tokens", "return_num_output_tokens", "return_logprobs")


@dataclass
class Output:
    """One backend response: per choice text (a delta when streaming), finish reason, token counts."""

    texts: list[str]
    finish_reasons: list[str | None]
    prompt_tokens: int | None
    completion_tokens: list[int] | None
    logprobs: list[list[dict[str, Any]]] | None  # per choice, per position: [{"id", "token", "logprob", "rank"}]


def _tensor(name: str, value: Any) -> InferInput:
    if isinstance(value, bool):
        tensor = InferInput(name, [1], "BOOL")
        tensor.set_data_from_numpy(np.array([value], dtype=bool))
    else:
        tensor = InferInput(name, [1], "BYTES")
        tensor.set_data_from_numpy(np.array([value.encode("utf-8")], dtype=np.object_))
    return tensor


def _strings(result, name: str) -> list[str] | None:
    values = result.as_numpy(name)
    if values is None:
        return None
    return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values.reshape(-1)]


def _positions(raw: str) -> list[dict[str, Any]] | None:
    """The backend's logprobs JSON for one choice -> positions; vLLM lists the sampled token first."""
    data = json.loads(raw)
    if data is None:
        return None
    rows = []
    for position in data:
        entries = [{"id": int(tid), "token": e["decoded_token"] or "", "logprob": e["logprob"], "rank": e["rank"]}
                   for tid, e in position.items()]
        rows.append({"sampled": entries[0], "top": sorted(entries, key=lambda e: e["rank"] or 0)})
    return rows


def parse_output(result) -> Output:
    texts = _strings(result, "text_output") or [""]
    reasons = _strings(result, "finish_reason")
    n_in = result.as_numpy("num_input_tokens")
    n_out = result.as_numpy("num_output_tokens")
    logprobs = _strings(result, "logprobs")
    return Output(
        texts=texts,
        finish_reasons=[r or None for r in reasons] if reasons is not None else [None] * len(texts),
        prompt_tokens=int(n_in.reshape(-1)[0]) if n_in is not None else None,
        completion_tokens=[int(v) for v in n_out.reshape(-1)] if n_out is not None else None,
        logprobs=[_positions(raw) for raw in logprobs] if logprobs is not None else None,
    )


class TritonBackend:
    """Async calls the routes need; errors come back as APIError, never as gRPC exceptions."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.client = grpcaio.InferenceServerClient(url)

    async def close(self) -> None:
        await self.client.close()

    async def _call(self, coro):
        try:
            return await coro
        except InferenceServerException as exc:
            raise self._error(exc.message() or str(exc)) from None
        except grpc.RpcError as exc:
            raise self._error(str(exc.details() if hasattr(exc, "details") else exc)) from None

    def _error(self, message: str) -> APIError:
        if "failed to connect" in message.lower() or "connection refused" in message.lower() or "unavailable" in message.lower():
            return APIError(503, f"Triton at {self.url} is unreachable: {message}", type=UNAVAILABLE)
        return from_triton(message)

    async def models(self) -> list[dict[str, Any]]:
        index = await self._call(self.client.get_model_repository_index(as_json=True))
        return list(index.get("models", []))

    async def config(self, name: str, version: str = "") -> dict[str, Any]:
        data = await self._call(self.client.get_model_config(name, version, as_json=True))
        return data.get("config", {})

    async def server_ready(self) -> bool:
        return bool(await self._call(self.client.is_server_ready()))

    async def stream(self, model: str, tensors: list[InferInput]) -> AsyncIterator[Any]:
        """Send one request; yield each InferResult. Leaving early cancels the request in Triton."""

        async def one_request():
            yield {"model_name": model, "inputs": tensors}

        try:
            responses = self.client.stream_infer(one_request(), stream_timeout=self.timeout_s)
        except InferenceServerException as exc:
            raise self._error(exc.message() or str(exc)) from None
        finished = False
        try:
            while True:
                try:
                    result, error = await responses.__anext__()
                except StopAsyncIteration:
                    finished = True
                    return
                except grpc.RpcError as exc:
                    finished = True
                    if getattr(exc, "code", lambda: None)() == grpc.StatusCode.DEADLINE_EXCEEDED:
                        raise APIError(504, f"Triton did not finish within {self.timeout_s:g} s") from None
                    raise self._error(str(exc.details() if hasattr(exc, "details") else exc)) from None
                if error is not None:
                    finished = True
                    raise self._error(error.message() or str(error))
                yield result
        finally:
            if not finished:
                responses.cancel()

    async def generate(self, model: str, prompt: str, params: dict[str, Any], stream: bool,
                       returns: frozenset[str]) -> AsyncIterator[Output]:
        tensors = [
            _tensor("text_input", prompt),
            _tensor("stream", stream),
            _tensor("sampling_parameters", json.dumps(params)),
            _tensor("exclude_input_in_output", True),
        ]
        wanted = set(RETURN_FLAGS) if "logprobs" in params else set(RETURN_FLAGS) - {"return_logprobs"}
        tensors += [_tensor(flag, True) for flag in sorted(wanted & returns)]
        async for result in self.stream(model, tensors):
            yield parse_output(result)

    async def embed(self, model: str, text: str, pooling: dict[str, Any]) -> tuple[np.ndarray, int | None]:
        tensors = [_tensor("text_input", text)]
        if pooling:
            tensors.append(_tensor("pooling_parameters", json.dumps(pooling)))
        vector, n_in = None, None
        async for result in self.stream(model, tensors):
            vector = result.as_numpy("embedding")
            count = result.as_numpy("num_input_tokens")
            n_in = int(count.reshape(-1)[0]) if count is not None else None
        if vector is None:
            raise APIError(500, f"model '{model}' returned no 'embedding' output")
        return vector.reshape(-1).astype(np.float32), n_in
