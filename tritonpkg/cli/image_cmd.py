"""`tritonpkg image build`: the toolkit image of one Triton release (tritonpkg.image)."""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path

import typer

from tritonpkg.cli._common import EXIT_PROBLEMS, err_console, library_errors, print_json

app = typer.Typer(help="Build the toolkit image: a release's NVIDIA Triton + vLLM image with tritonpkg installed and "
                       "`tritonpkg serve` as its entrypoint.",
                  no_args_is_help=True)


@app.command("build")
@library_errors()
def build(
    release: str = typer.Option(..., "--release", "-r", help="Triton release of the base image (a matrix row)."),
    out: Path | None = typer.Option(None, "--output", "-o",
                                    help="Folder for the build context (new or empty; default: a temp folder)."),
    tag: str | None = typer.Option(None, "--tag", "-t", help="Image tag (default: tritonpkg:<version>-<release>)."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan, the context and the docker command as JSON."),
) -> None:
    """Write the build context (Dockerfile + the toolkit's wheel) and run `docker build` where Docker exists;
    elsewhere print the command to run."""
    from tritonpkg.image import docker_build_argv, docker_engine, plan_image, run_build, write_context

    plan = plan_image(release, tag)
    context = out or Path(tempfile.mkdtemp(prefix=f"tritonpkg-image-{plan.release}-"))
    wheel = write_context(plan, context)
    argv = docker_build_argv(plan, context, wheel)
    engine = docker_engine()
    if as_json:
        print_json({**plan.model_dump(), "context": str(context), "wheel": wheel, "argv": argv,
                    "command": shlex.join(argv), "built": engine})
    else:
        err_console.print(f"context: {context} (Dockerfile, {wheel})", highlight=False, markup=False)
        err_console.print(f"backend: {plan.why}", highlight=False, markup=False, soft_wrap=True)
    if not engine:
        if not as_json:
            err_console.print("no Docker engine answers here: run this where one does", highlight=False)
            typer.echo(shlex.join(argv))
        return
    code = run_build(argv)
    if code != 0:
        raise typer.Exit(EXIT_PROBLEMS)
    if not as_json:
        err_console.print(f"built {plan.tag}", highlight=False, markup=False)
