"""`TritonServer`: start the real tritonserver on a model repository, wait until it serves, stop it
without leaving processes behind."""

from __future__ import annotations

import os
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from tritonpkg.errors import RuntimeSetupError
from tritonpkg.proc import rest
from tritonpkg.proc.group import ProcessGroup
from tritonpkg.proc.logtail import error_lines, tail
from tritonpkg.proc.ports import free_ports, port_in_use, require_free
from tritonpkg.runtime import admin
from tritonpkg.runtime.environment import server_environment
from tritonpkg.runtime.layout import Runtime
from tritonpkg.runtime.loading import LoadLog, ModelLoad

ModelControl = Literal["none", "poll", "explicit"]
MODEL_CONTROLS = ("none", "poll", "explicit")
PORT_RETRIES = 3
HTTP_THREADS = 16
# Triton's own --exit-timeout-secs default: a vLLM engine on a busy host takes more than a few seconds to wind down.
EXIT_TIMEOUT_S = 30
# `serve --drain-timeout`'s default and the Kubernetes pods' exit timeout: in-flight requests get this long on a
# stop, which with the models' unload stays within the pod's termination grace (DRAIN_TIMEOUT_S + 10).
DRAIN_TIMEOUT_S = 20
LOAD_REQUEST_TIMEOUT = 3600.0  # seconds one load request may take when start-up has no bound


class ServerStartError(RuntimeSetupError):
    """The server process started but did not become ready; `file` is its log, `log_tail` its end."""

    def __init__(self, message: str, *, log_path: Path | None, errors: list[str], log_tail: str,
                 failed: ModelLoad | None = None) -> None:
        self.errors = errors
        self.failed = failed  # the model whose load failed, when Triton said so
        self.log_tail = log_tail
        cause = "\n".join(errors) if errors else "(no error lines logged)"
        super().__init__(f"{message}\nerrors logged by tritonserver:\n{cause}\n--- last log lines ---\n{log_tail}",
                         file=log_path)


