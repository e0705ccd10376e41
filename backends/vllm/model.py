"""tritonpkg's vLLM backend for Triton's Python backend.

Triton serves it as `<backend_dir>/vllm/model.py` for every model whose config.pbtxt says
`backend: "vllm"`; engine arguments come from `<model_dir>/<version>/model.json`. The request
contract is NVIDIA's vLLM backend's (text_input, stream, sampling_parameters,
exclude_input_in_output -> text_output), so clients written for it work unchanged.

One vLLM V1 `AsyncLLM` runs on a private asyncio loop thread; `execute` only parses and schedules,
so the model is decoupled and vLLM batches concurrent requests itself. This file wires the parts:
engine_host.py (the engine's life cycle), generate_request.py / score_request.py / embed_request.py (one
request object per kind: its inputs, its run against the engine, its responses), request_base.py (what the
kinds share), responses.py (the sending thread), contract.py (the I/O, from io_contract.json).

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
- LoRA (lora.py): NVIDIA's multi_lora.json and `lora_name`; a relative adapter folder is resolved against the
  model version, an unknown `lora_name` is refused naming the adapters the model serves. The listed adapters are
  loaded into the engine at start, and a rewritten list is followed while serving (no engine restart); a folder
  the engine cannot load is refused by name with the reason.
- ENABLE_VLLM_HEALTH_CHECK (config.pbtxt) defaults to true here (NVIDIA: false); REPORT_CUSTOM_METRICS
  "false" turns vLLM's series off, absent leaves them to disable_log_stats (README: Health, Metrics).

This file imports nothing from tritonpkg: it runs inside the Triton stub's interpreter.
"""

from __future__ import annotations

import faulthandler
import json
import locale
import os
import signal
import sys
import time
import traceback
from typing import Any

import triton_python_backend_utils as pb_utils

# Sibling modules (this folder is linked into the backend directory as a whole).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cancellation import CancelWatch
from contract import INPUTS, OUTPUTS
from embed_request import EmbedRequest
from engine_host import ENGINE_START_TIMEOUT_S, HEALTH_PARAMETER, EngineHost, read_engine_args
from generate_request import GenerateRequest, generate_response
from lora import (
    AdapterError,
    Adapters,
    acknowledge,
    apply_list,
    follow_list,
    list_signature,
    lora_enabled,
    read_list,
)
from lora_index_fix import LoraFixError
from lora_index_fix import engine_args as lora_fixed_engine_args
from priority import ENV as NICE_ENV
from priority import engine_niceness
from request_base import (
    INVALID_ARG,
    UNAVAILABLE,
    BaseRequest,
    Context,
    RequestError,
    RequestInputs,
    VllmTypes,
    input_strings,
)
from request_params import ParamError
from responses import ResponseQueue
from score_request import ScoreRequest
from startup_guard import StartupGuard
from stopping import REFUSED, StopWatch, drain
from stopping import announced as stop_announced

