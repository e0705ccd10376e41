"""`tritonpkg bench embeddings`: the embedding-serving matrix against its baselines, in one run."""

from __future__ import annotations

from dataclasses import asdict

import typer

from tritonpkg.cli._common import EXIT_USAGE, console, err_console, library_errors, print_json

app = typer.Typer(help="Benchmarks that compare the toolkit's serving paths with their baselines in the same run.")

SYSTEMS = ("tritonpkg", "floor", "vllm", "infinity")


@app.command("embeddings")
@library_errors()
def embeddings(
    quick: bool = typer.Option(False, "--quick", help="Fewer repetitions (minutes instead of tens of minutes)."),
    systems: str = typer.Option(",".join(SYSTEMS), "--systems",
                                help="Comma-separated: tritonpkg, floor (in-process sentence-transformers), vllm, "
                                     "infinity."),
    install_baselines: bool = typer.Option(False, "--install-baselines",
                                           help="Install infinity-emb into its own virtualenv first."),
    dtype: str = typer.Option("float32", "--dtype", help="Precision every system computes in: float32 or bfloat16 "
                              "(bfloat16 pays off on CPUs with AMX or AVX512-BF16)."),
    settle: float = typer.Option(1.2, "--settle", min=0.0, help="Idle seconds before each system's round: vLLM's "
                                 "shared-memory readers spin for ~1 s after a burst, slowing the next system "
                                 "on a small machine (0: back to back)."),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as JSON instead of a table."),
) -> None:
    """Latency, scoring, throughput and concurrency on all-MiniLM-L6-v2, with ratios to each baseline.

    Every system is started first; each scenario then runs them in alternating rounds."""
    from tritonpkg.benchmarks import embeddings as bench

    chosen = tuple(s.strip() for s in systems.split(",") if s.strip())
    unknown = [s for s in chosen if s not in SYSTEMS]
    if unknown or not chosen:
        err_console.print(f"[bold red]error:[/] --systems: unknown {', '.join(unknown) or '(none given)'} "
                          f"(expected some of {', '.join(SYSTEMS)})")
        raise typer.Exit(EXIT_USAGE)
    if dtype not in ("float32", "bfloat16"):
        err_console.print(f"[bold red]error:[/] --dtype: {dtype!r} (expected float32 or bfloat16)")
        raise typer.Exit(EXIT_USAGE)
    if install_baselines and "infinity" in chosen and not bench.infinity_installed():
        bench.install_infinity(err_console.print)
    settings = bench.Settings(quick=quick, systems=chosen, log=err_console.print, dtype=dtype,
                              settle=settle)
    rows, skipped, bound = bench.run(settings, bench.minilm_weights())
    if as_json:
        print_json({"dtype": dtype, "rows": [asdict(r) for r in rows], "skipped": skipped,
                    "ceiling": {**asdict(bound), "embeddings_per_s": bound.embeddings_per_s}})
    else:
        from rich.console import Console

        wide = console if console.is_terminal and console.width >= 170 else Console(width=170)  # 9 columns
        wide.print(bench.table(rows, skipped, dtype, bound))
