"""Deployment state in SQLite: one row per model (strategy, alias, proxy facts), its units (version,
weight, endpoints, process group), every run with its plan, and the history of its steps. A run left
`running` by a killed command is found by the next command, which rolls it back (see executor).

The state folder decides which processes later commands signal and which files they write, so it is
trusted only when it is this user's alone: created 0700, refused when it (or a file in it) is a symlink,
owned by another user or writable by group/others (`secure_dir`, `check_file`); its files are written
with O_NOFOLLOW, atomically (`write_private`). A recorded process group carries its leader's start time
and executable (`process_identity`); `recorded_group` lets only the group that still matches them be signalled."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonpkg.deploy.plan import LiveState, Plan, Step, Unit
from tritonpkg.errors import TritonpkgError
from tritonpkg.private import (  # noqa: F401  the state's file rules, re-exported
    StateDirError,
    check_file,
    open_nofollow,
    read_private,
    secure_dir,
    write_private,
)
from tritonpkg.proc.group import group_members, process_identity

SCHEMA_VERSION = 2  # 2: process groups recorded with their leader's start time and executable
# The columns set_deployment and update_unit may change (their names go into the SQL text).
_DEPLOYMENT_FIELDS = frozenset({"target", "strategy", "alias", "info"})
_UNIT_FIELDS = frozenset({"version", "color", "weight", "replicas", "status", "routed", "last_active", "endpoints"})


def _columns(fields: Mapping[str, Any], allowed: frozenset[str]) -> list[str]:
    unknown = sorted(set(fields) - allowed)
    if unknown:
        raise ValueError(f"not a column that can be updated: {', '.join(unknown)} "
                         f"(expected {', '.join(sorted(allowed))})")
    return list(fields)


@dataclass(frozen=True)
class Snapshot:
    """One model's deployment as one read found it: what the planner (`live`), the driver's sync (`rows`, the
    alias, the proxy in `info`) and recovery (`running`) read, so a phase sees the state of one moment."""

    live: LiveState
    rows: list[dict[str, Any]] = field(default_factory=list)  # every unit's, retired ones too (units_table)
    endpoints: dict[str, dict[str, Any]] = field(default_factory=dict)  # unit -> what is recorded of it
    info: dict[str, Any] = field(default_factory=dict)
    running: list[tuple[int, Plan]] = field(default_factory=list)  # runs a stopped command left half-done


def _deployment(row: sqlite3.Row | None) -> dict[str, Any] | None:
    return None if row is None else {**dict(row), "info": json.loads(row["info"])}


def _unit_row(row: sqlite3.Row) -> dict[str, Any]:
    return {**dict(row), "endpoints": json.loads(row["endpoints"]), "routed": bool(row["routed"])}


def _unit(row: Mapping[str, Any]) -> Unit:
    return Unit(name=row["name"], version=row["version"], color=row["color"], weight=row["weight"],
                replicas=row["replicas"], status=row["status"], routed=row["routed"], last_active=row["last_active"])


def _plans(rows: list[sqlite3.Row]) -> list[tuple[int, Plan]]:
    return [(r["id"], Plan.model_validate_json(r["plan"])) for r in rows]


SCHEMA = """
CREATE TABLE IF NOT EXISTS deployments (
    model TEXT PRIMARY KEY, target TEXT NOT NULL, strategy TEXT, alias TEXT,
    info TEXT NOT NULL DEFAULT '{}', updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS units (
    model TEXT NOT NULL, name TEXT NOT NULL, version INTEGER NOT NULL, color TEXT,
    weight INTEGER NOT NULL DEFAULT 0, replicas INTEGER NOT NULL DEFAULT 1, status TEXT NOT NULL,
    routed INTEGER NOT NULL DEFAULT 0, last_active REAL, endpoints TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (model, name));
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, model TEXT NOT NULL, strategy TEXT NOT NULL, status TEXT NOT NULL,
    plan TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '', error TEXT, started REAL NOT NULL, finished REAL);
CREATE TABLE IF NOT EXISTS steps (
    run INTEGER NOT NULL, idx INTEGER NOT NULL, phase TEXT NOT NULL, kind TEXT NOT NULL, detail TEXT NOT NULL,
    status TEXT NOT NULL, message TEXT NOT NULL DEFAULT '', at REAL NOT NULL);
"""


# -- process identity -----------------------------------------------------------------------------
def identity_fields(pgid: int | None) -> dict[str, Any]:
    """What to record beside a process group's id, read while its leader is known to be ours (just started)."""
    ident = process_identity(pgid) if pgid else None
    if ident is None or ident[1] == "?":
        return {"pgid": pgid}
    return {"pgid": pgid, "pg_start": ident[0], "pg_exe": ident[1]}


