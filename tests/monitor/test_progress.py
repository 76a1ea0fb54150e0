"""The progress watchdog (rewind.monitor.progress): segment timings from rollouts, conformal limits,
and the online alarm, with the tiny policy in real MuJoCo. The calibration's timing rule is checked
against the online clock: limits equal to a rollout's own segment maxima raise nothing on that rollout,
one step less raises exactly one alarm, at that step, in that segment."""

import dataclasses
import math

import pytest
from helpers.monitor import TinyMonitor, run_tracked, tiny_calibration_rollouts

from rewind.config import ConfigError
from rewind.monitor import Calibration, Monitor, RewindConfig, make_score
from rewind.monitor.conformal import CalibrationError, conformal_quantile
from rewind.monitor.factory import MonitorConfig, load_monitor
from rewind.monitor.progress import ProgressWatchdog, progress_thresholds, segment_maxima

NEVER = 1e9  # a TIDE threshold no score reaches: only the watchdog alarms
PATIENCE = 2
SEEDS = [0, 1, 2, 3]


def _run(tiny: TinyMonitor, seeds, limits=None, rewind=None, batch: int = 1) -> list:
    progress = ProgressWatchdog(limits, 0.5) if limits is not None else None
    monitor = Monitor(
        make_score("tide"), Calibration("tide", 0.5, 1, NEVER, tiny.loaded.weights_hash), progress
    )
    return run_tracked(tiny, monitor, seeds, rewind or RewindConfig(max_rewinds=0), PATIENCE, batch)[0]


def _progress_alarms(record) -> list[dict]:
    return [e for e in record.events if e["kind"] == "alarm" and e.get("reason") == "progress"]


def test_segment_maxima_by_hand() -> None:
    events = [
        {"kind": "checkpoint", "step": 10, "checkpoint": "a"},
        {"kind": "alarm", "step": 20},
        {"kind": "checkpoint", "step": 25, "checkpoint": "b"},
    ]
    # start: reached a at 10 + 3, last checked 12; a: until b is reached (25 + 3 - 1); b: until the end
    assert segment_maxima(events, length=60, patience=3) == {"start": 12, "a": 17, "b": 34}
    with pytest.raises(ValueError, match="without rewinds"):
        segment_maxima([*events, {"kind": "rewind", "step": 30}], 60, 3)


def test_limits_are_conformal_and_absent_with_too_few_segments() -> None:
    limits = progress_thresholds({"a": [5, 9, 7], "b": [4]}, alpha=0.5)
    assert limits["a"] == conformal_quantile([5, 9, 7], 0.5) and limits["b"] == 4
    few = progress_thresholds({"a": [5, 9, 7]}, alpha=0.05)  # needs 19
    assert few == {"a": math.inf}
    assert not ProgressWatchdog(few, 0.05).overdue("a", 10**6)
    assert ProgressWatchdog({"a": 7.0}, 0.5).overdue("a", 8) and not ProgressWatchdog(
        {"a": 7.0}, 0.5
    ).overdue("a", 7)
    with pytest.raises(CalibrationError, match="recalibrate"):
        ProgressWatchdog.fit({}, 0.1)


def test_the_online_clock_matches_the_calibration_rule(tiny_monitor) -> None:
    plain = _run(tiny_monitor, SEEDS)
    maxima = [segment_maxima(r.events, r.length, PATIENCE) for r in plain]
    i = max(range(len(SEEDS)), key=lambda j: len(maxima[j]))
    rec, m = plain[i], maxima[i]
    assert len(m) >= 2, "no rollout reached a checkpoint: the test would not test segments"
    # limits equal to the rollout's own maxima: nothing fires, the record is unchanged
    assert _run(tiny_monitor, [rec.seed], limits={k: float(v) for k, v in m.items()}) == [rec]
    for name, most in m.items():
        (tight,) = _run(tiny_monitor, [rec.seed], limits={name: float(most - 1)})
        (alarm,) = _progress_alarms(tight)
        assert alarm["checkpoint"] == name and alarm["steps"] == most and alarm["limit"] == most - 1
        # once per segment; without a rewind budget nothing else changes
        assert [e for e in tight.events if e is not alarm] == rec.events


def test_an_overdue_segment_rewinds_to_its_checkpoint(tiny_monitor) -> None:
    plain = _run(tiny_monitor, SEEDS)
    name, most, seed = next(
        (k, v, r.seed)
        for r in plain
        for k, v in segment_maxima(r.events, r.length, PATIENCE).items()
        if k != "start"
    )
    (rec,) = _run(tiny_monitor, [seed], limits={name: float(most - 1)}, rewind=RewindConfig(max_rewinds=1))
    events = rec.events
    first = events.index(_progress_alarms(rec)[0])
    assert events[first + 1]["kind"] == "rewind" and events[first + 1]["checkpoint"] == name
    assert rec.rewinds == 1


