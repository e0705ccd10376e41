"""How a whole-suite run shares the machine's cores when asked to (`TRITONPKG_TEST_WORKERS=N bash scripts/test.sh`:
pytest-xdist, `-n N --dist loadgroup`).

Two workers use the second core that engine starts, stops and health polls leave idle part of the time
(docs/testing.md has the measurement), and three rules keep what the shared servers saved:
- every module runs whole on one worker, so a module's servers start once;
- the modules that read one session server (`vllm_server`, `python_server`, the differential corpus) form
  one group and run on one worker, so each of those servers starts once in the run;
- the groups go out longest first, so no worker is left with a long module at the end while the other
  sits idle. The lengths are measured module times on a 2-core machine (`--durations=0`, summed per
  module); they only order the work: a wrong or missing one costs balance, never a test;
- a module marked `alone` (it holds a time bound of the product, e.g. readiness within 2 s of an engine's
  death, that a neighbour's engine start on the other core would blur) runs once no other worker has an
  engine module left, on one worker, while the others run the light modules (unit, security and fuzz modules
  shorter than SECONDS' floor, which start no engine and no session server): the engine-death modules' lags
  measured beside the unit and security suites were 0.8-1.0 s, against their 2 s bar.

The workers know the groups (they collect; the controller does not), so each writes its node id -> group
table to a folder the controller names, and the controller's scheduler reads it. (xdist's own
`xdist_group` marks rename node ids through an attribute pytest 9.2 no longer reads.)"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling
from xdist.workermanage import WorkerController

ENV = "TRITONPKG_TEST_GROUPS"
"""The folder where the workers publish their tables, set by the controller for the workers it starts."""

SESSION_SERVERS = ("vllm_server", "python_server", "corpus_outcomes")
"""Session fixtures too costly to start once per worker: their users form one group."""
ALONE = "alone:"
"""The group-name prefix of a module marked `alone`."""
HEAVY_ROOT = "tests/integration/"
"""Modules under it start servers or engines: never light."""

SECONDS: dict[str, float] = {
    "tests/integration/test_lora_serving.py": 197, "tests/integration/test_openai_frontend.py": 193,
    "tests/integration/test_deploy_engine_death.py": 184, "vllm_server": 154,
    "tests/integration/test_docker_container_view.py": 132, "corpus_outcomes": 130,
    "tests/integration/test_engine_death.py": 115, "tests/integration/test_deploy_adapters.py": 97,
    "tests/integration/test_vllm_backend_lifecycle.py": 67, "tests/integration/test_lane_toolkit_backend.py": 65,
    "tests/integration/test_kubernetes_pod.py": 64, "tests/integration/test_serve_stack.py": 60,
    "tests/integration/test_lane_engine_args.py": 58, "tests/integration/test_vllm_backend_startup.py": 56,
    "tests/integration/test_deploy_local_weights.py": 54, "tests/integration/test_deploy_local.py": 51,
    "tests/integration/test_embedding_serving.py": 51, "tests/unit/test_plugins_validate.py": 41,
    "tests/unit/test_proc_group_grpc.py": 40,  # short alone, but its gRPC clients busy a core: never beside `alone`
}
"""Group -> its measured seconds, for the groups of 40 s or more (a two-worker run of 205229d, `--junitxml` times
summed)."""
INTEGRATION_S = 20.0
"""The length assumed for another integration module (most start a server), ahead of the fast unit tests."""


def group_of(item: pytest.Item, root: Path) -> str:
    module = item.path.relative_to(root).as_posix()
    if item.get_closest_marker("alone") is not None:
        return ALONE + module
    used = set(getattr(item, "fixturenames", ()))
    for name in SESSION_SERVERS:
        if name in used:
            return name
    return module


def weight(group: str) -> float:
    group = group.removeprefix(ALONE)
    if group in SECONDS:
        return SECONDS[group]
    return INTEGRATION_S if group.startswith("tests/integration/") else 0.0


def light(group: str) -> bool:
    """A group that may run beside an `alone` one: no engine, no server of the session, under SECONDS' floor."""
    return not group.startswith((ALONE, HEAVY_ROOT)) and group not in SESSION_SERVERS and group not in SECONDS


def order(items: list[pytest.Item], root: Path) -> dict[str, str]:
    """Sort the items group by group: the heavy groups longest first, then the `alone` ones, then the light ones
    (kept for the `alone` tail); the order inside a group kept. Returns node id -> group."""
    groups = {item.nodeid: group_of(item, root) for item in items}
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        first_seen.setdefault(groups[item.nodeid], index)

    def key(item: pytest.Item) -> tuple[int, float, int]:
        group = groups[item.nodeid]
        return (2 if light(group) else 1 if group.startswith(ALONE) else 0), -weight(group), first_seen[group]

    items.sort(key=key)
    return groups


def prepare_controller() -> Path | None:
    """Name the folder the workers (started after this, with this environment) publish to; returns it when
    this call made it (the caller removes it at the end)."""
    if ENV in os.environ:
        return None
    folder = tempfile.mkdtemp(prefix="tritonpkg-test-groups-")
    os.environ[ENV] = folder
    return Path(folder)


def publish(items: list[pytest.Item], root: Path) -> None:
    """On a worker: order the items and write the group table (before the worker reports its collection)."""
    groups = order(items, root)
    folder = os.environ.get(ENV)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if folder and worker:
        path = Path(folder) / f"{worker}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups))
        tmp.replace(path)


class GroupScheduling(LoadScopeScheduling):
    """xdist's scope scheduling with the published groups as the scopes (a module path where none is). Once the
    queue's head is an `alone` group, the first worker to reach it (the solo) runs the `alone` groups, one after
    another, as soon as no other worker has a heavy group pending; until then it takes light groups. Every
    other worker takes light groups, and is stopped when none is left. (A worker holds its last test until it
    gets the next unit or is stopped, so a worker can never be left waiting for work that will not come.)"""

    def __init__(self, config: pytest.Config, log: object = None) -> None:
        super().__init__(config, log)  # type: ignore[arg-type]
        self._groups: dict[str, str] | None = None
        self._solo: WorkerController | None = None

    def _assign_work_unit(self, node: WorkerController) -> None:
        if not next(iter(self.workqueue)).startswith(ALONE):
            super()._assign_work_unit(node)
            return
        if self._solo is None:
            self._solo = node
        heavy_elsewhere = any(self._pending_of({scope: work}) for other, assigned in self.assigned_work.items()
                              if other is not node for scope, work in assigned.items() if not light(scope))
        if node is self._solo and not heavy_elsewhere:
            super()._assign_work_unit(node)
            return
        spare = next((scope for scope in self.workqueue if light(scope)), None)
        if spare is not None:
            self.workqueue.move_to_end(spare, last=False)
            super()._assign_work_unit(node)
        elif node is not self._solo:
            node.shutdown()

    def mark_test_complete(self, node: WorkerController, item_index: int, duration: float = 0) -> None:
        super().mark_test_complete(node, item_index, duration)
        solo = self._solo
        if solo is not None and solo is not node and self.workqueue:
            self._reschedule(solo)  # the others' heavy tests may be done: the alone groups may start

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:
            self._groups = {}
            folder = os.environ.get(ENV)
            for table in sorted(Path(folder).glob("*.json")) if folder else ():
                self._groups.update(json.loads(table.read_text()))
        return self._groups.get(nodeid) or nodeid.split("::")[0]