class TritonServer:
    """A tritonserver process serving `repo`. Use as a context manager; ports left as None are chosen
    free on loopback at start(). In "none" (and "poll") mode every model in the repository loads at start and
    one failing model fails the start, as soon as Triton logs it; in "explicit" mode only `load_models` load,
    and load_model() adds more. `startup_timeout` None waits as long as the server runs and no load failed."""

    def __init__(
        self,
        repo: str | Path,
        runtime: Runtime | None = None,
        http_port: int | None = None,
        grpc_port: int | None = None,
        metrics_port: int | None = None,
        model_control: ModelControl = "none",
        load_models: list[str] | None = None,
        startup_timeout: float | None = 120.0,
        log_path: str | Path | None = None,
        extra_args: Sequence[str] = (),
        host: str = "127.0.0.1",
        exit_timeout: int = EXIT_TIMEOUT_S,
        metrics_host: str | None = None,
        env: Mapping[str, str] | None = None,
        admin_key: str | None = None,
        log_verbose: int = 0,
        metrics: bool = True,
        on_progress: Callable[[dict[str, ModelLoad]], None] | None = None,
    ) -> None:
        self.repo = Path(repo).absolute()
        if not self.repo.is_dir():
            raise RuntimeSetupError("model repository not found", file=self.repo,
                                    expected="a directory of model folders")
        if model_control not in MODEL_CONTROLS:
            raise RuntimeSetupError(f"unknown model control mode {model_control!r}", field="model_control",
                                    expected="'none', 'poll' or 'explicit'")
        if load_models and model_control != "explicit":
            raise RuntimeSetupError("load_models only applies when models are loaded on request",
                                    field="load_models", expected="model_control='explicit'")
        self.runtime = runtime
        self.model_control = model_control
        self.load_models = list(load_models or [])
        self.startup_timeout = startup_timeout
        self.log_verbose = log_verbose
        self.metrics = metrics  # Triton's own metrics endpoint (--allow-metrics)
        self.on_progress = on_progress  # sees Triton's per-model load states while it starts
        self.extra_args = list(extra_args)
        self.host = host
        # `tritonpkg serve` keeps Triton's metrics on loopback and publishes a merged /metrics instead.
        self.metrics_host = host if metrics_host is None else metrics_host
        self.env = dict(env or {})  # added to the server's environment (e.g. PROMETHEUS_MULTIPROC_DIR)
        self.exit_timeout = exit_timeout
        # Model control, logging, trace, shared memory and statistics answer only to this key (runtime/admin.py).
        self.admin_key = admin.check_key(admin_key) if admin_key is not None else admin.new_key()
        self._requested = {"http_port": http_port, "grpc_port": grpc_port, "metrics_port": metrics_port}
        self.http_port, self.grpc_port, self.metrics_port = http_port, grpc_port, metrics_port
        self._own_log = log_path is None
        self.log_path = Path(log_path).absolute() if log_path is not None else None
        self._group: ProcessGroup | None = None
        self._last_tail = ""
        self.startup_seconds: float | None = None

    # -- addresses -------------------------------------------------------------------------------
    @property
    def _client_host(self) -> str:
        return "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host  # noqa: S104  maps the wildcard

    @property
    def http_url(self) -> str:
        return f"http://{self._client_host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self._client_host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        """Triton's own metrics (nothing answers there when started with metrics=False)."""
        host = "127.0.0.1" if self.metrics_host in ("0.0.0.0", "") else self.metrics_host  # noqa: S104  maps the wildcard
        return f"http://{host}:{self.metrics_port}/metrics"

    @property
    def admin_headers(self) -> dict[str, str]:
        """The HTTP header Triton's restricted APIs want (gRPC: admin.grpc_headers(self.admin_key))."""
        return admin.http_headers(self.admin_key)

    @property
    def pid(self) -> int | None:
        return self._group.pid if self._group else None

    @property
    def pgid(self) -> int | None:
        return self._group.pgid if self._group else None

    @property
    def running(self) -> bool:
        return self._group is not None and self._group.poll() is None

    # -- lifecycle -------------------------------------------------------------------------------
    def command(self) -> list[str]:
        rt = self._rt()
        argv = [
            str(rt.server_bin),
            f"--model-repository={self.repo}",
            f"--backend-directory={rt.backend_dir}",
            f"--model-control-mode={self.model_control}",
            f"--http-port={self.http_port}", f"--grpc-port={self.grpc_port}", f"--metrics-port={self.metrics_port}",
            f"--http-address={self.host}", f"--grpc-address={self.host}", f"--metrics-address={self.metrics_host}",
            "--allow-gpu-metrics=false",  # no GPU here or NVML-less hosts: silences DCGM retries
            f"--log-verbose={self.log_verbose}",
            # On SIGTERM Triton waits up to this long for in-flight requests *and* for idle keep-alive
            # HTTP connections (a tritonclient.http client left open); its default is 30 s.
            f"--exit-timeout-secs={self.exit_timeout}",
            *admin.server_args(self.admin_key),
        ]
        if not self.metrics:
            argv.append("--allow-metrics=false")
        if not any(a.startswith("--http-thread-count") for a in self.extra_args):
            # Each HTTP generate_stream holds one HTTP worker for the whole stream; Triton's default of 8
            # queues the 9th concurrent stream behind the first eight (seen: 16 streams, TTFT x55); 64 threads
            # measured worse than 16 on this 2-core machine (bench/vllm_serving.py).
            argv.append(f"--http-thread-count={HTTP_THREADS}")
        argv += [f"--load-model={name}" for name in self.load_models]
        return argv + self.extra_args

    def start(self) -> TritonServer:
        if self.running:
            return self
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="tritonserver-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        started = time.monotonic()
        for attempt in range(PORT_RETRIES):
            self._choose_ports()
            try:
                self._launch_and_wait()
                break
            except ServerStartError:
                auto = any(v is None for v in self._requested.values())
                if auto and attempt + 1 < PORT_RETRIES and "already in use" in self.log_tail(200):
                    continue  # another process took an auto-chosen port between choice and bind
                raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _rt(self) -> Runtime:
        if self.runtime is None:
            from tritonpkg.runtime.ensure import ensure_runtime

            self.runtime = ensure_runtime()
        return self.runtime

    def _choose_ports(self) -> None:
        wildcard = self.host in ("0.0.0.0", "")  # noqa: S104  tests for the wildcard, binds nothing
        fresh = iter(free_ports(3, "127.0.0.1" if wildcard else self.host))
        for field, value in self._requested.items():
            host = (self.metrics_host if field == "metrics_port" else self.host) or "0.0.0.0"  # noqa: S104  Triton's default
            port = value or next(fresh)
            for _ in range(PORT_RETRIES if value is None else 0):
                if not port_in_use(port, host):  # another process may bind a port chosen on another address
                    break
                port = free_ports(1, "127.0.0.1" if wildcard else self.host)[0]
            require_free(port, host, field)
            setattr(self, field, port)

    def _launch_and_wait(self) -> None:
        rt = self._rt()
        env = {**server_environment(rt), **self.env}
        log = self.log_path
        if log is None:
            raise RuntimeSetupError("no log file chosen before the launch", field="log_path")
        watch = LoadLog(log, offset=log.stat().st_size if log.exists() else 0)
        self._group = ProcessGroup(self.command(), env, log)
        self._group.start()
        probe = "/v2/health/ready" if self.model_control != "explicit" or self.load_models else "/v2/health/live"
        deadline = None if self.startup_timeout is None else time.monotonic() + self.startup_timeout
        seen: dict[str, str] = {}
        try:
            while True:
                models = watch.poll()
                if self.on_progress is not None and {n: m.state for n, m in models.items()} != seen:
                    seen = {n: m.state for n, m in models.items()}
                    self.on_progress(dict(models))
                for failed in watch.failed():
                    self._fail(f"model {failed.name!r} version {failed.version} failed to load: {failed.reason}",
                               failed)
                code = self._group.poll()
                if code is not None:
                    watch.poll()
                    for failed in watch.failed():
                        self._fail(f"model {failed.name!r} version {failed.version} failed to load: "
                                   f"{failed.reason}", failed)
                    self._fail(f"tritonserver exited with code {code} before it was ready")
                if rest.ok(self.http_url + probe, timeout=1.0):
                    return
                if deadline is not None and time.monotonic() > deadline:
                    still = ", ".join(f"{m.name} (loading)" for m in watch.loading())
                    self._fail(f"tritonserver was not ready within {self.startup_timeout:g} s"
                               + (f"; still loading: {still}" if still else ""))
                time.sleep(0.1)
        except BaseException:
            self._group.stop(grace=5.0)
            raise

    def _fail(self, what: str, failed: ModelLoad | None = None) -> None:
        self._last_tail = self.log_tail(25)
        errors = error_lines(self.log_path) if self.log_path else []
        raise ServerStartError(what, log_path=self.log_path, errors=errors, log_tail=self._last_tail, failed=failed)

    def begin_stop(self) -> None:
        """SIGTERM tritonserver alone (not its group): it stops taking requests, lets in-flight ones end within
        its exit timeout and then unloads its models, whose backends stop their own engines. SIGTERM to the whole
        group killed the vLLM engines under live streams."""
        if self._group is not None:
            self._group.terminate_leader()

    def stop(self, grace: float | None = None) -> int | None:
        """SIGTERM the server (begin_stop), wait (default: the server's exit timeout + 10 s), SIGKILL what is
        left of its process group; returns the server's exit code."""
        if self._group is None:
            return None
        code = self._group.stop(grace=self.exit_timeout + 10.0 if grace is None else grace, leader_only=True)
        self._last_tail = self.log_tail(200)
        if self._own_log and self.log_path is not None and code == 0:
            self.log_path.unlink(missing_ok=True)  # keep the log only when something went wrong
        return code

    def detach(self) -> None:
        """Let the server outlive this interpreter (no stop at exit): its recorded process group is stopped later."""
        if self._group is not None:
            self._group.detach()

    def __enter__(self) -> TritonServer:
        try:
            return self.start()
        except BaseException:
            self.stop(grace=5.0)
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- model control and inspection ------------------------------------------------------------
    def load_model(self, name: str) -> tuple[bool, str]:
        """Explicit mode: ask the server to load `name`; (loaded?, the server's error message)."""
        code, body = rest.request("POST", f"{self.http_url}/v2/repository/models/{_q(name)}/load",
                                  timeout=self.startup_timeout or LOAD_REQUEST_TIMEOUT, headers=self.admin_headers)
        if code == 0:
            return False, f"no answer from {self.http_url}; last log lines:\n{self.log_tail(20)}"
        return code == 200, "" if code == 200 else rest.error_text(body)

    def unload_model(self, name: str, wait: bool = True, timeout: float = 30.0) -> None:
        """Explicit mode: unload `name`; with wait, return once the server no longer lists it as loaded."""
        code, body = rest.request("POST", f"{self.http_url}/v2/repository/models/{_q(name)}/unload",
                                  headers=self.admin_headers)
        if code != 200:
            raise RuntimeSetupError(f"unload failed: {rest.error_text(body) or 'no answer'}", field=name)
        deadline = time.monotonic() + timeout
        while wait and time.monotonic() < deadline:
            states = {m.get("name"): m.get("state") for m in self.repository_index()}
            if states.get(name) not in ("READY", "UNLOADING"):
                return
            time.sleep(0.1)

    def repository_index(self) -> list[dict]:
        """Triton's view of the repository: [{name, version, state, reason}, ...]."""
        import json

        code, body = rest.request("POST", f"{self.http_url}/v2/repository/index", headers=self.admin_headers)
        if code != 200:
            raise RuntimeSetupError(f"repository index failed: {rest.error_text(body) or 'no answer'}",
                                    file=self.repo)
        return json.loads(body)

    def ready_models(self) -> list[dict]:
        return [m for m in self.repository_index() if m.get("state") == "READY"]

    def log_tail(self, lines: int = 80) -> str:
        if self.log_path is not None and self.log_path.exists():
            return tail(self.log_path, lines)
        return "\n".join(self._last_tail.splitlines()[-lines:])


def _q(name: str) -> str:
    return urllib.parse.quote(name, safe="")
