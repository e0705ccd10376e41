"""`TritonServer`: start the real tritonserver on a model repository, wait until it serves, stop it
without leaving processes behind."""

from __future__ import annotations

import os
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Literal, Mapping, Sequence

from tritonpkg.errors import RuntimeSetupError
from tritonpkg.runtime import admin, rest
from tritonpkg.runtime.environment import server_environment
from tritonpkg.runtime.layout import Runtime
from tritonpkg.runtime.logtail import error_lines, tail
from tritonpkg.runtime.ports import free_ports, require_free
from tritonpkg.runtime.supervisor import ProcessGroup

ModelControl = Literal["none", "explicit"]
PORT_RETRIES = 3
HTTP_THREADS = 16


class ServerStartError(RuntimeSetupError):
    """The server process started but did not become ready; `file` is its log, `log_tail` its end."""

    def __init__(self, message: str, *, log_path: Path | None, errors: list[str], log_tail: str) -> None:
        self.errors = errors
        self.log_tail = log_tail
        cause = "\n".join(errors) if errors else "(no error lines logged)"
        super().__init__(f"{message}\nerrors logged by tritonserver:\n{cause}\n--- last log lines ---\n{log_tail}",
                         file=log_path)


class TritonServer:
    """A tritonserver process serving `repo`. Use as a context manager; ports left as None are chosen
    free on loopback at start(). In "none" mode every model in the repository loads at start and one
    failing model fails the start; in "explicit" mode only `load_models` load, and load_model() adds more."""

    def __init__(
        self,
        repo: str | Path,
        runtime: Runtime | None = None,
        http_port: int | None = None,
        grpc_port: int | None = None,
        metrics_port: int | None = None,
        model_control: ModelControl = "none",
        load_models: list[str] | None = None,
        startup_timeout: float = 120.0,
        log_path: str | Path | None = None,
        extra_args: Sequence[str] = (),
        host: str = "127.0.0.1",
        exit_timeout: int = 5,
        metrics_host: str | None = None,
        env: Mapping[str, str] | None = None,
        admin_key: str | None = None,
    ) -> None:
        self.repo = Path(repo).absolute()
        if not self.repo.is_dir():
            raise RuntimeSetupError("model repository not found", file=self.repo, expected="a directory of model folders")
        if model_control not in ("none", "explicit"):
            raise RuntimeSetupError(f"unknown model control mode {model_control!r}", field="model_control",
                                    expected="'none' or 'explicit'")
        if load_models and model_control != "explicit":
            raise RuntimeSetupError("load_models only applies when models are loaded on request",
                                    field="load_models", expected="model_control='explicit'")
        self.runtime = runtime
        self.model_control = model_control
        self.load_models = list(load_models or [])
        self.startup_timeout = startup_timeout
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
        return "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host

    @property
    def http_url(self) -> str:
        return f"http://{self._client_host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self._client_host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        host = "127.0.0.1" if self.metrics_host in ("0.0.0.0", "") else self.metrics_host
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
            "--log-verbose=0",
            # On SIGTERM Triton waits up to this long for in-flight requests *and* for idle keep-alive
            # HTTP connections (a tritonclient.http client left open); its default is 30 s.
            f"--exit-timeout-secs={self.exit_timeout}",
            *admin.server_args(self.admin_key),
        ]
        if not any(a.startswith("--http-thread-count") for a in self.extra_args):
            # Each HTTP generate_stream holds one HTTP worker for the whole stream; Triton's default of 8
            # queues the 9th concurrent stream behind the first eight (seen: 16 streams, TTFT x55); 64 threads
            # measured worse than 16 on this 2-core machine (bench/vllm_serving.py).
            argv.append(f"--http-thread-count={HTTP_THREADS}")
        argv += [f"--load-model={name}" for name in self.load_models]
        return argv + self.extra_args

    def start(self) -> "TritonServer":
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
        fresh = iter(free_ports(3, "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host))
        for field, value in self._requested.items():
            port = value if value else next(fresh)
            require_free(port, (self.metrics_host if field == "metrics_port" else self.host) or "0.0.0.0", field)
            setattr(self, field, port)

    def _launch_and_wait(self) -> None:
        rt = self._rt()
        env = {**server_environment(rt), **self.env}
        self._group = ProcessGroup(self.command(), env, self.log_path)  # type: ignore[arg-type]
        self._group.start()
        probe = "/v2/health/ready" if self.model_control == "none" or self.load_models else "/v2/health/live"
        deadline = time.monotonic() + self.startup_timeout
        try:
            while True:
                code = self._group.poll()
                if code is not None:
                    self._fail(f"tritonserver exited with code {code} before it was ready")
                if rest.ok(self.http_url + probe, timeout=1.0):
                    return
                if time.monotonic() > deadline:
                    self._fail(f"tritonserver was not ready within {self.startup_timeout:g} s")
                time.sleep(0.1)
        except BaseException:
            self._group.stop(grace=5.0)
            raise

    def _fail(self, what: str) -> None:
        self._last_tail = self.log_tail(25)
        errors = error_lines(self.log_path) if self.log_path else []
        raise ServerStartError(what, log_path=self.log_path, errors=errors, log_tail=self._last_tail)

    def stop(self, grace: float | None = None) -> int | None:
        """SIGTERM the server's process group, wait (default: the server's exit timeout + 10 s), SIGKILL
        leftovers; returns the server's exit code."""
        if self._group is None:
            return None
        code = self._group.stop(grace=self.exit_timeout + 10.0 if grace is None else grace)
        self._last_tail = self.log_tail(200)
        if self._own_log and self.log_path is not None and code == 0:
            self.log_path.unlink(missing_ok=True)  # keep the log only when something went wrong
        return code

    def __enter__(self) -> "TritonServer":
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
                                  timeout=self.startup_timeout, headers=self.admin_headers)
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
