"""Per-segment score thresholds (rewind.monitor.segments, ``monitor.per_segment``): segment maxima of a
rollout, conformal levels, and the online rule, with the tiny policy in real MuJoCo. The calibration's
segment cut is checked against the online one: with a threshold every score exceeds and no rewinds,
each step's alarm names the checkpoint the monitor compared it under, and the per-checkpoint maxima of
those alarms must equal the calibration's segment maxima of the same rollout."""

import dataclasses
import math

import pytest
from helpers.monitor import TinyMonitor, run_tracked, tiny_calibration_rollouts

from rewind.config import ConfigError
from rewind.monitor import Calibration, Monitor, RewindConfig, make_score
from rewind.monitor.conformal import CalibrationError, conformal_quantile
from rewind.monitor.factory import MonitorConfig, load_monitor
from rewind.monitor.segments import SegmentThresholds, segment_score_maxima

PATIENCE = 2
SEEDS = [0, 1, 2, 3]
TRACKING = {"min_similarity": 0.0, "patience": PATIENCE, "match": "nearest"}


def _run(tiny: TinyMonitor, threshold: float, segments=None, batch: int = 1, rewinds: int = 0):
    monitor = Monitor(
        make_score("tide"),
        Calibration("tide", 0.5, 1, threshold, tiny.loaded.weights_hash),
        segments=segments,
    )
    return run_tracked(tiny, monitor, SEEDS, RewindConfig(max_rewinds=rewinds), PATIENCE, batch)


def _alarms(record) -> list[dict]:
    return [e for e in record.events if e["kind"] == "alarm"]


def test_segment_maxima_by_hand() -> None:
    events = [
        {"kind": "checkpoint", "step": 3, "checkpoint": "a"},
        {"kind": "alarm", "step": 4, "checkpoint": "start"},  # not a segment boundary
        {"kind": "checkpoint", "step": 6, "checkpoint": "b"},
    ]
    trace = [None, 0.1, 0.9, 0.2, 0.3, 0.8, None, 0.4, 0.05, None]
    # a reached at 3 + 2 = 5, b at 6 + 2 = 8: start scores steps 0-4, a 5-7, b 8-9
    assert segment_score_maxima(events, trace, 2) == {"start": 0.9, "a": 0.8, "b": 0.05}
    assert segment_score_maxima(events, trace[:8], 2) == {"start": 0.9, "a": 0.8}  # b: nothing scored
    with pytest.raises(ValueError, match="without rewinds"):
        segment_score_maxima([*events, {"kind": "rewind", "step": 8}], trace, 2)


def test_each_segment_is_held_to_alpha_over_k_and_short_ones_keep_the_constant() -> None:
    maxima = {"start": [float(i) for i in range(40)], "a": [0.1 * i for i in range(40)], "b": [1.0, 2.0]}
    seg = SegmentThresholds.fit(maxima, alpha=0.3, fallback=7.0)
    assert seg.level == pytest.approx(0.1)  # three segments
    assert seg.thresholds == {k: conformal_quantile(maxima[k], 0.1) for k in ("start", "a")}
    # the ceil(41 x 0.9) = 37th smallest of 0..39
    assert seg.threshold("start") == 36.0 and seg.threshold(None) == 36.0
    assert seg.threshold("b") == 7.0 and seg.threshold("never_seen") == 7.0
    with pytest.raises(CalibrationError, match="recalibrate"):
        SegmentThresholds.fit({}, 0.3, 7.0)


def test_the_calibration_cut_matches_the_online_one(tiny_monitor) -> None:
    records, traces = _run(tiny_monitor, -1.0)  # every scored step alarms; no rewinds
    multi = 0
    for rec, trace in zip(records, traces, strict=True):
        online: dict[str, float] = {}
        for a in _alarms(rec):
            online[a["checkpoint"]] = max(online.get(a["checkpoint"], -math.inf), a["score"])
        offline = segment_score_maxima(rec.events, trace, PATIENCE)
        assert offline.keys() == online.keys()
        assert all(offline[k] == pytest.approx(online[k], abs=1e-6) for k in online)
        multi += len(online) >= 2
    assert multi, "no rollout scored past a checkpoint: the test would not test the cut"


