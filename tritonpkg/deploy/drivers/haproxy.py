"""HAProxy for the local target: the configuration (pure), its runtime API over the admin socket,
which changes weights, addresses, map entries and drains servers without a reload, and its life cycle
(`Proxy`: started once per deployment, found again from its recorded facts, stopped at teardown).

Layout, fixed at start so nothing ever needs a reload: `SLOTS` server slots, each a tritonserver when
taken. Backends `live_http`/`live_grpc` hold every slot (weights = percent of unversioned traffic);
`slotK_http`/`slotK_grpc` hold slot K alone. A request naming a version (Triton's own
`/v2/models/<m>/versions/<N>/...` path, or an `x-model-version: <N>|current` header, which is how gRPC
asks) is sent to the slot the routes map names; everything else goes to `live_*`.

A unit that dies costs no idempotent request (RetryPolicy): a refused connect is retried on another
server for every request, and an inference or read-only request whose unit closes or answers 502/503/504
before its response began is replayed on another server, as is one answered 404 (HTTP: the unit's model unloaded,
what a dead engine leaves until the checks mark the unit DOWN; gRPC says NOT_FOUND in a trailer, which HAProxy
cannot retry on). Replaying needs the whole request in HAProxy's
buffer before it is first sent, so those requests wait for their body (`wait-for-body`); without that
HAProxy forwards the headers at once, marks the request unreplayable, and a keep-alive client sees its
connection closed with no answer. Model control, shared-memory, trace and log settings are never
replayed once sent, nor are streams (gRPC ModelStreamInfer) or bodies larger than the buffer; a stream
whose unit dies after it began is cut (README: deploy).

Every slot server has an unchecked backup twin `bK` that mirrors its address, weight and state: when the
checks mark every weighted server of a backend DOWN (a check that flaps on a loaded host), HAProxy sends
the traffic to the twins, so the units that were serving keep serving instead of answering 503."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, Field

from tritonpkg.deploy import state
from tritonpkg.deploy.drivers import processes
from tritonpkg.errors import TritonpkgError
from tritonpkg.proc.group import ProcessGroup

PLACEHOLDER = "127.0.0.1:9"  # never contacted: slots start disabled
SOCKET = "haproxy.sock"
MAX_SOCKET_PATH = 97  # HAProxy's limit on a Unix socket's path (sun_path, less the suffix of its temporary name)


class CheckPolicy(BaseModel):
    """How HAProxy judges a unit. The defaults let one slow answer of the readiness check (check_path) pass (up to
    `timeout_ms`) and take `fall` failed checks in a row to mark a unit DOWN; a dead unit costs no
    request meanwhile, because a refused connection is retried on another server."""

    interval_ms: int = Field(default=1000, gt=0, description="between checks of a settled server")
    fast_interval_ms: int = Field(default=250, gt=0, description="between checks while a server changes state")
    timeout_ms: int | None = Field(default=2000, gt=0, description="a check's answer; None: the interval bounds it")
    fall: int = Field(default=3, ge=1)
    rise: int = Field(default=2, ge=1)
    keep_last: bool = Field(default=True, description="unchecked backup twins keep traffic when all checks fail")


class RetryPolicy(BaseModel):
    """Which requests HAProxy replays on another unit when theirs fails. A timeout is not replayed: a
    slow unit is not a dead one, and replaying slow requests multiplies the load on a struggling
    backend; the health checks take a hung unit out."""

    retries: int = Field(default=3, ge=0, description="attempts after the first, each on another server")
    body_wait_ms: int | None = Field(default=1000, gt=0, description=(
        "how long a replayable request's body is waited for before it is sent; None: sent as it "
        "arrives, replayable only when its body came in the same read as its headers"))
    buffer_kib: int = Field(default=64, ge=16, le=1024, description=(
        "HAProxy's buffer (tune.bufsize): a request is replayable only when its headers and body fit"))


# Requests whose effect does not depend on how often they run: inference (unary; a generate_stream that
# has not begun answering is replayed whole) and reads. Everything else on Triton's API changes server
# state (model load/unload, shared-memory registration, trace and log settings).
_HTTP_REPLAYABLE = r"^/v2/models/[^/]+(/versions/[0-9]+)?/(infer|generate|generate_stream)$"
_GRPC_SERVICE = "/inference.GRPCInferenceService/"
_GRPC_REPLAYABLE = ("ModelInfer", "ServerLive", "ServerReady", "ModelReady", "ServerMetadata",
                    "ModelMetadata", "ModelConfig", "ModelStatistics", "RepositoryIndex")


class ProxyError(TritonpkgError):
    """HAProxy is missing, did not start, or refused a runtime command."""


def find_haproxy() -> str:
    path = shutil.which("haproxy") or next((p for p in ("/usr/sbin/haproxy", "/usr/local/sbin/haproxy")
                                            if Path(p).is_file()), None)
    if path is None:
        raise ProxyError("haproxy is not installed; the local target routes traffic through it",
                         field="--target local",
                         expected="haproxy on PATH: `apt-get install haproxy` (Debian/Ubuntu), or --target kubernetes")
    return path


def check_path(model: str | None) -> str:
    """What the health checks GET on each unit: the deployed model's own readiness, which follows its engine (a
    dead engine unloads its model; /v2/health/ready is true again once that unload is done, docs: engine death),
    else the server's. The name is percent-encoded: it goes into the configuration as one token."""
    return "/v2/health/ready" if not model else f"/v2/models/{quote(model, safe='')}/ready"


