"""Dependency-light statistics shared by the env benchmarks and the policy evaluation."""

from __future__ import annotations

import math


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
