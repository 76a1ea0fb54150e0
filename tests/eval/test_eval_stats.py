"""Wilson interval against values worked out by hand from the closed form, and the stage histogram."""

from __future__ import annotations

import math

import pytest

from rewind.eval.stats import stage_histogram, wilson_interval


def _by_hand(k: int, n: int, z: float) -> tuple[float, float]:
    """(p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n), written out independently."""
    p = k / n
    lo = (p + z**2 / (2 * n) - z * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))) / (1 + z**2 / n)
    hi = (p + z**2 / (2 * n) + z * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))) / (1 + z**2 / n)
    return lo, hi


@pytest.mark.parametrize(
    ("k", "n", "expected"),
    [
        (8, 10, (0.4902, 0.9433)),  # textbook example (e.g. Newcombe 1998, method 3)
        (5, 10, (0.2366, 0.7634)),
        (0, 10, (0.0, 0.2775)),
        (10, 10, (0.7225, 1.0)),
        (1, 50, (0.0035, 0.1050)),
        (45, 50, (0.7864, 0.9565)),
    ],
)
def test_wilson_matches_known_values(k: int, n: int, expected: tuple[float, float]) -> None:
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(expected[0], abs=1e-4)
    assert hi == pytest.approx(expected[1], abs=1e-4)
    assert (lo, hi) == pytest.approx(tuple(min(max(x, 0.0), 1.0) for x in _by_hand(k, n, 1.96)), abs=1e-12)


def test_wilson_edge_cases() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    lo99, hi99 = wilson_interval(8, 10, z=2.576)
    lo95, hi95 = wilson_interval(8, 10)
    assert lo99 < lo95 < 0.8 < hi95 < hi99
    for bad in [(-1, 10), (11, 10), (1, -1)]:
        with pytest.raises(ValueError, match="0 <= k <= n"):
            wilson_interval(*bad)


def test_stage_histogram_counts_furthest_stage_in_task_order() -> None:
    hist = stage_histogram([0, 2, 1, 2, -1], ("grasp", "lift"))
    assert list(hist.items()) == [("grasp", 2), ("lift", 1), ("done", 2)]
