"""The rules around a monitored episode: when it alarms (:class:`Monitor`: a failure score over its
calibrated threshold, and optionally the progress watchdog) and how it rewinds (:class:`RewindConfig`,
the rewind modes, and :func:`rewindable`, the env layer that snapshots and restores).
:mod:`rewind.monitor.episode` applies them step by step."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from rewind.config import check_choice, check_range, require
from rewind.monitor.conformal import Calibration
from rewind.monitor.progress import ProgressWatchdog
from rewind.monitor.scores import FailureScore
from rewind.monitor.segments import SegmentThresholds

REWIND_MODES = ("restore", "drive")
#: ``monitor.armed_from``: the score alarms from the episode ``start``, or only once a rewind
#: ``checkpoint`` past the start has been reached (Rewind-IL: no rewind before the first checkpoint).
ARMED_FROM = ("start", "checkpoint")


def check_rewind_mode(mode: str, key: str) -> None:
    """The one check of a rewind mode (every option and command that takes one calls it).

    Raises:
        ConfigError: ``<key> must be one of [restore, drive]; got 'x'``.
    """
    check_choice(key, mode, REWIND_MODES)


@dataclass
class RewindConfig:
    """How a monitored episode rewinds.

    Attributes:
        mode: ``restore`` (exact simulator restore) or ``drive`` (drive the gripper back).
        max_rewinds: retry budget per episode; later alarms are logged only.
        auto_rewind: rewind at once on an alarm (the teleop tool turns this off and asks a person).
        drive_max_steps: step budget of one ``drive`` rewind.
        drive_pos_tol: position tolerance (m) at which a ``drive`` rewind has arrived.
        drive_yaw_tol: yaw tolerance (rad) at which a ``drive`` rewind has arrived (robosuite envs:
            the angle of the whole orientation error).
        backtrack_after: after this many automatic rewinds in a row to the same reached checkpoint
            (no newer one reached in between), the next goes one checkpoint further back, and so on
            down to the episode start; ``0`` (default, Rewind-IL's rule): always the latest.
    """

    mode: str = "restore"
    max_rewinds: int = 3
    auto_rewind: bool = True
    drive_max_steps: int = 40
    drive_pos_tol: float = 0.005
    drive_yaw_tol: float = 0.05
    backtrack_after: int = 0

    def __post_init__(self) -> None:
        check_rewind_mode(self.mode, "rewind.mode")
        check_range("rewind.max_rewinds", self.max_rewinds, 0)
        check_range("rewind.backtrack_after", self.backtrack_after, 0)
        check_range("rewind.drive_max_steps", self.drive_max_steps, 1)
        require(
            self.drive_pos_tol > 0 and self.drive_yaw_tol > 0,
            "rewind.drive_pos_tol and rewind.drive_yaw_tol must be > 0",
        )


class Monitor:
    """A failure score with its calibrated threshold: ``alarm`` when the score exceeds it; with a
    ``progress`` watchdog also when a segment between rewind checkpoints overruns its time limit.
    ``armed_from="checkpoint"``: the score's alarms count only while a rewind checkpoint past the
    episode start is reached (the watchdog is not affected). With ``segments``, the score's threshold
    is that of the latest reached rewind checkpoint (:mod:`rewind.monitor.segments`)."""

    def __init__(
        self,
        score: FailureScore,
        calibration: Calibration | None,
        progress: ProgressWatchdog | None = None,
        armed_from: str = "start",
        segments: SegmentThresholds | None = None,
    ) -> None:
        if calibration is not None and calibration.score != score.name:
            raise ValueError(f"calibration is for score '{calibration.score}', not '{score.name}'")
        check_choice("monitor.armed_from", armed_from, ARMED_FROM)
        self.score, self.calibration, self.progress = score, calibration, progress
        self.armed_from, self.segments = armed_from, segments

    def threshold(self, step: int, checkpoint: str | None = None) -> float:
        """Threshold at control step ``step`` with ``checkpoint`` the latest reached one (``inf`` when
        uncalibrated: the score is only recorded)."""
        if self.calibration is None:
            return math.inf
        if self.segments is not None:
            return self.segments.threshold(checkpoint)
        return self.calibration.threshold_at(step)


def rewindable(env: gym.Env) -> Any:
    """The outermost layer of ``env`` with ``snapshot()``/``restore()``: perturbation wrappers
    snapshot their schedule with the simulator, so a restore also returns to the same moment of the
    perturbation schedule (a perturbation that fired after the checkpoint fires again, but a nudge
    with ``on_restore="persist"``, which stays applied)."""
    e = env
    while not hasattr(type(e), "snapshot"):
        if not hasattr(e, "env"):
            raise TypeError(f"{type(env).__name__} has no snapshot()/restore() layer")
        e = e.env
    return e
