"""The contract between the executor and a deploy target, in the manner of httpx's transport interface:
one small core protocol (`Driver`: a method per step kind every target carries out) plus optional
capabilities a target has or has not (`AdapterRollouts`, checked with isinstance), so no target implements a
step by refusing it; many implementations (drivers/local.py: tritonservers behind HAProxy;
drivers/kubernetes.py: objects through the API; the unit tests' fake). The executor owns the state file
and the gate's judgement; a driver only acts on its target and says where each unit is (`Endpoints`,
recorded in the state file and handed back on every later step, by this command or the next)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from tritonpkg.deploy.plan import Unit
from tritonpkg.deploy.release import Release


class Endpoints(BaseModel):
    """Where one unit is and what started it, as its target reports it (the executor keeps its own facts beside
    them in the unit's JSON object: executor.Recorded). Each target fills its own fields; a state written by
    another tritonpkg may hold more, kept as they are."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    # local: the HAProxy slot, the unit's process group (its leader's identity) and its own ports
    slot: int | None = None
    pgid: int | None = None
    pg_start: int | None = Field(default=None, description="leader's start time, clock ticks since boot")
    pg_exe: str | None = Field(default=None, description="leader's executable")
    pg_identity: str | None = Field(default=None, description="'unrecorded': from a state without the identity")
    http_url: str | None = None
    grpc_url: str | None = None
    metrics_url: str | None = None
    log: str | None = None
    repository: str | None = None
    serving_repository: str | None = None
    unit_dir: str | None = None
    weights: list[dict[str, Any]] | None = None
    # kubernetes: the unit's Deployment/Service name, and the ConfigMap holding the adapter list its pods follow
    name: str | None = None
    namespace: str | None = None
    adapter_list: str | None = None

    @classmethod
    def of(cls, facts: Mapping[str, Any] | Endpoints | None) -> Endpoints:
        return facts if isinstance(facts, Endpoints) else cls.model_validate(dict(facts or {}))

    def facts(self) -> dict[str, Any]:
        """The JSON object the state file keeps (fields never set are left out)."""
        return self.model_dump(by_alias=True, exclude_none=True)


class Entry(BaseModel):
    """Where consumers connect to the deployment (the local proxy's ports, or the route's name)."""

    http_url: str | None = None
    grpc_url: str | None = None
    route: str | None = None


OnStarted = Callable[[Endpoints], None]
"""Facts to record now, before the step returns: a process a killed command leaves must be findable."""


class Driver(Protocol):
    """What a deploy target implements. `proxy` holds the target's shared facts the state file keeps
    (the local HAProxy: socket, ports, process group); empty where there is none."""

    target: str
    proxy: dict[str, Any]

    def sync(self, model: str, units: Sequence[Mapping[str, Any]], alias: str | None) -> None:
        """Take the state's picture (units rows, the alias) before any step: each command has a fresh driver."""

    # -- one method per step kind --------------------------------------------------------------------
    def provision(self, model: str, unit: Unit, release: Release, taken_slots: set[int],
                  on_started: OnStarted) -> Endpoints:
        """Start the unit (not yet routed); `on_started` gets what must be recorded before it is ready."""

    def health_check(self, model: str, version: int, ep: Endpoints, smoke: dict[str, Any] | None) -> str:
        """Wait until the unit serves `version` (and answers the canary where the target can send one)."""

    def shift(self, weights: Mapping[str, tuple[Endpoints, int]]) -> None:
        """unit -> (endpoints, percent of the shared route), applied in one operation."""

    def alive(self, ep: Endpoints) -> bool:
        """gate: the unit still runs."""

    def metrics_text(self, ep: Endpoints) -> str | None:
        """gate (and gc): the unit's Prometheus text, None where the target has none reachable."""

    def scale(self, replicas: Mapping[str, int]) -> str:
        """unit -> replica count."""

    def drain(self, ep: Endpoints) -> None:
        """No new requests for the unit; its open ones finish (bounded)."""

    def retire(self, ep: Endpoints) -> str:
        """Take the unit out of routing and stop it; returns a note when something was found (or left)."""

    def route(self, ep: Endpoints, version: str) -> None:
        """Requests naming `version` go to the unit."""

    def alias(self, ep: Endpoints) -> None:
        """Requests naming the current version (x-model-version: current) go to the unit."""

    # -- status and teardown ---------------------------------------------------------------------------
    def entry(self) -> Entry:
        """Where consumers connect."""

    def teardown(self, units: Sequence[Endpoints]) -> list[str]:
        """Stop every unit given and the target's shared parts (the local proxy); returns notes."""


@runtime_checkable
class AdapterRollouts(Protocol):
    """A target that changes a running unit's LoRA adapters, its engine kept (local: the vLLM backend follows the
    unit's multi_lora.json; kubernetes: each pod's serve follows the unit's ConfigMap and rewrites its own).
    Only there does auto pick an adapter rollout and a plan carry `adapters` and `adapter_check` steps."""

    def adapters(self, model: str, version: int, ep: Endpoints, listing: Mapping[str, str]) -> dict[str, str]:
        """The running unit serves `listing` (adapter name -> folder, or a remote source to materialize first) from
        now on, its engine kept; returns the list as written."""

    def adapter_check(self, model: str, ep: Endpoints, smoke: dict[str, Any] | None, name: str) -> str:
        """The unit answers the smoke request with adapter `name` (once its backend has read the list)."""
