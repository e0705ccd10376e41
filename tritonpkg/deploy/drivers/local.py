"""The local target: each unit is a real tritonserver (tritonpkg.runtime) on its own loopback ports,
behind one HAProxy (haproxy.py) whose weights, routes and drains change through its admin socket.

`persistent=False` (tests, in-process use): every process is supervised by this interpreter and
stopped by `shutdown()` or at exit. `persistent=True` (the CLI): processes outlive the command that
started them; their process groups are kept in the state file and later commands stop them by group."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from tritonpkg.deploy import state
from tritonpkg.deploy.drivers import haproxy
from tritonpkg.deploy.plan import Unit
from tritonpkg.errors import TritonpkgError
from tritonpkg.runtime import rest

SUMMARY = "--metrics-config=summary_latencies=true"


class LocalDriver:
    target = "local"

    def __init__(self, workdir: str | Path, *, proxy: dict[str, Any] | None = None, http_port: int = 0,
                 grpc_port: int = 0, slots: int = 6, persistent: bool = False, runtime: Any = None,
                 startup_timeout: float = 120.0, drain_timeout: float = 10.0) -> None:
        self.workdir = Path(workdir).absolute()
        self.proxy: dict[str, Any] = dict(proxy or {})
        self.http_port, self.grpc_port, self.slots = http_port, grpc_port, slots
        self.persistent = persistent
        self.runtime = runtime
        self.startup_timeout = startup_timeout
        self.drain_timeout = drain_timeout
        self._servers: dict[int, Any] = {}  # slot -> TritonServer (supervised here)
        self._haproxy: Any = None  # ProcessGroup
        self.notes: list[str] = []  # what stopping recorded process groups found (skipped ones say why)

    # -- the proxy -------------------------------------------------------------------------------
    @property
    def admin(self) -> haproxy.Admin:
        return haproxy.Admin(self.proxy["socket"])

    def proxy_alive(self) -> bool:
        if not self.proxy.get("socket"):
            return False
        try:
            return "Name: HAProxy" in self.admin.send("show info", timeout=2.0)
        except haproxy.ProxyError:
            return False

    def ensure_proxy(self) -> dict[str, Any]:
        """Start HAProxy unless the one recorded in the state still answers; returns its facts."""
        if self.proxy_alive():
            return self.proxy
        binary = haproxy.find_haproxy()
        from tritonpkg.runtime.ports import free_ports
        from tritonpkg.runtime.supervisor import ProcessGroup

        self.secure_workdir()
        auto = iter(free_ports(2))
        http_port = self.http_port or next(auto)
        grpc_port = self.grpc_port or next(auto)
        sock, routes = self.workdir / "haproxy.sock", self.workdir / "routes.map"
        state.write_private(routes, "")
        sock.unlink(missing_ok=True)  # removes a link itself, never its target
        cfg = self.workdir / "haproxy.cfg"
        state.write_private(cfg, haproxy.render_config(http_port=http_port, grpc_port=grpc_port, socket_path=sock,
                                                       map_path=routes, slots=self.slots))
        state.check_file(self.workdir / "haproxy.log")  # appended to: a link would be followed
        check = self._run_quiet([binary, "-c", "-q", "-f", str(cfg)])
        if check:
            raise haproxy.ProxyError(f"HAProxy rejected its configuration: {check}", file=cfg)
        group = ProcessGroup([binary, "-f", str(cfg), "-db"], dict(os.environ), self.workdir / "haproxy.log")
        self._start(group.start)
        self.proxy = {"socket": str(sock), "map": str(routes), "config": str(cfg), **state.identity_fields(group.pgid),
                      "http_port": http_port, "grpc_port": grpc_port, "slots": self.slots,
                      "http_url": f"http://127.0.0.1:{http_port}", "grpc_url": f"127.0.0.1:{grpc_port}"}
        deadline = time.monotonic() + 10
        while not self.proxy_alive():
            if group.poll() is not None or time.monotonic() > deadline:
                group.stop(grace=2)
                log = state.read_private(self.workdir / "haproxy.log").decode(errors="replace")[-2000:]
                raise haproxy.ProxyError(f"HAProxy did not start:\n{log}", file=cfg)
            time.sleep(0.05)
        self._haproxy = group
        self._detach(group)
        return self.proxy

    def secure_workdir(self) -> Path:
        """The driver's folder under the state folder, this user's alone (tritonpkg.deploy.state.secure_dir)."""
        state.secure_dir(self.workdir.parent)
        return state.secure_dir(self.workdir)

    @staticmethod
    def _run_quiet(argv: list[str]) -> str:
        import subprocess

        res = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        return "" if res.returncode == 0 else (res.stdout + res.stderr).strip()

    def _start(self, fn: Any) -> None:
        """Start a child. Persistent children are started from a helper thread: the supervisor asks the
        kernel to kill children of the *main* thread when it ends, which the CLI must not do."""
        if not self.persistent:
            fn()
            return
        box: list[BaseException] = []

        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # re-raised in the caller's thread
                box.append(exc)

        t = threading.Thread(target=run)
        t.start()
        t.join()
        if box:
            raise box[0]

    def _detach(self, group: Any) -> None:
        if self.persistent:
            from tritonpkg.runtime import supervisor

            with supervisor._LIVE_LOCK:  # no atexit stop: the state file owns this group now
                supervisor._LIVE.discard(group)

    # -- units -----------------------------------------------------------------------------------
    def admin_key(self, create: bool = False) -> str | None:
        """Triton's admin-API key of this deployment (one for all its units, so it works through HAProxy),
        kept 0600 in the workdir; created on first use when `create`."""
        from tritonpkg.runtime import admin

        return admin.ensure_key(self.workdir) if create else admin.read_key(self.workdir)

    def _free_slot(self, taken: set[int]) -> int:
        for k in range(int(self.proxy.get("slots", self.slots))):
            if k not in taken:
                return k
        raise TritonpkgError("every HAProxy slot is taken", field="slots",
                             expected="fewer live units (retire some, or run gc)")

    def provision(self, model: str, unit: Unit, release: Any, taken_slots: set[int]) -> dict[str, Any]:
        from tritonpkg.runtime import TritonServer

        repo = Path(release.repository)
        self.ensure_proxy()
        slot = self._free_slot(taken_slots)
        self.secure_workdir()
        log = self.workdir / f"{unit.name}.log"
        state.check_file(log)
        log.unlink(missing_ok=True)
        server = TritonServer(repo, runtime=self.runtime, startup_timeout=self.startup_timeout, log_path=log,
                              extra_args=[SUMMARY], exit_timeout=3, admin_key=self.admin_key(create=True))
        try:
            self._start(server.start)
        except BaseException:
            server.stop(grace=3.0)
            raise
        self._servers[slot] = server
        if server._group is not None:
            self._detach(server._group)
        self.admin.send(haproxy.enable_slot(slot, server.http_port, server.grpc_port))
        return {"slot": slot, **state.identity_fields(server.pgid), "http_url": server.http_url, "grpc_url": server.grpc_url,
                "metrics_url": server.metrics_url, "log": str(log), "repository": str(repo)}

    def health(self, model: str, version: int, ep: dict[str, Any], smoke: dict[str, Any] | None) -> str:
        from tritonpkg.deploy.executor import check_triton

        return check_triton(ep["http_url"], model, version, smoke)

    def alive(self, ep: dict[str, Any]) -> bool:
        server = self._servers.get(ep.get("slot"))  # type: ignore[arg-type]
        if server is not None and not server.running:
            return False
        return _group_alive(ep) and rest.ok(ep["http_url"] + "/v2/health/live", timeout=1.0)

    def set_weights(self, weights: dict[str, tuple[dict[str, Any], int]]) -> None:
        """unit -> (endpoints, percent), applied in one admin-socket write."""
        self.admin.send(haproxy.weight_commands({ep["slot"]: w for ep, w in weights.values() if "slot" in ep}))

    def scale(self, replicas: dict[str, int]) -> str:
        return "local units are one tritonserver each; replica counts apply to the kubernetes target"

    def drain(self, ep: dict[str, Any]) -> None:
        """No new requests for the unit's slot, then wait (bounded) for its open requests to finish."""
        if "slot" not in ep or not self.proxy_alive():
            return
        slot = ep["slot"]
        self.admin.send(haproxy.drain_slot(slot))
        deadline = time.monotonic() + self.drain_timeout
        while time.monotonic() < deadline:
            busy = [s for s in self.admin.stats() if s.get("svname") == f"s{slot}" and s.get("scur", "0") not in ("", "0")]
            if not busy:
                return
            time.sleep(0.05)

    def retire(self, ep: dict[str, Any]) -> str:
        """Take the unit's slot out of HAProxy and stop its server; returns what was found (a recorded process
        group that is no longer the one started is left alone, and the note says so)."""
        slot = ep.get("slot")
        if slot is not None and self.proxy_alive():
            self.admin.send(haproxy.disable_slot(slot))
            self._unmap_slot(slot)
        server = self._servers.pop(slot, None) if slot is not None else None
        if server is not None:
            server.stop(grace=10.0)
            return ""
        if ep.get("pgid"):
            return self._note(_stop_recorded(ep, f"unit {Path(ep['log']).stem if ep.get('log') else slot}"))
        return ""

    def _note(self, text: str) -> str:
        self.notes.append(text)
        return text

    def route(self, ep: dict[str, Any], key: str) -> None:
        """Send requests that name `key` (a version number, or 'current') to the unit's slot."""
        self._set_map(key, f"slot{ep['slot']}")

    def unroute(self, key: str) -> None:
        if self.proxy_alive():
            self.admin.send(f"del map {self.proxy['map']} {key}")

    def _set_map(self, key: str, value: str) -> None:
        entries = self._map_entries()
        verb = "set" if key in entries else "add"
        self.admin.send(f"{verb} map {self.proxy['map']} {key} {value}")

    def _map_entries(self) -> dict[str, str]:
        text = self.admin.send(f"show map {self.proxy['map']}")
        out = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 3:
                out[parts[1]] = parts[2]
        return out

    def _unmap_slot(self, slot: int) -> None:
        for key, value in self._map_entries().items():
            if value == f"slot{slot}":
                self.admin.send(f"del map {self.proxy['map']} {key}")

    def metrics_text(self, ep: dict[str, Any]) -> str | None:
        code, body = rest.request("GET", ep["metrics_url"], timeout=2.0)
        return body.decode(errors="replace") if code == 200 else None

    def endpoints(self) -> dict[str, Any]:
        return {k: self.proxy.get(k) for k in ("http_url", "grpc_url")}

    def shutdown(self, units: list[dict[str, Any]] = ()) -> None:  # type: ignore[assignment]
        """Stop every unit given (or started here) and HAProxy."""
        for ep in units:
            self.retire(ep)
        for slot in list(self._servers):
            self._servers.pop(slot).stop(grace=10.0)
        if self._haproxy is not None:
            self._haproxy.stop(grace=3.0)
            self._haproxy = None
        elif self.proxy.get("pgid"):
            self._note(_stop_recorded(self.proxy, "HAProxy"))
        for key in ("pgid", "pg_start", "pg_exe", "pg_identity"):
            self.proxy.pop(key, None)


