from __future__ import annotations

from pathlib import Path

import typer

from tritonpkg.cli._common import console, library_errors, print_json

STEPS = {
    "package": "packaging the spec",
    "validate": "validating the repository",
    "runtime": "preparing the Triton runtime",
    "serve": "bringing the model up as `tritonpkg serve` does (weights, plugins, Triton until every model is ready)",
    "request": "sending the smoke request",
    "stop": "stopping the server",
}


@library_errors()
def demo(
    spec: Path = typer.Argument(Path("examples/tiny-llm"), help="A tritonpkg.yaml or its folder."),
    output: Path = typer.Option(Path("model_repository"), "--output", "-o", help="Model repository to write."),
    timeout: float = typer.Option(300.0, help="Upper bound in seconds on the server's start (a failed model "
                                              "load ends it at once, naming the model)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Package a spec, validate it, serve it in the real Triton, send its smoke request, print the answer."""
    from rich.table import Table

    from tritonpkg import demo as demo_mod

    with console.status("starting") as status:
        result = demo_mod.run(spec, output, on_step=lambda s: status.update(STEPS[s]), startup_timeout=timeout)
    if as_json:
        print_json(result.__dict__)
        return
    console.print(f"[bold]{result.model}[/]: packaged -> validated -> served in Triton -> answered "
                  f"({result.repository})", highlight=False)
    table = Table(header_style="bold")
    table.add_column("step")
    table.add_column("seconds", justify="right")
    for step, secs in result.seconds.items():
        table.add_row(step, f"{secs:.2f}")
    console.print(table)
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    console.print(f"[bold]request[/]: {result.request}", highlight=False)
    for name, value in result.answer.items():
        console.print(f"[bold green]{name}[/]: {value}", highlight=False)
