"""What every command shares: consoles, JSON output, and turning library errors into exit codes."""

from __future__ import annotations

import contextlib
import functools
import json
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import typer
from rich.console import Console

from tritonpkg.errors import TritonpkgError

console = Console()
err_console = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])

EXIT_PROBLEMS = 1
EXIT_USAGE = 2


DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024


def api_key_option() -> Any:
    return typer.Option(
        None, "--api-key", envvar="TRITONPKG_API_KEY", show_default=False,
        help="Require 'Authorization: Bearer KEY' on every /v1 route of the OpenAI API (/health stays open). "
             "Prefer the environment variable or --api-key-file: a command line is visible to other users.")


def api_key_file_option() -> Any:
    return typer.Option(None, "--api-key-file",
                        help="Read the OpenAI API key from FILE, which only its owner may read (chmod 600).")


def max_request_bytes_option() -> Any:
    return typer.Option(DEFAULT_MAX_REQUEST_BYTES, "--max-request-bytes", min=1024,
                        help="Largest OpenAI request body; larger ones get a 413.")


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def library_errors(exit_code: int = EXIT_PROBLEMS) -> Callable[[F], F]:
    """Turn a TritonpkgError into one clear message on stderr and `exit_code`; anything else is a bug."""

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except TritonpkgError as exc:
                err_console.print(f"[bold red]error:[/] {exc.render()}", highlight=False, soft_wrap=True)
                raise typer.Exit(exit_code) from None

        return wrapper  # type: ignore[return-value]

    return deco


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def stop_signals(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """Route SIGINT, SIGTERM and SIGHUP to `handler` while a server runs, and restore the previous handlers.
    Explicit handlers because a shell starts background jobs with SIGINT ignored, and a closed terminal
    sends SIGHUP."""
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def serve_until_stopped(stop: threading.Event, problem: Callable[[], str | None]) -> None:
    """Block until `stop` is set (a signal handler sets it); exit 1 with the message as soon as `problem()`
    reports one (a child died), so a supervisor restarts us instead of finding a silent shell."""
    while not stop.is_set():
        message = problem()
        if message:
            print_error(message)
            raise typer.Exit(EXIT_PROBLEMS)
        stop.wait(0.5)


def print_error(text: str) -> None:
    """Server logs contain brackets; print them verbatim, not as rich markup."""
    err_console.print("[bold red]error:[/] ", end="")
    err_console.print(text, markup=False, highlight=False, soft_wrap=True)
