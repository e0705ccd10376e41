"""The engine's life cycle inside the stub: one vLLM V1 `AsyncLLM` on a private asyncio loop thread, started
with a bound, its processes lowered in priority and watched by a sibling process, its health polled, the
model unloaded once the engine is dead, and everything shut down and reaped on finalize."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import triton_python_backend_utils as pb_utils
from priority import lower_engine_priority
from prom_labels import stat_logger
from request_base import quietly
from settle import settle_after_start
from stopping import announced as stop_announced

ENGINE_ARGS_FILE = "model.json"
ENGINE_START_TIMEOUT_S = float(os.environ.get("TRITONPKG_VLLM_START_TIMEOUT", "900"))
SHUTDOWN_TIMEOUT_S = 30.0
HEALTH_POLL_S = float(os.environ.get("TRITONPKG_VLLM_HEALTH_POLL", "1.0"))
# While this file exists the health poll fails as if check_health had raised, for the models it names (one
# per line; empty: every model): how the tests (and an operator rehearsing a failover) make a live engine
# fail its health check on purpose.
HEALTH_FAULT_FILE = os.environ.get("TRITONPKG_VLLM_HEALTH_FAULT_FILE")
# NVIDIA's per-model switch (config.pbtxt parameters). NVIDIA's default is off; here it is on, because
# a model that unloads itself once its engine is dead is what lets a load balancer route around it.
HEALTH_PARAMETER = "ENABLE_VLLM_HEALTH_CHECK"
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


def read_engine_args(model_name: str, model_repository: str, version: str) -> dict[str, Any]:
    path = os.path.join(model_repository, version, ENGINE_ARGS_FILE)
    if not os.path.isfile(path):
        raise pb_utils.TritonModelException(
            f"model '{model_name}': {path} is missing; it holds the vLLM engine arguments"
        )
    try:
        with open(path, encoding="utf-8") as f:
            engine_args = json.load(f)
    except json.JSONDecodeError as exc:
        raise pb_utils.TritonModelException(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(engine_args, dict) or "model" not in engine_args:
        raise pb_utils.TritonModelException(f"{path}: expected a JSON object with at least 'model'")
    return engine_args


class EngineHost:
    """`on_dead(message)` is called once, on the loop thread or the request's, when the engine is found dead:
    the model answers its in-flight requests with it."""

    def __init__(self, model_name: str, model_version: str, logger: Any, health_check: bool, engine_nice: int,
                 on_dead: Callable[[str], None]) -> None:
        self.model_name, self.model_version, self.logger = model_name, model_version, logger
        self.health_check, self.engine_nice, self.on_dead = health_check, engine_nice, on_dead
        self.engine: Any = None
        self.tasks: set[str] = set()
        self.closing = False
        self.dead: str | None = None  # why the engine is unusable, once it is
        self._unload_lock = threading.Lock()  # orders a self-unload request before finalize
        self._watchdog: Any = None
        self._health_task: Any = None
        self._loop: asyncio.AbstractEventLoop | None = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self._loop.run_forever, name="vllm-engine-loop", daemon=True)
        self._loop_thread.start()

    @property
    def pooling(self) -> bool:
        return "generate" not in self.tasks

    # -- start -----------------------------------------------------------------------------------
    def start(self, engine_args: dict[str, Any]) -> float:
        """Start the engine (bounded by TRITONPKG_VLLM_START_TIMEOUT); returns when it began. The model checks
        `tasks`, then calls settle()."""
        from vllm.engine.arg_utils import AsyncEngineArgs

        started = time.monotonic()
        try:
            self.engine = self.call(self._start_engine(AsyncEngineArgs(**engine_args)), ENGINE_START_TIMEOUT_S)
            self.tasks = set(self.call(self.engine.get_supported_tasks(), 60))
        except BaseException:
            self._stop_loop()
            self.reap_children()
            raise
        return started

    def settle(self, started: float, weights: Any) -> None:
        """Lower the engine's priority, start the watchdog and the health poll, settle the stub's heap."""
        niced = lower_engine_priority(self.engine_nice)  # before the watchdog: only the engine's processes
        self._watchdog = self._start_watchdog()
        self._health_task = self.submit(self._watch_health()) if self.health_check else None
        settle_after_start()
        self.logger.log_info(
            f"[vllm] model '{self.model_name}': engine started in {time.monotonic() - started:.1f} s "
            f"(model {weights}, tasks {sorted(self.tasks)}"
            + (f", {len(niced)} engine processes at nice {self.engine_nice}" if niced else "") + ")"
        )

    async def _start_engine(self, engine_args: Any) -> Any:
        from vllm.v1.engine.async_llm import AsyncLLM

        # vLLM's series, also labelled with the Triton model and version (as NVIDIA's backend's are).
        loggers = None if engine_args.disable_log_stats else [stat_logger(self.model_name, self.model_version)]
        return AsyncLLM.from_engine_args(engine_args, stat_loggers=loggers)

    def _start_watchdog(self) -> Any:
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

    # -- running ---------------------------------------------------------------------------------
    def submit(self, coro: Awaitable[Any]) -> Any:
        """Schedule `coro` on the engine's loop from any thread; a concurrent.futures.Future."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]

    def call(self, coro: Awaitable[Any], timeout: float) -> Any:
        return self.submit(coro).result(timeout=timeout)

    def abort(self, request_id: str | list[str]) -> None:
        """From any thread: the request's generate() ends at its next output."""
        loop, engine = self._loop, self.engine
        if loop is not None and engine is not None:
            asyncio.run_coroutine_threadsafe(quietly(engine.abort(request_id)), loop)

    def poll_streams_per_step(self, watch: Any) -> bool:
        """Poll streams for cancellation before each engine step's outputs are processed
        (cancellation.poll_before_outputs); False where this vLLM does not allow it."""
        from cancellation import poll_before_outputs

        engine, loop = self.engine, self._loop
        core: Any = getattr(engine, "engine_core", None)
        if engine is None or loop is None or not hasattr(core, "abort_requests_async"):
            return False
        running: asyncio.AbstractEventLoop = loop
        pending: set[Any] = set()

        def abort_in_core(internal_ids: list[str]) -> None:  # on the loop, inside vLLM's output handler
            task = running.create_task(quietly(core.abort_requests_async(internal_ids)))
            pending.add(task)
            task.add_done_callback(pending.discard)

        def on_cancel(keys: list[Any]) -> None:
            for key in keys:
                self.logger.log_info(f"[vllm] request {key} cancelled by the client; aborted before its next step")

        return poll_before_outputs(getattr(engine, "output_processor", None), watch, abort_in_core, on_cancel)

    def abort_cancelled(self, request_id: str) -> None:
        """From the send loop or the cancel watch: the body stops at its next output (ticket.done())."""
        self.logger.log_info(f"[vllm] request {request_id} cancelled by the client; aborting it in vLLM")
        self.abort(request_id)

    async def render(self, prompt: str) -> Any:
        """Tokenize through vLLM's renderer (raw prompt strings are deprecated in vLLM 0.32's
        AsyncLLM); older vLLMs without a renderer take the text prompt itself."""
        renderer = getattr(self.engine, "renderer", None)
        if renderer is None or not hasattr(renderer, "render_cmpl_async"):
            return {"prompt": prompt}
        (engine_input,) = await renderer.render_cmpl_async([{"prompt": prompt}])
        return engine_input

    async def render_tokens(self, token_ids: list[int]) -> Any:
        renderer = getattr(self.engine, "renderer", None)
        if renderer is None or not hasattr(renderer, "render_cmpl_async"):
            return {"prompt_token_ids": token_ids}
        (engine_input,) = await renderer.render_cmpl_async([{"prompt_token_ids": token_ids}])
        return engine_input

    # -- health ----------------------------------------------------------------------------------
    async def _watch_health(self) -> None:
        """A dead EngineCore must not leave clients waiting: poll the engine, and once it is dead
        error every in-flight request, refuse new ones, and unload the model so Triton reports it
        not ready (possible when the server runs with --model-control-mode=explicit)."""
        while not self.closing:
            await asyncio.sleep(HEALTH_POLL_S)
            engine = self.engine
            if engine is None or self.closing:
                return
            try:
                if self._fault_injected():
                    raise RuntimeError(f"health check failed on purpose ({HEALTH_FAULT_FILE})")
                await engine.check_health()
            except Exception as exc:
                self.mark_dead(f"the vLLM engine died ({type(exc).__name__}: {exc or 'EngineCore exited'})")
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

    def mark_dead(self, reason: str) -> None:
        if self.dead is not None:
            return
        self.dead = f"model '{self.model_name}' is not ready: {reason}; it was unloaded or must be reloaded"
        self.logger.log_error(f"[vllm] {self.dead}")
        self.on_dead(self.dead)
        # The unload request goes out at once, before anything slow: a SIGTERM that lands while it is
        # still to be sent makes it reach a server that is shutting down (the stub segfaulted there).
        threading.Thread(target=self._unload_self, name="vllm-unload", daemon=True).start()

    def _unload_self(self) -> None:
        """In its own thread (unloading runs finalize, which needs the event loop). Never once finalize
        has begun: Triton is unloading the model already, maybe shutting down, and a model-control
        request from the stub then reaches a server tearing the stub's channel down. The lock makes
        finalize wait for a request already sent (Triton's unload only schedules, so it returns at once)."""
        with self._unload_lock:
            if self.closing or stop_announced():  # a server that shuts down unloads the model itself
                self.reap_children()
                return
            if not self.health_check:
                self.logger.log_warn(f"[vllm] '{self.model_name}' stays loaded and answers every request with an "
                                     f"error: its {HEALTH_PARAMETER} parameter is false")
                self.reap_children()
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
        self.reap_children()  # the model stays loaded: the dead engine's processes need not

    # -- shutdown --------------------------------------------------------------------------------
    def begin_shutdown(self, pending: list[str]) -> None:
        """Abort `pending`, shut the engine (and its EngineCore process) down; no self-unload from now on."""
        if self._unload_lock.acquire(timeout=SHUTDOWN_TIMEOUT_S):
            self.closing = True  # under the lock: no self-unload request is sent from now on
            self._unload_lock.release()
        self.closing = True
        engine, loop = self.engine, self._loop
        if engine is not None and loop is not None and loop.is_running():
            if self.dead is not None:
                # Declared dead: nothing to wind down gracefully, and a SIGTERMed server exits (its
                # --exit-timeout-secs) before a stuck EngineCore would.
                self.reap_children(grace=0.0)
            try:
                if pending:
                    self.call(engine.abort(pending), SHUTDOWN_TIMEOUT_S)
                self.call(self._shutdown_engine(engine), SHUTDOWN_TIMEOUT_S)
            except Exception:
                import traceback

                self.logger.log_error(f"[vllm] engine shutdown: {traceback.format_exc()}")
        if engine is not None:
            # vLLM keeps references to the engine until interpreter exit, where AsyncLLM.__del__ would
            # shut it down a second time with its modules already torn down (a TypeError in the log).
            engine.shutdown = lambda *args, **kwargs: None
        self.engine = None

    def end_shutdown(self) -> None:
        """Stop the loop and the watchdog (after begin_shutdown and whatever still needed the loop)."""
        self._stop_loop()
        if self._watchdog is not None:
            self._watchdog.kill()
            self._watchdog.wait()

    def shutdown(self, pending: list[str]) -> None:
        self.begin_shutdown(pending)
        self.end_shutdown()

    async def _shutdown_engine(self, engine: Any) -> None:
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()
        engine.shutdown(timeout=SHUTDOWN_TIMEOUT_S / 2)

    def _stop_loop(self) -> None:
        loop = self._loop
        if loop is None:
            return
        if loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
            self._loop_thread.join(timeout=SHUTDOWN_TIMEOUT_S)
        if not loop.is_running():
            loop.close()
        self._loop = None

    def reap_children(self, grace: float = 5.0) -> None:
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
            with contextlib.suppress(psutil.Error):
                child.kill()
