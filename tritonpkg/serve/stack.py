"""`ServingStack`: run the start-up plan of tritonpkg.serve.plan and hold what it started — the
unpacked package, the Triton child, the merged /metrics and (embedded mode) the OpenAI frontend — so that
one stop() ends all of it in reverse order, whichever step failed. It is the one way a serving unit comes
up: `tritonpkg serve`, `tritonpkg demo` and the local deploy driver's units."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tritonpkg import private
from tritonpkg.errors import RuntimeSetupError
from tritonpkg.repository import lock as lock_mod
from tritonpkg.serve.plan import (
    PackageFacts,
    StartupOptions,
    StartupPlan,
    Step,
    packaged_serving,
    plan_prepare,
    plan_serve,
)
from tritonpkg.serve.triton_options import ModelControlMode

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
STOP_FILE_ENV = "TRITONPKG_VLLM_STOP_FILE"  # backends/vllm/stopping.py reads the announced drain deadline there
STOP_MARGIN_S = 15  # Triton's exit timeout beyond the drain: the engines' own shutdown after their streams ended
METRICS_WAIT = 60.0  # seconds for Triton's metrics to name every ready model before the public /metrics opens


class Warn(str):
    """A step's result that the user should see as a warning (the step still succeeded)."""


@dataclass
class StepEvent:
    step: Step
    state: Literal["start", "done", "warn", "progress"]  # progress: the running step's detail changed
    seconds: float = 0.0
    detail: str = ""


def announce_stop(stop_file: Path, seconds: float) -> bool:
    """The drain deadline the stack's vLLM backends read (STOP_FILE_ENV): from now on they refuse new requests and
    send no self-unload, since a stop is under way. Written whole (a file beside it, renamed over it): a backend
    polls the file and must never read it half-written. False when it could not be written: the stop goes on, its
    models then cut their requests when Triton unloads them."""
    try:
        private.write_private(stop_file, f"{time.time() + seconds:.3f}\n", mode=0o644)
    except (OSError, private.StateDirError):
        return False
    return True