@pytest.mark.parametrize("mode", ["restore", "drive"])
def test_the_watchdog_gives_the_same_records_batched(tiny_monitor, mode) -> None:
    limits = {"start": 6.0, **{n: 4.0 for n in tiny_monitor.library.names}}
    cfg = RewindConfig(mode=mode, max_rewinds=2, drive_max_steps=5)
    seq = _run(tiny_monitor, SEEDS, limits, cfg)
    assert _run(tiny_monitor, SEEDS, limits, cfg, batch=3) == seq
    assert sum(len(_progress_alarms(r)) for r in seq) >= 2 and any(r.rewinds for r in seq)


def test_calibration_times_segments_without_changing_the_score(tiny_run, tmp_path) -> None:
    tracked = tiny_calibration_rollouts(tiny_run, tmp_path / "cal", min_similarity=0.0, patience=PATIENCE)
    untracked = tiny_calibration_rollouts(
        tiny_run, tmp_path / "cal", min_similarity=0.0, patience=PATIENCE, track_checkpoints=False
    )
    assert tracked.traces == untracked.traces  # tracking reads the rollouts, never changes them
    assert any(e["kind"] == "checkpoint" for r in tracked.records for e in r.events)
    assert untracked.segment_maxima() == {} and untracked.tracking == {}
    assert tracked.tracking == {"min_similarity": 0.0, "patience": PATIENCE, "match": "nearest"}
    assert tracked.segment_maxima() == {}  # the tiny policy never succeeds: nothing is timed
    tracked.records = [dataclasses.replace(r, success=True) for r in tracked.records]
    want: dict[str, list[int]] = {}
    for r in tracked.records:
        for k, v in segment_maxima(r.events, r.length, PATIENCE).items():
            want.setdefault(k, []).append(v)
    assert tracked.segment_maxima() == want and want["start"]
    cal = tracked.fit(0.5, False, "lift")
    cal.save(tmp_path)
    loaded = Calibration.load(tmp_path)
    assert loaded.progress == want and loaded.progress_tracking == tracked.tracking


def test_a_watchdog_without_limits_is_warned_about(tiny_monitor, tmp_path, caplog) -> None:
    w = tiny_monitor.loaded.weights_hash
    tracking = {"min_similarity": 0.7, "patience": 3, "match": "nearest"}
    Calibration("tide", 0.5, 1, NEVER, w, progress={"start": [10, 12]}, progress_tracking=tracking).save(
        tmp_path
    )
    tiny_monitor.library.save(tmp_path)
    cfg = MonitorConfig(score="tide", calibration=str(tmp_path), progress_alpha=0.05)  # needs 19
    with caplog.at_level("WARNING"):
        monitor, _, info = load_monitor(cfg, tiny_monitor.loaded.policy, w)
    assert monitor.progress.limits == {"start": math.inf} and info["progress_limits"] == {"start": None}
    assert "no time limit after start: fewer than 19 successful calibration rollouts" in caplog.text


def test_load_monitor_builds_the_watchdog_and_names_what_is_wrong(tiny_monitor, tmp_path) -> None:
    w = tiny_monitor.loaded.weights_hash
    tracking = {"min_similarity": 0.7, "patience": 3, "match": "nearest"}
    timings = {"start": [10, 12, 14], "after_lift": [30, 31]}
    Calibration("tide", 0.5, 1, NEVER, w, progress=timings, progress_tracking=tracking).save(tmp_path)
    tiny_monitor.library.save(tmp_path)
    cfg = MonitorConfig(score="tide", calibration=str(tmp_path), progress_alpha=0.5)
    monitor, tracker, info = load_monitor(cfg, tiny_monitor.loaded.policy, w)
    assert tracker is not None and monitor.progress.limits == progress_thresholds(timings, 0.5)
    assert info["progress_limits"]["start"] == monitor.progress.limits["start"]
    assert (
        load_monitor(dataclasses.replace(cfg, progress_alpha=None), tiny_monitor.loaded.policy, w)[0].progress
        is None
    )
    with pytest.raises(CalibrationError, match="tracks with"):
        load_monitor(dataclasses.replace(cfg, patience=5), tiny_monitor.loaded.policy, w)
    with pytest.raises(ConfigError, match="monitor.progress_alpha must be null or in"):
        MonitorConfig(score="tide", progress_alpha=1.5)
    old, no_library = tmp_path / "old", tmp_path / "no_library"
    old.mkdir()
    Calibration("tide", 0.5, 1, NEVER, w).save(old)  # made before segments were timed
    tiny_monitor.library.save(old)
    with pytest.raises(CalibrationError, match="no checkpoint timings"):
        load_monitor(dataclasses.replace(cfg, calibration=str(old)), tiny_monitor.loaded.policy, w)
    no_library.mkdir()
    Calibration("tide", 0.5, 1, NEVER, w, progress=timings, progress_tracking=tracking).save(no_library)
    with pytest.raises(ConfigError, match="needs checkpoint tracking"):
        load_monitor(dataclasses.replace(cfg, calibration=str(no_library)), tiny_monitor.loaded.policy, w)
