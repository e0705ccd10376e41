"""Which rollout a release gets: the choice `deploy --strategy auto` makes (adapters when only the LoRA adapters
changed and the target can roll them into the live engine, else red-black when the I/O stays compatible, else
versioned) and why a requested adapter rollout is refused. A pure function of what the executor found (the
adapter rollout `adapters.rollout` computed, or why there is none; the I/O changes `iodiff.diff` found breaking),
so every choice is tested with plain values."""

from __future__ import annotations

from tritonpkg.deploy import adapters
from tritonpkg.deploy.plan import (
    LiveState,
    Plan,
    PlanError,
    Strategy,
    plan_adapters,
    plan_red_black,
    plan_versioned,
)
from tritonpkg.deploy.release import Release

Rollout = adapters.Lists | adapters.Refusal | None
"""An adapter rollout into the live unit, why there is none, or None: not asked about (another strategy)."""


def choose_plan(release: Release, live: LiveState, rollout: Rollout, breaking: list[str] | None, *,
                grace_s: float) -> Plan:
    """The plan for `release` against `live`, with the strategy auto picked and why; `breaking`: how the release's
    I/O breaks the serving unit's clients (None: nothing compared). Raises PlanError for a requested rollout that
    cannot be planned."""
    strategy, reason = _choice(release, rollout, breaking)
    if isinstance(rollout, adapters.Lists):
        plan = plan_adapters(live, rollout.unit, release.version, rollout.served, rollout.load, rollout.alias,
                             rollout.final, rollout.canaries, grace_s, summary=rollout.summary, ids=rollout.ids)
    elif strategy == "versioned":
        plan = plan_versioned(live, release.version, release.replicas)
    else:
        plan = plan_red_black(live, release.version, release.traffic_steps, release.replicas)
    plan.reason = reason
    return plan


def _choice(release: Release, rollout: Rollout, breaking: list[str] | None) -> tuple[Strategy, str]:
    if isinstance(rollout, adapters.Lists):
        return "adapters", ("--strategy adapters" if release.strategy == "adapters" else
                            "auto: only the LoRA adapters changed, rolled into the live engine of " + rollout.unit)
    why = [] if rollout is None else _refuse(release, rollout)
    strategy, reason = choose(release.strategy, None if breaking is None else not breaking, breaking or [])
    if why and release.strategy == "auto":
        reason += f" (not an adapter rollout: {'; '.join(why)})"
    return strategy, reason


def choose(strategy: str, compatible: bool | None, reasons: list[str]) -> tuple[Strategy, str]:
    """auto -> red-black when the new I/O is compatible with the live one, else versioned, with why."""
    if strategy in ("red-black", "versioned", "adapters"):
        return strategy, f"--strategy {strategy}"  # type: ignore[return-value]
    if compatible is None:
        return "red-black", "auto: nothing live to compare with, red-black"
    if compatible:
        return "red-black", "auto: I/O compatible with the live version, red-black"
    return "versioned", "auto: I/O incompatible with the live version (" + "; ".join(reasons) + "), versioned"


def _refuse(release: Release, refusal: adapters.Refusal) -> list[str]:
    """--strategy adapters: a PlanError naming why. auto: why, for the plan's reason (nothing when quiet: the
    release is no candidate at all, e.g. no LoRA or nothing live)."""
    if release.strategy == "adapters":
        raise PlanError("not an adapter rollout: " + "; ".join(refusal.why), field="strategy",
                        expected="a release whose only change from the live unit is its adapters")
    return [] if refusal.quiet else refusal.why