def recorded_group(facts: Mapping[str, Any], what: str) -> tuple[int | None, str]:
    """(pgid to signal or None, what was found). A group is ours only while its leader has the recorded
    start time and executable: a mismatch is "gone, not ours". Without its leader (exited) or without a
    recorded identity (an older state file) a group cannot be verified and is never signalled; the note
    says how to look at it."""
    pgid = facts.get("pgid")
    if not pgid:
        return None, f"{what}: no process group recorded"
    start, exe = facts.get("pg_start"), facts.get("pg_exe")
    if start is None or not exe:
        return None, (f"{what}: process group {pgid} was recorded without its start time and executable (state from "
                      f"an older tritonpkg), so it is not signalled; check `ps -o pid,lstart,args -g {pgid}` and, "
                      f"if it is this deployment's, stop it with `kill -TERM -- -{pgid}`")
    now = process_identity(pgid)
    if now is None:
        members = [pid for pid, _ in group_members(int(pgid))]
        if not members:
            return None, f"{what}: process group {pgid} is gone"
        return None, (f"{what}: the leader of process group {pgid} has exited, so the group cannot be verified and "
                      f"is not signalled; pids {', '.join(map(str, members[:10]))} remain in it: check "
                      f"`ps -o pid,lstart,args -g {pgid}`")
    if now != (int(start), exe):
        return None, (f"{what}: process group {pgid} is gone, not ours: pid {pgid} is now {now[1]} started at tick "
                      f"{now[0]} (recorded: {exe} at tick {start}); not signalled")
    return int(pgid), f"{what}: process group {pgid}"


