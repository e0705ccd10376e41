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
  death, that a neighbour's engine start on the other core would blur) runs after every other group, on
  one worker, with the other workers finished: the run ends serially.

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

SECONDS: dict[str, float] = {
    "vllm_server": 327, "tests/integration/test_docker_container_view.py": 245,
    "tests/integration/test_openai_frontend.py": 213, "tests/integration/test_engine_death.py": 171,
    "tests/integration/test_lora_serving.py": 167, "tests/integration/test_deploy_engine_death.py": 153,
    "tests/integration/test_vllm_backend_lifecycle.py": 125, "corpus_outcomes": 115,
    "tests/integration/test_embedding_serving.py": 107, "tests/integration/test_vllm_backend_startup.py": 94,
    "tests/integration/test_deploy_adapters.py": 92, "tests/integration/test_lane_toolkit_backend.py": 90,
    "tests/integration/test_lane_engine_args.py": 80, "tests/integration/test_deploy_local_weights.py": 77,
    "tests/integration/test_serve_stack.py": 72, "tests/integration/test_kubernetes_pod.py": 71,
    "tests/integration/test_logits_vllm.py": 66, "tests/integration/test_plugin_triton.py": 56,
    "tests/integration/test_deploy_local.py": 53, "tests/unit/test_plugins_validate.py": 51,
    "tests/integration/test_deploy_unit_death.py": 49, "tests/fuzz/test_logits_fuzz.py": 46,
}
"""Group -> its measured seconds, for the groups of 45 s or more (a two-worker run, `--junitxml` times summed)."""
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


def order(items: list[pytest.Item], root: Path) -> dict[str, str]:
    """Sort the items group by group, longest first (the order inside a group kept); node id -> group."""
    groups = {item.nodeid: group_of(item, root) for item in items}
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        first_seen.setdefault(groups[item.nodeid], index)
    items.sort(key=lambda item: (groups[item.nodeid].startswith(ALONE), -weight(groups[item.nodeid]),
                                 first_seen[groups[item.nodeid]]))
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
    """xdist's scope scheduling with the published groups as the scopes (a module path where none is), and the
    `alone` groups (queued last) held back until one worker is left: the first worker to reach them runs them
    all, each other worker is told to finish what it has and stop, and the first `alone` group goes out once
    those have. (A worker holds its last test until it gets the next or is stopped, so waiting for idle workers
    without stopping them would wait forever.)"""

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
        if node is not self._solo:
            node.shutdown()
        elif not any(self._pending_of(work) for other, work in self.assigned_work.items() if other is not node):
            super()._assign_work_unit(node)

    def mark_test_complete(self, node: WorkerController, item_index: int, duration: float = 0) -> None:
        super().mark_test_complete(node, item_index, duration)
        solo = self._solo
        if solo is not None and solo is not node and self.workqueue:
            self._reschedule(solo)  # the others' last tests are done: the alone groups may start

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:
            self._groups = {}
            folder = os.environ.get(ENV)
            for table in sorted(Path(folder).glob("*.json")) if folder else ():
                self._groups.update(json.loads(table.read_text()))
        return self._groups.get(nodeid) or nodeid.split("::")[0]
