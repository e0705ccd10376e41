"""Issue 30, item 5: a start-up of Triton with the vLLM backend either completes or fails with a clear error.

Seen before: the backend logged "engine started", Triton never logged the model loaded, and the start waited
out its timeout. Each repetition here starts tritonserver on the tiny LLM (model control "none", as `serve`
runs it), answers one request, and stops it with exit 0. A start that logs "engine started" and is not ready
within TRITONPKG_TEST_START_HANG_S is declared hung: the Python stacks of every stub thread (the backend's
SIGUSR2 faulthandler, into the server log) and the native stacks of tritonserver and the stub (gdb -batch)
are written to `stacks.txt` before the server is killed, and the test fails naming that file.
TRITONPKG_TEST_START_REPS (default 1: the suite's clean start; the frozen-stub test below reproduces the
cause on every run) sets the number of starts; issue 30 asks for 20 by hand.

The cause, from those stacks (backends/vllm/startup_guard.py): Triton gives up on a stub whose health beat
missed one second during its initialize and then waits for it to exit without killing it. The last test makes
that happen on purpose by freezing the stub for a few seconds while its engine starts."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.repositories import package_tiny_llm

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MODEL = "tiny_llm"
REPS = int(os.environ.get("TRITONPKG_TEST_START_REPS", "1"))
HANG_AFTER_S = float(os.environ.get("TRITONPKG_TEST_START_HANG_S", "90"))  # engine started, model not loaded
START_BOUND_S = float(os.environ.get("TRITONPKG_TEST_START_BOUND_S", "600"))  # the whole start
ENGINE_STARTED = re.compile(r"\[vllm\] model '[^']+': engine started in ([0-9.]+) s")
STUB = "triton_python_backend_stub"


@pytest.fixture(scope="module")
def repo(tmp_path_factory, tiny_llm_weights):
    return package_tiny_llm(tmp_path_factory.mktemp("vllm-startup"), tiny_llm_weights)


def capture_stacks(server_pid: int, log: Path, out: Path) -> str:
    """Python stacks of the stubs (SIGUSR2 -> the backend's faulthandler -> the server log), then gdb's
    native stacks of tritonserver and every process under it; all of it into `out`."""
    import psutil

    root = psutil.Process(server_pid)
    procs = [root, *root.children(recursive=True)]
    before = log.stat().st_size
    for proc in procs:
        try:
            if proc.name().startswith(STUB[:15]):
                os.kill(proc.pid, signal.SIGUSR2)
        except (psutil.Error, OSError):
            pass
    time.sleep(2.0)
    with open(log, "rb") as f:
        f.seek(before)
        parts = ["=== Python stacks (faulthandler, from the server log)\n" + f.read().decode(errors="replace")]
    gdb = shutil.which("gdb")
    for proc in procs:
        try:
            title = f"=== pid {proc.pid} {proc.name()} {' '.join(proc.cmdline())[:200]}"
        except psutil.Error:
            continue
        if gdb is None:
            parts.append(title + "\n(no gdb on this host)")
            continue
        # The interpreter's gdb extension (py-bt) loads where the host has it; native frames either way.
        run = subprocess.run([gdb, "-batch", "-iex", "set auto-load safe-path /", "-p", str(proc.pid),
                              "-ex", "set pagination off", "-ex", "info threads", "-ex", "thread apply all bt",
                              "-ex", "thread apply all py-bt"],
                             capture_output=True, text=True, timeout=120, check=False)
        parts.append(f"{title}\n{run.stdout}{run.stderr[-2000:]}")
    text = "\n\n".join(parts)
    out.write_text(text)
    return text


class HangWatch(threading.Thread):
    """Declares the start hung once the engine has started and the server is still not ready HANG_AFTER_S
    later; captures the stacks and kills the server, so the start fails at once instead of at its bound."""

    def __init__(self, server, log: Path, out: Path) -> None:
        super().__init__(name="hang-watch", daemon=True)
        self.server, self.log, self.out = server, log, out
        self.ready = threading.Event()
        self.engine_s: float | None = None
        self.stacks: str | None = None

    def run(self) -> None:
        engine_seen = None
        while not self.ready.wait(1.0):
            if engine_seen is None and self.log.exists():
                found = ENGINE_STARTED.search(self.log.read_text(errors="replace"))
                if found:
                    engine_seen, self.engine_s = time.monotonic(), float(found.group(1))
            pid = self.server.pid
            if engine_seen is not None and pid is not None and time.monotonic() - engine_seen > HANG_AFTER_S:
                self.stacks = capture_stacks(pid, self.log, self.out)
                os.killpg(pid, signal.SIGKILL)
                return


def generate(server) -> tuple[int, dict]:
    body = {"text_input": "hello", "parameters": {"max_tokens": 3, "temperature": 0}}
    req = urllib.request.Request(f"{server.http_url}/v2/models/{MODEL}/generate", data=json.dumps(body).encode(),
                                 method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


@pytest.mark.parametrize("rep", range(REPS))
def test_start_up_completes_and_the_server_stops_cleanly(repo, tmp_path, rep):
    from tritonpkg.runtime import ServerStartError, TritonServer, ensure_runtime

    log, stacks = tmp_path / "tritonserver.log", tmp_path / "stacks.txt"
    server = TritonServer(repo, runtime=ensure_runtime(), startup_timeout=START_BOUND_S, log_path=log,
                          env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    watch = HangWatch(server, log, stacks)
    watch.start()
    began = time.monotonic()
    failure: ServerStartError | None = None
    code = None
    try:
        try:
            server.start()
        except ServerStartError as exc:
            failure = exc
        finally:
            watch.ready.set()
            watch.join(timeout=300)
        assert watch.stacks is None, (f"start {rep} hung: engine started in {watch.engine_s} s, model not loaded "
                                      f"{HANG_AFTER_S:g} s later; stacks in {stacks}\n{watch.stacks[-12000:]}")
        assert failure is None, str(failure)
        ready_s = time.monotonic() - began
        status, body = generate(server)
        assert status == 200 and body.get("text_output"), body
        code = server.stop()
    finally:
        if server.running:
            server.stop(grace=5.0)
    text = log.read_text(errors="replace")
    # Triton's own lines say why it exited non-zero; the engine's shutdown tracebacks would crowd them out.
    triton_lines = [line for line in text.splitlines() if not line.startswith("(") and "[core.py" not in line]
    assert code == 0, "\n".join(triton_lines[-60:])
    print(f"[start {rep}] ready in {ready_s:.1f} s (engine {watch.engine_s} s), stopped with exit 0")


def test_a_start_up_triton_gives_up_on_fails_with_its_reason_instead_of_hanging(repo, tmp_path):
    """Freeze the instance's stub for 3 s while its engine starts (what a starved CPU does to its 300 ms health
    beat): Triton declares it not healthy and waits for it to exit. Without the backend's startup guard the
    stub lived on, finished its initialize and the start never ended (the hang watch catches that here)."""
    import psutil

    from tritonpkg.runtime import ServerStartError, TritonServer, ensure_runtime

    log, stacks = tmp_path / "tritonserver.log", tmp_path / "stacks.txt"
    server = TritonServer(repo, runtime=ensure_runtime(), startup_timeout=START_BOUND_S, log_path=log,
                          env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    watch = HangWatch(server, log, stacks)
    frozen: list[float] = []

    def freeze() -> None:
        deadline = time.monotonic() + START_BOUND_S
        while time.monotonic() < deadline:
            time.sleep(0.5)
            if server.pid is None or not log.exists():
                continue
            if f"TRITONBACKEND_ModelInstanceInitialize: {MODEL}_0_0" not in log.read_text(errors="replace"):
                continue
            stubs = [p for p in psutil.Process(server.pid).children()
                     if p.name().startswith(STUB[:15]) and f"/{MODEL}/" in " ".join(p.cmdline())]
            if stubs:
                time.sleep(2.0)  # inside initialize: the engine is starting
                stubs[0].suspend()
                time.sleep(3.0)
                stubs[0].resume()
                frozen.append(time.monotonic())
                return

    freezer = threading.Thread(target=freeze, daemon=True)
    watch.start()
    freezer.start()
    try:
        with pytest.raises(ServerStartError) as failed:
            server.start()
    finally:
        watch.ready.set()
        watch.join(timeout=300)
        freezer.join(timeout=10)
        if server.running:
            server.stop(grace=5.0)
    assert watch.stacks is None, f"the start-up hung; stacks in {stacks}\n{watch.stacks[-12000:]}"
    assert frozen, "the stub was never frozen"
    text = log.read_text(errors="replace")
    assert f"Stub process '{MODEL}_0_0' is not healthy" in text, text[-4000:]
    assert "Triton gave up on this instance during its start-up" in text, text[-4000:]
    assert "engine started" not in text  # it ended at once, not after its engine came up
    print(f"[freeze] start failed {time.monotonic() - frozen[0]:.1f} s after the stub was resumed: {failed.value}")
