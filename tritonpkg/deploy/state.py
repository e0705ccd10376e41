"""Deployment state in SQLite: one row per model (strategy, alias, proxy facts), its units (version,
weight, endpoints, process group), every run with its plan, and the history of its steps. A run left
`running` by a killed command is found by the next command, which rolls it back (see executor)."""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from tritonpkg.deploy.plan import LiveState, Plan, Unit

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


class StateStore:
    """A small SQLite file; each call is its own transaction so a kill leaves a consistent file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._db() as db:
            db.executescript(SCHEMA)

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30)
        db.row_factory = sqlite3.Row
        try:
            with db:
                yield db
        finally:
            db.close()

    # -- deployments and units --------------------------------------------------------------------
    def models(self) -> list[str]:
        with self._db() as db:
            return [r["model"] for r in db.execute("SELECT model FROM deployments ORDER BY model")]

    def deployment(self, model: str) -> dict[str, Any] | None:
        with self._db() as db:
            row = db.execute("SELECT * FROM deployments WHERE model=?", (model,)).fetchone()
        if row is None:
            return None
        return {**dict(row), "info": json.loads(row["info"])}

    def ensure_deployment(self, model: str, target: str, info: dict[str, Any] | None = None) -> None:
        with self._db() as db:
            db.execute("INSERT OR IGNORE INTO deployments(model, target, info, updated) VALUES (?,?,?,?)",
                       (model, target, json.dumps(info or {}), time.time()))
            if info is not None:
                db.execute("UPDATE deployments SET info=? WHERE model=?", (json.dumps(info), model))

    def set_deployment(self, model: str, **fields: Any) -> None:
        sets = ", ".join(f"{k}=?" for k in fields)
        values = [json.dumps(v) if k == "info" else v for k, v in fields.items()]
        with self._db() as db:
            db.execute(f"UPDATE deployments SET {sets}, updated=? WHERE model=?", (*values, time.time(), model))

    def live(self, model: str) -> LiveState:
        dep = self.deployment(model) or {}
        with self._db() as db:
            rows = db.execute("SELECT * FROM units WHERE model=? AND status!='retired' ORDER BY version",
                              (model,)).fetchall()
        units = [Unit(name=r["name"], version=r["version"], color=r["color"], weight=r["weight"],
                      replicas=r["replicas"], status=r["status"], routed=bool(r["routed"]),
                      last_active=r["last_active"]) for r in rows]
        return LiveState(model=model, strategy=dep.get("strategy"), units=units, alias=dep.get("alias"))

    def put_unit(self, model: str, unit: Unit, endpoints: dict[str, Any] | None = None) -> None:
        with self._db() as db:
            db.execute(
                "INSERT INTO units(model, name, version, color, weight, replicas, status, routed, last_active, endpoints)"
                " VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT(model, name) DO UPDATE SET version=excluded.version,"
                " color=excluded.color, weight=excluded.weight, replicas=excluded.replicas, status=excluded.status,"
                " routed=excluded.routed, last_active=excluded.last_active, endpoints=excluded.endpoints",
                (model, unit.name, unit.version, unit.color, unit.weight, unit.replicas, unit.status,
                 int(unit.routed), unit.last_active, json.dumps(endpoints or {})))

    def update_unit(self, model: str, name: str, **fields: Any) -> None:
        fields = {k: (json.dumps(v) if k == "endpoints" else int(v) if k == "routed" else v) for k, v in fields.items()}
        sets = ", ".join(f"{k}=?" for k in fields)
        with self._db() as db:
            db.execute(f"UPDATE units SET {sets} WHERE model=? AND name=?", (*fields.values(), model, name))

    def endpoints(self, model: str, name: str) -> dict[str, Any]:
        with self._db() as db:
            row = db.execute("SELECT endpoints FROM units WHERE model=? AND name=?", (model, name)).fetchone()
        return json.loads(row["endpoints"]) if row else {}

    def units_table(self, model: str) -> list[dict[str, Any]]:
        with self._db() as db:
            rows = db.execute("SELECT * FROM units WHERE model=? ORDER BY version", (model,)).fetchall()
        return [{**dict(r), "endpoints": json.loads(r["endpoints"]), "routed": bool(r["routed"])} for r in rows]

    # -- runs and step history ---------------------------------------------------------------------
    def start_run(self, plan: Plan) -> int:
        with self._db() as db:
            cur = db.execute("INSERT INTO runs(model, strategy, status, plan, reason, started) VALUES (?,?,?,?,?,?)",
                             (plan.model, plan.strategy, "running", plan.model_dump_json(), plan.reason, time.time()))
            return int(cur.lastrowid)

    def finish_run(self, run: int, status: str, error: str | None = None) -> None:
        with self._db() as db:
            db.execute("UPDATE runs SET status=?, error=?, finished=? WHERE id=?", (status, error, time.time(), run))

    def running_runs(self, model: str | None = None) -> list[tuple[int, Plan]]:
        query, args = "SELECT id, plan FROM runs WHERE status='running'", ()
        if model:
            query, args = query + " AND model=?", (model,)
        with self._db() as db:
            rows = db.execute(query, args).fetchall()
        return [(r["id"], Plan.model_validate_json(r["plan"])) for r in rows]

    def runs(self, model: str, limit: int = 5) -> list[dict[str, Any]]:
        with self._db() as db:
            rows = db.execute("SELECT id, strategy, status, reason, error, started, finished FROM runs WHERE model=?"
                              " ORDER BY id DESC LIMIT ?", (model, limit)).fetchall()
        return [dict(r) for r in rows]

    def record_step(self, run: int, idx: int, phase: str, step: Any, status: str, message: str = "") -> None:
        with self._db() as db:
            db.execute("INSERT INTO steps(run, idx, phase, kind, detail, status, message, at) VALUES (?,?,?,?,?,?,?,?)",
                       (run, idx, phase, step.kind, step.model_dump_json(), status, message, time.time()))

    def steps(self, run: int) -> list[dict[str, Any]]:
        with self._db() as db:
            rows = db.execute("SELECT * FROM steps WHERE run=? ORDER BY at", (run,)).fetchall()
        return [dict(r) for r in rows]
