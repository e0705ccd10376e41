"""tritonpkg's vLLM backend for Triton's Python backend.

Triton serves it as `<backend_dir>/vllm/model.py` for every model whose config.pbtxt says
`backend: "vllm"`; engine arguments come from `<model_dir>/<version>/model.json`. The request
contract is NVIDIA's vLLM backend's (text_input, stream, sampling_parameters,
exclude_input_in_output -> text_output), so clients written for it work unchanged.

One vLLM V1 `AsyncLLM` runs on a private asyncio loop thread; `execute` only parses and schedules,
so the model is decoupled and vLLM batches concurrent requests itself.

Semantics that differ from, or pin down, NVIDIA's backend:
- exclude_input_in_output: absent means "include the prompt" without streaming and "exclude it"
  with streaming (as NVIDIA). An explicit `false` while streaming is accepted (NVIDIA rejects it):
  the prompt is sent as the first streamed delta's prefix, so the deltas still join to the full text.
- Sampling parameters come from the `sampling_parameters` input (a JSON object) or, when that input
  is absent, from the request's parameters (what HTTP /generate's "parameters" object becomes).
  Values are converted to the installed vLLM's SamplingParams field types, so "16" is accepted for
  max_tokens. An unknown key fails the request with an error naming it instead of being dropped.
  In request parameters, `stream` and `exclude_input_in_output` also act as the inputs of the same
  name when those inputs are not sent.
- ENABLE_VLLM_HEALTH_CHECK (config.pbtxt) defaults to true here (NVIDIA: false); REPORT_CUSTOM_METRICS
  "false" turns vLLM's series off, absent leaves them to disable_log_stats (README: Health, Metrics).

This file imports nothing from tritonpkg: it runs inside the Triton stub's interpreter.
"""

from __future__ import annotations

import asyncio
import json
import locale
import os
import queue
import sys
import threading
import time
import traceback
import uuid
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

# Sibling modules (this folder is linked into the backend directory as a whole).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cancellation import CancelWatch  # noqa: E402
from request_params import ParamError, candidate_logprob, logprobs_json, normalize_sampling  # noqa: E402
from priority import ENV as NICE_ENV, engine_niceness, lower_engine_priority  # noqa: E402
from prom_labels import stat_logger  # noqa: E402
from settle import settle_after_start  # noqa: E402
from stream_merge import Step, coalesce  # noqa: E402

ENGINE_ARGS_FILE = "model.json"
WATCHDOG = """
import os, signal, sys, time
stub, pids = int(sys.argv[1]), [int(p) for p in sys.argv[2:]]
while os.getppid() == stub:
    time.sleep(0.5)
for pid in pids:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
"""
ENGINE_START_TIMEOUT_S = float(os.environ.get("TRITONPKG_VLLM_START_TIMEOUT", "900"))
SHUTDOWN_TIMEOUT_S = 30.0
CANCEL_POLL_S = float(os.environ.get("TRITONPKG_VLLM_CANCEL_POLL", "1.0"))


def _send(sender, response, flags):
    if response is None:
        sender.send(flags=flags)
    else:
        sender.send(response, flags=flags)


HEALTH_POLL_S = float(os.environ.get("TRITONPKG_VLLM_HEALTH_POLL", "1.0"))
# While this file exists the health poll fails as if check_health had raised, for the models it names (one
# per line; empty: every model): how the tests (and an operator rehearsing a failover) make a live engine
# fail its health check on purpose.
HEALTH_FAULT_FILE = os.environ.get("TRITONPKG_VLLM_HEALTH_FAULT_FILE")
# NVIDIA's per-model switch (config.pbtxt parameters). NVIDIA's default is off; here it is on, because
# a model that unloads itself once its engine is dead is what lets a load balancer route around it.
HEALTH_PARAMETER = "ENABLE_VLLM_HEALTH_CHECK"
# NVIDIA's switch for the vLLM series. Absent: they follow the engine argument disable_log_stats (as before);
# "false" turns them off whatever model.json says; "true" leaves disable_log_stats in charge, as in NVIDIA's.
METRICS_PARAMETER = "REPORT_CUSTOM_METRICS"
STREAM_MERGE = os.environ.get("TRITONPKG_VLLM_STREAM_MERGE", "1") != "0"
RETURN_FLAGS = (
    "return_finish_reason",
    "return_cumulative_logprob",
    "return_logprobs",
    "return_num_input_tokens",
    "return_num_output_tokens",
)
CONTROL_KEYS = ("stream", "exclude_input_in_output", *RETURN_FLAGS)
# Keys of SamplingParams that the backend owns or that only vLLM itself may set.
RESERVED_FIELDS = {"output_kind", "skip_clone", "output_text_buffer_length", "detokenize"}
# PoolingParams keys a client may set (task is chosen by the backend: "embed").
POOLING_FIELDS = ("dimensions", "use_activation")
EMBEDDING_REQUEST_KEYS = ("input", "pooling_params")
MAX_REQUEST_JSON = 4 << 20  # bytes of one JSON input; the engine bounds the prompt itself (max_model_len)

