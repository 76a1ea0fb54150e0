"""TeleopSession without a browser: modes and toggles, auto-pause, rewind, hand-back, end, discard,
labels in the store, and clear errors for bad commands."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from rewind.envs.config import EnvConfig, build_env
from rewind.monitor.factory import TrackingConfig
from rewind.store import ReplayStore, store_spec_for
from rewind.teleop import ControlSettings, SessionSettings, TeleopCommandError, TeleopSession
from rewind.teleop.app import load_calibrated_monitor
from rewind.teleop.controls import HumanInput, keys_to_motion
from rewind.train import policy_api


def _session(
    tmp_path: Path,
    weights: Path | None = None,
    calibration: Path | None = None,
    tracking: TrackingConfig | None = None,
    **settings: object,
) -> TeleopSession:
    env = build_env(EnvConfig(name="lift", max_steps=60))
    spec = store_spec_for(env)
    policy, monitor, tracker, version = None, None, None, ""
    if weights is not None:
        policy, _ = policy_api.load_weights(weights, "cpu", spec, "lift")
        version = policy_api.weights_version(weights)
    if calibration is not None:
        from rewind.policies.io import weights_hash

        monitor, tracker = load_calibrated_monitor(
            calibration, policy, weights_hash(weights), tracking or TrackingConfig()
        )
    return TeleopSession(
        env,
        policy,
        tmp_path / "store",
        spec,
        monitor,
        tracker,
        SessionSettings(**settings),
        policy_version=version,
    )


def _stored(tmp_path: Path) -> list:
    with ReplayStore.open(tmp_path / "store") as store:
        return [(info, store.load(info.id).source_names) for info in store.episodes()]


def test_pure_teleop_records_human_steps_only_on_input(tmp_path: Path) -> None:
    s = _session(tmp_path)
    assert s.mode == "human" and not s.has_policy
    assert s.tick() is None  # no input: the simulation waits, no no-op step is recorded
    s.input.update(["KeyD"])
    res = [s.tick() for _ in range(5)]
    assert [r.source for r in res] == ["human"] * 5
    np.testing.assert_allclose(res[0].action, [0.5, 0, 0, 0, 1.0])
    s.input.update([])
    s.command("grip", {"value": "close"})
    settle = sum(s.tick() is not None for _ in range(30))
    assert settle == 10 and s.state()["grip"] == "closed"
    with pytest.raises(TeleopCommandError, match="no policy loaded"):
        s.command("handback")
    state = s.command("end", {"outcome": "failure"})
    assert state["committed"] == 1 and state["episode"]["index"] == 1 and state["episode"]["recorded"] == 0
    ((info, labels),) = _stored(tmp_path)
    assert labels == ["human"] * 15 and info.success is False and info.policy_version == "human"
    assert info.seed == 0 and info.n_operator_steps == 15 and info.extra["teleop"] is True


def test_takeover_and_pause_are_toggles(tmp_path: Path, tiny_weights: Path) -> None:
    s = _session(tmp_path, tiny_weights)
    assert s.mode == "autonomous" and s.tick().source == "policy"
    assert s.command("takeover")["mode"] == "human"
    assert s.command("takeover")["mode"] == "autonomous"  # pressed again: handed back
    assert s.command("pause")["mode"] == "paused"
    step = s.episode.step_count
    assert s.tick() is None and s.episode.step_count == step  # paused: nothing moves
    assert s.command("pause")["mode"] == "autonomous"  # pressed again: resumed
    s.command("takeover")
    assert s.command("pause")["mode"] == "paused" and s.command("pause")["mode"] == "human"
    assert s.command("handback")["mode"] == "autonomous"


def test_alarm_pauses_then_rewind_correct_and_commit_labels(
    tmp_path: Path, tiny_weights: Path, alarm_calibration: Path
) -> None:
    s = _session(tmp_path, tiny_weights, alarm_calibration, pre_intervention_steps=2)
    for _ in range(30):
        s.tick()
    assert s.mode == "paused" and "alarm" in s.reason and s.alarms == 1
    policy_steps = s.episode.step_count
    assert s.tick() is None and s.episode.step_count == policy_steps  # waits for the person
    state = s.command("rewind", {"target": 0, "mode": "drive"})
    assert state["mode"] == "paused" and "rewound to 'start'" in state["reason"]
    recovery = state["episode"]["source_counts"].get("recovery", 0)
    assert recovery > 0
    s.command("takeover")
    s.input.update(["KeyW", "KeyR"])
    for _ in range(4):
        assert s.tick().source == "human"
    s.command("handback")
    assert s.tick().source == "policy"
    s.command("end", {"outcome": "success"})
    ((info, labels),) = _stored(tmp_path)
    expected = ["policy"] * (policy_steps - 2) + ["pre_intervention"] * 2 + ["recovery"] * recovery
    assert labels == expected + ["human"] * 4 + ["policy"]
    assert info.success is True and info.extra["env_success"] is False
    assert [e["kind"] for e in info.extra["events"]][:2] == ["alarm", "rewind"]


def test_the_progress_watchdog_calls_the_person_in(tmp_path: Path, tiny_weights: Path, tiny_monitor) -> None:
    """``tracking.progress_alpha``: a segment that overruns its limit pauses the session like a score
    alarm, and the reason says which checkpoint and how long (there is no score at that step)."""
    from rewind.monitor import Calibration
    from rewind.policies.io import weights_hash

    cal = tmp_path / "cal"
    cal.mkdir()
    tracking = {"min_similarity": 0.7, "patience": 3, "match": "nearest"}
    timings = {"start": [4, 5, 6]}  # at alpha 0.5: a limit of 5 steps after the start
    Calibration(
        "tide", 0.5, 1, 1e9, weights_hash(tiny_weights), progress=timings, progress_tracking=tracking
    ).save(cal)
    tiny_monitor.library.save(cal)
    s = _session(tmp_path, tiny_weights, cal, TrackingConfig(progress_alpha=0.5))
    for _ in range(12):
        s.tick()
    assert s.mode == "paused" and s.alarms == 1
    assert "6 steps since checkpoint 'start' > limit 5" in s.reason
    assert s.state()["last_alarm"]["text"] == "6 steps since checkpoint 'start' > limit 5"
    with pytest.raises(Exception, match="tracking.progress_alpha must be null or in"):
        TrackingConfig(progress_alpha=0.0)


def test_armed_from_checkpoint_holds_the_score_until_a_checkpoint(
    tmp_path: Path, tiny_weights: Path, alarm_calibration: Path, tiny_monitor
) -> None:
    """``tracking.armed_from=checkpoint``: a score that alarms at its first comparison pauses nothing
    while only the start is reached (the checkpoint cannot be reached: similarity must exceed 1);
    the same session armed from the start pauses; an unknown name is refused."""
    import shutil

    cal = tmp_path / "cal"
    shutil.copytree(alarm_calibration, cal)
    tiny_monitor.library.save(cal)
    runs = {}
    for armed in ("start", "checkpoint"):
        tracking = TrackingConfig(min_similarity=1.0, armed_from=armed)
        s = _session(tmp_path / armed, tiny_weights, cal, tracking)
        for _ in range(30):
            s.tick()
        assert [c.name for c in s.episode.tracker.reached] == ["start"]
        runs[armed] = (s.mode, s.alarms, len(s.state()["scores"]))
    assert runs["start"][:2] == ("paused", 1)
    assert runs["checkpoint"][:2] == ("autonomous", 0) and runs["checkpoint"][2] >= 2
    with pytest.raises(Exception, match=r"tracking.armed_from must be one of \[start, checkpoint\]"):
        TrackingConfig(armed_from="grasp")
    # tracking.per_segment reaches the monitor: this calibration has no per-segment scores
    with pytest.raises(Exception, match="no per-segment scores"):
        _session(tmp_path / "segments", tiny_weights, cal, TrackingConfig(per_segment=True))


def test_the_page_shows_the_threshold_of_the_latest_checkpoint(
    tmp_path: Path, tiny_weights: Path, tiny_monitor
) -> None:
    """``tracking.per_segment=true``: the page's threshold is that of the latest reached rewind
    checkpoint's segment, the one the monitor compares with, not the start's."""
    from rewind.monitor import Calibration
    from rewind.policies.io import weights_hash

    cal = tmp_path / "cal"
    cal.mkdir()
    tracking = {"min_similarity": 0.0, "patience": 2, "match": "nearest"}
    names = ["start", *tiny_monitor.library.names]
    scores = {n: [1e8 + i] * 4 for i, n in enumerate(names)}  # never exceeded; one value per segment
    Calibration(
        "tide", 0.9, 4, 1e9, weights_hash(tiny_weights), segment_scores=scores, progress_tracking=tracking
    ).save(cal)
    tiny_monitor.library.save(cal)
    s = _session(
        tmp_path, tiny_weights, cal, TrackingConfig(min_similarity=0.0, patience=2, per_segment=True)
    )
    assert s.state()["threshold"] == scores["start"][0]
    for _ in range(40):
        s.tick()
    latest = s.state()["checkpoints"][-1]["name"]
    assert latest != "start", "no checkpoint reached: the test would not test the segment"
    assert s.state()["threshold"] == scores[latest][0]


def test_auto_pause_off_keeps_the_policy_going(
    tmp_path: Path, tiny_weights: Path, alarm_calibration: Path
) -> None:
    s = _session(tmp_path, tiny_weights, alarm_calibration, auto_pause=False)
    for _ in range(12):
        s.tick()
    assert s.mode == "autonomous" and s.alarms >= 1 and s.state()["scores"]
    assert s.command("auto_pause")["auto_pause"] is True


def test_restore_rewind_discard_and_episode_over(tmp_path: Path, tiny_weights: Path) -> None:
    s = _session(tmp_path, tiny_weights)
    for _ in range(6):
        s.tick()
    state = s.command("rewind", {})
    assert state["episode"]["step"] == 0 and state["mode"] == "paused" and state["episode"]["recorded"] == 6
    assert s.command("discard")["discarded"] == 1
    assert not (tmp_path / "store" / "index.sqlite").exists() or _stored(tmp_path) == []
    for _ in range(60):
        s.tick()
    assert s.episode.done
    assert s.mode == "paused" and "time limit" in s.reason
    for cmd in ("takeover", "handback", "pause"):
        with pytest.raises(TeleopCommandError, match="episode is over"):
            s.command(cmd)
    with pytest.raises(TeleopCommandError, match="drive rewind cannot move"):
        s.command("rewind", {"mode": "drive"})
    assert s.command("rewind", {"target": "latest"})["episode"]["done"] is False


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("fly", {}, "unknown command 'fly'; valid: pause, takeover"),
        ("pause", {"now": True}, "pause: unknown argument 'now'; valid arguments: none"),
        ("rewind", {"target": 3}, r"target must be a checkpoint index in \[0=start\]"),
        ("rewind", {"target": True}, "target must be a checkpoint index"),
        ("rewind", {"mode": "teleport"}, r"mode must be one of \[restore, drive\]; got 'teleport'"),
        ("end", {"outcome": "maybe"}, r"outcome must be one of \[success, failure\]"),
        ("end", {"outcome": "success"}, "nothing to commit"),
        ("grip", {"value": "half"}, r"value must be one of \[open, close, toggle\]"),
        ("auto_pause", {"value": "yes"}, "must be true or false"),
        ("camera", {"name": "side"}, r"name must be one of \[front, top\]"),
    ],
)
def test_bad_commands_give_clear_errors(tmp_path: Path, name: str, args: dict, message: str) -> None:
    s = _session(tmp_path)
    with pytest.raises(TeleopCommandError, match=message):
        s.command(name, args)


def test_key_bindings_and_stale_input() -> None:
    settings = ControlSettings(translation_speed=0.5, yaw_speed=1.0, precise_scale=0.25, input_timeout_s=0.05)
    np.testing.assert_allclose(keys_to_motion(["KeyW", "KeyD", "KeyQ"], settings), [0.5, 0.5, 0, 1.0])
    np.testing.assert_allclose(
        keys_to_motion(["KeyA", "ArrowLeft", "ShiftLeft"], settings), [-0.125, 0, 0, 0]
    )
    np.testing.assert_allclose(keys_to_motion(["KeyR", "KeyF", "Unknown"], settings), [0, 0, 0, 0])
    inp = HumanInput(settings)
    seq = inp.update(["KeyF"], axes=[0.02, 0, 0, -2.0])
    motion, got = inp.motion()
    assert got == seq
    np.testing.assert_allclose(motion, [0, 0, -0.5, -1.0])  # deadzone, clip
    time.sleep(0.1)
    assert not inp.motion()[0].any()  # not refreshed: released (a closed tab never keeps a key held)
    with pytest.raises(ValueError, match="axes must be 4 finite numbers"):
        inp.update([], axes=[0.0, float("nan"), 0.0, 0.0])
