"""Statistics of evaluation results: binomial confidence intervals and stage histograms."""

from __future__ import annotations

import math
from collections.abc import Sequence


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for ``k`` successes in ``n`` trials (``z = 1.96``: 95%).

    Unlike the normal ("Wald") interval it stays inside ``[0, 1]`` and is sensible for ``k = 0`` or
    ``k = n``, which small evaluations hit often. ``n = 0`` gives the uninformative ``(0, 1)``.
    """
    if n < 0 or not 0 <= k <= max(n, 0):
        raise ValueError(f"need 0 <= k <= n; got k={k}, n={n}")
    if n == 0:
        return 0.0, 1.0
    p = k / n
    z2 = z * z
    denom = 1.0 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, center - half), min(1.0, center + half)


def stage_histogram(max_stages: Sequence[int], stage_names: Sequence[str]) -> dict[str, int]:
    """Count episodes by the furthest stage they reached, in task order.

    ``max_stages[i]`` is an index into ``stage_names`` (the stage in progress) or
    ``len(stage_names)`` for a completed task, which is counted as ``done``.
    """
    names = [*stage_names, "done"]
    counts = dict.fromkeys(names, 0)
    for s in max_stages:
        counts[names[min(max(int(s), 0), len(stage_names))]] += 1
    return counts
