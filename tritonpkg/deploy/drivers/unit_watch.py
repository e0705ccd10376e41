"""The engine supervision of a detached local unit: `tritonpkg serve` supervises its own Triton (serve.supervisor),
but a unit the CLI leaves running outlives that process. This small process, started beside the unit and recorded in
its state, runs the same EngineSupervisor against the running tritonserver over its admin API: `restart` loads a
model whose engine died again, `exit` (or restarts exhausted) stops the unit the graceful way (its leader alone) so
HAProxy's checks and `status` see it gone. Each event goes to the unit's engine file, which `deploy status` reads
(engine_state). `Watchers` is the local driver's side: start one beside a detached unit, stop it before the unit.

Run as `python -m tritonpkg.deploy.drivers.unit_watch WATCH_JSON` (WatchOptions, written by the local driver)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from tritonpkg import boundedio
from tritonpkg.proc import rest
from tritonpkg.proc.group import process_identity
from tritonpkg.runtime import admin
from tritonpkg.serve.supervisor import DEFAULT_POLICY, EngineDeathPolicy, EngineEvent, EngineSupervisor

if TYPE_CHECKING:
    from tritonpkg.deploy.driver import Endpoints
    from tritonpkg.proc.group import ProcessGroup

ENGINE_FILE = "engine.json"  # under the unit's folder: each model's engine state, as the watcher last saw it
MAX_ENGINE_FILE = 64 * 1024
STOP_GRACE_S = 5.0  # a watcher ends at once on SIGTERM


class WatchOptions(BaseModel):
    http_url: str
    admin_key_dir: Path = Field(description="the deployment's folder, where its admin key is kept")
    pgid: int = Field(description="the unit's tritonserver (its group's leader)")
    pg_start: int
    pg_exe: str
    models: list[str] = Field(description="the vLLM models to watch (READY when the unit started)")
    policy: EngineDeathPolicy = DEFAULT_POLICY
    log: Path | None = Field(default=None, description="Triton's log: the backend's words for a death")
    engine_file: Path
    stop_grace: float = 30.0


class AttachedServer:
    """What EngineSupervisor needs of a tritonserver this process did not start: its index, a load, whether the
    recorded leader still runs."""

    def __init__(self, o: WatchOptions) -> None:
        self.o = o
        self.http_url = o.http_url
        self.log_path = o.log
        self.headers = admin.http_headers(admin.read_key(o.admin_key_dir) or "")

    @property
    def running(self) -> bool:
        return process_identity(self.o.pgid) == (self.o.pg_start, self.o.pg_exe)

    def repository_index(self) -> list[dict]:
        code, body = rest.request("POST", f"{self.http_url}/v2/repository/index", headers=self.headers)
        if code != 200:
            raise RuntimeError(rest.error_text(body) or "no answer")
        return list(json.loads(body))

    def load_model(self, name: str) -> tuple[bool, str]:
        from urllib.parse import quote

        code, body = rest.request("POST", f"{self.http_url}/v2/repository/models/{quote(name, safe='')}/load",
                                  timeout=600.0, headers=self.headers)
        if code == 0:
            return False, f"no answer from {self.http_url}"
        return code == 200, "" if code == 200 else rest.error_text(body)


def write_engine_file(path: Path, states: dict[str, dict[str, Any]]) -> None:
    """Replaced whole (a rename), so a reader never sees half of it."""
    staged = path.with_name(f".{path.name}.next")
    staged.write_text(json.dumps(states, indent=1) + "\n")
    os.replace(staged, path)


def read_engine_file(path: Path) -> dict[str, dict[str, Any]]:
    """The watcher's last word per model; {} when there is none (or it is unreadable)."""
    try:
        data = json.loads(boundedio.read_file(path, MAX_ENGINE_FILE))
    except (OSError, ValueError):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


def watch(o: WatchOptions, stop: threading.Event) -> int:
    """Supervise until `stop` (SIGTERM: the unit is being retired) or the unit is gone; 1 when the policy stopped
    the unit, else 0."""
    server = AttachedServer(o)
    states: dict[str, dict[str, Any]] = {m: {"state": "alive", "at": time.time()} for m in o.models}

    def on_event(event: EngineEvent) -> None:
        kind = {"died": "dead", "restarting": "restarting", "restarted": "alive", "gave_up": "dead"}[event.kind]
        states[event.model] = {"state": kind, "event": event.kind, "detail": event.detail, "at": time.time()}
        print(f"engine of {event.model}: {event.kind} {event.detail}".rstrip(), flush=True)
        write_engine_file(o.engine_file, states)

    write_engine_file(o.engine_file, states)
    supervisor = EngineSupervisor(server, set(o.models), policy=o.policy, on_event=on_event).start()
    try:
        while not stop.wait(0.5):
            if supervisor.problem:
                print(supervisor.problem, flush=True)
                _stop_unit(o)
                return 1
            if not server.running:
                return 0
        return 0
    finally:
        supervisor.stop()


