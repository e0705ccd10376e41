"""`tritonpkg frontend`: the OpenAI-compatible API alone, in front of a Triton that runs on its own
(the `separate` execution mode). Runs until Ctrl-C / SIGTERM."""

from __future__ import annotations

import contextlib
from pathlib import Path

import typer

from tritonpkg.cli._common import (
    api_key_file_option,
    api_key_option,
    console,
    err_console,
    library_errors,
    max_request_bytes_option,
    print_json,
    serve_until_stopped,
    stop_signals,
)
from tritonpkg.errors import RuntimeSetupError


@library_errors()
def frontend(
    triton_grpc: str = typer.Option("127.0.0.1:8001", "--triton-grpc", help="Triton's gRPC address, HOST:PORT."),
    port: int = typer.Option(9000, "--port", help="Port of the OpenAI API (0 picks a free one)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on; 0.0.0.0 for all."),
    model_repository: Path | None = typer.Option(
        None, "--model-repository", "-m",
        help="The repository Triton serves: gives each model's tokenizer (chat) and context length."),
    timeout: float = typer.Option(600.0, "--request-timeout", help="Longest one request may take, in seconds."),
    as_json: bool = typer.Option(False, "--json", help="Print the address and models as JSON once listening."),
    triton_admin_key: str | None = typer.Option(
        None, "--triton-admin-key", envvar="TRITONPKG_ADMIN_KEY", show_default=False,
        help="Triton's admin key (`serve --json` prints it; prefer the environment variable): listing the "
             "models needs it."),
    api_key: str | None = api_key_option(),
    api_key_file: Path | None = api_key_file_option(),
    max_request_bytes: int = max_request_bytes_option(),
) -> None:
    """Serve /v1/models, /v1/completions, /v1/chat/completions, /v1/embeddings and /health/ready for the
    models of a running Triton; stop cleanly on Ctrl-C or SIGTERM."""
    import threading

    from tritonpkg.frontend import FrontendServer, FrontendSettings
    from tritonpkg.frontend.auth import exposure_warning, load_api_key

    key = load_api_key(api_key, api_key_file)
    settings = FrontendSettings(triton_grpc_url=triton_grpc, host=host, port=port, request_timeout_s=timeout,
                                model_repository=model_repository.absolute() if model_repository else None,
                                triton_admin_key=triton_admin_key or None, api_key=key,
                                max_request_bytes=max_request_bytes)
    warning = exposure_warning(host, port, key is not None)
    if warning:
        err_console.print(f"[bold yellow]warning:[/] {warning}", highlight=False, soft_wrap=True)
    stop = threading.Event()
    server = FrontendServer(settings)
    with stop_signals(lambda *_: stop.set()):
        try:
            connecting = f"connecting to Triton at {triton_grpc} ..."
            status = contextlib.nullcontext() if as_json else console.status(connecting)
            with status:
                server.start()
            _report(server, as_json)
            serve_until_stopped(stop, lambda: None if server.running else "the frontend stopped unexpectedly")
        finally:
            server.stop()
    if not as_json:
        console.print("frontend stopped", highlight=False)


def _report(server, as_json: bool) -> None:
    import json
    import urllib.error
    import urllib.request

    from rich.table import Table

    key = server.settings.api_key
    headers = {"Authorization": f"Bearer {key.get_secret_value()}"} if key is not None else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(server.url + "/v1/models", headers=headers),  # noqa: S310  the frontend's own http:// URL
                                    timeout=60) as resp:
            models = json.load(resp)["data"]
    except urllib.error.HTTPError as exc:
        reason = json.loads(exc.read() or b"{}").get("error", {}).get("message", str(exc))
        raise RuntimeSetupError(f"the frontend cannot list Triton's models: {reason}", field="--triton-grpc",
                                expected="a running Triton at that gRPC address") from None
    data = {"openai_url": server.url, "triton_grpc_url": server.settings.triton_grpc_url,
            "api_key_required": key is not None,
            "models": [{"id": m["id"], "kind": m["kind"], "version": m["version"]} for m in models]}
    if as_json:
        print_json(data)
        return
    table = Table("model", "kind", "version", header_style="bold",
                  title=f"OpenAI API at {server.url}/v1 (Triton {server.settings.triton_grpc_url})")
    for m in data["models"]:
        table.add_row(m["id"], m["kind"], m["version"])
    console.print(table)
    console.print("serving; Ctrl-C or SIGTERM stops", highlight=False)