def render_config(*, http_port: int, grpc_port: int, socket_path: Path, map_path: Path, slots: int,
                  checks: CheckPolicy | None = None, retry: RetryPolicy | None = None,
                  model: str | None = None) -> str:
    """The whole configuration. Health checks probe check_path(model) on each slot's HTTP port (also for the
    gRPC servers, through check-port)."""
    c = checks or CheckPolicy()
    r = retry or RetryPolicy()

    def servers(proto: str) -> str:
        lines = [f"    server s{k} {PLACEHOLDER}{proto} weight 0 disabled check" for k in range(slots)]
        if c.keep_last:
            lines += [f"    server b{k} {PLACEHOLDER}{proto} weight 0 disabled backup" for k in range(slots)]
        return "\n".join(lines)

    h2 = " proto h2 check-proto h1"
    servers_http, servers_grpc = servers(""), servers(h2)
    slot_backends = "".join(
        f"\nbackend slot{k}_http\n{_slot_servers(k, '', c.keep_last)}\n"
        f"\nbackend slot{k}_grpc\n{_slot_servers(k, h2, c.keep_last)}\n"
        for k in range(slots))
    timeout_check = f"\n    timeout check {c.timeout_ms}ms" if c.timeout_ms else ""
    allbackups = "\n    option allbackups" if c.keep_last else ""
    every = (f"inter {c.interval_ms}ms fastinter {c.fast_interval_ms}ms downinter {c.fast_interval_ms}ms "
             f"fall {c.fall} rise {c.rise}")
    route = f"%[var(txn.route),map({map_path},live)]"
    grpc_replayable = " ".join(_GRPC_SERVICE + m for m in _GRPC_REPLAYABLE)
    http_replay = _replay_rules([f"inference path_reg {_HTTP_REPLAYABLE}"], "METH_GET || METH_POST inference", r)
    grpc_replay = _replay_rules([f"replayable path {grpc_replayable}"], "replayable", r)
    return f"""# written by tritonpkg deploy (local target); changed at run time through the admin socket only
global
    stats socket {socket_path} mode 600 level admin
    maxconn 4096
    tune.bufsize {r.buffer_kib * 1024}

defaults
    mode http
    timeout connect 1s
    timeout client 60s
    timeout server 60s
    timeout http-request 10s
    timeout http-keep-alive 30s{timeout_check}
    retries {r.retries}
    option redispatch 1
    retry-on conn-failure empty-response junk-response 404 502 503 504
    option httpchk GET {check_path(model)}{allbackups}
    default-server {every}

frontend http_in
    bind 127.0.0.1:{http_port}
    http-request set-var(txn.route) str(default)
    http-request set-var(txn.route) path,field(6,/) if {{ path,field(5,/) -m str versions }}
    http-request set-var(txn.route) req.hdr(x-model-version) if {{ req.hdr(x-model-version) -m found }}
{http_replay}
    use_backend {route}_http

frontend grpc_in
    bind 127.0.0.1:{grpc_port} proto h2
    http-request set-var(txn.route) str(default)
    http-request set-var(txn.route) req.hdr(x-model-version) if {{ req.hdr(x-model-version) -m found }}
{grpc_replay}
    use_backend {route}_grpc

backend live_http
    balance roundrobin
{servers_http}

backend live_grpc
    balance roundrobin
{servers_grpc}
{slot_backends}"""


