from __future__ import annotations

from pathlib import Path

import typer

from tritonpkg.cli._common import console, library_errors, print_json


@library_errors()
def package(
    spec: Path = typer.Argument(..., help="A tritonpkg.yaml, or a folder holding one."),
    output: Path = typer.Option(..., "--output", "-o", help="Model repository to write into (created if missing)."),
    archive: Path | None = typer.Option(None, "--archive", help="Also write a reproducible model package (.tar.gz)."),
    materialize_to: Path | None = typer.Option(
        None, "--materialize-to", help="First materialize the spec's weights under this root (see `materialize`); "
        "model.json then points at the local copy."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Build a version-pinned Triton model repository entry from a spec (atomic; other versions kept)."""
    from rich.table import Table

    from tritonpkg.repository import package_spec
    from tritonpkg.spec import load_spec

    loaded = load_spec(spec)
    materialized = None
    weights = loaded.weights_location()
    if materialize_to is not None and weights:
        from tritonpkg.storage import materialize

        materialized = materialize(weights, materialize_to)
        source = loaded.source
        loaded = loaded.model_copy(update={"weights": str(materialized.path)})
        loaded._source = source
    result = package_spec(loaded, output, archive=archive)
    if as_json:
        print_json({
            "repository": str(result.repository),
            "models": result.models,
            "version": result.version,
            "files": result.files,
            "archive": str(result.archive) if result.archive else None,
            "weights": str(materialized.path) if materialized else loaded.weights_location(),
        })
        return
    table = Table(title=f"packaged {', '.join(result.models)} v{result.version} into {result.repository}",
                  header_style="bold")
    table.add_column("file")
    table.add_column("sha256")
    for path, digest in sorted(result.files.items()):
        table.add_row(path, digest[:16])
    console.print(table)
    if result.archive:
        console.print(f"archive: {result.archive}", highlight=False)
    if materialized:
        console.print(f"weights: {materialized.path}", highlight=False)
