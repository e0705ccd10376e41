"""Which rollout a release gets: the choice `deploy --strategy auto` makes (adapters when only the LoRA adapters
changed and the target can roll them into the live engine, else red-black when the I/O stays compatible, else
versioned) and why a requested adapter rollout is refused. A pure function of what the executor read
(`Observed`), so every choice is tested with plain values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonpkg import version_files
from tritonpkg.deploy import adapters, iodiff
from tritonpkg.deploy.plan import (
    LiveState,
    Plan,
    PlanError,
    Unit,
    choose,
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
    not read, see `wants_adapter_files`; `unreadable`: why reading the files failed, `served_error`: the served
    list's, raised only where the rollout needs it)."""

    serving_schema: Mapping[str, Any] | None = None
    endpoints: Mapping[str, Any] = field(default_factory=dict)
    live_files: Mapping[str, bytes] | None = None
    new_files: Mapping[str, bytes] | None = None
    served: Mapping[str, str] | None = None
    unreadable: str | None = None
    served_error: TritonpkgError | None = None


def adapter_unit(live: LiveState) -> Unit | None:
    """The unit an adapter rollout would change: the alias's, else the serving one."""
    return live.unit(live.alias or "") or live.serving()


def _blockers(live: LiveState, supported: bool, endpoints: Mapping[str, Any]) -> list[str]:
    current = adapter_unit(live)
    if current is None:
        return ["no live unit"]
    if not supported:
        return ["this target cannot change a running unit's adapters"]
    if current.replicas != 1:
        return [f"{current.name} runs {current.replicas} replicas (adapter rollouts change one)"]
    if not (endpoints.get("repository") and endpoints.get("serving_repository")):
        return [f"{current.name} records no repository"]
    return []


def wants_adapter_files(release: Release, live: LiveState, supported: bool, endpoints: Mapping[str, Any]) -> bool:
    """Whether the choice compares the releases' files (the executor reads them only then)."""
    return release.strategy in ("auto", "adapters") and not _blockers(live, supported, endpoints)


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


def _strategy(release: Release, serving_schema: Mapping[str, Any] | None) -> tuple[str, str]:
    if release.strategy != "auto":
        return choose(release.strategy, None, [])
    if serving_schema is None or release.schema_ is None:
        return choose("auto", None, [])
    d = iodiff.diff(iodiff.Schema.model_validate(dict(serving_schema)), release.schema_)
    return choose("auto", d.compatible, d.reasons())


def _adapter_rollout(release: Release, live: LiveState, seen: Observed, supported: bool,
                     grace_s: float) -> Plan | list[str]:
    """The adapter rollout of `release` into the live unit, or why there is none ([] when not asked about)."""
    if release.strategy not in ("auto", "adapters"):
        return []
    current = adapter_unit(live)
    why = _blockers(live, supported, seen.endpoints)
    if why or current is None:
        return _refuse(release, why, quiet=True)
    if seen.unreadable or seen.live_files is None or seen.new_files is None:
        return _refuse(release, [f"the releases cannot be compared: {seen.unreadable or 'files not read'}"])
    try:
        live_facts = adapters.facts(live.model, current.version, seen.live_files)
        new_facts = adapters.facts(release.model, release.version, seen.new_files)
    except (ValueError, TritonpkgError) as exc:
        return _refuse(release, [f"the releases cannot be compared: {exc}"])
    if not (live_facts.lora and new_facts.lora):
        return _refuse(release, ["LoRA is off in the " + ("live" if not live_facts.lora else "new") + " release"],
                       quiet=True)
    ep = seen.endpoints
    live_facts.adapters = dict(ep.get("adapter_ids") or live_facts.adapters)
    released = max(current.version, int(ep.get("adapter_release") or 0))
    why = adapters.only_adapters_changed(live_facts, new_facts)
    if not why and release.version <= released:
        why.append(f"version {release.version} is not above the live adapters' {released}")
    if why:
        return _refuse(release, why)
    if seen.served_error is not None:
        raise seen.served_error
    listing = version_files.adapter_list(seen.new_files[f"{release.model}/{release.version}/{adapters.MULTI_LORA}"])
    version_dir = release.repository / release.model / str(release.version)
    folders = {name: str(version_dir / loc.removeprefix("./")) if loc.startswith("./") else loc
               for name, loc in listing.items()}
    live_list = dict(seen.served or {})
    lists = adapters.rollout_lists(live_list, live_facts.adapters, folders, new_facts.adapters, release.version)
    plan = plan_adapters(live, current.name, release.version, live_list, lists.load, lists.alias, lists.final,
                         lists.canaries, grace_s, summary=lists.summary)
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


def serving_version(endpoints: Mapping[str, Any], model: str, version: int) -> Path:
    """The live unit's served version folder, where its adapter list is."""
    return Path(endpoints["serving_repository"]) / model / str(version)
