from __future__ import annotations

import json
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from tritonpkg.cli import app

HEAVY = ("tritonclient", "numpy", "jinja2", "google.protobuf", "vllm", "torch", "tritonpkg.repository",
         "tritonpkg.validate", "tritonpkg.runtime")


def all_command_paths() -> list[list[str]]:
    root = typer.main.get_command(app)
    paths: list[list[str]] = [[]]

    def walk(cmd, prefix: list[str]) -> None:
        for name, sub in getattr(cmd, "commands", {}).items():
            paths.append([*prefix, name])
            walk(sub, [*prefix, name])

    walk(root, [])
    return paths


@pytest.mark.parametrize("path", all_command_paths(), ids=lambda p: " ".join(p) or "tritonpkg")
def test_every_command_has_help(path):
    result = CliRunner().invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_help_imports_no_heavy_module():
    """`tritonpkg --help` stays fast because commands import the library only when they run."""
    code = (
        "import sys\nfrom tritonpkg.cli import app\n"
        "from typer.testing import CliRunner\nCliRunner().invoke(app, ['--help'])\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_commands_that_machines_read_offer_json():
    for path in (["package"], ["validate"], ["compat"], ["compat", "check"], ["runtime", "info"], ["demo"]):
        result = CliRunner().invoke(app, [*path, "--help"])
        assert "--json" in result.output, path


def test_schema_is_json():
    assert "properties" in json.loads(CliRunner().invoke(app, ["schema"]).stdout)


def test_stop_signals_routes_the_stop_signals_and_restores_the_previous_handlers():
    import os
    import signal

    from tritonpkg.cli._common import stop_signals

    seen: list[int] = []
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    def serve_then_fail() -> None:
        for sig in before:
            os.kill(os.getpid(), sig)
        raise RuntimeError("a server failed")

    with pytest.raises(RuntimeError, match="a server failed"), stop_signals(lambda signum, _frame: seen.append(signum)):
        serve_then_fail()
    assert seen == list(before)
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_main_freezes_what_start_up_made_however_the_command_ends(monkeypatch):
    """So the interpreter's last collection does not walk it (60-70 ms of a warm materialize)."""
    import gc

    from tritonpkg import cli

    monkeypatch.setattr(sys, "argv", ["tritonpkg", "--help"])
    gc.unfreeze()
    try:
        with pytest.raises(SystemExit) as done:
            cli.main()
        assert done.value.code == 0 and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
