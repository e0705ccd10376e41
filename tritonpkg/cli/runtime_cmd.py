"""`tritonpkg runtime install|info`: the local Triton runtime in the user cache."""

from __future__ import annotations

import typer

from tritonpkg.cli._common import console, library_errors, print_json

app = typer.Typer(
    help="The local Triton runtime (Triton 2.51 from nvidia-pytriton + the toolkit's backends).",
    no_args_is_help=True,
)


@app.command("install")
@library_errors()
def install(as_json: bool = typer.Option(False, "--json", help="Print the installed runtime as JSON.")) -> None:
    """Install the server into the cache (once) and refresh the backend directory (every time)."""
    import time

    from tritonpkg.runtime import ensure_runtime

    started = time.monotonic()
    rt = ensure_runtime()
    data = {**rt.to_dict(), "seconds": round(time.monotonic() - started, 3)}
    if as_json:
        print_json(data)
        return
    console.print(f"[green]Triton {rt.version}[/] ready in {data['seconds']} s", highlight=False)
    console.print(f"  server   {rt.server_bin}", highlight=False)
    console.print(f"  backends {rt.backend_dir}: python (stub for Python {rt.python_version})"
                  + "".join(f", {n}" for n in rt.toolkit_backends), highlight=False)


@app.command("info")
@library_errors()
def info(as_json: bool = typer.Option(False, "--json", help="Print the report as JSON.")) -> None:
    """Show where the runtime lives, its version, the Python stub and the backends it serves."""
    from rich.table import Table

    from tritonpkg.runtime import runtime_report

    report = runtime_report()
    if as_json:
        print_json(report)
        return
    src = report["source"]
    table = Table(show_header=False, box=None)
    table.add_row("cache", report["cache_dir"])
    table.add_row("source", f"nvidia-pytriton {src['nvidia_pytriton']} in {src['site']}" if not src["error"]
                  else f"[red]{src['error']}[/]")
    table.add_row("interpreter", f"{report['interpreter']} (Python {report['python_version']})")
    table.add_row("libpython", report["libpython"] or "[red]none in LIBDIR: the stub cannot load this Python[/]")
    if not report["installed"]:
        table.add_row("installed", f"[yellow]no[/]: {report['hint']}")
        console.print(table)
        return
    table.add_row("version", f"Triton {report['version']}")
    table.add_row("server", report["server_bin"])
    table.add_row("backend dir", report["backend_dir"])
    stub = f"Python {report['stub_python']} ({report['python_stub']})"
    if not report["stub_matches_interpreter"]:
        stub += " [yellow]differs from this interpreter: `tritonpkg runtime install` refreshes it[/]"
    table.add_row("python stub", stub)
    console.print(table)
    backends = Table("backend", "kind", "source", "ok", header_style="bold")
    for b in report["backends"]:
        backends.add_row(b["name"], b["kind"], b["source"], "yes" if b["ok"] else "[red]no[/]")
    console.print(backends)