class StateStore:
    """A small SQLite file; each call is its own transaction so a kill leaves a consistent file.
    `read_only` (a dry run): nothing is created or written, a state that does not exist reads as empty."""

    def __init__(self, path: str | Path, read_only: bool = False) -> None:
        self.path = Path(path).absolute()
        self.read_only = read_only
        if read_only:
            if os.path.lexists(self.path.parent):
                secure_dir(self.path.parent)  # checks an existing folder, creates nothing
            self._exists = check_file(self.path)
            return
        secure_dir(self.path.parent)
        if not check_file(self.path):
            try:
                os.close(open_nofollow(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                check_file(self.path)
        with self._db() as db:
            db.executescript(SCHEMA)
            self._migrate(db)

    @staticmethod
    def _migrate(db: sqlite3.Connection) -> None:
        """Rows of an older schema: a process group recorded without identity is marked unverifiable."""
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version >= SCHEMA_VERSION:
            return
        for row in db.execute("SELECT model, name, endpoints FROM units").fetchall():
            ep = json.loads(row["endpoints"])
            if ep.get("pgid") and "pg_start" not in ep:
                ep["pg_identity"] = "unrecorded"
                db.execute("UPDATE units SET endpoints=? WHERE model=? AND name=?",
                           (json.dumps(ep), row["model"], row["name"]))
        for row in db.execute("SELECT model, info FROM deployments").fetchall():
            info = json.loads(row["info"])
            proxy = info.get("proxy") or {}
            if proxy.get("pgid") and "pg_start" not in proxy:
                proxy["pg_identity"] = "unrecorded"
                db.execute("UPDATE deployments SET info=? WHERE model=?", (json.dumps(info), row["model"]))
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        for name in (self.path.name, self.path.name + "-journal", self.path.name + "-wal", self.path.name + "-shm"):
            check_file(self.path.parent / name)
        db = self._connect()
        db.row_factory = sqlite3.Row
        try:
            with db:
                yield db
                if self.read_only and db.total_changes:
                    raise TritonpkgError("a read-only state (a dry run's) was asked to change", file=self.path,
                                         expected="reads only")
        finally:
            db.close()

    def _connect(self) -> sqlite3.Connection:
        if not self.read_only:
            return sqlite3.connect(self.path, timeout=30)
        if not self._exists:  # no state yet: an empty one in memory
            db = sqlite3.connect(":memory:")
            db.executescript(SCHEMA)
            return db
        return sqlite3.connect(self.path.as_uri() + "?mode=ro", uri=True, timeout=30)

    # -- deployments and units --------------------------------------------------------------------
    def models(self) -> list[str]:
        with self._db() as db:
            return [r["model"] for r in db.execute("SELECT model FROM deployments ORDER BY model")]

    def snapshot(self, model: str) -> Snapshot:
        """The model's deployment, its units and its runs left `running`, read in one transaction."""
        with self._db() as db:
            dep = db.execute("SELECT * FROM deployments WHERE model=?", (model,)).fetchone()
            units = db.execute("SELECT * FROM units WHERE model=? ORDER BY version", (model,)).fetchall()
            runs = db.execute("SELECT id, plan FROM runs WHERE status='running' AND model=?", (model,)).fetchall()
        deployment = _deployment(dep) or {}
        rows = [_unit_row(r) for r in units]
        live = LiveState(model=model, strategy=deployment.get("strategy"), alias=deployment.get("alias"),
                         units=[_unit(r) for r in rows if r["status"] != "retired"])
        return Snapshot(live=live, rows=rows, endpoints={r["name"]: r["endpoints"] for r in rows},
                        info=deployment.get("info", {}), running=_plans(runs))

    def deployment(self, model: str) -> dict[str, Any] | None:
        with self._db() as db:
            return _deployment(db.execute("SELECT * FROM deployments WHERE model=?", (model,)).fetchone())

    def ensure_deployment(self, model: str, target: str, info: dict[str, Any] | None = None) -> None:
        with self._db() as db:
            db.execute("INSERT OR IGNORE INTO deployments(model, target, info, updated) VALUES (?,?,?,?)",
                       (model, target, json.dumps(info or {}), time.time()))
            if info is not None:
                db.execute("UPDATE deployments SET info=? WHERE model=?", (json.dumps(info), model))

    def set_deployment(self, model: str, **fields: Any) -> None:
        sets = ", ".join(f"{k}=?" for k in _columns(fields, _DEPLOYMENT_FIELDS))
        values = [json.dumps(v) if k == "info" else v for k, v in fields.items()]
        with self._db() as db:
            db.execute(f"UPDATE deployments SET {sets}, updated=? WHERE model=?",  # noqa: S608  names checked by _columns
                       (*values, time.time(), model))

    def live(self, model: str) -> LiveState:
        return self.snapshot(model).live

    def put_unit(self, model: str, unit: Unit, endpoints: dict[str, Any] | None = None) -> None:
        with self._db() as db:
            db.execute(
                "INSERT INTO units(model, name, version, color, weight, replicas, status, routed, last_active,"
                " endpoints) VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT(model, name) DO UPDATE SET"
                " version=excluded.version, color=excluded.color, weight=excluded.weight,"
                " replicas=excluded.replicas, status=excluded.status, routed=excluded.routed,"
                " last_active=excluded.last_active, endpoints=excluded.endpoints",
                (model, unit.name, unit.version, unit.color, unit.weight, unit.replicas, unit.status,
                 int(unit.routed), unit.last_active, json.dumps(endpoints or {})))

    def update_unit(self, model: str, name: str, **fields: Any) -> None:
        values = [json.dumps(v) if k == "endpoints" else int(v) if k == "routed" else v for k, v in fields.items()]
        sets = ", ".join(f"{k}=?" for k in _columns(fields, _UNIT_FIELDS))
        with self._db() as db:
            db.execute(f"UPDATE units SET {sets} WHERE model=? AND name=?",  # noqa: S608  names checked by _columns
                       (*values, model, name))

    def endpoints(self, model: str, name: str) -> dict[str, Any]:
        with self._db() as db:
            row = db.execute("SELECT endpoints FROM units WHERE model=? AND name=?", (model, name)).fetchone()
        return json.loads(row["endpoints"]) if row else {}

    def units_table(self, model: str) -> list[dict[str, Any]]:
        with self._db() as db:
            rows = db.execute("SELECT * FROM units WHERE model=? ORDER BY version", (model,)).fetchall()
        return [_unit_row(r) for r in rows]

    # -- runs and step history ---------------------------------------------------------------------
    def start_run(self, plan: Plan, target: str | None = None) -> int:
        """A run of `plan`, recorded `running` until finish_run; `target` records the model's deployment first
        where there is none yet (a first deploy)."""
        if target is not None:
            self.ensure_deployment(plan.model, target)
        with self._db() as db:
            cur = db.execute("INSERT INTO runs(model, strategy, status, plan, reason, started) VALUES (?,?,?,?,?,?)",
                             (plan.model, plan.strategy, "running", plan.model_dump_json(), plan.reason, time.time()))
            if cur.lastrowid is None:
                raise RuntimeError("sqlite gave the new run no row id")
            return cur.lastrowid

    def finish_run(self, run: int, status: str, error: str | None = None) -> None:
        with self._db() as db:
            db.execute("UPDATE runs SET status=?, error=?, finished=? WHERE id=?", (status, error, time.time(), run))

    def running_runs(self, model: str | None = None) -> list[tuple[int, Plan]]:
        query, args = "SELECT id, plan FROM runs WHERE status='running'", tuple[str, ...]()
        if model:
            query, args = query + " AND model=?", (model,)
        with self._db() as db:
            return _plans(db.execute(query, args).fetchall())

    def runs(self, model: str, limit: int = 5) -> list[dict[str, Any]]:
        with self._db() as db:
            rows = db.execute("SELECT id, strategy, status, reason, error, started, finished FROM runs WHERE model=?"
                              " ORDER BY id DESC LIMIT ?", (model, limit)).fetchall()
        return [dict(r) for r in rows]

    def record_step(self, run: int, idx: int, phase: str, step: Step, status: str, message: str = "") -> None:
        with self._db() as db:
            db.execute("INSERT INTO steps(run, idx, phase, kind, detail, status, message, at) VALUES (?,?,?,?,?,?,?,?)",
                       (run, idx, phase, step.kind, step.model_dump_json(), status, message, time.time()))

    def steps(self, run: int) -> list[dict[str, Any]]:
        with self._db() as db:
            rows = db.execute("SELECT * FROM steps WHERE run=? ORDER BY at", (run,)).fetchall()
        return [dict(r) for r in rows]
