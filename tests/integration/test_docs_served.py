"""The docs' examples that start servers run as shown. A page's blocks marked `<!-- run: ... -->` run in page
order in one scratch folder (`examples/` linked in), so a served block finds what the page's earlier blocks made:

- `<!-- run: exit N -->` (tests/unit/test_docs_examples.py runs every one of those; here only those before the
  page's last served block): one line at a time, every line exits 0 but the last, which exits N.
- `<!-- run: served, exit 0 -->`: the block as one `bash -e` script (its commands start their own Triton, units,
  HAProxy) exits 0; background jobs it started are stopped after it.
- `<!-- run: served, until "TEXT" -->`: one long-running command, stopped with Ctrl-C (SIGINT to its process
  group, as a terminal sends it) once it printed TEXT; it must then exit 0.
- `<!-- run: served, beside the tiny LLM's Triton -->`: a `served, exit 0` block given TRITON_GRPC,
  TRITONPKG_ADMIN_KEY and REPO of the session's shared Triton + vLLM server (tests/integration/conftest.py's
  `vllm_server`, whose engines start once for every module that uses it) and a free PORT."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tritonpkg.proc.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
BLOCK = re.compile(r"^<!-- run: (.*?) -->\n```bash\n(.*?)\n```", re.DOTALL | re.MULTILINE)
UNTIL = re.compile(r'served, until "([^"]+)"')
BESIDE = "served, beside the tiny LLM's Triton"
SERVED = re.compile(r"^<!-- run: served", re.MULTILINE)
SERVED_PAGES = sorted(p for p in DOCS.rglob("*.md") if SERVED.search(p.read_text(encoding="utf-8")))


def _blocks(page: Path) -> list[tuple[str, list[str]]]:
    text = page.read_text(encoding="utf-8")
    found = [(m.group(1), [ln for ln in m.group(2).splitlines() if ln.strip() and not ln.startswith("#")])
             for m in BLOCK.finditer(text)]
    assert len(found) == text.count("\n<!-- run:"), f"{page}: a `<!-- run: ... -->` not followed by ```bash"
    for kind, lines in found:
        ok = (re.fullmatch(r"exit \d+", kind) or kind in ("served, exit 0", BESIDE)
              or (UNTIL.fullmatch(kind) and len(lines) == 1))
        assert ok, f"{page}: unknown marker `<!-- run: {kind} -->` (or an `until` block of more than one line)"
    return found


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update({"COLUMNS": "120", "VLLM_CPU_KVCACHE_SPACE": "1", **(extra or {})})
    return env


def _script(block: str, cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The block as one script; jobs it left in the background get SIGTERM when it ends (the group is killed
    after, whatever happened)."""
    script = f'set -euo pipefail\ntrap \'kill $(jobs -p) 2>/dev/null || true; wait\' EXIT\n{block}\n'
    proc = subprocess.Popen(["bash", "-c", script], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        _kill_group(proc)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _until(line: str, marker: str, cwd: Path, env: dict[str, str], timeout: float = 180) -> tuple[int, str]:
    with tempfile.TemporaryFile(mode="w+") as out:
        proc = subprocess.Popen(["bash", "-c", line], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        try:
            deadline = time.monotonic() + timeout
            while proc.poll() is None and time.monotonic() < deadline:
                out.seek(0)
                if marker in out.read():
                    os.killpg(proc.pid, signal.SIGINT)
                    break
                time.sleep(0.2)
            code = proc.wait(timeout=60)
        finally:
            _kill_group(proc)
        out.seek(0)
        return code, out.read()


def _run_page(page: Path, work: Path, env: dict[str, str]) -> None:
    (work / "examples").symlink_to(ROOT / "examples")
    name = page.relative_to(DOCS).as_posix()
    blocks = _blocks(page)
    last_served = max(i for i, (kind, _) in enumerate(blocks) if kind.startswith("served"))
    for kind, lines in blocks[:last_served + 1]:  # the plain blocks after it: tests/unit/test_docs_examples.py
        if kind.startswith("exit "):
            expected = int(kind.split()[1])
            for i, line in enumerate(lines):
                want = expected if i == len(lines) - 1 else 0
                proc = subprocess.run(["bash", "-c", line], check=False, cwd=work, env=env, capture_output=True,
                                      text=True, timeout=120)
                assert proc.returncode == want, (f"{name}: `{line}` exited {proc.returncode}, the docs show "
                                                 f"{want}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        elif m := UNTIL.fullmatch(kind):
            code, out = _until(lines[0], m.group(1), work, env)
            assert m.group(1) in out, f"{name}: `{lines[0]}` never printed {m.group(1)!r}\n{out[-3000:]}"
            assert code == 0, f"{name}: `{lines[0]}` exited {code} after Ctrl-C, expected 0\n{out[-3000:]}"
        else:
            proc = _script("\n".join(lines), work, env)
            shown = "\n".join(lines)
            assert proc.returncode == 0, f"{name}: the block\n{shown}\nexited {proc.returncode}\n{proc.stdout[-4000:]}"


def _needs_llm(page: Path) -> bool:
    return any(kind == BESIDE for kind, _ in _blocks(page))


def test_the_docs_have_served_examples() -> None:
    kinds = {kind.split(",")[1].strip().split()[0] for p in SERVED_PAGES for kind, _ in _blocks(p)
             if kind.startswith("served")}
    assert kinds == {"exit", "until", "beside"}, kinds


@pytest.mark.parametrize("page", [p for p in SERVED_PAGES if not _needs_llm(p)],
                         ids=lambda p: p.relative_to(DOCS).as_posix())
def test_served_examples_run_as_shown(page: Path, tmp_path: Path) -> None:
    try:
        _run_page(page, tmp_path, _env())
    finally:  # a deploy the page did not tear down (it failed half-way) stops here
        if (tmp_path / ".tritonpkg" / "deploy").exists():
            subprocess.run(["tritonpkg", "deploy", "sentiment", "--teardown"], cwd=tmp_path, env=_env(),
                           capture_output=True, timeout=120, check=False)


@pytest.mark.parametrize("page", [p for p in SERVED_PAGES if _needs_llm(p)],
                         ids=lambda p: p.relative_to(DOCS).as_posix())
def test_examples_beside_the_tiny_llm_run_as_shown(page: Path, tmp_path: Path, vllm_server, vllm_repo) -> None:
    _run_page(page, tmp_path, _env({"TRITON_GRPC": vllm_server.grpc_url, "TRITONPKG_ADMIN_KEY": vllm_server.admin_key,
                                    "REPO": str(vllm_repo), "PORT": str(free_port())}))
