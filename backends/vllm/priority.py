"""The engine processes' CPU priority on a CPU-only host.

vLLM's EngineCore and its workers hand each step over a shared-memory ring whose readers busy-wait
(`sched_yield`) for a second after every message, so while requests flow both processes are always
runnable. Where they share the cores with everything else (a CPU-only host), the response path (this
stub, tritonserver, an OpenAI frontend, the clients) waits behind that spin for every wake-up. At a higher
nice value the spin only takes CPU nobody else asks for, and the engine's own compute still gets every
idle cycle. Measured on 2 cores (five A/B runs, backends/vllm/README.md): p50 of 8 concurrent tiny-model
requests 2-14% lower straight to Triton and 5-13% lower through the OpenAI frontend in all five; at one
request, no change beyond the noise. On a GPU host the engine feeds the GPU and the cores are rarely all
busy, so there the default leaves the priority alone.

Raising nice needs no privilege, lowering it does, so this only ever raises it."""

from __future__ import annotations

import os

ENV = "TRITONPKG_VLLM_ENGINE_NICE"
CPU_DEFAULT = 10
MAX_NICE = 19


def engine_niceness(setting: str | None, on_cpu: bool) -> int:
    """`TRITONPKG_VLLM_ENGINE_NICE`: unset or "auto" -> 10 on a CPU-only vLLM platform, else 0; or 0-19."""
    if setting is None or setting.strip().lower() in ("", "auto"):
        return CPU_DEFAULT if on_cpu else 0
    try:
        value = int(setting)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_NICE:
        raise ValueError(f"{ENV}={setting!r}: expected 'auto' or a nice value from 0 to {MAX_NICE}")
    return value


def lower_engine_priority(niceness: int, parent: int | None = None) -> list[int]:
    """Every thread of every process under `parent` (this process) to at least `niceness`; threads they
    start later inherit it. A thread that is already nicer keeps its value. Returns the processes changed."""
    import psutil

    changed: list[int] = []
    if niceness <= 0:
        return changed
    for proc in psutil.Process(parent).children(recursive=True):
        try:
            threads = [t.id for t in proc.threads()]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        touched = False
        for tid in threads:
            try:
                if os.getpriority(os.PRIO_PROCESS, tid) < niceness:
                    os.setpriority(os.PRIO_PROCESS, tid, niceness)
                    touched = True
            except (ProcessLookupError, PermissionError):
                continue
        if touched:
            changed.append(proc.pid)
    return changed
