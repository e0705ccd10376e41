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

This file imports nothing from tritonpkg: it runs inside the Triton stub's interpreter.
"""

from __future__ import annotations

import asyncio
import json
import locale
import os
import queue
import threading
import time
import traceback
import uuid
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

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
CANCEL_POLL_S = 0.2
CONTROL_KEYS = ("stream", "exclude_input_in_output")
# Keys of SamplingParams that the backend owns or that only vLLM itself may set.
RESERVED_FIELDS = {"output_kind", "skip_clone", "output_text_buffer_length", "detokenize"}
ALIASES = {"guided_decoding": "structured_outputs"}

INPUTS = [
    {"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]},
    {"name": "stream", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
    {"name": "sampling_parameters", "data_type": "TYPE_STRING", "dims": [1], "optional": True},
    {"name": "exclude_input_in_output", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
]
OUTPUTS = [{"name": "text_output", "data_type": "TYPE_STRING", "dims": [-1]}]


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
        from vllm import SamplingParams
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.sampling_params import RequestOutputKind

        try:
            from vllm.exceptions import VLLMClientError
        except ImportError:
            VLLMClientError = ValueError
        self._client_errors = (ValueError, VLLMClientError)  # the request's fault: no traceback in the log
        self._SamplingParams = SamplingParams
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
        engine_args = self._read_engine_args(args)
        self._sampling_fields = _sampling_fields(SamplingParams)
        self._requests: dict[str, Any] = {}
        self._closing = False

        self._responses: queue.Queue = queue.Queue()
        self._response_thread = threading.Thread(target=self._send_loop, name="vllm-responses", daemon=True)
        self._response_thread.start()

        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self._loop.run_forever, name="vllm-engine-loop", daemon=True)
        self._loop_thread.start()
        started = time.monotonic()
        try:
            future = asyncio.run_coroutine_threadsafe(self._start_engine(AsyncEngineArgs(**engine_args)), self._loop)
            self.engine = future.result(timeout=ENGINE_START_TIMEOUT_S)
        except BaseException:
            self._stop_loop()
            self._reap_children()
            raise
        self._watchdog = self._start_watchdog()
        self.logger.log_info(
            f"[vllm] model '{self.model_name}': engine started in {time.monotonic() - started:.1f} s "
            f"(model {engine_args.get('model')})"
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

        return AsyncLLM.from_engine_args(engine_args)

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                job = self._parse(request)
            except RequestError as exc:
                self._send_error(sender, str(exc))
                continue
            except Exception as exc:
                self._send_error(sender, f"could not read the request: {exc}")
                continue
            if self._closing:
                self._send_error(sender, "the model is being unloaded")
                continue
            asyncio.run_coroutine_threadsafe(self._generate(sender, **job), self._loop)
        return None

    def _parse(self, request) -> dict:
        prompt_tensor = pb_utils.get_input_tensor_by_name(request, "text_input")
        if prompt_tensor is None:
            raise RequestError("input 'text_input' is required")
        prompt = prompt_tensor.as_numpy().reshape(-1)
        if prompt.size != 1:
            raise RequestError(f"input 'text_input' must hold exactly one string, got {prompt.size}")
        prompt = prompt[0]
        prompt = prompt.decode("utf-8") if isinstance(prompt, bytes) else str(prompt)

        raw = _input_string(request, "sampling_parameters")
        from_request_parameters = raw is None
        if from_request_parameters:
            raw = request.parameters() or "{}"
        try:
            params = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            raise RequestError(f"sampling_parameters is not valid JSON: {exc}") from exc
        if not isinstance(params, dict):
            raise RequestError("sampling_parameters must be a JSON object")

        controls = {}
        if from_request_parameters:
            controls = {k: params.pop(k) for k in CONTROL_KEYS if k in params}
            params = {k: v for k, v in params.items() if not k.startswith("triton_")}
        stream = _input_bool(request, "stream")
        if stream is None:
            stream = _as_bool(controls.get("stream", False), "stream")
        exclude = _input_bool(request, "exclude_input_in_output")
        if exclude is None and "exclude_input_in_output" in controls:
            exclude = _as_bool(controls["exclude_input_in_output"], "exclude_input_in_output")
        if exclude is None:
            exclude = stream

        sampling = self._sampling_params(params)
        sampling.output_kind = self._RequestOutputKind.DELTA if stream else self._RequestOutputKind.FINAL_ONLY
        return {"prompt": prompt, "sampling": sampling, "stream": stream, "prepend": not exclude}

    def _sampling_params(self, params: dict):
        """JSON object -> SamplingParams with the installed vLLM's field types; unknown keys are errors."""
        import msgspec

        params = {ALIASES.get(k, k): v for k, v in params.items() if v is not None}
        unknown = sorted(k for k in params if k not in self._sampling_fields)
        if unknown:
            raise RequestError(
                f"unknown sampling parameter(s) {', '.join(repr(k) for k in unknown)}; "
                f"vLLM's SamplingParams accepts: {', '.join(sorted(self._sampling_fields))}"
            )
        for key, value in params.items():
            if isinstance(value, str) and not self._sampling_fields[key] and value.strip()[:1] in ("{", "["):
                try:
                    params[key] = json.loads(value)
                except json.JSONDecodeError as exc:
                    raise RequestError(f"sampling parameter {key!r}: not valid JSON ({exc})") from exc
        try:
            return msgspec.convert(params, self._SamplingParams, strict=False)
        except msgspec.ValidationError as exc:
            raise RequestError(f"invalid sampling parameters: {exc}") from exc
        except (TypeError, *self._client_errors) as exc:
            raise RequestError(f"invalid sampling parameters: {exc}") from exc

    async def _generate(self, sender, prompt: str, sampling, stream: bool, prepend: bool):
        request_id = uuid.uuid4().hex
        self._requests[request_id] = sender
        watcher = asyncio.create_task(self._watch_cancellation(sender, request_id))
        prefix = prompt if prepend else ""
        final_sent = False
        try:
            async for output in self.engine.generate(await self._render(prompt), sampling, request_id):
                if watcher.done():
                    break
                texts = [prefix + completion.text for completion in output.outputs]
                prefix = ""
                flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if output.finished else 0
                if stream or output.finished:
                    self._responses.put((sender, self._text_response(texts), flags))
                    final_sent = bool(flags)
        except asyncio.CancelledError:
            await _quietly(self.engine.abort(request_id))
            raise
        except Exception as exc:
            await _quietly(self.engine.abort(request_id))
            if not watcher.done():
                if isinstance(exc, self._client_errors):
                    self._send_error(sender, f"vLLM rejected the request: {exc}")
                else:
                    self.logger.log_error(f"[vllm] request {request_id} failed: {traceback.format_exc()}")
                    self._send_error(sender, f"vLLM failed the request: {type(exc).__name__}: {exc}")
                final_sent = True
        finally:
            watcher.cancel()
            self._requests.pop(request_id, None)
            if not final_sent:
                self._send_final(sender, cancelled=watcher.done() and not watcher.cancelled())

    async def _render(self, prompt: str):
        """Tokenize through vLLM's renderer (raw prompt strings are deprecated in vLLM 0.32's
        AsyncLLM); older vLLMs without a renderer take the text prompt itself."""
        renderer = getattr(self.engine, "renderer", None)
        if renderer is None or not hasattr(renderer, "render_cmpl_async"):
            return {"prompt": prompt}
        (engine_input,) = await renderer.render_cmpl_async([{"prompt": prompt}])
        return engine_input

    async def _watch_cancellation(self, sender, request_id: str):
        """Abort the vLLM request once Triton reports the client gone (polled: the stub has no callback)."""
        loop = asyncio.get_running_loop()
        while not await loop.run_in_executor(None, sender.is_cancelled):
            await asyncio.sleep(CANCEL_POLL_S)
        self.logger.log_info(f"[vllm] request {request_id} cancelled by the client; aborting it in vLLM")
        await self.engine.abort(request_id)

    def _send_final(self, sender, cancelled: bool):
        response = None
        if cancelled:
            code = getattr(pb_utils.TritonError, "CANCELLED", None)
            error = pb_utils.TritonError("[vllm] request cancelled", code) if code is not None else None
            response = pb_utils.InferenceResponse(error=error) if error is not None else None
        self._responses.put((sender, response, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL))

    def _text_response(self, texts: list[str]):
        data = np.asarray([t.encode("utf-8") for t in texts], dtype=self.output_dtype)
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("text_output", data)])

    def _send_error(self, sender, message: str):
        response = pb_utils.InferenceResponse(error=pb_utils.TritonError(f"[vllm] {message}"))
        self._responses.put((sender, response, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL))

    def _send_loop(self):
        """Send from one thread, in order, so a slow client never stalls vLLM's event loop."""
        while True:
            item = self._responses.get()
            if item is None:
                return
            sender, response, flags = item
            try:
                if response is None:
                    sender.send(flags=flags)
                else:
                    sender.send(response, flags=flags)
            except Exception:
                self.logger.log_error(f"[vllm] could not send a response: {traceback.format_exc()}")

    def finalize(self):
        """Abort what is running, shut the engine (and its EngineCore process) down, stop the threads."""
        self._closing = True
        engine = getattr(self, "engine", None)
        loop = getattr(self, "_loop", None)
        if engine is not None and loop is not None and loop.is_running():
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

    def _reap_children(self):
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
        for child in children:
            try:
                self.logger.log_warn(f"[vllm] terminating leftover engine process {child.pid} ({child.name()})")
                child.terminate()
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(children, timeout=5)
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


def _input_string(request, name: str) -> str | None:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    value = tensor.as_numpy().reshape(-1)
    if value.size == 0:
        return None
    value = value[0]
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


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
