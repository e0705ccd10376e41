"""The local target: each unit is a real tritonserver on its own loopback ports, brought up the way
`tritonpkg serve` does (tritonpkg.serve: verify, remote weights materialized, bundled plugins installed,
Triton behind closed ports until ready), behind one HAProxy (haproxy.py) whose weights, routes and drains
change through its admin socket.

`persistent=False` (tests, in-process use): every process is supervised by this interpreter and
stopped by `shutdown()` or at exit. `persistent=True` (the CLI): processes outlive the command that
started them; their process groups are kept in the state file and later commands stop them by group. A detached
unit keeps serve's engine supervision through a watcher process of its own (unit_watch.py), and HAProxy's checks
read the deployed model's readiness, which falls with its engine (haproxy.check_path); a retired unit's
tritonserver is stopped leader first, so its engines stop after their requests, never under them."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritonpkg import version_files
from tritonpkg.deploy import adapters, state
from tritonpkg.deploy.checks import check_adapter, check_triton
from tritonpkg.deploy.driver import AdapterRollouts, Driver, Endpoints, Entry, OnStarted
from tritonpkg.deploy.drivers import haproxy, processes, unit_watch
from tritonpkg.deploy.plan import Unit
from tritonpkg.errors import TritonpkgError
from tritonpkg.proc import rest
from tritonpkg.proc.group import ProcessGroup

if TYPE_CHECKING:
    from tritonpkg.deploy.driver import Release

SUMMARY = "--metrics-config=summary_latencies=true"
UNIT_PORTS = 3  # per slot from unit_port_base: HTTP, gRPC, metrics
STOP_GRACE_S = 30.0  # a retired unit's tritonserver: its models unload and their engines stop within it
SERVING_COPY = "repository"  # under the unit's folder: the repository it serves (serving_copy)


class LocalDriver:
    target = "local"

    def __init__(self, workdir: str | Path, *, proxy: dict[str, Any] | None = None, http_port: int = 0,
                 grpc_port: int = 0, slots: int = 6, persistent: bool = False, runtime: Any = None,
                 startup_timeout: float | None = None, drain_timeout: float = 10.0,
                 weights_root: Path | None = None, triton: Any = None, unit_port_base: int = 0,
                 on_engine_death: str = "restart") -> None:
        self.workdir = Path(workdir).absolute()
        self.haproxy = haproxy.Proxy(self.workdir, proxy, http_port=http_port, grpc_port=grpc_port, slots=slots,
                                     persistent=persistent)
        self.slots = slots
        _check_port_base(unit_port_base, slots, "--unit-port-base")
        self.unit_port_base = unit_port_base  # 0: the spec's, else the deployment's recorded base, else free ports
        self.persistent = persistent
        self.runtime = runtime
        self.startup_timeout = startup_timeout  # None: as long as Triton reports models loading
        self.drain_timeout = drain_timeout
        self.weights_root = weights_root  # None: serve's default (the user cache)
        self.adapter_ack_timeout = 120.0  # a rewritten adapter list, until the unit's backend serves it
        self.triton = triton  # tritonpkg.serve.TritonOptions; None: serve's defaults + summary latencies
        self._servers: dict[int, Any] = {}  # slot -> ServingStack (supervised here)
        self.watchers = unit_watch.Watchers(self.workdir, on_engine_death)  # detached units' engine supervision
        self.notes: list[str] = []  # what stopping recorded process groups found (skipped ones say why)

    # -- the proxy (haproxy.Proxy) --------------------------------------------------------------------
    @property
    def proxy(self) -> dict[str, Any]:
        """The proxy's facts, as the state file keeps them."""
        return self.haproxy.facts

    @proxy.setter
    def proxy(self, facts: dict[str, Any]) -> None:
        self.haproxy.facts = facts

    def ensure_proxy(self, on_started: OnStarted | None = None) -> dict[str, Any]:
        """Start HAProxy unless the one recorded in the state still answers; returns its facts. `on_started`
        gets what to record (the executor saves self.proxy with it) before and right after the spawn."""
        facts, note = self.haproxy.ensure(None if on_started is None else lambda: on_started(Endpoints()))
        if note:
            self._note(note)
        return facts

    def secure_workdir(self) -> Path:
        """The driver's folder under the state folder, this user's alone (tritonpkg.deploy.state.secure_dir)."""
        state.secure_dir(self.workdir.parent)
        return state.secure_dir(self.workdir)

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

    def port_base_for(self, release: Release) -> int:
        """The unit port base this deploy sets: --unit-port-base, else the spec's deployment.unit_port_base, else
        0 (unit_ports then uses the base the deployment recorded, if any)."""
        slots = int(self.proxy.get("slots", self.slots))
        return self.unit_port_base or _check_port_base(release.unit_port_base or 0, slots, "deployment.unit_port_base")

    def unit_ports(self, slot: int) -> tuple[int, int, int]:
        """A unit's loopback (HTTP, gRPC, metrics) ports: free ones, or with a unit port base (this driver's,
        else the one the deployment recorded) base + 3*slot .. + 2, so every unit is in a known range."""
        base = self.unit_port_base or int(self.proxy.get("unit_port_base") or 0)
        if not base:
            return 0, 0, 0
        first = base + UNIT_PORTS * slot
        return first, first + 1, first + 2

    def unit_folder(self, name: str) -> Path:
        """The unit's folder: its serving copy, the serve stage's files, its metrics files."""
        return self.workdir / "units" / name

    def unit_options(self, unit: Unit, repository: Path, slot: int = 0) -> Any:
        """The serve stage's options for one unit: loopback ports of its own (unit_ports, Triton's own metrics on
        the third: no public merged /metrics, the gate reads Triton's), no OpenAI API (HAProxy fronts it), its
        files under the unit's folder."""
        from tritonpkg.serve import StartupOptions, TritonOptions

        unit_dir = self.unit_folder(unit.name)
        triton = self.triton or TritonOptions(extra_args=(SUMMARY,))
        http, grpc, metrics = self.unit_ports(slot)
        return StartupOptions(source=repository, http_port=http, grpc_port=grpc, metrics_port=metrics, openai=False,
                              merged_metrics=False, state_dir=unit_dir,
                              multiproc_dir=unit_dir / "prometheus-multiproc", weights_root=self.weights_root,
                              startup_timeout=self.startup_timeout, triton=triton, exit_timeout=3,
                              log_path=self.workdir / f"{unit.name}.log", admin_key_dir=self.workdir)

    def sync(self, model: str, units: Sequence[Mapping[str, Any]], alias: str | None) -> None:
        """Nothing to rebuild: HAProxy holds the routes, the executor hands this driver the proxy's facts."""

    def provision(self, model: str, unit: Unit, release: Release, taken_slots: set[int],
                  on_started: OnStarted) -> Endpoints:
        """Start the unit. `on_started` gets the facts to record as soon as they exist: the slot (with the
        proxy, now in self.proxy) before the server starts, then its process group's identity while Triton
        is still loading, so a command killed meanwhile leaves nothing that rollback or teardown cannot find."""
        from tritonpkg.serve import ServingStack

        repo = Path(release.repository)
        self.haproxy.model = model  # a proxy started now checks the model's readiness (a running one keeps its own)
        self.ensure_proxy(on_started)
        slot = self._free_slot(taken_slots)
        on_started(Endpoints(slot=slot))
        self.secure_workdir()
        state.secure_dir(self.workdir / "units")
        base = self.port_base_for(release)
        if base:
            self.proxy["unit_port_base"] = base  # saved with the proxy: later deploys keep it
        unit_dir = self.unit_folder(unit.name)
        options = self.unit_options(unit, unit_dir / SERVING_COPY, slot)
        log = options.log_path
        state.check_file(log)
        log.unlink(missing_ok=True)
        if unit_dir.exists():
            shutil.rmtree(unit_dir)  # a unit name is used once; what is there is an aborted start's
        # recorded before the spawn: a command killed before the group's record leaves a unit that names its
        # folder, and each process of the unit carries spawn_tag(folder) (see retire)
        on_started(Endpoints(slot=slot, log=str(log), unit_dir=str(unit_dir)))
        serving_copy(repo, state.secure_dir(unit_dir) / SERVING_COPY)
        stack = ServingStack(options, runtime=self.runtime)

        def spawned(group: ProcessGroup) -> None:  # tritonserver, recorded before start() waits for it
            on_started(Endpoints(slot=slot, **state.identity_fields(group.pgid), log=str(log),
                                 unit_dir=str(unit_dir)))

        # start() stops what it started when a step fails
        processes.start(stack.start, spawned, processes.spawn_tag(unit_dir), self.persistent)
        self._servers[slot] = stack
        server = stack.server
        watched = sorted(stack.supervisor.models) if stack.supervisor is not None else []
        stop_file = str(stack.stop_file) if stack.stop_file is not None else None
        processes.detach(stack, self.persistent)  # the state file owns the process group and the unit's folder now
        watch = self.watchers.start(slot, unit_dir, server, watched) if self.persistent and watched else {}
        self.haproxy.admin.send(haproxy.enable_slot(slot, server.http_port, server.grpc_port))
        ep = Endpoints(slot=slot, **state.identity_fields(server.pgid), http_url=server.http_url,
                       grpc_url=server.grpc_url, metrics_url=server.metrics_url, log=str(log),
                       repository=str(repo), serving_repository=str(stack.repository), unit_dir=str(unit_dir),
                       weights=[{"source": w.source, "path": w.path, "kind": w.kind} for w in stack.weights])
        served = _served(stack.repository, model, unit.version)
        for key, value in {**watch, "stop_file": stop_file, "adapters": served}.items():  # the target's own facts
            if value is not None:
                setattr(ep, key, value)
        return ep

    def health_check(self, model: str, version: int, ep: Endpoints, smoke: dict[str, Any] | None) -> str:
        return check_triton(_url(ep), model, version, smoke)

    def alive(self, ep: Endpoints) -> bool:
        stack = self._servers.get(ep.slot) if ep.slot is not None else None
        if stack is not None and (stack.server is None or not stack.server.running):
            return False
        return _group_alive(ep) and rest.ok(_url(ep) + "/v2/health/live", timeout=1.0)

    def shift(self, weights: Mapping[str, tuple[Endpoints, int]]) -> None:
        """unit -> (endpoints, percent), applied in one admin-socket write."""
        slots = {ep.slot: w for ep, w in weights.values() if ep.slot is not None}
        self.haproxy.admin.send(haproxy.weight_commands(slots))

    def scale(self, replicas: Mapping[str, int]) -> str:
        return "local units are one tritonserver each; replica counts apply to the kubernetes target"

    def drain(self, ep: Endpoints) -> None:
        """No new requests for the unit's slot, then wait (bounded) for its open requests to finish."""
        if ep.slot is None or not self.haproxy.alive():
            return
        slot = ep.slot
        self.haproxy.admin.send(haproxy.drain_slot(slot))
        deadline = time.monotonic() + self.drain_timeout
        while time.monotonic() < deadline:
            busy = [s for s in self.haproxy.admin.stats()
                    if s.get("svname") in (f"s{slot}", f"b{slot}") and s.get("scur", "0") not in ("", "0")]
            if not busy:
                return
            time.sleep(0.05)

    def retire(self, ep: Endpoints) -> str:
        """Take the unit's slot out of HAProxy and stop its server; returns what was found (a recorded process
        group that is no longer the one started is left alone, and the note says so)."""
        slot = ep.slot
        if slot is not None and self.haproxy.alive():
            self.haproxy.admin.send(haproxy.disable_slot(slot))
            self.haproxy.unroute_slot(slot)
        what = f"unit {Path(ep.log).stem if ep.log else slot}"
        watcher = self.watchers.stop(ep, what)
        stack = self._servers.pop(slot, None) if slot is not None else None
        if stack is not None:  # started by this command: its own stop is the graceful one
            stack.stop()
            self._remove_unit_dir(ep)
            return watcher
        note = self._note(watcher) if watcher else ""
        folder = self._unit_dir(ep)
        if ep.pgid:
            _announce_stop(folder, ep)
            stopped = processes.stop_recorded(ep.facts(), what, grace=STOP_GRACE_S, leader_first=True)
            note = "; ".join(n for n in (note, self._note(stopped)) if n)
        if folder is not None:  # a start killed between its spawn and its record (also a retried one): its tag
            found = processes.stop_unrecorded(processes.spawn_tag(folder), what)
            note = "; ".join(n for n in (note, self._note(found) if found else "") if n)
        self._remove_unit_dir(ep)
        return note

    def _unit_dir(self, ep: Endpoints) -> Path | None:
        """The unit's folder as recorded, only when it is one under this driver's units/ (the path comes from
        the state file)."""
        folder = Path(ep.unit_dir) if ep.unit_dir else None
        if folder is not None and folder == self.unit_folder(folder.name) and not folder.is_symlink():
            return folder
        return None

    def _remove_unit_dir(self, ep: Endpoints) -> None:
        """The unit's serving copy, admin key copy and metrics files, once its server is gone."""
        folder = self._unit_dir(ep)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    def _note(self, text: str) -> str:
        self.notes.append(text)
        return text

    def route(self, ep: Endpoints, version: str) -> None:
        """Send requests that name `version` to the unit's slot."""
        self.haproxy.set_route(version, f"slot{ep.slot}")

    def alias(self, ep: Endpoints) -> None:
        """Send requests that name the version 'current' to the unit's slot."""
        self.haproxy.set_route("current", f"slot{ep.slot}")

    def adapters(self, model: str, version: int, ep: Endpoints, listing: Mapping[str, str]) -> dict[str, str]:
        """Rename the next list onto the unit's served multi_lora.json (its backend follows the file). Only the
        unit's serving copy under this driver's folder is written, never the release or repository it was
        started from; a remote source is materialized first, as serve does."""
        from tritonpkg import safepath
        from tritonpkg.serve import weights as w

        if not ep.serving_repository:
            raise TritonpkgError("the unit records no serving repository", field="serving_repository")
        serving = Path(ep.serving_repository)
        version_dir = serving / model / str(version)
        if not safepath.within(version_dir, self.workdir):
            raise TritonpkgError(f"{serving} is served in place (a unit started by an older tritonpkg): an adapter "
                                 "rollout would rewrite its multi_lora.json", field="strategy",
                                 expected="--strategy red-black once, for a unit serving its own copy")
        root = self.weights_root or w.default_weights_root()
        written = {name: str(w.fetch_adapter(location, root)) if "://" in location else location
                   for name, location in listing.items()}
        digest = version_files.write_adapter_list(version_dir, written)
        deadline = time.monotonic() + self.adapter_ack_timeout  # the backend reads the list about once a second
        while version_files.served_digest(version_dir) != digest:
            if time.monotonic() > deadline:
                raise TritonpkgError(f"the unit's backend did not acknowledge the adapter list within "
                                     f"{self.adapter_ack_timeout:g} s", file=version_dir / version_files.SERVED,
                                     field="adapters", expected="the toolkit's vLLM backend serving this unit "
                                     "(NVIDIA's reads the list only at load)")
            time.sleep(0.2)
        return written

    def adapter_check(self, model: str, ep: Endpoints, smoke: dict[str, Any] | None, name: str) -> str:
        return check_adapter(_url(ep), model, smoke, name)

    def metrics_text(self, ep: Endpoints) -> str | None:
        if not ep.metrics_url:
            return None
        code, body = rest.request("GET", ep.metrics_url, timeout=2.0)
        return body.decode(errors="replace") if code == 200 else None

    def entry(self) -> Entry:
        return Entry(http_url=self.proxy.get("http_url"), grpc_url=self.proxy.get("grpc_url"))

    def teardown(self, units: Sequence[Endpoints]) -> list[str]:
        before = len(self.notes)
        self.shutdown(units)
        return [n for n in self.notes[before:] if n]

    def shutdown(self, units: Sequence[Endpoints | Mapping[str, Any]] = ()) -> None:
        """Stop every unit given (endpoints, or the state's JSON of them) and those started here, then HAProxy."""
        for ep in units:
            self.retire(Endpoints.of(ep))
        for slot in list(self._servers):
            stack = self._servers.pop(slot)
            stack.stop()
            if stack.options.state_dir is not None:
                shutil.rmtree(stack.options.state_dir, ignore_errors=True)
        self._note(self.haproxy.stop())