def _replay_rules(acls: list[str], replayable: str, r: RetryPolicy) -> str:
    """A frontend's rules: replayable requests are held until their body is in (so HAProxy keeps a copy
    it can send again); every other request is replayed only if its connection was refused, i.e. the
    unit never saw it. A body larger than the buffer is forwarded as it comes and is not replayed."""
    lines = [f"    acl {a}" for a in acls]
    if r.body_wait_ms is not None:
        lines.append(f"    http-request wait-for-body time {r.body_wait_ms}ms if {replayable}")
    lines.append(f"    http-request disable-l7-retry unless {replayable}")
    return "\n".join(lines)


def _slot_servers(k: int, proto: str, keep_last: bool) -> str:
    twin = f"\n    server b{k} {PLACEHOLDER}{proto} disabled backup" if keep_last else ""
    return f"    server s{k} {PLACEHOLDER}{proto} disabled check{twin}"


def _servers(slot: int, twins: bool) -> tuple[str, ...]:
    """The checked server of a slot, and its unchecked twin where the configuration has one (keep_last)."""
    return (f"s{slot}", f"b{slot}") if twins else (f"s{slot}",)


def enable_slot(slot: int, http_port: int, grpc_port: int, twins: bool = True) -> list[str]:
    """Point slot K (and its twin) at a server and take it out of maintenance, with no share of live
    traffic yet."""
    cmds = []
    for be, port in (("live_http", http_port), ("live_grpc", grpc_port),
                     (f"slot{slot}_http", http_port), (f"slot{slot}_grpc", grpc_port)):
        for srv in _servers(slot, twins):
            cmds.append(f"set server {be}/{srv} addr 127.0.0.1 port {port}")
            if srv.startswith("s"):
                cmds.append(f"set server {be}/{srv} check-port {http_port}")
            if be.startswith("live"):
                cmds.append(f"set weight {be}/{srv} 0")
            cmds.append(f"set server {be}/{srv} state ready")
    return cmds


def weight_commands(weights: dict[int, int], twins: bool = True) -> list[str]:
    """slot -> percent; raised weights first, so a shift never leaves a moment with no server."""
    order = sorted(weights.items(), key=lambda kv: -kv[1])
    return [f"set weight {be}/{srv} {w}" for slot, w in order for srv in _servers(slot, twins)
            for be in ("live_http", "live_grpc")]


def _slot_backends(slot: int) -> tuple[str, ...]:
    return ("live_http", "live_grpc", f"slot{slot}_http", f"slot{slot}_grpc")


def disable_slot(slot: int, twins: bool = True) -> list[str]:
    return [f"set server {be}/{srv} state maint" for be in _slot_backends(slot) for srv in _servers(slot, twins)]


def drain_slot(slot: int, twins: bool = True) -> list[str]:
    return [f"set weight {be}/{srv} 0" for be in ("live_http", "live_grpc") for srv in _servers(slot, twins)] + [
        f"set server {be}/{srv} state drain" for be in _slot_backends(slot) for srv in _servers(slot, twins)]


