"""Normalizer.range_report: how far data lies outside the fitted range, per key and dimension."""

from __future__ import annotations

import numpy as np
import pytest

from rewind.policies.normalizer import Normalizer


def test_range_report_measures_the_excess_before_clipping() -> None:
    rng = np.random.default_rng(0)
    fit = {"obs/q": rng.uniform(-1, 1, (200, 2)), "action": rng.uniform(-2, 2, (200, 3))}
    fit["obs/q"][:, 1] = rng.uniform(0.0, 1e-3, 200)  # a near-constant channel
    norm = Normalizer({"obs/q": (2, "min_max"), "action": (3, "min_max")}, obs_clip=5.0).fit(fit)
    new = np.zeros((4, 2))
    new[:, 1] = [5e-4, 5e-4, 0.05, 0.1]  # two tilted steps: 0.05 and 0.1 against a half-range of ~5e-4
    rep = norm.range_report({"obs/q": new, "obs/unknown": new})
    q = rep["obs/q"]
    assert set(rep) == {"obs/q"} and q["steps"] == 4
    assert q["frac_over"] == 0.5 and q["max_abs_per_dim"][0] < 0.1
    assert 150 < q["max_abs"] == q["max_abs_per_dim"][1] < 250  # not clipped to obs_clip
    inside = norm.range_report({"obs/q": fit["obs/q"]}, threshold=1.001)["obs/q"]  # float32 statistics
    assert inside["frac_over"] == 0.0 and inside["max_abs"] <= 1.001


def test_range_report_needs_a_fitted_normalizer() -> None:
    with pytest.raises(RuntimeError, match="not fitted"):
        Normalizer({"obs/q": (2, "min_max")}).range_report({"obs/q": np.zeros((1, 2))})