class ServingStack:
    """Use as a context manager, or start()/stop(). `on_event` sees each step start and finish."""

    def __init__(self, options: StartupOptions, runtime: Any = None,
                 on_event: Callable[[StepEvent], None] | None = None) -> None:
        self.options = options
        self.runtime = runtime
        self.on_event = on_event or (lambda _e: None)
        self.plan: StartupPlan | None = None
        self.repository: Path | None = None
        self.server: Any = None  # TritonServer
        self.metrics: Any = None  # MergedMetricsServer
        self.frontend: Any = None
        self.multiproc_dir: Path | None = None
        self.weights: list[Any] = []  # WeightsResult per vLLM model
        self.timings: dict[str, float] = {}
        self.startup_seconds: float | None = None
        self._unpacked: Any = None  # UnpackedPackage
        self._claim: Any = None  # MultiprocDirClaim
        self._state_dir: Path | None = None
        self._own_state = False
        self._scratch: list[Path] = []  # folders this run created inside a user-given state dir
        self.admin_key: str | None = None  # Triton's admin-API key, stored 0600 in the state dir
        self.admin_key_file: Path | None = None
        self.supervisor: Any = None  # EngineSupervisor, once Triton serves vLLM models
        self.stop_problem: str | None = None  # one line: why the last stop was not clean
        self.stop_file: Path | None = None  # where a stop announces its drain deadline (announce_stop)

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> ServingStack:
        began = time.monotonic()
        try:
            source = self._source()
            prepare = plan_prepare(self.options, source_is_archive=source.is_file())
            for step in prepare.steps:
                self._run(step)
            self.plan = plan_serve(self.options, self._facts())
            self.plan.steps = prepare.steps + self.plan.steps
            for note in self.plan.notes:
                self.on_event(StepEvent(Step("plan", "start-up plan"), "warn", detail=note))
            for step in self.plan.steps[len(prepare.steps):]:
                self._run(step)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def detach(self) -> None:
        """Leave Triton running past this interpreter, with the files it serves from: whoever recorded its
        process group (the deploy state) stops it later. Its engine supervisor ends here: a dead engine still makes
        the unit's readiness false (the backend unloads its model), and whoever owns the unit restarts it."""
        if self.supervisor is not None:
            self.supervisor.stop()
            self.supervisor = None
        if self.server is not None:
            self.server.detach()
        self._scratch.clear()
        self._own_state = False
        if self._claim is not None:
            self._claim.release()
            self._claim = None

    def stop(self) -> int | None:
        """A graceful stop: the drain deadline announced to the backends (they refuse new requests from now on),
        SIGTERM to Triton alone (not ready at once; in-flight requests end, then its models unload and their
        engines stop), the OpenAI API's streams drained meanwhile, then what start() unpacked removed.
        `stop_problem` says in one line why a stop was not clean (Triton's exit status, a stub's segfault)."""
        code = None
        if self.supervisor is not None:  # no restart may start under the stop
            self.supervisor.stop()
        drain = self.options.drain_timeout
        if self.server is not None and self.server.running:
            if drain and self.stop_file is not None:
                announce_stop(self.stop_file, drain)
            self.server.begin_stop()
        if self.frontend is not None:
            self.frontend.stop(drain=drain or None)
            self.frontend = None
        if self.metrics is not None:
            self.metrics.stop()
            self.metrics = None
        if self.server is not None:
            code = self.server.stop()
            self.stop_problem = _stop_problem(code, self.server.log_tail(400), self.server.exit_timeout)
        if self._claim is not None:
            self._claim.release()
            self._claim = None
        if self._own_state and self._state_dir is not None:
            shutil.rmtree(self._state_dir, ignore_errors=True)
        for folder in self._scratch:
            shutil.rmtree(folder, ignore_errors=True)
        self._scratch.clear()
        return code

    def __enter__(self) -> ServingStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self.problem() is None

    def problem(self) -> str | None:
        """Why the stack no longer serves (a child or thread that died), or None while all is well."""
        if self.server is None or not self.server.running:
            tail = self.server.log_tail(40) if self.server is not None else ""
            return f"tritonserver exited unexpectedly; last log lines:\n{tail}"
        if self.supervisor is not None and self.supervisor.problem:
            return self.supervisor.problem
        if self.frontend is not None and not self.frontend.running:
            return "the OpenAI frontend stopped unexpectedly (see its log above)"
        return None

    # -- steps -----------------------------------------------------------------------------------
    def _run(self, step: Step) -> None:
        self.on_event(StepEvent(step, "start"))
        began = time.monotonic()
        detail = getattr(self, f"_step_{step.kind}")()
        self.timings[step.kind] = time.monotonic() - began
        self.on_event(StepEvent(step, "warn" if isinstance(detail, Warn) else "done", self.timings[step.kind],
                                str(detail or "")))

    def _source(self) -> Path:
        source = self.options.source
        if not (source.is_file() or source.is_dir()):
            raise RuntimeSetupError("nothing to serve here", file=source,
                                    expected="a model repository folder or a `tritonpkg package --archive` file")
        if source.is_dir():
            self.repository = source.absolute()
        return source

    def _state(self) -> Path:
        if self._state_dir is None:
            if self.options.state_dir is None:
                self._state_dir = Path(tempfile.mkdtemp(prefix="tritonpkg-serve-"))
                self._own_state = True
            else:
                # it holds the admin key and what serve unpacks and runs: this user's alone (0700)
                self._state_dir = private.secure_dir(self.options.state_dir)
        return self._state_dir

    def _scratch_dir(self, stem: str) -> Path:
        path = self._state() / f"{stem}-{uuid.uuid4().hex[:8]}"
        self._scratch.append(path)
        return path

    def _repo(self) -> Path:
        if self.repository is None:
            raise RuntimeSetupError("no repository to serve yet", file=self.options.source,
                                    expected="the unpack or verify step first")
        return self.repository

    def _step_unpack(self) -> str:
        from tritonpkg.serve.unpack import UnpackLimits, unpack_archive

        limits = UnpackLimits(max_members=self.options.max_members, max_bytes=self.options.max_bytes)
        self._unpacked = unpack_archive(self.options.source, self._scratch_dir("package"), limits)
        self.repository = self._unpacked.repository
        return f"{self._unpacked.files} files, {self._unpacked.bytes} bytes, {len(self._unpacked.wheels)} wheel(s)"

    def _step_verify(self) -> str:
        repository = self._repo()
        if self._unpacked is not None:
            from tritonpkg.serve.unpack import verify_unpacked

            verify_unpacked(self._unpacked, self.options.source)
            return "every file matches the lock"
        if not (repository / lock_mod.LOCK_NAME).is_file():
            return Warn("no tritonpkg.lock.json: files not verified")
        problems = lock_mod.verify(repository)
        if problems:
            return Warn(f"{len(problems)} file(s) differ from the lock: " + "; ".join(problems[:5]))
        return "every file the lock names matches"

    def _facts(self) -> PackageFacts:
        repository = self._repo()
        lock = lock_mod.read(repository)
        mode, openai = packaged_serving(lock)
        recorded = {p.get("wheel") for m in lock.get("models", {}).values() for v in m.get("versions", {}).values()
                    for p in v.get("plugins", []) if isinstance(p, dict) and p.get("wheel")}
        wheels = len(self._unpacked.wheels) if self._unpacked is not None else 0
        return PackageFacts(wheels=wheels, recorded_wheels=len(recorded), execution_mode=mode, openai=openai)

    def _step_weights(self) -> str:
        from tritonpkg.serve import weights as w

        repository = self._repo()
        actions = w.plan_weights(w.read_engine_args(repository))
        adapters = w.plan_adapters(w.read_multi_lora(repository))
        if not actions:
            return "no vLLM model"
        remote = any(a.kind == "materialize" for a in actions) or any(a.kind == "materialize" for a in adapters)
        relative = [a for a in adapters if a.kind == "local" and not a.location.startswith(("/", "~"))]
        if not self.options.absolute_adapters:
            relative = []
        if self._unpacked is None and (remote or relative):
            # model.json / multi_lora.json get the local paths: rewrite a copy, never the user's folder
            copy = self._scratch_dir("repository")
            shutil.copytree(repository, copy, symlinks=True)
            self.repository = repository = copy
        root = self.options.weights_root or w.default_weights_root()
        self.weights = w.ensure_weights(repository, actions, root) + w.ensure_adapters(repository, adapters, root)
        for adapter in relative:  # checked to exist inside its version by ensure_adapters
            path = repository / adapter.multi_lora
            entries = json.loads(path.read_text())
            entries[adapter.name] = str((repository / adapter.location).absolute())
            path.write_text(json.dumps(entries, indent=2) + "\n")
        return "; ".join(f"{r.model_json}: {r.kind} {r.path} ({r.detail})" for r in self.weights)

    def _step_plugins(self) -> str:
        from tritonpkg.plugins import install_bundled

        if self._unpacked is None:  # the plan has this step only for an unpacked archive's wheels
            raise RuntimeSetupError("no unpacked package to install plugin wheels from", field="plugins")
        repository = self._repo()
        installed = install_bundled(self._unpacked.wheels_dir, lock=repository / lock_mod.LOCK_NAME)
        return ", ".join(f"{p.name} {p.version} {p.action}" for p in installed) or "nothing to install"

    def _step_metrics_dir(self) -> str:
        from tritonpkg.metrics import claim_multiproc_dir

        chosen = self.options.multiproc_dir or os.environ.get(MULTIPROC_ENV) or self._state() / "prometheus-multiproc"
        self._claim = claim_multiproc_dir(chosen)
        self.multiproc_dir = self._claim.path
        return str(self.multiproc_dir)

    def _step_triton(self) -> str:
        """Triton binds the public HTTP/gRPC ports itself: in model-control mode "none" (and "poll", and the
        models named in "explicit"), Triton 2.51 loads them inside server creation and only then starts its
        endpoints (measured here: a model sleeping 8 s in initialize, ports refused until 9.5 s, then open; a
        model failing to load makes the server exit without ever opening them), so no forwarder is needed
        for the readiness gate."""
        from tritonpkg.proc.ports import require_free
        from tritonpkg.runtime import admin
        from tritonpkg.runtime.ensure import ensure_runtime
        from tritonpkg.runtime.server import TritonServer

        o = self.options
        # Fail before a model load that can take minutes, not after it.
        public = (("metrics_port", o.merged_metrics and o.metrics_port),
                  ("openai_port", self._wants_frontend() and o.openai_port))
        for name, port in public:
            if port:
                require_free(port, o.host or "0.0.0.0", name)  # noqa: S104  checks the port where the server will bind
        if o.admin_key_dir is not None:  # kept there for every unit of a deployment (created on first use)
            self.admin_key = admin.ensure_key(o.admin_key_dir)
            self.admin_key_file = o.admin_key_dir / admin.KEY_FILE
        else:
            self.admin_key = admin.check_key(o.admin_key) if o.admin_key else admin.new_key()
            self.admin_key_file = admin.write_key(self._scratch_dir("admin"), self.admin_key)
        t = o.triton
        # "none" (every model loads at start, none changes after) runs as explicit with every model loaded: the
        # vLLM backend can then unload a model whose engine died, so its readiness follows the engine.
        stop_dir = self._scratch_dir("stop")
        stop_dir.mkdir(mode=0o700)
        self.stop_file = stop_dir / "drain-deadline"  # named now, written when a stop begins
        exit_timeout = max(o.exit_timeout, int(o.drain_timeout) + STOP_MARGIN_S) if o.drain_timeout else o.exit_timeout
        control: ModelControlMode = "explicit" if t.model_control_mode == "none" else t.model_control_mode
        load = ["*"] if t.model_control_mode == "none" else list(t.load_models)
        self.server = TritonServer(
            self._repo(), runtime=self.runtime or ensure_runtime(), host=o.host,
            http_port=o.http_port or None, grpc_port=o.grpc_port or None,
            metrics_port=o.triton_metrics_port or None,
            metrics_host="127.0.0.1", model_control=control, load_models=load,
            log_verbose=t.log_verbose, metrics=t.metrics, extra_args=t.server_args(),
            startup_timeout=o.startup_timeout, log_path=o.log_path, exit_timeout=exit_timeout,
            env={MULTIPROC_ENV: str(self.multiproc_dir), STOP_FILE_ENV: str(self.stop_file)},
            admin_key=self.admin_key, on_progress=self._loading)
        self.server.start()
        self._supervise()
        return f"pid {self.server.pid}, {len(self.server.ready_models())} model(s) ready"

    def _supervise(self) -> None:
        """Watch the vLLM models Triton serves now (explicit model control: a dead engine unloads its model)."""
        from tritonpkg.serve.supervisor import EngineSupervisor, vllm_models

        if self.server.model_control != "explicit":
            return
        ready = {m["name"] for m in self.server.ready_models()}
        watched = vllm_models(self._repo()) & ready
        if watched:
            self.supervisor = EngineSupervisor(self.server, watched, policy=self.options.on_engine_death,
                                               on_event=self._engine_event).start()

    def _engine_event(self, event: Any) -> None:
        detail = f"{event.model}: {event.kind}" + (f" ({event.detail})" if event.detail else "")
        if event.kind == "restarted":
            detail += f", ready again {event.seconds:.1f} s after its death"
        self.on_event(StepEvent(Step("engine", "vLLM engine"), "done" if event.kind == "restarted" else "warn",
                                detail=detail))

    def _loading(self, models: dict[str, Any]) -> None:
        """Triton's per-model load states while it starts, as progress of the triton step."""
        loading = sorted(n for n, m in models.items() if m.state == "loading")
        loaded = sorted(n for n, m in models.items() if m.state == "loaded")
        parts = [f"{label} {', '.join(names)}" for label, names in (("loading", loading), ("loaded", loaded)) if names]
        if parts:
            self.on_event(StepEvent(Step("triton", "start Triton"), "progress", detail="; ".join(parts)))

    def _step_metrics(self) -> str:
        from tritonpkg.metrics import MergedMetricsServer

        triton_url = self.server.metrics_url if self.options.triton.metrics else None
        supervisor = self.supervisor
        metrics = MergedMetricsServer(triton_url, self.multiproc_dir, host=self.options.host,
                                      port=self.options.metrics_port, token=self.options.metrics_token,
                                      extra=supervisor.exposition if supervisor is not None else None)
        if triton_url is not None:
            # The public port opens only once Triton's own metrics answer for every model: its first scrape is whole.
            metrics.wait_for_triton(METRICS_WAIT, [m["name"] for m in self.server.ready_models()])
        self.metrics = metrics.start()
        return self.metrics.url + ("" if triton_url else " (vLLM only: Triton's own metrics are off)")

    def _wants_frontend(self) -> bool:
        return self.plan is not None and any(s.kind == "frontend" for s in self.plan.steps)

    def _step_frontend(self) -> str:
        from tritonpkg.frontend import FrontendServer, FrontendSettings

        settings = FrontendSettings(triton_grpc_url=self.server.grpc_url, host=self.options.host,
                                    port=self.options.openai_port, model_repository=self.repository,
                                    triton_admin_key=self.admin_key, api_key=self.options.openai_api_key,
                                    max_request_bytes=self.options.max_request_bytes)
        self.frontend = FrontendServer(settings).start()
        return self.openai_url or ""

    # -- what is served --------------------------------------------------------------------------
    @property
    def openai_url(self) -> str | None:
        """The OpenAI clients' base_url."""
        return f"{self.frontend.url}/v1" if self.frontend is not None else None

    def endpoints(self) -> dict[str, Any]:
        srv = self.server
        models = srv.ready_models() if srv is not None and srv.running else []
        return {
            "http_url": srv.http_url, "grpc_url": srv.grpc_url,
            "metrics_url": self.metrics.url if self.metrics else None,
            "triton_metrics_url": srv.metrics_url if srv.metrics else None,
            "model_control_mode": self.options.triton.model_control_mode,
            "openai_url": self.openai_url,
            "execution_mode": self.plan.execution_mode if self.plan else None,
            "pid": srv.pid, "repository": str(self.repository),
            "startup_seconds": round(self.startup_seconds or 0.0, 3),
            "steps": [{"step": k, "seconds": round(v, 3)} for k, v in self.timings.items()],
            "weights": [dataclasses.asdict(w) for w in self.weights],
            "models": [{"name": m["name"], "version": m.get("version"), "state": m["state"]} for m in models],
            "admin_key": self.admin_key, "admin_key_file": str(self.admin_key_file) if self.admin_key_file else None,
            "admin_header": "admin-key", "metrics_auth": "bearer" if self.options.metrics_token else None,
            "openai_auth": "bearer" if self.options.openai_api_key else None,
        }


def _stop_problem(code: int | None, log: str, exit_timeout: int) -> str | None:
    """One line on why Triton's stop was not clean, or None: its exit status and the log's own reason."""
    if "Segfault encountered" in log or "Signal (11) received" in log:
        return f"a Python-backend stub segfaulted while Triton stopped (tritonserver exit status {code})"
    if code in (0, None):
        return None
    if "Exit timeout expired" in log:
        return (f"tritonserver's exit timeout ({exit_timeout} s) ran out before its models had unloaded "
                f"(exit status {code})")
    if code < 0:
        return f"tritonserver was killed by signal {-code} during the stop"
    return f"tritonserver exited with status {code} during the stop"