def test_the_latest_checkpoint_picks_the_threshold_alike_batched(tiny_monitor) -> None:
    segments = SegmentThresholds({"start": 1e9}, fallback=-1.0, alpha=0.5, level=0.25)
    seq, _ = _run(tiny_monitor, 1e9, segments, rewinds=2)
    assert _run(tiny_monitor, 1e9, segments, batch=3, rewinds=2)[0] == seq
    where = [a["checkpoint"] for r in seq for a in _alarms(r)]
    assert where and "start" not in where  # the constant 1e9 would raise none
    assert any(r.rewinds for r in seq)
    assert (
        _run(tiny_monitor, 1e9, None)[0] == _run(tiny_monitor, 1e9, SegmentThresholds({}, 1e9, 0.5, 0.5))[0]
    )


def test_calibration_records_segment_scores(tiny_run, tmp_path) -> None:
    run = tiny_calibration_rollouts(tiny_run, tmp_path / "cal", **TRACKING)
    assert run.segment_scores() == {}  # the tiny policy never succeeds: nothing calibrates
    run.records = [dataclasses.replace(r, success=True) for r in run.records]
    want: dict[str, list[float]] = {}
    for r, t in zip(run.records, run.traces, strict=True):
        for k, v in segment_score_maxima(r.events, t, PATIENCE).items():
            want.setdefault(k, []).append(v)
    assert run.segment_scores() == want and len(want) >= 2
    assert set(want) <= {"start", *run.library.names}
    run.fit(0.5, False, "lift").save(tmp_path)
    cal = Calibration.load(tmp_path)
    assert cal.segment_scores == want and cal.progress_tracking == TRACKING
    # the segments cut every scored step of a rollout into one of them: their maxima's maximum is
    # the rollout's own maximum, what the constant threshold calibrates
    pairs = zip(run.records, run.traces, strict=True)
    per_rollout = [segment_score_maxima(r.events, t, PATIENCE) for r, t in pairs]
    assert [max(m.values()) for m in per_rollout] == pytest.approx(cal.scores)


def test_load_monitor_builds_segment_thresholds_and_names_what_is_wrong(tiny_monitor, tmp_path) -> None:
    w, policy = tiny_monitor.loaded.weights_hash, tiny_monitor.loaded.policy
    scores = {"start": [0.4, 0.5, 0.6, 0.7], "after_lift": [0.1, 0.2, 0.3, 0.4]}
    Calibration("tide", 0.9, 4, 0.7, w, segment_scores=scores, progress_tracking=TRACKING).save(tmp_path)
    tiny_monitor.library.save(tmp_path)
    cfg = MonitorConfig(score="tide", calibration=str(tmp_path), per_segment=True, **TRACKING)
    monitor, _, info = load_monitor(cfg, policy, w)
    assert monitor.segments.level == pytest.approx(0.45)
    # each at 0.45: the ceil(5 x 0.55) = 3rd smallest
    assert info["segment_thresholds"] == {"start": 0.6, "after_lift": 0.3}
    assert monitor.threshold(5, "after_lift") == 0.3 and monitor.threshold(5, "start") == 0.6
    assert (
        load_monitor(dataclasses.replace(cfg, per_segment=False), policy, w)[0].threshold(5, "after_lift")
        == 0.7
    )
    with pytest.raises(CalibrationError, match="tracks with"):
        load_monitor(dataclasses.replace(cfg, patience=5), policy, w)
    old = tmp_path / "old"
    old.mkdir()
    Calibration("tide", 0.5, 1, 0.7, w).save(old)  # made before segment scores were recorded
    tiny_monitor.library.save(old)
    with pytest.raises(CalibrationError, match="no per-segment scores"):
        load_monitor(dataclasses.replace(cfg, calibration=str(old)), policy, w)
    with pytest.raises(ConfigError, match="monitor.per_segment=true needs checkpoint tracking"):
        load_monitor(dataclasses.replace(cfg, calibration=str(tiny_monitor.calibrations[1e-12])), policy, w)
    banded = tmp_path / "banded"
    banded.mkdir()
    Calibration(
        "tide", 0.9, 4, 0.7, w, band=[0.5, 0.7], segment_scores=scores, progress_tracking=TRACKING
    ).save(banded)
    tiny_monitor.library.save(banded)
    with pytest.raises(CalibrationError, match="time-varying band"):
        load_monitor(dataclasses.replace(cfg, calibration=str(banded)), policy, w)
    with pytest.raises(ConfigError, match="needs checkpoint tracking"):
        MonitorConfig(score="tide", per_segment=True, track_checkpoints=False)