def serving_copy(repository: Path, dest: Path) -> Path:
    """The repository as a unit serves it: folders of its own (what Triton, the backend and an adapter rollout
    add or rename there stays in the unit's), each file hard-linked where the filesystem allows, else copied.
    A link is never written through: every writer of a served folder replaces files by rename (the adapter
    list, the backend's acknowledgement)."""

    def link_or_copy(src: str, dst: str) -> str:
        try:
            os.link(src, dst, follow_symlinks=False)
        except OSError:  # another filesystem, or a file hard links may not name (another user's)
            shutil.copy2(src, dst)
        return dst

    shutil.copytree(repository, dest, symlinks=True, copy_function=link_or_copy)
    return dest


def _served(serving: Path | None, model: str, version: int) -> dict[str, str] | None:
    """The adapter list a unit starts serving (its copy's multi_lora.json, folders absolute): what an adapter rollout
    into it starts from. None where it has no list, or one that is not name -> folder."""
    version_dir = Path(serving or "") / model / str(version)
    if serving is None or not (version_dir / version_files.MULTI_LORA).is_file():
        return None
    try:
        return adapters.served_list(version_dir)
    except TritonpkgError:
        return None


def _announce_stop(folder: Path | None, ep: Endpoints) -> None:
    """Tell a recorded unit's backends the stop's drain deadline (serve.stack.announce_stop), only through a stop
    file inside the unit's own folder (`folder`: LocalDriver._unit_dir; the path comes from the state file)."""
    stop_file = Path(str(ep.facts().get("stop_file") or ""))
    if folder is not None and stop_file.is_absolute() and stop_file.parent.parent == folder \
            and not stop_file.parent.is_symlink() and stop_file.parent.is_dir():
        from tritonpkg.serve.stack import announce_stop

        announce_stop(stop_file, STOP_GRACE_S)


def _check_port_base(base: int, slots: int, field: str) -> int:
    if base and not 1 <= base <= 65536 - UNIT_PORTS * slots:
        raise TritonpkgError(f"unit ports from {base} do not fit below 65536", field=field,
                             expected=f"1..{65536 - UNIT_PORTS * slots} ({UNIT_PORTS} ports for each of {slots} "
                                      "slots), or none for free ports")
    return base


def _url(ep: Endpoints) -> str:
    if not ep.http_url:
        raise TritonpkgError("the unit has no HTTP endpoint recorded (it never finished starting)", field="http_url")
    return ep.http_url


def _group_alive(ep: Endpoints) -> bool:
    """The recorded group still runs (and is the one recorded, when its identity was recorded)."""
    if not ep.pgid:
        return False
    if ep.pg_start is None:  # an older record: signal 0 only asks whether the group exists
        try:
            os.killpg(ep.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return state.recorded_group(ep.facts(), "")[0] is not None


def _implements(driver: LocalDriver) -> tuple[Driver, AdapterRollouts]:
    return driver, driver  # mypy proves the driver implements the core protocol and adapter rollouts