def _group_alive(facts: dict[str, Any]) -> bool:
    """The recorded group still runs (and is the one recorded, when its identity was recorded)."""
    pgid = facts.get("pgid")
    if not pgid:
        return False
    if facts.get("pg_start") is None:  # an older record: signal 0 only asks whether the group exists
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return state.recorded_group(facts, "")[0] is not None


def _stop_recorded(facts: dict[str, Any], what: str, grace: float = 10.0) -> str:
    """SIGTERM a process group an earlier command started, only once `state.recorded_group` found its leader
    still the recorded process, then SIGKILL what is left after `grace`; returns what it found and did."""
    pgid, note = state.recorded_group(facts, what)
    if pgid is None:
        return note
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return note + ": gone"
    except PermissionError:
        return note + ": not permitted to signal it (another user's processes): not stopped"
    deadline = time.monotonic() + grace
    only_zombies = None
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return note + ": stopped"
        if state.group_members(pgid):
            only_zombies = None
        elif only_zombies is None:
            only_zombies = time.monotonic()
        elif time.monotonic() - only_zombies > 2.0:  # exited; their parent has not reaped them (yet)
            return note + ": stopped"
        time.sleep(0.1)
    # still there after the grace: the leader verified above, or its stragglers if it exited meanwhile (the
    # group existed at every poll, and Linux reuses no pid that is still some process's group id)
    now = state.process_identity(pgid)
    if now is not None and now != (int(facts["pg_start"]), facts["pg_exe"]):
        return note + ": stopped"
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return note + ": killed"