CANCEL_POLL_S = float(os.environ.get("TRITONPKG_VLLM_CANCEL_POLL", "1.0"))
# "0": streams are polled for cancellation before each send instead of before each engine step's outputs.
STEP_CANCEL = os.environ.get("TRITONPKG_VLLM_STEP_CANCEL", "1") != "0"
# With STEP_CANCEL: a stream is asked once every this many of its engine steps ("1": at each step).
STEP_POLL_EVERY = int(os.environ.get("TRITONPKG_VLLM_STEP_POLL_EVERY", "2"))
STREAM_MERGE = os.environ.get("TRITONPKG_VLLM_STREAM_MERGE", "1") != "0"
# NVIDIA's switch for the vLLM series. Absent: they follow the engine argument disable_log_stats (as before);
# "false" turns them off whatever model.json says; "true" leaves disable_log_stats in charge, as in NVIDIA's.
METRICS_PARAMETER = "REPORT_CUSTOM_METRICS"
# SIGUSR2 prints every thread's Python stack to the server's log: how a start-up or a request that never
# finishes is diagnosed from outside (tests/integration/test_vllm_backend_startup.py).
STACKS_SIGNAL = signal.SIGUSR2


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
        auto_complete_model_config.set_model_transaction_policy({"decoupled": True})
        auto_complete_model_config.set_max_batch_size(0)
        return auto_complete_model_config

    def initialize(self, args):
        faulthandler.register(STACKS_SIGNAL, all_threads=True, chain=False)
        self.logger = pb_utils.Logger
        self.model_name = args["model_name"]
        self._guard: StartupGuard | None = StartupGuard(self._abandoned, self.logger.log_warn)
        try:
            self._initialize(args)
        except BaseException:
            self._guard.stop()
            raise

    def _abandoned(self) -> None:
        """Triton stopped waiting for this instance's start-up and now waits for the stub to exit
        (startup_guard.py): exit, so the load fails with Triton's reason instead of hanging."""
        message = (f"[vllm] model '{self.model_name}': Triton gave up on this instance during its start-up (the "
                   "Python-backend stub missed a 1 s health beat, e.g. on a starved CPU) and waits for it to exit; "
                   "exiting so that the load fails instead of hanging")
        self.logger.log_error(message)
        os.write(2, (message + "\n").encode())
        host = getattr(self, "host", None)
        if host is not None:
            host.reap_children(grace=0.0)
        time.sleep(1.0)  # the log message travels to the server on a stub thread
        os._exit(1)

    def _initialize(self, args):
        # The stub's embedded interpreter starts with an ASCII locale; torch and vLLM read UTF-8
        # files at import time and fail without this.
        locale.setlocale(locale.LC_ALL, "C.UTF-8")
        # Prometheus multiprocess mode: prometheus_client picks its file-backed values at import
        # when this variable is set, so vLLM's metrics from every stub land in one directory that
        # a single /metrics can publish. The directory must exist before vLLM registers metrics.
        prom_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if prom_dir:
            os.makedirs(prom_dir, exist_ok=True)
        types = VllmTypes()
        model_config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(model_config):
            raise pb_utils.TritonModelException(
                f"model '{self.model_name}': the vllm backend needs model_transaction_policy {{ decoupled: true }}"
            )
        output_dtype = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(model_config, "text_output")["data_type"]
        )
        engine_args = read_engine_args(self.model_name, args["model_repository"], args["model_version"])
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        listed_at = list_signature(version_dir)  # before the read: a list renamed in meanwhile is read again
        try:
            adapters, listed = read_list(version_dir, engine_args)
        except AdapterError as exc:
            raise pb_utils.TritonModelException(f"model '{self.model_name}': {exc}") from None
        try:
            health_check = _parameter_bool(model_config, HEALTH_PARAMETER, default=True) is not False
            if _parameter_bool(model_config, METRICS_PARAMETER, default=None) is False:
                engine_args["disable_log_stats"] = True
        except ValueError as exc:
            raise pb_utils.TritonModelException(f"model '{self.model_name}': {exc}") from None
        from vllm.platforms import current_platform

        try:
            engine_nice = engine_niceness(os.environ.get(NICE_ENV), current_platform.is_cpu())
        except ValueError as exc:
            raise pb_utils.TritonModelException(f"model '{self.model_name}': {exc}") from None
        try:
            engine_args, lora_fixed = lora_fixed_engine_args(engine_args, lora_enabled(engine_args))
        except LoraFixError as exc:
            raise pb_utils.TritonModelException(f"model '{self.model_name}': {exc}") from None
        if lora_fixed:
            self.logger.log_info(f"[vllm] model '{self.model_name}': this vLLM's CPU LoRA ops would apply an adapter "
                                 "to base requests batched beside adapter requests; corrected in its workers "
                                 "(lora_index_fix.py)")

        self.host = EngineHost(self.model_name, str(args.get("model_version", "")), self.logger, health_check,
                               engine_nice, on_dead=self._fail_all)
        responses = ResponseQueue(lambda step: generate_response(step.output, step.prefix, step.returns, output_dtype),
                                  self.host.abort, self.host.abort_cancelled, self.logger, merge=STREAM_MERGE)
        cancel_watch = CancelWatch(CANCEL_POLL_S, lambda key: self.host.abort_cancelled(str(key)), self.logger.log_warn,
                                   step_every=STEP_POLL_EVERY)
        self.ctx = Context(self.host, responses, cancel_watch, types, output_dtype, self.logger)
        self.ctx.adapters = Adapters()
        self._stop_watch = StopWatch(lambda: len(self.ctx.inflight), self._fail_all, self.logger.log_warn)
        started = self.host.start(engine_args)
        if self.host.pooling and "embed" not in self.host.tasks:
            self.finalize()
            raise pb_utils.TritonModelException(
                f"model '{self.model_name}': the engine supports {sorted(self.host.tasks)}; this backend serves "
                "'generate' and 'embed'"
            )
        if STEP_CANCEL and self.host.poll_streams_per_step(cancel_watch):
            responses.poll_at_send = False
        if lora_enabled(engine_args):
            self._follow_adapters(adapters, listed, listed_at, version_dir, engine_args)
        self.host.settle(started, engine_args.get("model"))

    def _follow_adapters(self, folders: dict[str, str], digest: str, listed_at: Any, version_dir: str,
                         engine_args: dict[str, Any]) -> None:
        """Load the listed adapters into the engine now (a broken one is refused by name instead of stopping the
        engine at its first request), then follow multi_lora.json for rollouts."""
        def log(message: str) -> None:
            self.logger.log_warn(f"[vllm] model '{self.model_name}': {message}")

        engine = self.host.engine
        self.host.call(apply_list(self.ctx.adapters, folders, engine, log), ENGINE_START_TIMEOUT_S)
        acknowledge(version_dir, self.ctx.adapters, digest, log)
        self.host.submit(follow_list(self.ctx.adapters, version_dir, engine_args, engine,
                                     lambda: self.host.closing, log, seen=listed_at))

    def _fail_all(self, message: str) -> None:
        self.ctx.fail_all(message)

    def execute(self, requests):
        if self._guard is not None:  # Triton took the start-up: it is serving
            self._guard.stop()
            self._guard = None
        for request in requests:
            sender = request.get_response_sender()
            if self.host.dead is not None:
                self.ctx.responses.error(sender, self.host.dead, UNAVAILABLE)
                continue
            if self.host.closing:
                self.ctx.responses.error(sender, "the model is being unloaded", UNAVAILABLE)
                continue
            if stop_announced():
                self.ctx.responses.error(sender, REFUSED, UNAVAILABLE)
                continue
            try:
                job = self._parse(request)
            except (RequestError, ParamError) as exc:
                self.ctx.responses.error(sender, str(exc), INVALID_ARG)
                continue
            except Exception as exc:  # nothing ran yet: whatever the parse tripped on came with the request
                self.logger.log_warn(f"[vllm] unreadable request: {traceback.format_exc()}")
                self.ctx.responses.error(sender, f"could not read the request: {type(exc).__name__}: {exc}",
                                         INVALID_ARG)
                continue
            self.host.submit(job.run(self.ctx, sender))
        return

    def _parse(self, request) -> BaseRequest:
        """The request's kind: the engine's (pooling: embed), else scoring when it sends candidates."""
        inputs = RequestInputs(request)
        if self.host.pooling:
            return EmbedRequest.parse(inputs, self.ctx)
        candidates = input_strings(request, "candidates")
        if candidates is not None:
            return ScoreRequest(inputs, candidates)
        return GenerateRequest(inputs, self.ctx)

    def finalize(self):
        """Abort what is running, shut the engine (and its EngineCore process) down, stop the threads."""
        guard = getattr(self, "_guard", None)
        if guard is not None:  # from here on Triton waits for this process to exit, rightly
            guard.stop()
        host, ctx = getattr(self, "host", None), getattr(self, "ctx", None)
        if host is None:
            return
        if ctx is not None:  # a stop drains its in-flight requests first; whatever is cut is told so
            drain(lambda: len(ctx.inflight), ctx.fail_all, host.dead is not None)
            stop_watch = getattr(self, "_stop_watch", None)
            if stop_watch is not None:
                stop_watch.close()
        host.begin_shutdown(list(ctx.inflight) if ctx is not None else [])
        if ctx is not None:
            ctx.cancel_watch.close()
        host.end_shutdown()
        if ctx is not None:
            ctx.responses.close()
        host.reap_children()
        self.logger.log_info(f"[vllm] model '{self.model_name}': engine shut down")


def _parameter_bool(model_config: dict[str, Any], name: str, default: bool | None) -> bool | None:
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