def _stop_unit(o: WatchOptions) -> None:
    """SIGTERM the unit's tritonserver alone (it unloads its models, whose backends stop their engines), then
    SIGKILL its group if it outlives the grace."""
    if process_identity(o.pgid) != (o.pg_start, o.pg_exe):
        return
    os.kill(o.pgid, signal.SIGTERM)
    deadline = time.monotonic() + o.stop_grace
    while time.monotonic() < deadline and process_identity(o.pgid) == (o.pg_start, o.pg_exe):
        time.sleep(0.2)
    if process_identity(o.pgid) == (o.pg_start, o.pg_exe):
        os.killpg(o.pgid, signal.SIGKILL)


class Watchers:
    """The watchers a local driver starts beside its detached units (one process group each, carrying the unit's
    spawn tag so a killed command's watcher is found by its folder), and stops before their units: a watcher must
    not take a stop's unloads for engine deaths."""

    def __init__(self, workdir: Path, policy: str) -> None:
        self.workdir = workdir  # the deployment's folder: its admin key
        self.policy = policy  # serve --on-engine-death
        self._groups: dict[int, ProcessGroup] = {}  # slot -> the watcher started by this command

    def start(self, slot: int, unit_dir: Path, server: Any, models: list[str]) -> dict[str, Any]:
        """Start the unit's watcher; returns its identity as the state records it (watch_pgid, ...)."""
        from tritonpkg.deploy import state
        from tritonpkg.deploy.drivers import processes
        from tritonpkg.proc.group import ProcessGroup

        ident = state.identity_fields(server.pgid)
        options = WatchOptions(http_url=server.http_url, admin_key_dir=self.workdir, pgid=ident["pgid"],
                               pg_start=ident["pg_start"], pg_exe=ident["pg_exe"], models=models,
                               policy=self.policy, log=server.log_path, engine_file=unit_dir / ENGINE_FILE)
        spec = unit_dir / "watch.json"
        spec.write_text(options.model_dump_json())
        group = ProcessGroup([sys.executable, "-m", __name__, str(spec)], dict(os.environ), unit_dir / "watch.log")
        processes.start(group.start, lambda _g: None, processes.spawn_tag(unit_dir), True)
        processes.detach(group, True)
        self._groups[slot] = group
        return {f"watch_{k}": v for k, v in state.identity_fields(group.pgid).items()}

    def stop(self, ep: Endpoints, what: str) -> str:
        """Stop the unit's watcher (one this command started, or the one the state records); returns a note."""
        from tritonpkg.deploy.drivers import processes

        group = self._groups.pop(ep.slot, None) if ep.slot is not None else None
        if group is not None:
            group.stop(grace=STOP_GRACE_S)
            return ""
        facts = ep.facts()
        if not facts.get("watch_pgid"):
            return ""
        watch = {k.removeprefix("watch_"): v for k, v in facts.items() if k.startswith("watch_")}
        return processes.stop_recorded(watch, f"{what}'s engine watcher", grace=STOP_GRACE_S)


def engine_state(model: str, facts: Mapping[str, Any]) -> str:
    """What `deploy status` shows of a unit's engines: the deployed model's readiness (what HAProxy checks), then
    each vLLM model's state as the unit's watcher last saw it, with its last event."""
    url = facts.get("http_url")
    if not url:
        return "-"
    from urllib.parse import quote

    head = "ready" if rest.ok(f"{url}/v2/models/{quote(model, safe='')}/ready", timeout=1.0) else "not ready"
    folder = Path(str(facts.get("unit_dir") or ""))
    states = read_engine_file(folder / ENGINE_FILE) if folder.is_absolute() else {}
    parts = []
    for name, st in sorted(states.items()):
        said = st.get("detail") or "-"
        event = "" if not st.get("event") else f" ({said})" if st["event"] == st.get("state") else \
            f" ({st['event']}: {said})"
        parts.append(f"{name}: {st.get('state', '?')}{event}")
    return "; ".join([head, *parts])


def main(argv: list[str]) -> int:
    o = WatchOptions.model_validate_json(boundedio.read_file(Path(argv[1]), MAX_ENGINE_FILE))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    return watch(o, stop)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
