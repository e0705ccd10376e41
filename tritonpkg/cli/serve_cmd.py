"""`tritonpkg serve REPO`: run the real Triton server on a repository until Ctrl-C / SIGTERM, or print
the `docker run` that serves it in NVIDIA's image on a GPU host."""

from __future__ import annotations

import enum
from pathlib import Path

import typer

from tritonpkg.cli._common import EXIT_PROBLEMS, console, err_console, library_errors, print_json


class RuntimeKind(str, enum.Enum):
    local = "local"
    docker = "docker"


@library_errors()
def serve(
    repo: Path = typer.Argument(..., help="Model repository (a folder of model folders with config.pbtxt)."),
    http_port: int = typer.Option(8000, "--http-port", help="HTTP/REST port (0 picks a free one)."),
    grpc_port: int = typer.Option(8001, "--grpc-port", help="gRPC port (0 picks a free one)."),
    metrics_port: int = typer.Option(8002, "--metrics-port", help="Prometheus /metrics port (0 picks a free one)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (local runtime); 0.0.0.0 for all."),
    runtime: RuntimeKind = typer.Option(RuntimeKind.local, "--runtime",
                                        help="local: run Triton here; docker: print the docker run command."),
    target_release: str | None = typer.Option(None, "--target-release", "-r",
                                              help="Triton release for --runtime docker (default: the toolkit's)."),
    weights: list[Path] = typer.Option([], "--weights", help="Host path of weights to mount (docker; repeatable)."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds to wait for the server to be ready."),
    as_json: bool = typer.Option(False, "--json", help="Print endpoints and models (or the docker command) as JSON."),
) -> None:
    """Serve a model repository in the real Triton server; stop cleanly on Ctrl-C or SIGTERM."""
    if runtime is RuntimeKind.docker:
        _print_docker(repo, target_release, weights, http_port, grpc_port, metrics_port, as_json)
        return
    _serve_local(repo, http_port, grpc_port, metrics_port, host, timeout, as_json)


def _print_docker(repo: Path, release: str | None, weights: list[Path], http: int, grpc: int, metrics: int,
                  as_json: bool) -> None:
    import shlex

    from tritonpkg.compat import default_release
    from tritonpkg.runtime import docker_command

    release = release or default_release()
    argv = docker_command(repo, release, weights=weights, http_port=http, grpc_port=grpc, metrics_port=metrics)
    if as_json:
        print_json({"release": release, "argv": argv, "command": shlex.join(argv)})
    else:
        typer.echo(shlex.join(argv))


def _serve_local(repo: Path, http: int, grpc: int, metrics: int, host: str, timeout: float, as_json: bool) -> None:
    import signal
    import threading

    from tritonpkg.runtime import ServerStartError, TritonServer, ensure_runtime

    stop = threading.Event()
    serving = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()
        if not serving.is_set():  # still starting (a vLLM engine takes a minute): abort the start
            raise KeyboardInterrupt

    # Explicit handlers: a shell starts background jobs with SIGINT ignored, and a closed terminal sends SIGHUP.
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    srv = TritonServer(repo, runtime=ensure_runtime(), http_port=http or None, grpc_port=grpc or None,
                       metrics_port=metrics or None, host=host, startup_timeout=timeout)
    try:
        try:
            srv.start()
        except ServerStartError as exc:  # other RuntimeSetupErrors go through library_errors
            _error(exc.message)
            err_console.print(f"full log: {exc.file}", highlight=False, markup=False)
            raise typer.Exit(EXIT_PROBLEMS) from None
        serving.set()
        _report(srv, as_json)
        while not stop.is_set():
            if not srv.running:
                _error(f"tritonserver exited unexpectedly; last log lines:\n{srv.log_tail(40)}")
                raise typer.Exit(EXIT_PROBLEMS)
            stop.wait(0.5)
    finally:
        srv.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not as_json:
        console.print("tritonserver stopped", highlight=False)


def _error(text: str) -> None:
    """Server logs contain brackets; print them verbatim, not as rich markup."""
    err_console.print("[bold red]error:[/] ", end="")
    err_console.print(text, markup=False, highlight=False, soft_wrap=True)


def _report(srv, as_json: bool) -> None:
    from rich.table import Table

    models = srv.ready_models()
    data = {
        "http_url": srv.http_url, "grpc_url": srv.grpc_url, "metrics_url": srv.metrics_url,
        "pid": srv.pid, "startup_seconds": round(srv.startup_seconds or 0.0, 3),
        "models": [{"name": m["name"], "version": m.get("version"), "state": m["state"]} for m in models],
    }
    if as_json:
        print_json(data)
        return
    endpoints = Table("endpoint", "address", title=f"Triton ready in {data['startup_seconds']} s (pid {srv.pid})",
                      header_style="bold")
    endpoints.add_row("HTTP", srv.http_url)
    endpoints.add_row("gRPC", srv.grpc_url)
    endpoints.add_row("metrics", srv.metrics_url)
    console.print(endpoints)
    table = Table("model", "version", "state", header_style="bold")
    for m in data["models"]:
        table.add_row(m["name"], str(m["version"]), f"[green]{m['state']}[/]")
    console.print(table)
    console.print("serving; Ctrl-C or SIGTERM stops the server", highlight=False)
