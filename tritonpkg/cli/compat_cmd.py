from __future__ import annotations

import typer

from tritonpkg.cli._common import EXIT_PROBLEMS, console, library_errors, print_json

app = typer.Typer(help="The compatibility matrix: Triton release -> server, Python, vLLM, numpy rule, backend imports.")


@app.callback(invoke_without_command=True)
def show(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print the matrix as JSON."),
) -> None:
    """Print the matrix (when no subcommand is given)."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.table import Table

    from tritonpkg import compat

    rows = [
        {
            **r.model_dump(),
            "logits_processor_gpu": compat.logits_processor_interface(r.vllm_base, "gpu") if r.vllm_base else None,
            "backend_imports_list": compat.backend_imports(r.backend_imports) if r.backend_imports else None,
            "engine_args": _engine_args_source(r.vllm_base),
        }
        for r in compat.releases()
    ]
    if as_json:
        print_json({"toolkit": compat.toolkit(), "releases": rows})
        return
    table = Table(title="Triton vllm-python-py3 releases", header_style="bold")
    for col in ("release", "server", "python", "vLLM", "stub numpy", "backend imports", "logits procs (GPU)",
                "engine args checked by"):
        table.add_column(col)
    for r in rows:
        table.add_row(*(r[k] or "unknown" for k in ("release", "server_version", "python", "vllm", "stub_numpy",
                                                     "backend_imports", "logits_processor_gpu")),
                      r["engine_args"] if r["engine_args"].startswith("vllm-") else "no snapshot")
    console.print(table)
    tk = compat.toolkit()
    console.print(
        f"toolkit pins: local runtime Triton {tk['local_runtime']['server_version']} "
        f"({tk['local_runtime']['package']}), vLLM {tk['vllm']['version']} "
        f"({tk['vllm']['gpu_package']} | {tk['vllm']['cpu_package']}), numpy {tk['vllm']['numpy']}",
        highlight=False,
    )


def _engine_args_source(vllm) -> str:
    """The snapshot validate -r judges this vLLM's engine arguments by, or why there is none."""
    from tritonpkg import compat
    from tritonpkg.compat.engine_args import load_snapshot, snapshot_path

    if vllm is None:
        return "none: the release does not publish its vLLM"
    if load_snapshot(str(vllm)) is not None:
        return snapshot_path(str(vllm)).name
    return f"none: {compat.engine_args_unavailable(vllm) or 'not recorded'}"


@app.command("check")
@library_errors()
def check(
    target_release: str = typer.Option(..., "--target-release", "-r", help="Triton release (e.g. 24.10) or 'local'."),
    as_json: bool = typer.Option(False, "--json", help="Print mismatches as JSON."),
) -> None:
    """Check this environment (installed vLLM, numpy, Python) against a release; exit 1 on any mismatch."""
    from rich.table import Table

    from tritonpkg import compat

    env = compat.current_environment()
    problems = compat.check_environment(target_release, env)
    if as_json:
        print_json({"release": target_release, "environment": env,
                    "required": compat.required_profile(target_release),
                    "mismatches": [p.model_dump() for p in problems]})
    elif not problems:
        console.print(f"[green]environment matches {target_release}[/]: {env}")
    else:
        table = Table(title=f"mismatches against {target_release}", header_style="bold")
        for col in ("component", "installed", "required", "consequence"):
            table.add_column(col)
        for p in problems:
            table.add_row(p.component, p.installed or "(not installed)", p.required, p.consequence)
        console.print(table)
    if problems:
        raise typer.Exit(EXIT_PROBLEMS)
