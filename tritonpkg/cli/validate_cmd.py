"""`tritonpkg validate REPO`: exit 0 when clean (warnings allowed), 1 on errors, 2 on usage errors."""

from __future__ import annotations

from pathlib import Path

import typer

from tritonpkg.cli._common import EXIT_PROBLEMS, EXIT_USAGE, console, err_console, library_errors, print_json


@library_errors(EXIT_USAGE)
def validate(
    repo: Path = typer.Argument(..., help="model repository (a directory of model directories)"),
    target_release: str | None = typer.Option(
        None, "--target-release", "-r", help="Triton release (e.g. 24.10) or 'local' (default: the toolkit's runtime)"),
    contract: Path | None = typer.Option(None, "--contract", help="JSON/YAML requests a frontend sends"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
    no_auto_complete: bool = typer.Option(
        False, "--disable-auto-complete-config",
        help="judge configs as written, as a tritonserver started with this option (or --strict-model-config) does"),
) -> None:
    """Catch before deploy what Triton or vLLM would reject at load time."""
    from tritonpkg.validate import validate_repository

    if not repo.is_dir():
        err_console.print(f"[bold red]error:[/] {repo}: model repository not found", highlight=False)
        raise typer.Exit(EXIT_USAGE)
    report = validate_repository(repo, target_release=target_release, contract=contract,
                                 auto_complete=not no_auto_complete)
    if as_json:
        print_json(report.to_json())
    else:
        _table(report)
    if not report.ok:
        raise typer.Exit(EXIT_PROBLEMS)


def _table(report) -> None:
    from rich.table import Table

    if not report.problems:
        console.print(f"[green]ok[/]: {len(report.models)} model(s), no problems (target {report.target_release})")
        return
    table = Table(show_lines=False)
    for col in ("severity", "where", "model", "field", "message", "expected"):
        table.add_column(col, overflow="fold")
    for p in report.problems:
        sev = "[red]error[/]" if p.severity == "error" else "[yellow]warning[/]"
        table.add_row(sev, p.where(), p.model or "", p.field or "", f"{p.message} [dim]({p.rule})[/]", p.expected or "")
    console.print(table)
    console.print(f"{len(report.errors)} error(s), {len(report.warnings)} warning(s) in {len(report.models)} model(s)")