_BOOL = {"data_type": "TYPE_BOOL", "dims": [1], "optional": True}
# NVIDIA's contract (names, types and dims as NVIDIA's backend auto-completes them), then the
# toolkit's extensions: prefill-only scoring (`candidates` -> `candidate_logprobs`) and pooling
# (`pooling_parameters` -> `embedding`). Auto-complete adds whatever the config leaves out.
INPUTS = [
    {"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]},
    {"name": "stream", **_BOOL},
    {"name": "sampling_parameters", "data_type": "TYPE_STRING", "dims": [1], "optional": True},
    {"name": "exclude_input_in_output", **_BOOL},
    *({"name": name, **_BOOL} for name in RETURN_FLAGS),
    {"name": "candidates", "data_type": "TYPE_STRING", "dims": [-1], "optional": True},
    {"name": "pooling_parameters", "data_type": "TYPE_STRING", "dims": [1], "optional": True},
    # NVIDIA's (what its OpenAI frontend sends for /v1/embeddings): JSON {"input": text or token ids,
    # "pooling_params": {...}}; the vector also comes back as JSON in text_output, as NVIDIA's does.
    {"name": "embedding_request", "data_type": "TYPE_STRING", "dims": [1], "optional": True},
]
OUTPUTS = [
    {"name": "text_output", "data_type": "TYPE_STRING", "dims": [-1]},
    {"name": "finish_reason", "data_type": "TYPE_STRING", "dims": [-1]},
    {"name": "cumulative_logprob", "data_type": "TYPE_FP32", "dims": [-1]},
    {"name": "logprobs", "data_type": "TYPE_STRING", "dims": [-1]},
    {"name": "num_input_tokens", "data_type": "TYPE_UINT32", "dims": [1]},
    {"name": "num_output_tokens", "data_type": "TYPE_UINT32", "dims": [-1]},
    {"name": "candidate_logprobs", "data_type": "TYPE_FP32", "dims": [-1]},
    {"name": "embedding", "data_type": "TYPE_FP32", "dims": [-1]},
]


INVALID_ARG, UNAVAILABLE = "INVALID_ARG", "UNAVAILABLE"  # pb_utils.TritonError codes (_send_error)


class RequestError(ValueError):
    """A problem with one request: reported to its client, the model keeps serving."""


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        """Fill in the contract's I/O when the config leaves it out; vLLM batches, so no Triton batching."""
        config = auto_complete_model_config.as_dict()
        have_inputs = {i["name"] for i in config.get("input", [])}
        have_outputs = {o["name"] for o in config.get("output", [])}
        for spec in INPUTS:
            if spec["name"] not in have_inputs:
                auto_complete_model_config.add_input(spec)
        for spec in OUTPUTS:
            if spec["name"] not in have_outputs:
                auto_complete_model_config.add_output(spec)
        auto_complete_model_config.set_model_transaction_policy(dict(decoupled=True))
        auto_complete_model_config.set_max_batch_size(0)
        return auto_complete_model_config

    def initialize(self, args):
        # The stub's embedded interpreter starts with an ASCII locale; torch and vLLM read UTF-8
        # files at import time and fail without this.
        locale.setlocale(locale.LC_ALL, "C.UTF-8")
        # Prometheus multiprocess mode: prometheus_client picks its file-backed values at import
        # when this variable is set, so vLLM's metrics from every stub land in one directory that
        # a single /metrics can publish. The directory must exist before vLLM registers metrics.
        prom_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if prom_dir:
            os.makedirs(prom_dir, exist_ok=True)
        import dataclasses

        from vllm import SamplingParams
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.pooling_params import PoolingParams
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

        try:
            from vllm.exceptions import VLLMClientError
        except ImportError:
            VLLMClientError = ValueError
        try:
            from vllm.v1.engine.exceptions import EngineDeadError
        except ImportError:
            EngineDeadError = RuntimeError
        self._client_errors = (ValueError, VLLMClientError)  # the request's fault: no traceback in the log
        self._EngineDeadError = EngineDeadError
        self._SamplingParams = SamplingParams
        self._PoolingParams = PoolingParams
        self._RequestOutputKind = RequestOutputKind
        self.logger = pb_utils.Logger
        self.model_name = args["model_name"]
        model_config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(model_config):
            raise pb_utils.TritonModelException(
                f"model '{self.model_name}': the vllm backend needs model_transaction_policy {{ decoupled: true }}"
            )
        self.output_dtype = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(model_config, "text_output")["data_type"]
        )
        self._declared_outputs = {o["name"] for o in model_config.get("output", [])}
        engine_args = self._read_engine_args(args)
        try:
            self._health_check = _parameter_bool(model_config, HEALTH_PARAMETER, default=True)
            if _parameter_bool(model_config, METRICS_PARAMETER, default=None) is False:
                engine_args["disable_log_stats"] = True
        except ValueError as exc:
            raise pb_utils.TritonModelException(f"model '{self.model_name}': {exc}") from None
        self._model_version = str(args.get("model_version", ""))
        from vllm.platforms import current_platform

        try:
            self._engine_nice = engine_niceness(os.environ.get(NICE_ENV), current_platform.is_cpu())
        except ValueError as exc:
            raise pb_utils.TritonModelException(f"model '{self.model_name}': {exc}") from None
        self._sampling_fields = _sampling_fields(SamplingParams)
        self._structured_fields = {f.name for f in dataclasses.fields(StructuredOutputsParams) if not f.name.startswith("_")}
        self._requests: dict[str, Any] = {}
        self._closing = False
        self._unload_lock = threading.Lock()  # orders a self-unload request before finalize
        self._dead: str | None = None  # why the engine is unusable, once it is

        self._responses: queue.SimpleQueue = queue.SimpleQueue()  # put() in C: no Condition per step
        self._failed: set[int] = set()  # senders whose response could not be built: their steps are dropped
        self._tickets: dict[int, Any] = {}  # id(sender) -> its CancelWatch ticket, until the final response
        self._response_thread = threading.Thread(target=self._send_loop, name="vllm-responses", daemon=True)
        self._response_thread.start()

        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self._loop.run_forever, name="vllm-engine-loop", daemon=True)
        self._loop_thread.start()
        self._cancel_watch = CancelWatch(CANCEL_POLL_S, self._abort_cancelled, self.logger.log_warn)
        started = time.monotonic()
        try:
            future = asyncio.run_coroutine_threadsafe(self._start_engine(AsyncEngineArgs(**engine_args)), self._loop)
            self.engine = future.result(timeout=ENGINE_START_TIMEOUT_S)
            tasks = asyncio.run_coroutine_threadsafe(self.engine.get_supported_tasks(), self._loop).result(60)
        except BaseException:
            self._stop_loop()
            self._reap_children()
            raise
        self._tasks = set(tasks)
        self._pooling = "generate" not in self._tasks
        if self._pooling and "embed" not in self._tasks:
            self.finalize()
            raise pb_utils.TritonModelException(
                f"model '{self.model_name}': the engine supports {sorted(self._tasks)}; this backend serves "
                "'generate' and 'embed'"
            )
        niced = lower_engine_priority(self._engine_nice)  # before the watchdog: only the engine's processes
        self._watchdog = self._start_watchdog()
        self._health_task = (asyncio.run_coroutine_threadsafe(self._watch_health(), self._loop)
                             if self._health_check else None)
        settle_after_start()
        self.logger.log_info(
            f"[vllm] model '{self.model_name}': engine started in {time.monotonic() - started:.1f} s "
            f"(model {engine_args.get('model')}, tasks {sorted(self._tasks)}"
            + (f", {len(niced)} engine processes at nice {self._engine_nice}" if niced else "") + ")"
        )

    def _start_watchdog(self):
        """A SIGKILLed stub never runs finalize, and vLLM's EngineCore does not watch its parent, so
        a tiny sibling process kills the engine's processes once the stub is gone."""
        import shutil
        import subprocess

        try:
            import psutil
        except ImportError:
            self.logger.log_warn("[vllm] psutil is missing: engine processes may outlive a killed stub")
            return None
        pids = [str(p.pid) for p in psutil.Process().children(recursive=True)]
        python = shutil.which("python3") or shutil.which("python")
        if not pids or python is None:
            return None
        return subprocess.Popen([python, "-c", WATCHDOG, str(os.getpid()), *pids], close_fds=True)

    def _read_engine_args(self, args) -> dict:
        path = os.path.join(args["model_repository"], args["model_version"], ENGINE_ARGS_FILE)
        if not os.path.isfile(path):
            raise pb_utils.TritonModelException(
                f"model '{self.model_name}': {path} is missing; it holds the vLLM engine arguments"
            )
        try:
            with open(path, encoding="utf-8") as f:
                engine_args = json.load(f)
        except json.JSONDecodeError as exc:
            raise pb_utils.TritonModelException(f"{path}: not valid JSON ({exc})") from exc
        if not isinstance(engine_args, dict) or "model" not in engine_args:
            raise pb_utils.TritonModelException(f"{path}: expected a JSON object with at least 'model'")
        return engine_args

    async def _start_engine(self, engine_args):
        from vllm.v1.engine.async_llm import AsyncLLM

        # vLLM's series, also labelled with the Triton model and version (as NVIDIA's backend's are).
        loggers = None if engine_args.disable_log_stats else [stat_logger(self.model_name, self._model_version)]
        return AsyncLLM.from_engine_args(engine_args, stat_loggers=loggers)

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            if self._dead is not None:
                self._send_error(sender, self._dead, UNAVAILABLE)
                continue
            if self._closing:
                self._send_error(sender, "the model is being unloaded", UNAVAILABLE)
                continue
            try:
                job = self._parse(request)
            except (RequestError, ParamError) as exc:
                self._send_error(sender, str(exc), INVALID_ARG)
                continue
            except Exception as exc:  # nothing ran yet: whatever the parse tripped on came with the request
                self.logger.log_warn(f"[vllm] unreadable request: {traceback.format_exc()}")
                self._send_error(sender, f"could not read the request: {type(exc).__name__}: {exc}", INVALID_ARG)
                continue
            kind = job.pop("kind")
            coro = {"generate": self._generate, "score": self._score, "embed": self._embed}[kind]
            asyncio.run_coroutine_threadsafe(coro(sender, **job), self._loop)
        return None

    def _parse(self, request) -> dict:
        prompt = _input_string(request, "text_input")
        if prompt is None:
            raise RequestError("input 'text_input' is required (exactly one string)")
        tensor = pb_utils.get_input_tensor_by_name(request, "text_input")
        if tensor.as_numpy().size != 1:
            raise RequestError(f"input 'text_input' must hold exactly one string, got {tensor.as_numpy().size}")

        raw = _input_string(request, "sampling_parameters")
        from_request_parameters = raw is None
        if from_request_parameters:
            raw = request.parameters() or "{}"
        params = _json_object(raw, "sampling_parameters")

        controls = {}
        if from_request_parameters:
            controls = {k: params.pop(k) for k in CONTROL_KEYS if k in params}
            params = {k: v for k, v in params.items() if not k.startswith("triton_")}

        def flag(name: str, default: bool = False) -> bool:
            value = _input_bool(request, name)
            if value is None and name in controls:
                value = _as_bool(controls[name], name)
            return default if value is None else value

        if self._pooling:
            embedding_request = _input_string(request, "embedding_request")
            if embedding_request is not None:
                return self._parse_embedding_request(embedding_request, params)
            pooling_raw = _input_string(request, "pooling_parameters")
            pooling = _json_object(pooling_raw, "pooling_parameters") if pooling_raw is not None else params
            if pooling_raw is not None and params:
                raise RequestError(f"an embedding model takes no sampling parameters, got {', '.join(map(repr, params))}")
            return {"kind": "embed", "prompt": prompt, "pooling": self._pooling_params(pooling), "as_text": False}

        returns = {name: flag(name) for name in RETURN_FLAGS}
        candidates = _input_strings(request, "candidates")
        if candidates is not None:
            if flag("stream"):
                raise RequestError("scoring 'candidates' is one forward pass: 'stream' must be false")
            forbidden = sorted(set(params) & {"max_tokens", "prompt_logprobs", "n", "structured_outputs"})
            if forbidden:
                raise RequestError(f"scoring sets {', '.join(map(repr, forbidden))} itself; do not send them")
            if not candidates:
                raise RequestError("input 'candidates' is empty")
            return {"kind": "score", "prompt": prompt, "candidates": candidates, "params": params}

        stream = flag("stream")
        exclude = flag("exclude_input_in_output", default=stream)
        sampling = self._sampling_params(params)
        sampling.output_kind = self._RequestOutputKind.DELTA if stream else self._RequestOutputKind.FINAL_ONLY
        return {"kind": "generate", "prompt": prompt, "sampling": sampling, "stream": stream,
                "prepend": not exclude, "returns": returns}

    def _parse_embedding_request(self, raw: str, params: dict) -> dict:
        """NVIDIA's `embedding_request`: text_input is ignored (NVIDIA's frontend sends "")."""
        if params:
            raise RequestError(f"input 'embedding_request' carries the pooling parameters; got "
                               f"{', '.join(repr(k[:40]) for k in list(params)[:5])} beside it")
        body = _json_object(raw, "embedding_request")
        unknown = sorted(k for k in body if k not in EMBEDDING_REQUEST_KEYS)
        if unknown:
            raise RequestError(f"embedding_request: unknown key(s) {', '.join(repr(k[:40]) for k in unknown[:5])}; "
                               f"accepted: {', '.join(EMBEDDING_REQUEST_KEYS)}")
        prompt = body.get("input")
        if isinstance(prompt, list) and prompt and all(type(t) is int and 0 <= t < 2**31 for t in prompt):
            prompt = [int(t) for t in prompt]
        elif not isinstance(prompt, str):
            raise RequestError("embedding_request 'input' must be a string or a non-empty list of token ids")
        pooling = body.get("pooling_params") or {}
        if not isinstance(pooling, dict):
            raise RequestError("embedding_request 'pooling_params' must be a JSON object")
        dims = pooling.get("dimensions")
        if isinstance(dims, list) and len(dims) == 1:  # NVIDIA's frontend sends [n]
            pooling = {**pooling, "dimensions": dims[0]}
        return {"kind": "embed", "prompt": prompt, "pooling": self._pooling_params(pooling), "as_text": True}

    def _sampling_params(self, params: dict):
        """JSON object -> SamplingParams with the installed vLLM's field types; unknown keys are errors."""
        import msgspec

        kwargs = normalize_sampling(params, self._sampling_fields, self._structured_fields)
        try:
            return msgspec.convert(kwargs, self._SamplingParams, strict=False)
        except msgspec.ValidationError as exc:
            raise RequestError(f"invalid sampling parameters: {exc}") from exc
        except (TypeError, *self._client_errors) as exc:
            raise RequestError(f"invalid sampling parameters: {exc}") from exc

    def _pooling_params(self, params: dict):
        unknown = sorted(k for k in params if k not in POOLING_FIELDS)
        if unknown:
            raise RequestError(
                f"unknown pooling parameter(s) {', '.join(map(repr, unknown))}; accepted: {', '.join(POOLING_FIELDS)}"
            )
        if "dimensions" in params:
            try:
                params = {**params, "dimensions": int(params["dimensions"])}
            except (TypeError, ValueError) as exc:
                raise RequestError(f"pooling parameter 'dimensions' must be an integer, got {params['dimensions']!r}") from exc
        if "use_activation" in params:
            params = {**params, "use_activation": _as_bool(params["use_activation"], "use_activation")}
        try:
            return self._PoolingParams(task="embed", **params)
        except (TypeError, *self._client_errors) as exc:
            raise RequestError(f"invalid pooling parameters: {exc}") from exc

    async def _run(self, sender, request_id: str, body):
        """Shared request life cycle: register, watch for cancellation, map failures to one error
        response, always end the response stream exactly once."""
        self._requests[request_id] = sender
        ticket = self._tickets[id(sender)] = self._cancel_watch.register(request_id, sender)
        final_sent = False
        try:
            final_sent = await body(ticket)
        except asyncio.CancelledError:
            await _quietly(self.engine.abort(request_id))
            raise
        except Exception as exc:
            await _quietly(self.engine.abort(request_id))
            if not ticket.done():
                if isinstance(exc, self._EngineDeadError) or self._dead is not None:
                    self._mark_dead(f"the vLLM engine died ({type(exc).__name__}: {exc})")
                    if self._requests.pop(request_id, None) is not None:  # not answered by _mark_dead
                        self._send_error(sender, self._dead, UNAVAILABLE)
                elif isinstance(exc, (RequestError, ParamError, *self._client_errors)):
                    self._send_error(sender, f"vLLM rejected the request: {exc}", INVALID_ARG)
                else:
                    self.logger.log_error(f"[vllm] request {request_id} failed: {traceback.format_exc()}")
                    self._send_error(sender, f"vLLM failed the request: {type(exc).__name__}: {exc}")
                final_sent = True
        finally:
            self._cancel_watch.release(request_id)
            answered = self._requests.pop(request_id, None) is None  # by _mark_dead
            if not final_sent and not answered:
                self._send_final(sender, cancelled=ticket.done())

    async def _generate(self, sender, prompt: str, sampling, stream: bool, prepend: bool, returns: dict):
        request_id = uuid.uuid4().hex

        async def body(ticket) -> bool:
            prefix = prompt if prepend else ""
            engine_input = await self._render(prompt)
            async for output in self.engine.generate(engine_input, sampling, request_id):
                if ticket.done():
                    return False
                if stream or output.finished:
                    self._responses.put(Step(sender, output, prefix, returns, request_id))
                    prefix = ""
                    if output.finished:
                        return True
            return False

        await self._run(sender, request_id, body)

    def _generate_response(self, output, prefix: str, returns: dict):
        """text_output plus the additional outputs the request asked for; with streaming each
        response carries the delta's tokens and logprobs (vLLM's DELTA outputs), as NVIDIA's backend."""
        completions = output.outputs
        tensors = [pb_utils.Tensor("text_output", np.asarray(
            [(prefix + c.text).encode("utf-8") for c in completions], dtype=self.output_dtype))]
        if returns["return_finish_reason"]:
            tensors.append(pb_utils.Tensor("finish_reason", np.asarray(
                [str(c.finish_reason).encode() if c.finish_reason is not None else b"" for c in completions],
                dtype=np.object_)))
        if returns["return_cumulative_logprob"]:
            tensors.append(pb_utils.Tensor("cumulative_logprob", np.asarray(
                [c.cumulative_logprob if c.cumulative_logprob is not None else np.nan for c in completions],
                dtype=np.float32)))
        if returns["return_logprobs"]:
            tensors.append(pb_utils.Tensor("logprobs", np.asarray(
                [logprobs_json(c.logprobs).encode() for c in completions], dtype=np.object_)))
        if returns["return_num_input_tokens"]:
            tensors.append(pb_utils.Tensor("num_input_tokens", np.asarray(
                [len(output.prompt_token_ids or ())], dtype=np.uint32)))
        if returns["return_num_output_tokens"]:
            tensors.append(pb_utils.Tensor("num_output_tokens", np.asarray(
                [len(c.token_ids) for c in completions], dtype=np.uint32)))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    async def _score(self, sender, prompt: str, candidates: list[str], params: dict):
        """Prefill-only scoring: for each candidate, one request over prompt+candidate token ids with
        max_tokens=1 and prompt_logprobs=0, so the engine runs the prefill forward pass (batched
        across candidates) and reports log P(token | prefix) for every prompt position; the
        candidate's score is the sum over its own positions. The one sampled token is discarded."""
        request_id = uuid.uuid4().hex
        sub_ids = [f"{request_id}-{i}" for i in range(len(candidates))]

        async def body(ticket) -> bool:
            tokenizer = self.engine.get_tokenizer()
            prompt_ids = list(tokenizer.encode(prompt))
            sampling = self._sampling_params({**params, "max_tokens": 1, "prompt_logprobs": 0})
            sampling.output_kind = self._RequestOutputKind.FINAL_ONLY

            async def one(sub_id: str, text: str) -> float:
                cand_ids = list(tokenizer.encode(text, add_special_tokens=False))
                if not cand_ids:
                    raise RequestError(f"candidate {text!r} has no tokens")
                engine_input = await self._render_tokens(prompt_ids + cand_ids)
                final = None
                async for output in self.engine.generate(engine_input, sampling, sub_id):
                    final = output
                if final is None or final.prompt_logprobs is None:
                    raise RequestError("vLLM returned no prompt log-probabilities")
                return candidate_logprob(final.prompt_logprobs, len(prompt_ids), cand_ids)

            tasks = [asyncio.create_task(one(s, c)) for s, c in zip(sub_ids, candidates)]
            try:
                scores = await asyncio.gather(*tasks)
            except BaseException:
                for t in tasks:
                    t.cancel()
                await _quietly(self.engine.abort(sub_ids))
                raise
            if ticket.done():
                return False
            response = pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("candidate_logprobs", np.asarray(scores, dtype=np.float32)),
                pb_utils.Tensor("num_input_tokens", np.asarray([len(prompt_ids)], dtype=np.uint32)),
            ])
            self._responses.put((sender, response, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL))
            return True

        await self._run(sender, request_id, body)

    async def _embed(self, sender, prompt: str | list[int], pooling, as_text: bool):
        """Pooling runner: one `embedding` (FP32, the model's pooled and, per its config, normalised vector);
        `as_text` (NVIDIA's embedding_request) also sends it as a JSON list in text_output."""
        request_id = uuid.uuid4().hex

        async def body(ticket) -> bool:
            final = None
            engine_input = await (self._render_tokens(prompt) if isinstance(prompt, list) else self._render(prompt))
            async for output in self.engine.encode(engine_input, pooling, request_id):
                final = output
            if ticket.done() or final is None:
                return False
            vector = final.outputs.data.detach().float().cpu().numpy().reshape(-1).astype(np.float32)
            tensors = [
                pb_utils.Tensor("embedding", vector),
                pb_utils.Tensor("num_input_tokens", np.asarray([len(final.prompt_token_ids or ())], dtype=np.uint32)),
            ]
            if as_text:
                tensors.append(pb_utils.Tensor("text_output", np.asarray(
                    [json.dumps(vector.tolist()).encode()], dtype=self.output_dtype)))
            response = pb_utils.InferenceResponse(output_tensors=tensors)
            self._responses.put((sender, response, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL))
            return True

        await self._run(sender, request_id, body)

    async def _render(self, prompt: str):
        """Tokenize through vLLM's renderer (raw prompt strings are deprecated in vLLM 0.32's
        AsyncLLM); older vLLMs without a renderer take the text prompt itself."""
        renderer = getattr(self.engine, "renderer", None)
        if renderer is None or not hasattr(renderer, "render_cmpl_async"):
            return {"prompt": prompt}
        (engine_input,) = await renderer.render_cmpl_async([{"prompt": prompt}])
        return engine_input

    async def _render_tokens(self, token_ids: list[int]):
        renderer = getattr(self.engine, "renderer", None)
        if renderer is None or not hasattr(renderer, "render_cmpl_async"):
            return {"prompt_token_ids": token_ids}
        (engine_input,) = await renderer.render_cmpl_async([{"prompt_token_ids": token_ids}])
        return engine_input

    async def _watch_health(self):
        """A dead EngineCore must not leave clients waiting: poll the engine, and once it is dead
        error every in-flight request, refuse new ones, and unload the model so Triton reports it
        not ready (possible when the server runs with --model-control-mode=explicit)."""
        while not self._closing:
            await asyncio.sleep(HEALTH_POLL_S)
            engine = self.engine
            if engine is None or self._closing:
                return
            try:
                if self._fault_injected():
                    raise RuntimeError(f"health check failed on purpose ({HEALTH_FAULT_FILE})")
                await engine.check_health()
            except Exception as exc:
                self._mark_dead(f"the vLLM engine died ({type(exc).__name__}: {exc or 'EngineCore exited'})")
                return

    def _fault_injected(self) -> bool:
        if not HEALTH_FAULT_FILE:
            return False
        try:
            with open(HEALTH_FAULT_FILE, encoding="utf-8", errors="replace") as f:
                names = f.read(4096).split()
        except OSError:
            return False
        return not names or self.model_name in names

    def _mark_dead(self, reason: str):
        if self._dead is not None:
            return
        self._dead = f"model '{self.model_name}' is not ready: {reason}; it was unloaded or must be reloaded"
        self.logger.log_error(f"[vllm] {self._dead}")
        for request_id, sender in list(self._requests.items()):
            self._requests.pop(request_id, None)
            ticket = self._tickets.get(id(sender))
            if ticket is not None:
                ticket.abandon()  # its body stops at its next output, its queued steps are dropped
            self._abort(request_id)  # an engine that only failed its health check would run it on
            self._send_error(sender, self._dead, UNAVAILABLE)
        # The unload request goes out at once, before anything slow: a SIGTERM that lands while it is
        # still to be sent makes it reach a server that is shutting down (the stub segfaulted there).
        threading.Thread(target=self._unload_self, name="vllm-unload", daemon=True).start()

    def _unload_self(self):
        """In its own thread (unloading runs finalize, which needs the event loop). Never once finalize
        has begun: Triton is unloading the model already, maybe shutting down, and a model-control
        request from the stub then reaches a server tearing the stub's channel down. The lock makes
        finalize wait for a request already sent (Triton's unload only schedules, so it returns at once)."""
        with self._unload_lock:
            if self._closing:
                return
            if not self._health_check:
                self.logger.log_warn(f"[vllm] '{self.model_name}' stays loaded and answers every request with an "
                                     f"error: its {HEALTH_PARAMETER} parameter is false")
                self._reap_children()
                return
            try:
                pb_utils.unload_model(self.model_name)
                return  # finalize shuts the engine down and reaps its processes
            except Exception as exc:
                self.logger.log_warn(
                    f"[vllm] could not unload '{self.model_name}' after the engine died ({exc}); the model stays "
                    "loaded and answers every request with an error (Triton 2.51 lets a Python model unload "
                    "itself only under --model-control-mode=explicit)"
                )
        self._reap_children()  # the model stays loaded: the dead engine's processes need not

    def _abort_cancelled(self, request_id: str):
        """From the send loop or the cancel watch: the body stops at its next output (ticket.done())."""
        self.logger.log_info(f"[vllm] request {request_id} cancelled by the client; aborting it in vLLM")
        self._abort(request_id)

    def _abort(self, request_id: str):
        """From any thread: the request's generate() ends at its next output."""
        loop = self._loop
        if loop is not None and self.engine is not None:
            asyncio.run_coroutine_threadsafe(_quietly(self.engine.abort(request_id)), loop)

    def _send_final(self, sender, cancelled: bool):
        response = None
        if cancelled:
            code = getattr(pb_utils.TritonError, "CANCELLED", None)
            error = pb_utils.TritonError("[vllm] request cancelled", code) if code is not None else None
            response = pb_utils.InferenceResponse(error=error) if error is not None else None
        self._responses.put((sender, response, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL))

    def _send_error(self, sender, message: str, code: str = "INTERNAL"):
        """`code` names a pb_utils.TritonError code: INVALID_ARG (Triton answers HTTP 400), UNAVAILABLE (503),
        INTERNAL (500, the backend's own failures only)."""
        number = getattr(pb_utils.TritonError, code, None)
        error = (pb_utils.TritonError(f"[vllm] {message}", number) if number is not None
                 else pb_utils.TritonError(f"[vllm] {message}"))
        response = pb_utils.InferenceResponse(error=error)
        self._responses.put((sender, response, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL))

    def _send_loop(self):
        """Send from one thread, in order, so a slow client never stalls vLLM's event loop; streamed
        steps that queued up behind a send go out merged (stream_merge)."""
        while True:
            batch = [self._responses.get()]
            while batch[-1] is not None:
                try:
                    batch.append(self._responses.get_nowait())
                except queue.Empty:
                    break
            items = [item for item in batch if item is not None]
            for item in coalesce(items) if STREAM_MERGE else items:
                self._send_item(item)
            if batch[-1] is None:
                return

    def _send_item(self, item):
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if isinstance(item, Step):
            sender, flags = item.sender, final if item.final else 0
        else:
            sender, response, flags = item
        if id(sender) in self._failed:
            if flags & final:
                self._failed.discard(id(sender))
            return
        if isinstance(item, Step):
            if not flags and self._cancelled_before_send(sender, item.request_id):
                return
            try:
                response = self._generate_response(item.output, item.prefix, item.returns)
            except Exception as exc:
                self.logger.log_error(f"[vllm] request {item.request_id}: {traceback.format_exc()}")
                response = pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    f"[vllm] could not build the response: {type(exc).__name__}: {exc}"))
                if not flags:
                    self._failed.add(id(sender))  # its later steps are dropped until its final one
                    self._abort(item.request_id)
                flags = final
        ticket = self._tickets.pop(id(sender), None) if flags & final else None
        try:
            if ticket is None:
                _send(sender, response, flags)
            else:
                ticket.send_final(lambda: _send(sender, response, flags))
        except Exception:
            self.logger.log_error(f"[vllm] could not send a response: {traceback.format_exc()}")

    def _cancelled_before_send(self, sender, request_id: str) -> bool:
        """Before each streamed (non-final) response: has the client gone? One is_cancelled() round trip
        per response, from this thread, so a stream is aborted within one engine step of the hang-up
        (the cancel watch's sweep covers requests that send nothing until their end). A cancelled
        stream's remaining steps are dropped; its body ends at the next output and sends the final."""
        ticket = self._tickets.get(id(sender))
        if ticket is None:
            return False
        if ticket.done():
            return True
        try:
            cancelled = ticket.poll()
        except Exception:  # a sender Triton already dropped: the send below reports it
            return False
        if cancelled:
            self._abort_cancelled(request_id)
        return cancelled

    def finalize(self):
        """Abort what is running, shut the engine (and its EngineCore process) down, stop the threads."""
        lock = getattr(self, "_unload_lock", None)
        if lock is not None and lock.acquire(timeout=SHUTDOWN_TIMEOUT_S):
            self._closing = True  # under the lock: no self-unload request is sent from now on
            lock.release()
        self._closing = True
        engine = getattr(self, "engine", None)
        loop = getattr(self, "_loop", None)
        if engine is not None and loop is not None and loop.is_running():
            if self._dead is not None:
                # Declared dead: nothing to wind down gracefully, and a SIGTERMed server exits (its
                # --exit-timeout-secs) before a stuck EngineCore would.
                self._reap_children(grace=0.0)
            pending = list(self._requests)
            try:
                if pending:
                    asyncio.run_coroutine_threadsafe(engine.abort(pending), loop).result(timeout=SHUTDOWN_TIMEOUT_S)
                asyncio.run_coroutine_threadsafe(self._shutdown_engine(engine), loop).result(
                    timeout=SHUTDOWN_TIMEOUT_S
                )
            except Exception:
                self.logger.log_error(f"[vllm] engine shutdown: {traceback.format_exc()}")
        if engine is not None:
            # vLLM keeps references to the engine until interpreter exit, where AsyncLLM.__del__ would
            # shut it down a second time with its modules already torn down (a TypeError in the log).
            engine.shutdown = lambda *args, **kwargs: None
        self.engine = engine = None
        if getattr(self, "_cancel_watch", None) is not None:
            self._cancel_watch.close()
        self._stop_loop()
        watchdog = getattr(self, "_watchdog", None)
        if watchdog is not None:
            watchdog.kill()
            watchdog.wait()
        if getattr(self, "_response_thread", None) is not None:
            self._responses.put(None)
            self._response_thread.join(timeout=SHUTDOWN_TIMEOUT_S)
        self._reap_children()
        self.logger.log_info(f"[vllm] model '{getattr(self, 'model_name', '?')}': engine shut down")

    async def _shutdown_engine(self, engine):
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()
        engine.shutdown(timeout=SHUTDOWN_TIMEOUT_S / 2)

    def _stop_loop(self):
        loop = getattr(self, "_loop", None)
        if loop is None:
            return
        if loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
            self._loop_thread.join(timeout=SHUTDOWN_TIMEOUT_S)
        if not loop.is_running():
            loop.close()
        self._loop = None

    def _reap_children(self, grace: float = 5.0):
        """Kill what vLLM left behind. The stub process exists only for this model, so its children
        are the engine's; multiprocessing's resource tracker is spared: it ignores SIGTERM, exits by
        itself with the stub and unlinks leaked shared memory on the way out."""
        try:
            import psutil
        except ImportError:
            return
        children = []
        for child in psutil.Process().children(recursive=True):
            try:
                if "multiprocessing.resource_tracker" not in " ".join(child.cmdline()):
                    children.append(child)
            except psutil.Error:
                pass
        for child in children if grace > 0 else ():
            try:
                self.logger.log_warn(f"[vllm] terminating leftover engine process {child.pid} ({child.name()})")
                child.terminate()
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(children, timeout=grace) if grace > 0 else ((), children)
        for child in alive:
            try:
                child.kill()
            except psutil.Error:
                pass


