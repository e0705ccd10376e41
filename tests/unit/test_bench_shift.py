"""The round bootstrap the serving benches judge their latency goals by."""

from __future__ import annotations

import numpy as np
import pytest

from tritonpkg.benchmarks.shift import Shift, percentile_shift


def rounds(rng, n_rounds: int, per_round: int, shift: float, drift: float = 10.0) -> tuple[list, list]:
    """Both paths share each round's drift (the machine's speed at that moment); `path` is `shift` slower."""
    base, path = [], []
    for _ in range(n_rounds):
        moment = rng.uniform(0, drift)
        base.append(list(50 + moment + rng.normal(0, 5, per_round)))
        path.append(list(50 + moment + shift + rng.normal(0, 5, per_round)))
    return base, path


def test_a_real_shift_is_inside_the_interval_and_zero_is_not() -> None:
    base, path = rounds(np.random.default_rng(1), 20, 40, shift=4.0)
    found = percentile_shift(base, path)
    assert found.low < 4.0 < found.high
    assert found.low > 0
    assert found.verdict(2.0) == "missed" and found.verdict(10.0) == "met"


def test_no_shift_is_not_called_a_difference() -> None:
    base, path = rounds(np.random.default_rng(2), 20, 40, shift=0.0)
    found = percentile_shift(base, path)
    assert found.low < 0 < found.high
    assert found.verdict(-1.0) != "met"


def test_few_noisy_rounds_give_a_wide_interval_and_an_unsure_verdict() -> None:
    base, path = rounds(np.random.default_rng(3), 4, 8, shift=2.0, drift=30.0)
    found = percentile_shift(base, path)
    assert found.high - found.low > 4
    assert found.verdict(2.0) == "unsure"


def test_rounds_are_resampled_in_pairs_so_shared_drift_cancels() -> None:
    """Drift between rounds larger than the shift, shared by both paths within a round: resampling the
    same rounds for both keeps the interval narrow; with the pairing broken it is several times wider."""
    base, path = rounds(np.random.default_rng(4), 20, 40, shift=3.0, drift=40.0)
    paired = percentile_shift(base, path)
    order = np.random.default_rng(4).permutation(len(path))
    broken = percentile_shift(base, [path[i] for i in order])
    assert paired.low < 3.0 < paired.high
    assert (broken.high - broken.low) > 4 * (paired.high - paired.low)


def test_the_same_seed_gives_the_same_interval_and_unpaired_input_is_refused() -> None:
    base, path = rounds(np.random.default_rng(5), 6, 10, shift=1.0)
    assert percentile_shift(base, path, seed=7) == percentile_shift(base, path, seed=7)
    with pytest.raises(ValueError, match="same number of rounds"):
        percentile_shift(base, path[:-1])


def test_verdict_edges() -> None:
    assert Shift(1.0, 0.5, 2.0).verdict(2.0) == "met"
    assert Shift(3.0, 2.0, 4.0).verdict(2.0) == "unsure"
    assert Shift(3.0, 2.01, 4.0).verdict(2.0) == "missed"