class Admin:
    """The runtime API: commands joined with ';' go in one write, so HAProxy applies them together."""

    def __init__(self, socket_path: str | Path) -> None:
        self.socket_path = str(socket_path)

    def send(self, commands: list[str] | str, timeout: float = 5.0) -> str:
        line = commands if isinstance(commands, str) else "; ".join(commands)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(timeout)
                sock.connect(self.socket_path)
                sock.sendall(line.encode() + b"\n")
                chunks = []
                while True:
                    data = sock.recv(65536)
                    if not data:
                        break
                    chunks.append(data)
        except OSError as exc:
            raise ProxyError(f"HAProxy admin socket did not answer: {exc}", file=self.socket_path) from exc
        answer = b"".join(chunks).decode(errors="replace")
        bad = [ln for ln in answer.splitlines() if ln.strip() and not _harmless(ln)]
        if bad and not line.startswith("show"):
            raise ProxyError(f"HAProxy refused `{line[:200]}`: {' | '.join(bad)[:400]}", file=self.socket_path)
        return answer

    def stats(self) -> list[dict[str, str]]:
        text = self.send("show stat")
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if not lines or not lines[0].startswith("# "):
            return []
        header = lines[0][2:].split(",")
        return [dict(zip(header, ln.split(","), strict=False)) for ln in lines[1:]]


def _harmless(line: str) -> bool:
    """Informational answers of set server / map commands."""
    low = line.lower()
    return any(s in low for s in ("ip changed", "port changed", "no need to change", "done",
                                  "health check port updated"))


def _socket_dir_name(workdir: Path) -> str:
    digest = hashlib.sha256(str(Path(workdir).resolve()).encode()).hexdigest()[:16]
    return f"tritonpkg-{os.getuid()}-{digest}"


def socket_dir(workdir: Path) -> Path:
    """Where the proxy of `workdir` keeps its admin socket: a folder named by the workdir's hash under
    $XDG_RUNTIME_DIR, else the temp folder (whichever keeps the path within MAX_SOCKET_PATH), so a state folder
    nested deep still starts HAProxy. Proxy.ensure creates it 0700 (refused when it is not this user's)."""
    name = _socket_dir_name(workdir)
    # the folder is made 0700 and checked to be this user's wherever it lies
    for base in (os.environ.get("XDG_RUNTIME_DIR"), tempfile.gettempdir(), "/tmp"):  # noqa: S108
        if base and os.path.isabs(base) and os.path.isdir(base) \
                and len(os.path.join(base, name, SOCKET)) <= MAX_SOCKET_PATH:
            return Path(base) / name
    raise ProxyError(f"no folder for HAProxy's admin socket within {MAX_SOCKET_PATH} bytes", field="XDG_RUNTIME_DIR",
                     expected="$XDG_RUNTIME_DIR or $TMPDIR a short absolute folder")


