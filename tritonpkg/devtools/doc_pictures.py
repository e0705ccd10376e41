"""The docs' pictures, regenerated from real runs: `scripts/gen_docs.py --pictures`.

- SVG captures of the commands' rich output: each command runs for real (a subprocess, on the examples, in
  a scratch folder), with rich told the output is a colour terminal that is not interactive
  (`TTY_COMPATIBLE=1`, `TTY_INTERACTIVE=0`: colours and tables, no live spinners); the captured text is
  printed into rich's own recording console and saved with `Console.save_svg`.
- Benchmark plots (matplotlib, SVG) from the benches' own results files, bench/results/*.json
  (tritonpkg/devtools/bench_plots.py).

Captured: package, validate with a finding, compat, serve's start-up (examples/sentiment-custom, a
Python-backend model that is ready in seconds; stopped with SIGINT once ready), deploy (two versions on the
local target, the second shifted red-black) and status; the deployment is torn down afterwards.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

WIDTH = 104
_CONTROL = re.compile(r"\x1b\[\?25[hl]|\r")


def _env(root: Path, width: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "0", "COLUMNS": str(width), "LINES": "60",
                "PATH": f"{root / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}", "NO_COLOR": ""})
    env.pop("NO_COLOR")
    return env


def _tritonpkg(root: Path) -> str:
    exe = root / ".venv" / "bin" / "tritonpkg"
    return str(exe) if exe.exists() else "tritonpkg"


def run_capture(root: Path, cwd: Path, args: Sequence[str], width: int = WIDTH, expect: int | None = 0,
                timeout: float = 300.0) -> str:
    """Run `tritonpkg ARGS` in `cwd` and return what it printed (stdout and stderr as they came), ANSI colours kept."""
    proc = subprocess.run([_tritonpkg(root), *args], check=False, cwd=cwd, env=_env(root, width),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    if expect is not None and proc.returncode != expect:
        raise RuntimeError(f"tritonpkg {' '.join(args)} exited {proc.returncode}, expected {expect}:\n"
                           f"{proc.stdout}")
    return _CONTROL.sub("", proc.stdout)


def run_until(root: Path, cwd: Path, args: Sequence[str], marker: str, width: int = WIDTH,
              timeout: float = 120.0) -> str:
    """Start `tritonpkg ARGS`, wait for `marker` in its output, then stop it with SIGINT (Ctrl-C) and return
    everything it printed, its shutdown included. The process runs in its own group and is ended by pid."""
    with tempfile.TemporaryFile(mode="w+") as out:
        _run_and_interrupt(root, cwd, args, marker, width, timeout, out)
        out.seek(0)
        return _CONTROL.sub("", out.read())


def _run_and_interrupt(root: Path, cwd: Path, args: Sequence[str], marker: str, width: int, timeout: float,
                       out: Any) -> None:
    proc = subprocess.Popen([_tritonpkg(root), *args], cwd=cwd, env=_env(root, width), stdout=out,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            out.seek(0)
            if marker in out.read():
                break
            time.sleep(0.2)
        else:
            raise RuntimeError(f"tritonpkg {' '.join(args)}: no {marker!r} within {timeout} s")
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def save_svg(text: str, path: Path, title: str, command: str, width: int = WIDTH) -> Path:
    """The captured output as rich's own SVG export, headed by the command line that produced it."""
    from rich.console import Console
    from rich.text import Text

    console = Console(record=True, width=width, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    console.print(Text(f"$ {command}", style="bold"))
    console.print(Text.from_ansi(text.rstrip("\n")))
    path.parent.mkdir(parents=True, exist_ok=True)
    console.save_svg(str(path), title=title)
    return path


def _scratch(root: Path) -> Path:
    work = Path(tempfile.mkdtemp(prefix="tritonpkg-docs-"))
    (work / "examples").symlink_to(root / "examples")
    return work


def captures(root: Path, img: Path) -> list[Path]:
    work = _scratch(root)
    written = []
    try:
        cmd = ["package", "examples/sentiment-custom", "-o", "model_repository"]
        written.append(save_svg(run_capture(root, work, cmd), img / "package.svg", "tritonpkg package",
                                "tritonpkg " + " ".join(cmd)))
        shutil.copytree(work / "model_repository", work / "broken")
        config = work / "broken" / "sentiment" / "config.pbtxt"
        config.write_text(config.read_text().replace("KIND_CPU", "KIND_GPU"))
        written.append(save_svg(run_capture(root, work, ["validate", "broken"], width=140, expect=1),
                                img / "validate-finding.svg", "tritonpkg validate", width=140, command=
                                "sed -i 's/KIND_CPU/KIND_GPU/' broken/sentiment/config.pbtxt; "
                                "tritonpkg validate broken"))
        written.append(save_svg(run_capture(root, work, ["compat"], width=150), img / "compat.svg",
                                "tritonpkg compat", "tritonpkg compat", width=150))
        cmd = ["serve", "model_repository", "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]
        written.append(save_svg(run_until(root, work, cmd, "serving; Ctrl-C"), img / "serve.svg",
                                "tritonpkg serve", "tritonpkg " + " ".join(cmd) + "   # then Ctrl-C"))
        written.extend(_deploy_captures(root, work, img))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return written


def _deploy_captures(root: Path, work: Path, img: Path) -> list[Path]:
    """Two versions of the sentiment example on the local target; the second is shifted red-black."""
    v2 = work / "sentiment-v2"
    shutil.copytree(root / "examples" / "sentiment-custom", v2)
    spec = v2 / "tritonpkg.yaml"
    spec.write_text(spec.read_text().replace("version: 1", "version: 2", 1))
    state = ["--state", "deploy-state"]
    written = []
    try:
        run_capture(root, work, ["deploy", "examples/sentiment-custom", *state])
        cmd = ["deploy", "sentiment-v2", "--min-requests", "0", "--dwell", "0.5", *state]
        written.append(save_svg(run_capture(root, work, cmd), img / "deploy.svg", "tritonpkg deploy",
                                "tritonpkg " + " ".join(cmd)))
        text = run_capture(root, work, ["status", *state], width=132)
        text = re.sub(r"(header admin-key: )\S+", r"\1<the deployment's key>", text)
        written.append(save_svg(text, img / "status.svg", "tritonpkg status",
                                "tritonpkg status --state deploy-state", width=132))
    finally:
        run_capture(root, work, ["deploy", "sentiment", "--teardown", *state], expect=None)
    return written


def generate(root: Path) -> list[Path]:
    from tritonpkg.devtools.bench_plots import plots

    img = root / "docs" / "img"
    return plots(root, img) + captures(root, img)
