"""`tritonpkg serve SOURCE`: bring a model repository or package archive up the way production does
(tritonpkg.serve: unpack + verify, weights, plugins, metrics directory, Triton behind closed ports
until ready, merged /metrics, OpenAI API) and supervise it until Ctrl-C / SIGTERM; or print the
`docker run` that serves it in NVIDIA's image on a GPU host."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.status import Status

from tritonpkg.cli._common import (
    EXIT_PROBLEMS,
    EXIT_USAGE,
    api_key_file_option,
    api_key_option,
    console,
    err_console,
    library_errors,
    max_request_bytes_option,
    print_error,
    print_json,
    serve_until_stopped,
    stop_signals,
)

if TYPE_CHECKING:
    from tritonpkg.serve import StepEvent

EXIT_INTERRUPTED = 130  # the shell's code for a command ended by a signal it did not finish


class RuntimeKind(str, enum.Enum):
    local = "local"
    docker = "docker"


class Image(str, enum.Enum):
    ngc = "ngc"
    toolkit = "toolkit"


class Mode(str, enum.Enum):
    embedded = "embedded"
    separate = "separate"


class EngineDeath(str, enum.Enum):
    restart = "restart"
    exit = "exit"


class ModelControl(str, enum.Enum):
    none = "none"
    poll = "poll"
    explicit = "explicit"


DEFAULT_OPENAI_PORT = 9000
DEFAULT_DRAIN_S = 20.0  # tritonpkg.runtime.server.DRAIN_TIMEOUT_S: with the engines' own stop, within a 30 s grace


def _backend_configs(values: list[str]) -> list[str]:
    from tritonpkg.serve.triton_options import TritonOptions

    for value in values:
        try:
            TritonOptions(backend_config=(value,))
        except ValueError:
            raise typer.BadParameter(f"{value!r}: expected BACKEND,KEY=VALUE "
                                     "(e.g. python,shm-default-byte-size=16777216)") from None
    return values


def _triton_args(values: list[str]) -> list[str]:
    from tritonpkg.serve.triton_options import TritonOptionError, check_passthrough

    for value in values:
        try:
            check_passthrough(value)
        except TritonOptionError as exc:
            raise typer.BadParameter(str(exc)) from None
    return values


def _usage_error(option: str, message: str) -> typer.Exit:
    err_console.print(f"[bold red]usage error:[/] {option}: ", end="", highlight=False)
    err_console.print(message, markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(EXIT_USAGE)


def _admin_key(value: str | None) -> str | None:
    from tritonpkg.errors import TritonpkgError
    from tritonpkg.runtime import admin

    if not value:
        return None
    try:
        return admin.check_key(value)
    except TritonpkgError:
        raise typer.BadParameter("16 to 256 characters of A-Z a-z 0-9 _ - (TRITONPKG_ADMIN_KEY)") from None


def _metrics_token(value: str | None) -> str | None:
    if value is not None and not 16 <= len(value) <= 4096:
        raise typer.BadParameter("a bearer token of 16 to 4096 characters (TRITONPKG_METRICS_TOKEN)")
    return value or None


@library_errors()
def serve(
    repo: Path = typer.Argument(..., metavar="SOURCE",
                                help="Model repository folder, or a package archive from `package --archive`."),
    http_port: int = typer.Option(8000, "--http-port", help="HTTP/REST port (0 picks a free one)."),
    grpc_port: int = typer.Option(8001, "--grpc-port", help="gRPC port (0 picks a free one)."),
    metrics_port: int = typer.Option(8002, "--metrics-port",
                                     help="Merged Prometheus /metrics port: Triton + vLLM (0 picks a free one)."),
    openai_port: int | None = typer.Option(
        None, "--openai-port", show_default=False,
        help=f"OpenAI-compatible API port (default {DEFAULT_OPENAI_PORT}; 0 picks a free one). Giving it turns the "
             "OpenAI API on (an error with --no-openai)."),
    openai: bool | None = typer.Option(None, "--openai/--no-openai",
                                       help="Serve the OpenAI API (default: what the package asks for)."),
    mode: Mode | None = typer.Option(None, "--mode",
                                     help="embedded: this process also serves the OpenAI API; separate: Triton "
                                          "only (default: the package's execution_mode, else embedded)."),
    host: str = typer.Option("127.0.0.1", "--host",
                             help="Address to listen on (docker: to publish the ports on); 0.0.0.0 for all."),
    state_dir: Path | None = typer.Option(None, "--state-dir",
                                          help="Where the archive is unpacked (default: a temp dir removed at exit)."),
    weights_root: Path | None = typer.Option(None, "--weights-root",
                                             help="Where remote weights are materialized (default: the user cache)."),
    max_members: int | None = typer.Option(None, "--max-members", min=1,
                                           help="Refuse archives with more members (default: 20000)."),
    max_bytes: int | None = typer.Option(None, "--max-bytes", min=1,
                                         help="Refuse archives that expand to more bytes (default: 4 GiB)."),
    plugins: bool = typer.Option(True, "--plugins/--no-plugins", help="Install the package's bundled plugin wheels."),
    runtime: RuntimeKind = typer.Option(RuntimeKind.local, "--runtime",
                                        help="local: run Triton here; docker: print the docker run command."),
    target_release: str | None = typer.Option(None, "--target-release", "-r",
                                              help="Triton release for --runtime docker (default: the toolkit's)."),
    image: Image = typer.Option(
        Image.ngc, "--image",
        help="docker: ngc runs NVIDIA's stock image (tritonserver alone; folders the repository names mounted at "
             "container paths, remote weights materialized here first); toolkit runs the toolkit image "
             "(`tritonpkg image build`), whose `tritonpkg serve` does the whole start procedure inside."),
    triton_home: Path | None = typer.Option(
        None, "--triton-home", envvar="TRITONPKG_TRITON_HOME", show_default=False,
        help="Run the Triton installed in this folder (bin/tritonserver, backends/, lib/), as the toolkit image "
             "does with /opt/tritonserver, instead of the toolkit's local runtime."),
    timeout: float | None = typer.Option(
        None, "--timeout", min=0.001, show_default=False,
        help="Upper bound in seconds on Triton's start (default: none; start-up waits while Triton reports "
             "models loading and fails at once, naming the model, when a load fails)."),
    model_control_mode: ModelControl = typer.Option(
        ModelControl.none, "--model-control-mode",
        help="Triton's model control: none (every model loads at start), poll (and the repository is polled "
             "for changes), explicit (only --load-model models load; the admin API loads and unloads more)."),
    load_model: list[str] = typer.Option(
        [], "--load-model", help="A model to load at start (repeatable; only with --model-control-mode explicit)."),
    backend_config: list[str] = typer.Option(
        [], "--backend-config", callback=_backend_configs, metavar="BACKEND,KEY=VALUE",
        help="Triton's --backend-config (repeatable), e.g. python,shm-default-byte-size=16777216."),
    log_verbose: int = typer.Option(0, "--log-verbose", min=0, help="Triton's verbose log level (0: off)."),
    triton_metrics: bool = typer.Option(
        True, "--metrics/--no-metrics",
        help="Triton's own metrics; with --no-metrics the merged /metrics serves vLLM's only and says so "
             "(tritonpkg_metrics_source_served{source=\"triton\"} 0)."),
    triton_arg: list[str] = typer.Option(
        [], "--triton-arg", callback=_triton_args, metavar="--OPTION[=VALUE]",
        help="Any other tritonserver option, passed through as given (repeatable; write --triton-arg=--foo=bar). "
             "Options tritonpkg sets itself (ports, addresses, --model-repository, --backend-directory, the "
             "restricted APIs, ...) are refused."),
    on_engine_death: EngineDeath = typer.Option(
        EngineDeath.restart, "--on-engine-death",
        help="When a model's vLLM engine dies (its readiness turns false within ~1 s either way): restart loads "
             "the model again with a fresh engine (3 attempts, backoff 2 s then 4 s; exhausted: as exit); exit "
             "stops the whole stack with status 1 and a one-line reason, for systemd/Docker/Kubernetes to restart."),
    drain_timeout: float = typer.Option(
        DEFAULT_DRAIN_S, "--drain-timeout", min=0, max=3600,
        help="On SIGTERM/SIGINT: readiness false at once, new requests refused (503), in-flight requests and "
             "streams get this many seconds to end; what is still running then gets a final error saying so "
             "(default below Kubernetes' 30 s termination grace; 0: Triton's own exit timeout alone)."),
    as_json: bool = typer.Option(False, "--json", help="Print endpoints and models (or the docker command) as JSON."),
    metrics_token: str | None = typer.Option(
        None, "--metrics-token", envvar="TRITONPKG_METRICS_TOKEN", show_default=False, callback=_metrics_token,
        help="Require `Authorization: Bearer <token>` on the merged /metrics (prefer the environment variable)."),
    admin_key: str | None = typer.Option(
        None, "--admin-key", envvar="TRITONPKG_ADMIN_KEY", show_default=False, callback=_admin_key,
        help="Triton's admin-API key (16-256 of A-Z a-z 0-9 _ -; prefer the environment variable, as a Kubernetes "
             "pod gets it from its deployment's Secret); default: a new one, in the state directory."),
    api_key: str | None = api_key_option(),
    api_key_file: Path | None = api_key_file_option(),
    max_request_bytes: int = max_request_bytes_option(),
    adapter_list: Path | None = typer.Option(
        None, "--adapter-list", show_default=False,
        help="Follow this LoRA adapter list (a Kubernetes unit's mounted ConfigMap: name -> an adapter in a "
             "package archive of the package store, or an s3:// / hf:// source): each new content is fetched, "
             "verified and served by the running engine (GET /health/adapters on the OpenAI port says what is "
             "applied); readiness waits for the first. No file: the package's own adapters."),
) -> None:
    """Serve a model repository or package in the real Triton server; stop cleanly on Ctrl-C or SIGTERM."""
    if runtime is RuntimeKind.docker:
        ports = {"http_port": http_port, "grpc_port": grpc_port, "metrics_port": metrics_port,
                 "openai_port": DEFAULT_OPENAI_PORT if openai_port is None else openai_port}
        passed = [*(["--openai" if openai else "--no-openai"] if openai is not None else []),
                  *(["--mode", mode.value] if mode else [])]
        _print_docker(repo, target_release, image, ports, host, state_dir, weights_root, plugins, passed, as_json)
        return
    from tritonpkg.frontend.auth import load_api_key
    from tritonpkg.serve import StartupOptions, TritonOptions

    if openai_port is not None:
        if openai is False:
            raise _usage_error("--openai-port", "serves the OpenAI API, which --no-openai turns off: give one of them")
        if mode is Mode.separate:
            raise _usage_error("--openai-port", "the separate mode serves no OpenAI API here (run `tritonpkg "
                                                "frontend` beside it): drop --mode separate or --openai-port")
        openai = True
    if load_model and model_control_mode is not ModelControl.explicit:
        raise _usage_error("--load-model", "needs --model-control-mode explicit (in none and poll mode every "
                                           "model of the repository loads)")
    triton = TritonOptions(model_control_mode=model_control_mode.value, load_models=tuple(load_model),
                           backend_config=tuple(backend_config), log_verbose=log_verbose, metrics=triton_metrics,
                           extra_args=tuple(triton_arg))
    openai_key = load_api_key(api_key, api_key_file)
    options = StartupOptions(
        openai_api_key=openai_key, max_request_bytes=max_request_bytes,
        source=repo, host=host, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port,
        openai_port=DEFAULT_OPENAI_PORT if openai_port is None else openai_port, openai=openai,
        execution_mode=mode.value if mode else None, state_dir=state_dir, triton=triton,
        weights_root=weights_root, startup_timeout=timeout, install_plugins=plugins,
        metrics_token=metrics_token or None, on_engine_death=on_engine_death.value, admin_key=admin_key,
        drain_timeout=drain_timeout, absolute_adapters=triton_home is not None,
        **{k: v for k, v in (("max_members", max_members), ("max_bytes", max_bytes)) if v is not None})
    if adapter_list is not None and (openai is False or mode is Mode.separate):
        raise _usage_error("--adapter-list", "reports on the OpenAI port (/health/adapters), which --no-openai and "
                                             "--mode separate turn off")
    if adapter_list is not None and repo.is_dir():
        raise _usage_error("--adapter-list", "rewrites the served multi_lora.json: serve a package archive (serve "
                                             "unpacks it into a folder of its own), not a repository folder")
    _serve_local(options, as_json, triton_home, adapter_list)


def _print_docker(repo: Path, release: str | None, image: Image, ports: dict[str, int], host: str,
                  state_dir: Path | None, weights_root: Path | None, plugins: bool, passed: list[str],
                  as_json: bool) -> None:
    """Prepare what the container mounts (tritonpkg.serve.docker) and print the `docker run` that serves it."""
    import shlex

    from tritonpkg.compat import default_release
    from tritonpkg.image import default_tag
    from tritonpkg.runtime import admin
    from tritonpkg.serve import docker

    release = release or default_release()
    state = state_dir or docker.default_state_dir(repo, release, image.value)
    prepared = docker.prepare(repo, image.value, state, weights_root=weights_root, install_plugins=plugins)
    data: dict = {"release": release, "image_kind": image.value, "state_dir": str(state), "notes": prepared.notes,
                  "mounts": [{"host": m.host, "container": m.container} for m in prepared.view.mounts],
                  "rewritten": sorted(prepared.view.rewrites)}
    key = None
    if image is Image.ngc:
        key = admin.new_key()
        argv = docker.ngc_command(prepared, release, http_port=ports["http_port"], grpc_port=ports["grpc_port"],
                                  metrics_port=ports["metrics_port"], host=host, admin_key=key)
        data.update(admin_key=key, admin_header=admin.HEADER, admin_apis=list(admin.RESTRICTED))
    else:
        tag = default_tag(release)
        argv = docker.toolkit_command(prepared, tag, http_port=ports["http_port"], grpc_port=ports["grpc_port"],
                                      metrics_port=ports["metrics_port"], openai_port=ports["openai_port"],
                                      host=host, serve_args=passed)
        data["image"] = tag
    data.update(argv=argv, command=shlex.join(argv))
    if as_json:
        print_json(data)
        return
    typer.echo(shlex.join(argv))
    for note in prepared.notes:
        err_console.print(note, highlight=False, markup=False, soft_wrap=True)
    if key is not None:
        err_console.print(f"admin APIs ({', '.join(admin.RESTRICTED)}) answer only with the header "
                          f"{admin.HEADER}: {key}", highlight=False, markup=False)
    else:
        err_console.print(f"image {data['image']}: `tritonpkg image build --release {release}` builds it; the "
                          "admin key is in the container's log", highlight=False, markup=False)


def _follower(options, stack, list_file: Path):
    """The adapter list follower of `stack` (tritonpkg.serve.adapter_list), over the repository serve owns."""
    from tritonpkg.serve import adapter_list, weights

    repository = stack.repository  # serve's unpacked package: <scratch>/repository, removed at stop
    return adapter_list.Follower(list_file, repository, work=repository.parent / "adapter-list",
                                 weights_root=options.weights_root or weights.default_weights_root(),
                                 own_sha256=adapter_list.file_sha256(options.source),
                                 log=lambda line: err_console.print(line, highlight=False, markup=False))


def _serve_local(options, as_json: bool, triton_home: Path | None = None, adapter_list: Path | None = None) -> None:
    import threading

    from tritonpkg.runtime import ServerStartError
    from tritonpkg.serve import ServingStack

    stop = threading.Event()
    serving = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()
        if not serving.is_set():  # still starting (a vLLM engine takes a minute): abort the start
            raise KeyboardInterrupt

    progress = _Progress(err_console if as_json else console)
    runtime = None
    if triton_home is not None:
        from tritonpkg.runtime.installed import installed_runtime

        runtime = installed_runtime(triton_home)
    follower = None

    def on_event(event: StepEvent) -> None:
        nonlocal follower
        progress(event)
        if adapter_list is not None and event.step.kind == "weights" and event.state in ("done", "warn"):
            follower = _follower(options, stack, adapter_list)  # the served repository is final now
            follower.pending()  # before the OpenAI API opens: readiness waits for the first list

    stack = ServingStack(options, runtime=runtime, on_event=on_event)
    with stop_signals(on_signal):
        try:
            try:
                stack.start()
            except ServerStartError as exc:  # other TritonpkgErrors go through library_errors
                progress.close()
                print_error(exc.message)
                err_console.print(f"full log: {exc.file}", highlight=False, markup=False)
                raise typer.Exit(EXIT_PROBLEMS) from None
            except KeyboardInterrupt:
                progress.close()
                err_console.print("interrupted during start-up: what had started is stopped", highlight=False)
                raise typer.Exit(EXIT_INTERRUPTED) from None
            finally:
                progress.close()
            serving.set()
            _report(stack, as_json)
            if follower is not None:
                follower.start()
            serve_until_stopped(stop, stack.problem)
        finally:
            if follower is not None:
                follower.stop()
            stack.stop()
    if stack.stop_problem:  # the exit status tells the truth about the stop, in one line
        print_error(stack.stop_problem)
        raise typer.Exit(EXIT_PROBLEMS)
    if not as_json:
        console.print("stopped: Triton and every endpoint", highlight=False)


class _Progress:
    """One line per finished start-up step (with its time) and a spinner while a step runs."""

    def __init__(self, out: Console) -> None:
        self.out = out
        self._status: Status | None = None
        self._title = ""

    def __call__(self, event: StepEvent) -> None:
        if event.state == "progress":
            if self._status is not None:
                self._status.update(f"{self._title} ... {event.detail}")
            return
        self.close()
        title = event.step.title
        if event.state == "start":
            self._title = title
            self._status = self.out.status(f"{title} ...")
            self._status.start()
            return
        mark = "[yellow]![/]" if event.state == "warn" else "[green]✓[/]"
        timing = f" [dim]{event.seconds:.2f} s[/]" if event.seconds else ""
        self.out.print(f"{mark} {event.step.kind}{timing}  ", end="", highlight=False)
        self.out.print(f"{title}" + (f": {event.detail}" if event.detail else ""), markup=False, highlight=False,
                       soft_wrap=True)

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


def _report(stack, as_json: bool) -> None:
    from rich.table import Table

    data = stack.endpoints()
    if as_json:
        print_json(data)
        return
    title = f"ready in {data['startup_seconds']} s ({data['execution_mode']}, Triton pid {data['pid']})"
    endpoints = Table("endpoint", "address", header_style="bold", title=title)
    endpoints.add_row("HTTP (KServe v2)", data["http_url"])
    endpoints.add_row("gRPC (KServe v2)", data["grpc_url"])
    served = "Triton + vLLM" if data["triton_metrics_url"] else "vLLM only: Triton's metrics are off"
    endpoints.add_row(f"metrics ({served})", data["metrics_url"] + (" (bearer token)" if data["metrics_auth"] else ""))
    endpoints.add_row("admin key (header admin-key)", data["admin_key_file"] or "-")
    if data["openai_url"]:
        endpoints.add_row("OpenAI API", data["openai_url"])
    console.print(endpoints)
    table = Table("model", "version", "state", header_style="bold")
    for m in data["models"]:
        table.add_row(m["name"], str(m["version"]), f"[green]{m['state']}[/]")
    console.print(table)
    console.print("serving; Ctrl-C or SIGTERM stops everything", highlight=False)
