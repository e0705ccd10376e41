"""`EngineSupervisor`: what `serve` does when a vLLM engine dies while it serves.

The engine's death is seen by the vLLM backend itself (its health poll: EngineCore gone or check_health
failing, every TRITONPKG_VLLM_HEALTH_POLL s), which then unloads its model. That self-unload only works in
Triton's explicit model-control mode, so the start procedure runs Triton in explicit mode with every model
loaded at start (`--load-model=*`) when the operator asks for "none": the model's Triton readiness then falls
with its engine. This thread watches Triton's repository index; a vLLM model that leaves READY without the
supervisor having asked is an engine death. It keeps `alive` (the merged /metrics'
`tritonpkg_engine_alive{model,version}`) and applies the policy: `restart` loads the model again (a fresh
engine), with bounded retries and backoff; `exit` (or restarts exhausted) sets `problem`, which stops the
whole stack with a non-zero status."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

EngineDeathPolicy = Literal["restart", "exit"]
DEFAULT_POLICY: EngineDeathPolicy = "restart"
POLL_S = 0.2
RESTART_ATTEMPTS = 3
RESTART_BACKOFF_S = 2.0  # before the 2nd attempt; doubled for each further one
_BACKEND = re.compile(r'^\s*backend\s*:\s*"vllm"', re.MULTILINE)
_DEATH = re.compile(r"\[vllm\] model '(?P<name>[^']+)' is not ready: (?P<reason>.*?); it was unloaded")


def vllm_models(repository: Path) -> set[str]:
    """The models of `repository` that the toolkit's vLLM backend serves (config.pbtxt's backend "vllm")."""
    names = set()
    for config in repository.glob("*/config.pbtxt"):
        try:
            if _BACKEND.search(config.read_text(encoding="utf-8", errors="replace")):
                names.add(config.parent.name)
        except OSError:
            continue
    return names


@dataclass
class EngineEvent:
    model: str
    kind: Literal["died", "restarting", "restarted", "gave_up"]
    detail: str = ""
    seconds: float = 0.0  # restarted: from the death to ready again


@dataclass
class EngineSupervisor:
    """`server` is a started TritonServer; `models` the vLLM models to watch (all loaded and READY now)."""

    server: Any
    models: set[str]
    policy: EngineDeathPolicy = DEFAULT_POLICY
    attempts: int = RESTART_ATTEMPTS
    backoff: float = RESTART_BACKOFF_S
    poll: float = POLL_S
    on_event: Callable[[EngineEvent], None] = lambda _e: None
    alive: dict[tuple[str, str], bool] = field(default_factory=dict)
    problem: str | None = None
    events: list[EngineEvent] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._versions: dict[str, str] = {}
        self._restarting: set[str] = set()
        self._died_at: dict[str, float] = {}
        self._log_offset = 0

    def start(self) -> EngineSupervisor:
        self._observe(self._index())
        if self.server.log_path is not None and Path(self.server.log_path).exists():
            self._log_offset = Path(self.server.log_path).stat().st_size
        self._thread = threading.Thread(target=self._run, name="tritonpkg-engine-supervisor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """No more restarts from now on (a stop is under way); returns once the watch thread has ended."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)

    # -- what the merged /metrics publishes ------------------------------------------------------
    def exposition(self) -> str:
        lines = [("# HELP tritonpkg_engine_alive 1 while the model's vLLM engine serves (its model READY in "
                  "Triton), 0 from its death until it answers again."),
                 "# TYPE tritonpkg_engine_alive gauge"]
        for (model, version), ok in sorted(self.alive.items()):
            lines.append(f'tritonpkg_engine_alive{{model="{_label(model)}",version="{_label(version)}"}} {int(ok)}')
        return "\n".join(lines) + "\n"

    # -- the watch -------------------------------------------------------------------------------
    def _index(self) -> list[dict]:
        try:
            return list(self.server.repository_index())
        except Exception:  # Triton going away: the stack's own problem() says so
            return []

    def _observe(self, index: list[dict]) -> dict[str, dict]:
        states = {str(m["name"]): m for m in index if m.get("name") in self.models}
        for name in self.models:
            entry = states.get(name)
            if entry is not None and entry.get("version"):
                self._versions[name] = str(entry["version"])
            version = self._versions.get(name, "1")
            self.alive[(name, version)] = entry is not None and entry.get("state") == "READY"
        return states

    def _run(self) -> None:
        while not self._stop.wait(self.poll):
            if not self.server.running:
                return
            states = self._observe(self._index())
            if not states:
                continue
            for name in sorted(self.models - self._restarting):
                entry = states.get(name) or {}
                if entry.get("state") == "READY" or name in self._died_at:
                    continue
                self._died(name, entry)

    def _died(self, name: str, entry: dict) -> None:
        self._died_at[name] = time.monotonic()
        reason = self._death_reason(name) or f"model {entry.get('state', 'gone')} ({entry.get('reason') or '-'})"
        self._emit(EngineEvent(name, "died", reason))
        if self.policy == "exit":
            self.problem = (f"model '{name}': its vLLM engine died ({reason}); --on-engine-death exit stops "
                            "the stack")
            return
        self._restarting.add(name)
        threading.Thread(target=self._restart, args=(name, reason), name=f"tritonpkg-restart-{name}",
                         daemon=True).start()

    def _restart(self, name: str, reason: str) -> None:
        """Load the model again once its unload is done; each failed load waits longer before the next."""
        try:
            error = ""
            for attempt in range(1, self.attempts + 1):
                if not self._wait_unloaded(name):
                    return
                self._emit(EngineEvent(name, "restarting", f"attempt {attempt} of {self.attempts}"))
                ok, error = self.server.load_model(name)
                if self._stop.is_set():
                    return
                if ok:
                    seconds = time.monotonic() - self._died_at.pop(name)
                    self._observe(self._index())
                    self._emit(EngineEvent(name, "restarted", f"attempt {attempt}", seconds))
                    return
                if attempt < self.attempts and self._stop.wait(self.backoff * 2 ** (attempt - 1)):
                    return
            self.problem = (f"model '{name}': its vLLM engine died ({reason}) and {self.attempts} restart(s) "
                            f"failed, the last: {error.splitlines()[0] if error else 'no reason given'}")
            self._emit(EngineEvent(name, "gave_up", self.problem))
        finally:
            self._restarting.discard(name)

    def _wait_unloaded(self, name: str) -> bool:
        """Until Triton has finished the model's unload (a load sent meanwhile would race it)."""
        while not self._stop.is_set():
            entry = next((m for m in self._index() if m.get("name") == name), {})
            if entry.get("state") not in ("READY", "UNLOADING") or not entry:
                return True
            if not self.server.running:
                return False
            self._stop.wait(self.poll)
        return False

    def _death_reason(self, name: str) -> str | None:
        """The backend's own words for the death, from Triton's log (it logs them before unloading)."""
        path = self.server.log_path
        if path is None:
            return None
        try:
            with open(path, "rb") as fh:
                fh.seek(self._log_offset)
                text = fh.read(4 * 1024 * 1024).decode(errors="replace")
        except OSError:
            return None
        found = [m["reason"] for m in _DEATH.finditer(text) if m["name"] == name]
        return found[-1] if found else None

    def _emit(self, event: EngineEvent) -> None:
        self.events.append(event)
        self.on_event(event)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
