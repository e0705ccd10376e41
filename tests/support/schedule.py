"""How a whole-suite run shares the machine's cores when asked to (`TRITONPKG_TEST_WORKERS=N bash scripts/test.sh`:
pytest-xdist, `-n N --dist loadgroup`).

Two workers use the second core that engine starts, stops and health polls leave idle part of the time
(docs/testing.md has the measurement), and three rules keep what the shared servers saved:
- every module runs whole on one worker, so a module's servers start once;
- the modules that read one session server (`vllm_server`, `python_server`, the differential corpus) form
  one group and run on one worker, so each of those servers starts once in the run;
- the groups go out longest first, so no worker is left with a long module at the end while the other
  sits idle. The lengths are measured module times on a 2-core machine (`--durations=0`, summed per
  module); they only order the work: a wrong or missing one costs balance, never a test.

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

ENV = "TRITONPKG_TEST_GROUPS"
"""The folder where the workers publish their tables, set by the controller for the workers it starts."""

SESSION_SERVERS = ("vllm_server", "python_server", "corpus_outcomes")
"""Session fixtures too costly to start once per worker: their users form one group."""

SECONDS: dict[str, float] = {
    "vllm_server": 330, "tests/integration/test_deploy_engine_death.py": 150,
    "tests/integration/test_engine_death.py": 120, "tests/integration/test_docker_container_view.py": 120,
    "tests/integration/test_openai_frontend.py": 116, "tests/integration/test_lora_serving.py": 102,
    "corpus_outcomes": 85, "tests/integration/test_vllm_backend_lifecycle.py": 68,
    "tests/integration/test_deploy_adapters.py": 58, "tests/integration/test_serve_stack.py": 57,
    "tests/integration/test_deploy_local.py": 55, "tests/integration/test_vllm_backend_startup.py": 52,
}
"""Group -> its measured seconds, for the groups of 50 s or more."""
INTEGRATION_S = 20.0
"""The length assumed for another integration module (most start a server), ahead of the fast unit tests."""


def group_of(item: pytest.Item, root: Path) -> str:
    used = set(getattr(item, "fixturenames", ()))
    for name in SESSION_SERVERS:
        if name in used:
            return name
    return item.path.relative_to(root).as_posix()


def weight(group: str) -> float:
    if group in SECONDS:
        return SECONDS[group]
    return INTEGRATION_S if group.startswith("tests/integration/") else 0.0


def order(items: list[pytest.Item], root: Path) -> dict[str, str]:
    """Sort the items group by group, longest first (the order inside a group kept); node id -> group."""
    groups = {item.nodeid: group_of(item, root) for item in items}
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        first_seen.setdefault(groups[item.nodeid], index)
    items.sort(key=lambda item: (-weight(groups[item.nodeid]), first_seen[groups[item.nodeid]]))
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
    """xdist's scope scheduling with the published groups as the scopes (a module path where none is)."""

    def __init__(self, config: pytest.Config, log: object = None) -> None:
        super().__init__(config, log)  # type: ignore[arg-type]
        self._groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:
            self._groups = {}
            folder = os.environ.get(ENV)
            for table in sorted(Path(folder).glob("*.json")) if folder else ():
                self._groups.update(json.loads(table.read_text()))
        return self._groups.get(nodeid) or nodeid.split("::")[0]
