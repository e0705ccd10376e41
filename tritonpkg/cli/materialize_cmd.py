"""`tritonpkg materialize SOURCE --to ROOT` and `tritonpkg materialize gc ROOT --keep N`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup

from tritonpkg.cli._common import EXIT_USAGE, console, library_errors, print_json
from tritonpkg.errors import SpecError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)


class _SourceFirst(TyperGroup):
    """`materialize SOURCE ...` runs the `copy` command; `materialize gc ...` runs gc."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["copy", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(cls=_SourceFirst, no_args_is_help=True,
                  help="Copy weights to fast storage as ROOT/<model>/<revision>/ (verified, resumable, never "
                       "partial): `tritonpkg materialize SOURCE --to ROOT`; `tritonpkg materialize gc ROOT --keep N`.")


def parse_size(text: str, option: str) -> int:
    """'8MiB', '16M', '1048576' -> bytes (binary units)."""
    m = _SIZE.match(text)
    if not m:
        raise typer.BadParameter(f"{text!r} is not a size; expected e.g. 8MiB, 64M, 1048576", param_hint=option)
    unit = (m.group(2) or "b").lower()[0]
    return int(float(m.group(1)) * {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[unit])


@app.command("copy")
@library_errors()
def copy(
    source: str = typer.Argument(..., help="s3://bucket/prefix, hf://org/name@revision, a local folder, an fsspec "
                                           "URL, or a tritonpkg.yaml (its weights, named after its model)."),
    to: Path = typer.Option(..., "--to", help="Destination root (e.g. an FSx mount): ROOT/<model>/<revision>/."),
    name: str | None = typer.Option(None, "--name", help="Model folder name (default: from the source)."),
    revision: str | None = typer.Option(None, "--revision", help="Revision folder name (default: the Hub commit or "
                                        "a digest of the listing); for hf:// the revision when the URL has none."),
    concurrency: int = typer.Option(8, "--concurrency", min=1, max=256, help="Parallel ranged reads."),
    part_size: str = typer.Option("auto", "--part-size", help="Bytes per ranged read and resume unit; auto: the "
                                  "listing split over the threads, within 8-64 MiB."),
    max_bandwidth: str | None = typer.Option(None, "--max-bandwidth", help="Cap in bytes/s, e.g. 200MiB."),
    hf_cache: Path | None = typer.Option(None, "--hf-cache", help="Read hf:// from this local HF cache (offline)."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary (bytes, files, seconds, MB/s, skipped)."),
) -> None:
    """Materialize SOURCE under ROOT: parallel ranged downloads, sha256 while streaming, resume after a kill,
    one download per revision across concurrent runs, READY written last, atomic rename into place."""
    from tritonpkg.storage import materialize

    source, name = _from_spec(source, name)
    size = None if part_size.strip().lower() == "auto" else parse_size(part_size, "--part-size")
    cap = parse_size(max_bandwidth, "--max-bandwidth") if max_bandwidth else None
    kwargs: dict[str, Any] = {"name": name, "revision": revision, "concurrency": concurrency, "part_size": size,
                              "hf_cache": hf_cache, "max_bandwidth": cap}
    if as_json or not console.is_terminal:
        result = materialize(source, to, **kwargs)
    else:
        result = _with_progress(source, to, kwargs)
    if as_json:
        print_json(result.summary())
        return
    how = "already materialized" if result.reused else (
        f"{result.bytes_downloaded / 1e6:.1f} MB downloaded in {result.seconds:.1f} s ({result.mb_per_s:.1f} MB/s), "
        f"{result.bytes_resumed / 1e6:.1f} MB resumed, {result.files_skipped} file(s) reused")
    console.print(f"[green]ready:[/] {result.path}  ({result.files} files, {result.bytes_total / 1e6:.1f} MB; {how})",
                  highlight=False)


def _from_spec(source: str, name: str | None) -> tuple[str, str | None]:
    """A spec (file, or folder holding tritonpkg.yaml) stands for its weights, named after its model."""
    path = Path(source)
    spec_file = path / "tritonpkg.yaml" if path.is_dir() else path
    if not (spec_file.is_file() and spec_file.suffix in (".yaml", ".yml")):
        return source, name
    from tritonpkg.spec import load_spec

    spec = load_spec(spec_file)
    location = spec.weights_location()
    if location is None:
        raise SpecError("the spec names no weights to materialize", file=spec_file, field="weights",
                        expected="a local path, s3://bucket/prefix or hf://org/name@revision")
    return location, name or spec.name


def _with_progress(source: str, to: Path, kwargs: dict):
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    from tritonpkg.storage import materialize

    with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), TimeRemainingColumn(), console=console, transient=True) as bar:
        task = bar.add_task(source, total=None)
        return materialize(source, to, progress=lambda done, total: bar.update(task, completed=done, total=total),
                           **kwargs)


@app.command("gc")
@library_errors()
def gc(
    root: Path = typer.Argument(..., help="The --to ROOT of materialize."),
    keep: int = typer.Option(2, "--keep", help="Revisions to keep per model (the latest is always kept)."),
    model: str | None = typer.Option(None, "--model", help="Only this model folder."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would be removed; remove nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Remove old revisions: keep the newest N per model, never the latest, never one in use (locked)."""
    from tritonpkg.storage import gc as run_gc

    if keep < 1:
        console.print("[red]error:[/] --keep must be at least 1")
        raise typer.Exit(EXIT_USAGE)
    result = run_gc(root, keep=keep, model=model, dry_run=dry_run)
    if as_json:
        print_json({"removed": result.removed, "kept": result.kept, "in_use": result.in_use,
                    "freed_bytes": result.freed_bytes, "dry_run": dry_run})
        return
    verb = "would remove" if dry_run else "removed"
    for label in result.removed:
        console.print(f"{verb} {label}", highlight=False)
    for label in result.in_use:
        console.print(f"kept {label} (in use)", highlight=False)
    console.print(f"{verb} {len(result.removed)} revision(s), {result.freed_bytes / 1e6:.1f} MB; "
                  f"kept {len(result.kept) + len(result.in_use)}", highlight=False)