def _sampling_fields(sampling_cls) -> dict[str, bool]:
    """Public SamplingParams fields -> whether the field takes a plain string (JSON strings are not decoded)."""
    import typing

    hints = typing.get_type_hints(sampling_cls)
    fields = {}
    for name in sampling_cls.__struct_fields__:
        if name.startswith("_") or name in RESERVED_FIELDS:
            continue
        hint = hints.get(name)
        fields[name] = hint is str or str in typing.get_args(hint)
    return fields


def _parameter_bool(model_config: dict, name: str, default: bool | None) -> bool | None:
    """A boolean from config.pbtxt's `parameters` (string values, as Triton stores them)."""
    entry = (model_config.get("parameters") or {}).get(name)
    if entry is None:
        return default
    raw = entry.get("string_value", "") if isinstance(entry, dict) else str(entry)
    value = raw.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"config.pbtxt parameter {name} must be true or false, got {raw[:40]!r}")


def _input_string(request, name: str) -> str | None:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    value = tensor.as_numpy().reshape(-1)
    if value.size == 0:
        return None
    return _text(value[0], name)


def _input_strings(request, name: str) -> list[str] | None:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    return [_text(v, name) for v in tensor.as_numpy().reshape(-1)]


def _text(value, name: str) -> str:
    """One element of a BYTES input as text; Triton has checked the datatype and shape against the config."""
    if not isinstance(value, bytes):
        raise RequestError(f"input '{name}' must be BYTES (UTF-8 text), got {type(value).__name__}")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError(f"input '{name}' is not UTF-8 text: byte {exc.start} ({value[exc.start:exc.start + 1]!r})") from None


def _json_object(raw: str, name: str) -> dict:
    if len(raw) > MAX_REQUEST_JSON:
        raise RequestError(f"{name} is longer than {MAX_REQUEST_JSON} characters")
    try:
        value = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        raise RequestError(f"{name} is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise RequestError(f"{name} must be a JSON object")
    return value


def _input_bool(request, name: str) -> bool | None:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    value = tensor.as_numpy().reshape(-1)
    return bool(value[0]) if value.size else None


def _as_bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
        return value.lower() in ("true", "1")
    raise RequestError(f"parameter {name!r} must be a boolean, got {value!r}")


async def _quietly(awaitable):
    try:
        await awaitable
    except Exception:
        pass
