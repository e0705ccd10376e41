"""How sure a run is of a latency difference: a bootstrap over rounds.

The serving benches alternate their paths in rounds so that the machine's drift hits all alike; a
round's requests share that moment, so they are not independent samples. Resampling whole rounds (the
same rounds for both paths: they ran side by side) gives an interval for "this path's p50 minus the
baseline's" that a single run can be judged by, instead of one number that moved ±2 ms between runs here."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Shift:
    """`path`'s q-th percentile minus the baseline's, with a 95% bootstrap interval (same unit as the samples)."""

    value: float
    low: float
    high: float

    def verdict(self, goal: float) -> str:
        """"met" when the whole interval is within the goal, "missed" when none of it is, else "unsure"."""
        if self.high <= goal:
            return "met"
        if self.low > goal:
            return "missed"
        return "unsure"


def percentile_shift(base_rounds: list[list[float]], path_rounds: list[list[float]], q: float = 50,
                     resamples: int = 2000, seed: int = 0) -> Shift:
    """Rounds are paired by index (round i of both paths ran back to back); each resample draws round
    indices with replacement and compares the percentiles of the pooled samples of those rounds."""
    if len(base_rounds) != len(path_rounds) or not base_rounds:
        raise ValueError(f"need the same number of rounds for both paths "
                         f"(got {len(base_rounds)} and {len(path_rounds)})")
    base = [np.asarray(r, dtype=float) for r in base_rounds]
    path = [np.asarray(r, dtype=float) for r in path_rounds]
    value = float(np.percentile(np.concatenate(path), q) - np.percentile(np.concatenate(base), q))
    rng = np.random.default_rng(seed)
    draws = np.empty(resamples)
    for i in range(resamples):
        pick = rng.integers(0, len(base), len(base))
        draws[i] = (np.percentile(np.concatenate([path[j] for j in pick]), q)
                    - np.percentile(np.concatenate([base[j] for j in pick]), q))
    low, high = np.percentile(draws, [2.5, 97.5])
    return Shift(value, float(low), float(high))
