"""The docs' pictures, regenerated from real runs: `scripts/gen_docs.py --pictures`.

- SVG captures of the commands' rich output: each command runs for real (a subprocess, on the examples, in
  a scratch folder), with rich told the output is a colour terminal that is not interactive
  (`TTY_COMPATIBLE=1`, `TTY_INTERACTIVE=0`: colours and tables, no live spinners); the captured text is
  printed into rich's own recording console and saved with `Console.save_svg`.
- Benchmark plots (matplotlib, SVG) from the benches' recorded figures in docs/bench/figures.json.

Captured: package, validate with a finding, compat, serve's start-up (examples/sentiment-custom, a
Python-backend model that is ready in seconds; stopped with SIGINT once ready), deploy (two versions on the
local target, the second shifted red-black) and status; the deployment is torn down afterwards.
"""

from __future__ import annotations

import io
import json
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


def plots(root: Path, img: Path) -> list[Path]:
    """Benchmark plots from docs/bench/figures.json (SVG, no timestamps, fixed hash salt)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "tritonpkg-docs", "svg.fonttype": "path", "font.size": 10})
    figures = json.loads((root / "docs" / "bench" / "figures.json").read_text())
    meta: dict[str, object] = {"Date": None,
                              "Creator": f"tritonpkg/devtools/doc_pictures.py, matplotlib {matplotlib.__version__}"}
    img.mkdir(parents=True, exist_ok=True)
    written = []

    c = figures["cancel_poll"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6))
    x = range(len(c["streams"]))
    for i, run in enumerate(c["runs"]):
        off = -0.15 + 0.3 * i
        a1.bar([v + off for v in x], [s / b for s, b in zip(run["tok_s_step"], run["tok_s_send"], strict=True)],
               width=0.28, label=run["name"])
        a2.bar([v + off for v in x],
               [s / b for s, b in zip(run["ttft_p50_step"], run["ttft_p50_send"], strict=True)],
               width=0.28, label=run["name"])
    for ax, title in ((a1, "tokens/s, per-step poll / per-send poll"), (a2, "TTFT p50, per-step / per-send")):
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xticks(list(x), [f"{s} stream{'s' if s > 1 else ''}" for s in c["streams"]])
        ax.set_title(title)
        ax.set_ylim(0, 1.4)
        ax.legend(loc="lower right")
    fig.suptitle("Cancellation poll once per engine step vs before each send (ratio, 1.0 = same)")
    fig.tight_layout()
    written.append(_save(fig, img / "bench-cancel-poll.svg", meta))

    c = figures["cpu_per_token"]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    names = ["Triton path", "vllm serve"]
    bottoms = [0.0, 0.0]
    for i, proc in enumerate(c["processes"]):
        vals = [c["triton"][i], c["vllm_serve"][i]]
        ax.barh(names, vals, left=bottoms, label=proc)
        bottoms = [b + v for b, v in zip(bottoms, vals, strict=True)]
    for i, total in enumerate(bottoms):
        ax.text(total + 0.02, i, f"{total:.3f} ms", va="center")
    ax.set_xlabel("CPU ms per output token (16 streams x 64 tokens)")
    ax.set_xlim(0, max(bottoms) * 1.2)
    ax.legend(ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.25), frameon=False)
    ax.set_title("Where the CPU goes per token, by process")
    fig.tight_layout()
    written.append(_save(fig, img / "bench-cpu-per-token.svg", meta))

    c = figures["omp_spin"]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    n = len(c["series"])
    for i, (label, vals) in enumerate(c["series"].items()):
        ax.bar([v + (i - (n - 1) / 2) * 0.27 for v in range(len(c["tokens"]))], vals, width=0.26, label=label)
    ax.set_xticks(range(len(c["tokens"])), [f"{t} tokens" for t in c["tokens"]])
    ax.set_yscale("log")
    ax.set_ylabel("p50 ms (log)")
    ax.set_title("Served MiniLM embedding, batch 1")
    ax.legend(fontsize=8)
    fig.tight_layout()
    written.append(_save(fig, img / "bench-omp-spin.svg", meta))

    c = figures["materialize"]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for i in range(len(c["sizes"])):
        for j, (key, label) in enumerate((("cold_vs_awscli", "cold, vs awscli's defaults"),
                                          ("like_for_like", "like for like (same parts)"))):
            vals = c[key][i]
            xs = [i * 3 + j + k * 0.12 for k in range(len(vals))]
            ax.scatter(xs, vals, color=f"C{j}", label=label if i == 0 else None, zorder=3)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks([0.15, 3.15], c["sizes"])
    ax.set_yscale("log")
    ax.set_ylabel("speed vs awscli (x, log)")
    ax.set_title("tritonpkg materialize vs aws s3 cp, one point per run")
    ax.legend()
    fig.tight_layout()
    written.append(_save(fig, img / "bench-materialize.svg", meta))
    return written


def _save(fig: object, path: Path, meta: dict[str, object]) -> Path:
    import matplotlib.pyplot as plt

    fig.savefig(path, format="svg", metadata=meta)  # type: ignore[attr-defined]
    plt.close(fig)  # type: ignore[arg-type]
    return path


def generate(root: Path) -> list[Path]:
    img = root / "docs" / "img"
    return plots(root, img) + captures(root, img)
