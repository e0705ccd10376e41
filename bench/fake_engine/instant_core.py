"""An instant token source in place of vLLM's EngineCore, for bench/response_ceiling.py.

Everything of vLLM's `AsyncLLM` stays real (the renderer that tokenizes prompts, the input processor, the
output processor with its incremental detokenizer and per-request collectors, `generate()`, `abort()`,
`check_health()`); only the engine-core client that `AsyncLLM.__init__` makes with
`EngineCoreClient.make_async_mp_client` is replaced. A real one sends requests over ZMQ to the EngineCore
process (scheduler + model) and decodes its `EngineCoreOutputs` from a socket; this one keeps the requests in
a dict and answers `get_output_async()` at once with one step: one new token for every live request whose
previous output the consumer (the backend's `async for` over `generate()`) has already taken. So tokens come
as fast as they are asked for, one token per `RequestOutput`, and whatever is slower than that shows.

Each step is encoded and decoded with vLLM's own msgpack codec, as the real client decodes what the EngineCore
sent (the encode, a few microseconds per step, is charged to this process though a real EngineCore pays it).
Token ids cycle through an English sentence tokenized by the model's own tokenizer, so the detokenizer turns
them into ordinary text; a request ends with finish reason "length" after its `max_tokens` tokens (the fake
never samples an end-of-sequence token: every request is `ignore_eos` in effect).
"""

from __future__ import annotations

import asyncio
import os
import time
from types import SimpleNamespace
from typing import Any

TEXT = ("Triton streams every token of the answer to its client as soon as the engine has produced it, "
        "and the client joins the deltas into the text. ")


class InstantCore:
    """Duck-types the parts of vllm.v1.engine.core_client.AsyncMPClient that AsyncLLM uses for generation."""

    def __init__(self, vllm_config: Any, executor_class: Any = None, log_stats: bool = False,
                 client_addresses: Any = None, client_count: int = 1, client_index: int = 0,
                 renderer: Any = None) -> None:
        from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs, FinishReason
        from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

        self.vllm_config = vllm_config
        self.engine_ranks_managed = [0]
        self.resources = SimpleNamespace(engine_dead=False)
        self.output_processor: Any = None  # set by the patch once AsyncLLM has made it (sitecustomize.py)
        self._output, self._outputs, self._length = EngineCoreOutput, EngineCoreOutputs, FinishReason.LENGTH
        self._encoder, self._decoder = MsgpackEncoder(), MsgpackDecoder(EngineCoreOutputs)
        tokenizer = getattr(renderer, "tokenizer", None)
        ids = tokenizer.encode(TEXT, add_special_tokens=False) if tokenizer is not None else []
        self._ids = ids or list(range(100, 200))
        self._live: dict[str, list[int]] = {}  # internal request id -> [tokens sent, max_tokens]
        self._added: asyncio.Event | None = None
        self.steps = 0
        self._pace = float(os.environ.get("TRITONPKG_BENCH_STEP_S", "0") or 0)

    # -- what AsyncLLM calls -----------------------------------------------------------------------
    async def get_supported_tasks_async(self) -> tuple[str, ...]:
        return ("generate",)

    async def add_request_async(self, request: Any) -> None:
        params = request.sampling_params
        if params is None:
            raise ValueError("the instant token source generates only (no pooling)")
        self._live[request.request_id] = [0, int(params.max_tokens or 16)]
        if self._added is not None:
            self._added.set()

    async def abort_requests_async(self, request_ids: list[str]) -> None:
        for request_id in request_ids:
            self._live.pop(request_id, None)

    async def get_output_async(self) -> Any:
        """One step: a token for each live request whose last output was taken. Waits while there is none."""
        if self._added is None:
            self._added = asyncio.Event()
        while True:
            if not self._live:
                self._added.clear()
                await self._added.wait()
                continue
            await asyncio.sleep(self._pace)  # the consumers woken by the last step take their outputs
            step = self._step()
            if step:
                break
        self.steps += 1
        frames = self._encoder.encode(self._outputs(outputs=step, timestamp=time.monotonic()))
        return self._decoder.decode(frames)

    def _step(self) -> list[Any]:
        states = self.output_processor.request_states if self.output_processor is not None else None
        step = []
        ids, n_ids = self._ids, len(self._ids)
        for request_id, live in list(self._live.items()):
            if states is not None:
                state = states.get(request_id)
                if state is None:  # finished or aborted in the output processor
                    del self._live[request_id]
                    continue
                queue = state.queue
                if queue is not None and queue.output is not None:  # not taken yet: it is not asked for
                    continue
            sent, limit = live
            token = ids[sent % n_ids]
            live[0] = sent = sent + 1
            if sent >= limit:
                del self._live[request_id]
                step.append(self._output(request_id=request_id, new_token_ids=[token], finish_reason=self._length))
            else:
                step.append(self._output(request_id=request_id, new_token_ids=[token]))
        return step

    # -- the rest of the client's surface that AsyncLLM touches ------------------------------------
    def dp_engines_running(self) -> bool:
        return False

    def get_kv_event_sources(self) -> dict[int, Any]:
        return {}

    async def check_health_async(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        """The API server's start-up calls (`reset_mm_cache_async`, ...): there is nothing to reset or report."""
        if name.endswith("_async"):
            async def nothing(*args: Any, **kwargs: Any) -> None:
                return None

            return nothing
        raise AttributeError(name)

    def shutdown(self, timeout: float | None = None) -> None:
        self._live.clear()
