from __future__ import annotations

import typer

app = typer.Typer(help="The local Triton runtime (Triton 2.51 from nvidia-pytriton + the toolkit's backends).")
