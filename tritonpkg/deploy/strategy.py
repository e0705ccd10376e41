"""Which rollout a release gets: the choice `deploy --strategy auto` makes (adapters when only the LoRA adapters
changed and the target can roll them into the live engine, else red-black when the I/O stays compatible, else
versioned) and why a requested adapter rollout is refused. A pure function of what the executor read
(`Observed`), so every choice is tested with plain values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonpkg.deploy import adapters, iodiff
from tritonpkg.deploy.plan import (
    LiveState,
    Plan,
    PlanError,
    Strategy,
    Unit,
    plan_adapters,
    plan_red_black,
    plan_versioned,
)
from tritonpkg.deploy.release import Release
from tritonpkg.errors import TritonpkgError


@dataclass(frozen=True)
class Observed:
    """What the choice reads besides the release: the serving unit's recorded I/O schema; for an adapter rollout
    the live unit's recorded endpoints, its packaged files, its served adapter list and the release's files (None:
    not read, see `adapter_candidate`; `unreadable`: why reading the files failed, `served_error`: the served
    list's, raised only where the rollout needs it)."""

    serving_schema: Mapping[str, Any] | None = None
    endpoints: Mapping[str, Any] = field(default_factory=dict)
    live_files: Mapping[str, bytes] | None = None
    new_files: Mapping[str, bytes] | None = None
    served: Mapping[str, str] | None = None
    unreadable: str | None = None
    served_error: TritonpkgError | None = None


def _blockers(current: Unit | None, supported: bool, endpoints: Mapping[str, Any]) -> list[str]:
    if current is None:
        return ["no live unit"]
    if not supported:
        return ["this target cannot change a running unit's adapters"]
    if not endpoints.get("repository"):
        return [f"{current.name} records no repository"]
    if endpoints.get("adapter_list"):  # kubernetes: every pod follows the unit's list, whatever the replicas
        return [] if isinstance(endpoints.get("adapters"), dict) else [f"{current.name} records no adapter list"]
    if current.replicas != 1:
        return [f"{current.name} runs {current.replicas} replicas (adapter rollouts change one)"]
    if not endpoints.get("serving_repository"):
        return [f"{current.name} records no serving repository or adapter list"]
    return []


def adapter_candidate(release: Release, live: LiveState, supported: bool,
                      endpoints: Mapping[str, Any]) -> Path | dict[str, str] | None:
    """Where the live unit's served adapter list is read when the choice compares the releases' files (the executor
    reads them only then), else None: the folder of the unit's own multi_lora.json (local), or the list its driver
    recorded (kubernetes: the driver writes every list the pods follow)."""
    current = live.current()
    if current is None or release.strategy not in ("auto", "adapters") or _blockers(current, supported, endpoints):
        return None
    if endpoints.get("adapter_list"):
        return dict(endpoints["adapters"])
    return Path(endpoints["serving_repository"]) / live.model / str(current.version)


def choose_plan(release: Release, live: LiveState, seen: Observed, *, adapter_rollouts: bool,
                grace_s: float) -> Plan:
    """The plan for `release` against `live`, with the strategy auto picked and why. `adapter_rollouts`: the target
    can roll adapters into a running engine. Raises PlanError for a requested rollout that cannot be planned."""
    rollout = _adapter_rollout(release, live, seen, adapter_rollouts, grace_s)
    if isinstance(rollout, Plan):
        return rollout
    strategy, reason = _strategy(release, seen.serving_schema)
    if rollout and release.strategy == "auto":
        reason += f" (not an adapter rollout: {'; '.join(rollout)})"
    if strategy == "versioned":
        plan = plan_versioned(live, release.version, release.replicas)
    else:
        plan = plan_red_black(live, release.version, release.traffic_steps, release.replicas)
    plan.reason = reason
    return plan


def _strategy(release: Release, serving_schema: Mapping[str, Any] | None) -> tuple[Strategy, str]:
    compatible, reasons = None, []
    if release.strategy == "auto" and serving_schema is not None and release.schema_ is not None:
        d = iodiff.diff(iodiff.Schema.model_validate(dict(serving_schema)), release.schema_)
        compatible, reasons = d.compatible, d.reasons()
    return choose(release.strategy, compatible, reasons)


def choose(strategy: str, compatible: bool | None, reasons: list[str]) -> tuple[Strategy, str]:
    """auto -> red-black when the new I/O is compatible with the live one, else versioned, with why."""
    if strategy in ("red-black", "versioned", "adapters"):
        return strategy, f"--strategy {strategy}"  # type: ignore[return-value]
    if compatible is None:
        return "red-black", "auto: nothing live to compare with, red-black"
    if compatible:
        return "red-black", "auto: I/O compatible with the live version, red-black"
    return "versioned", "auto: I/O incompatible with the live version (" + "; ".join(reasons) + "), versioned"


def _adapter_rollout(release: Release, live: LiveState, seen: Observed, supported: bool,
                     grace_s: float) -> Plan | list[str]:
    """The adapter rollout of `release` into the live unit, or why there is none ([] when not asked about)."""
    if release.strategy not in ("auto", "adapters"):
        return []
    current = live.current()
    why = _blockers(current, supported, seen.endpoints)
    if why or current is None:
        return _refuse(release, why, quiet=True)
    if seen.unreadable or seen.live_files is None or seen.new_files is None:
        return _refuse(release, [f"the releases cannot be compared: {seen.unreadable or 'files not read'}"])
    lists = adapters.rollout(current.version, seen.live_files, seen.endpoints, release.model, release.version,
                             seen.new_files, release.repository / release.model / str(release.version),
                             seen.served, seen.served_error)
    if isinstance(lists, adapters.Refusal):
        return _refuse(release, lists.why, quiet=lists.quiet)
    plan = plan_adapters(live, current.name, release.version, dict(seen.served or {}), lists.load, lists.alias,
                         lists.final, lists.canaries, grace_s, summary=lists.summary, ids=lists.ids)
    plan.reason = ("--strategy adapters" if release.strategy == "adapters" else
                   "auto: only the LoRA adapters changed, rolled into the live engine of " + current.name)
    return plan


def _refuse(release: Release, why: list[str], quiet: bool = False) -> list[str]:
    """--strategy adapters: a PlanError naming why. auto: why, for the plan's reason (nothing when `quiet`: the
    release is no candidate at all, e.g. no LoRA or nothing live)."""
    if release.strategy == "adapters":
        raise PlanError("not an adapter rollout: " + "; ".join(why), field="strategy",
                        expected="a release whose only change from the live unit is its adapters")
    return [] if quiet else why
