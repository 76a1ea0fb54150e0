"""Split conformal thresholds, the time-varying band, the calibration file and its checks."""

import json
import math

import numpy as np
import pytest

from rewind.monitor.conformal import (
    Calibration,
    CalibrationError,
    band_thresholds,
    calibrate,
    conformal_quantile,
    held,
    min_calibration_size,
)


def test_quantile_index_and_minimum_n() -> None:
    scores = np.arange(1, 20, dtype=float)  # n = 19
    assert min_calibration_size(0.05) == 19
    assert min_calibration_size(0.1) == 9
    assert conformal_quantile(scores, 0.05) == 19.0  # ceil(20 * 0.95) = 19th smallest
    assert conformal_quantile(scores, 0.2) == float(math.ceil(20 * 0.8))
    with pytest.raises(CalibrationError, match="at least 19 successful"):
        conformal_quantile(scores[:18], 0.05)
    with pytest.raises(CalibrationError, match="NaN"):
        conformal_quantile([*scores[:18], float("nan")], 0.05)


def test_empirical_false_alarm_rate_stays_within_alpha() -> None:
    """The guarantee: averaged over calibrations, P(fresh max > q) <= alpha."""
    rng = np.random.default_rng(0)
    alpha, misses = 0.1, []
    for _ in range(400):
        q = conformal_quantile(rng.gamma(2.0, size=30), alpha)
        misses.append(np.mean(rng.gamma(2.0, size=200) > q))
    assert np.mean(misses) <= alpha + 0.01


def test_band_keeps_the_episode_guarantee_and_follows_the_shape() -> None:
    rng = np.random.default_rng(1)
    shape = np.concatenate([np.full(20, 0.1), np.full(20, 1.0)])  # score typically rises late

    def episode() -> np.ndarray:
        return shape + 0.05 * rng.standard_normal(40)

    fails = []
    for _ in range(100):
        th, _ = band_thresholds([episode() for _ in range(40)], 0.1)
        assert th[:20].mean() < th[20:].mean()
        fails.append(np.mean([np.any(episode() > th) for _ in range(50)]))
    assert np.mean(fails) <= 0.11


def test_held_and_calibrate_use_episode_maxima() -> None:
    assert held([None, 1.0, None, 3.0, None]).tolist() == [0.0, 1.0, 1.0, 3.0, 3.0]
    traces = [[None, float(i), None] for i in range(1, 20)]
    cal = calibrate(traces, "tide", 0.05, "ab" * 32)
    assert cal.threshold == 19.0 and cal.n == 19 and cal.band is None
    banded = calibrate(traces * 2, "tide", 0.05, "ab" * 32, band=True)
    assert banded.band is not None and banded.threshold == max(banded.band)
    with pytest.raises(CalibrationError, match="twice as many"):
        calibrate(traces, "tide", 0.05, "ab" * 32, band=True)


def test_save_load_and_refusals(tmp_path) -> None:
    cal = Calibration("tide", 0.05, 19, 0.25, "a" * 64, score_params={"dims": [0, 1]})
    cal.save(tmp_path)
    back = Calibration.load(tmp_path)
    assert back.threshold == 0.25 and back.score_params == {"dims": [0, 1]}
    back.check_weights("a" * 64)
    with pytest.raises(CalibrationError, match="recalibrate"):
        back.check_weights("b" * 64)
    path = tmp_path / "calibration.json"
    path.write_text("{not json")
    with pytest.raises(CalibrationError, match="not a readable"):
        Calibration.load(tmp_path)
    path.write_text(json.dumps({"kind": "something else"}))
    with pytest.raises(CalibrationError, match="not a rewind calibration"):
        Calibration.load(path)
    body = json.loads(json.dumps({"kind": "rewind.calibration", "version": 99}))
    path.write_text(json.dumps(body))
    with pytest.raises(CalibrationError, match="version 99"):
        Calibration.load(path)
    with pytest.raises(CalibrationError, match="no calibration file"):
        Calibration.load(tmp_path / "missing")