class Proxy:
    """One deployment's HAProxy: started once (or found answering from the facts the state file recorded), its
    routes map changed through the admin socket, stopped at teardown. `facts` is what the state keeps of it
    (socket, ports, process group; `unit_port_base`, the deployment's, rides along)."""

    def __init__(self, workdir: Path, facts: dict[str, Any] | None = None, *, http_port: int = 0,
                 grpc_port: int = 0, slots: int = 6, persistent: bool = False, model: str | None = None) -> None:
        self.workdir = workdir
        self.model = model  # whose readiness the health checks read (check_path)
        self.facts: dict[str, Any] = dict(facts or {})
        self.http_port, self.grpc_port, self.slots = http_port, grpc_port, slots
        self.persistent = persistent
        self.group: ProcessGroup | None = None  # started by this command

    @property
    def config(self) -> Path:
        return self.workdir / "haproxy.cfg"

    @property
    def admin(self) -> Admin:
        return Admin(self.facts["socket"])

    def alive(self) -> bool:
        if not self.facts.get("socket"):
            return False
        try:
            return "Name: HAProxy" in self.admin.send("show info", timeout=2.0)
        except ProxyError:
            return False

    def ensure(self, on_started: Callable[[], None] | None = None) -> tuple[dict[str, Any], str]:
        """Start HAProxy unless the one recorded still answers; returns its facts and a note (what stopping one a
        killed command spawned found). `on_started` is called once the facts name its configuration (before the
        spawn) and again once they hold its process group (right after it)."""
        if self.alive():
            return self.facts, ""
        note = self.stop_unrecorded()  # one a killed command spawned but never recorded: not ours to reuse
        binary = find_haproxy()
        from tritonpkg.proc.ports import free_ports

        state.secure_dir(self.workdir.parent)
        state.secure_dir(self.workdir)
        auto = iter(free_ports(2))
        http_port = self.http_port or next(auto)
        grpc_port = self.grpc_port or next(auto)
        sock, routes, cfg = socket_dir(self.workdir) / SOCKET, self.workdir / "routes.map", self.config
        state.write_private(routes, "")
        state.write_private(cfg, render_config(http_port=http_port, grpc_port=grpc_port, socket_path=sock,
                                               map_path=routes, slots=self.slots, model=self.model))
        state.check_file(self.workdir / "haproxy.log")  # appended to: a link would be followed
        state.secure_dir(sock.parent)  # once the state's files passed: a refusal leaves nothing outside the state
        sock.unlink(missing_ok=True)  # removes a link itself, never its target
        check = processes.run_quiet([binary, "-c", "-q", "-f", str(cfg)])
        if check:
            raise ProxyError(f"HAProxy rejected its configuration: {check}", file=cfg)
        group = ProcessGroup([binary, "-f", str(cfg), "-db"], dict(os.environ), self.workdir / "haproxy.log")

        kept = {k: self.facts[k] for k in ("unit_port_base",) if k in self.facts}  # the deployment's, not the proxy's
        self.facts = {**kept, "config": str(cfg)}  # recorded before the spawn: its tag (spawn_tag) finds the process
        if on_started is not None:
            on_started()

        def spawned(started: ProcessGroup) -> None:
            self.facts = {**kept, "socket": str(sock), "map": str(routes), "config": str(cfg),
                          **state.identity_fields(started.pgid), "http_port": http_port, "grpc_port": grpc_port,
                          "slots": self.slots, "http_url": f"http://127.0.0.1:{http_port}",
                          "grpc_url": f"127.0.0.1:{grpc_port}"}
            if on_started is not None:
                on_started()

        processes.start(group.start, spawned, processes.spawn_tag(cfg), self.persistent)
        deadline = time.monotonic() + 10
        while not self.alive():
            if group.poll() is not None or time.monotonic() > deadline:
                group.stop(grace=2)
                log = state.read_private(self.workdir / "haproxy.log").decode(errors="replace")[-2000:]
                raise ProxyError(f"HAProxy did not start:\n{log}", file=cfg)
            time.sleep(0.05)
        self.group = group
        processes.detach(group, self.persistent)
        return self.facts, note

    def stop_unrecorded(self) -> str:
        """A proxy recorded only by its configuration (the command was killed before its group's record)."""
        if not self.facts.get("pgid") and self.facts.get("config") == str(self.config):
            return processes.stop_unrecorded(processes.spawn_tag(self.config), "HAProxy")
        return ""

    def stop(self) -> str:
        """Stop the proxy this command started, else the recorded one (or one spawned but never recorded)."""
        note = ""
        if self.group is not None:
            self.group.stop(grace=3.0)
            self.group = None
        elif self.facts.get("pgid"):
            note = processes.stop_recorded(self.facts, "HAProxy")
        else:
            note = self.stop_unrecorded()
        for key in ("pgid", "pg_start", "pg_exe", "pg_identity"):
            self.facts.pop(key, None)
        sock = Path(self.facts.get("socket") or "")
        if sock.parent.name == _socket_dir_name(self.workdir) and not self.alive():  # never a folder still in use
            shutil.rmtree(sock.parent, ignore_errors=True)
        return note

    # -- the routes map: request key (a version, or 'current') -> slot ---------------------------------------
    def set_route(self, key: str, value: str) -> None:
        verb = "set" if key in self.routes() else "add"
        self.admin.send(f"{verb} map {self.facts['map']} {key} {value}")

    def unroute(self, key: str) -> None:
        if self.alive():
            self.admin.send(f"del map {self.facts['map']} {key}")

    def routes(self) -> dict[str, str]:
        out = {}
        for line in self.admin.send(f"show map {self.facts['map']}").splitlines():
            parts = line.split()
            if len(parts) == 3:
                out[parts[1]] = parts[2]
        return out

    def unroute_slot(self, slot: int) -> None:
        for key, value in self.routes().items():
            if value == f"slot{slot}":
                self.admin.send(f"del map {self.facts['map']} {key}")
