"""The records of a monitored episode's steps: :class:`StepResult` (one control step),
:class:`PendingStep` (what a step keeps from before its action), :class:`RewindPlan` (a rewind under
way) and :class:`EpisodeLog` (scores and events). :mod:`rewind.monitor.episode` produces them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rewind.monitor.checkpoints import ReachedCheckpoint


@dataclass
class StepResult:
    """One control step of a monitored episode.

    Attributes:
        step: control step index of the action (0 = first action of the episode).
        obs: observation *before* the action; action: what was applied ``[Da]``.
        source: who acted (``policy``, ``recovery``, ``correction``, ``human``...).
        info: the env's info after the step; done: the episode ended.
        score / threshold: monitor value when it produced one this step, else ``None``.
        alarm: the score crossed the threshold this step, or the progress watchdog alarmed.
        alarm_reason: what raised ``alarm``: ``score`` or ``progress`` (the watchdog), else ``None``.
        checkpoint: a rewind checkpoint reached this step, else ``None``.
        state: flat physics state before the action (what the store records).
    """

    step: int
    obs: dict[str, np.ndarray]
    action: np.ndarray
    source: str
    info: dict[str, Any]
    done: bool
    state: np.ndarray
    score: float | None = None
    threshold: float | None = None
    alarm: bool = False
    alarm_reason: str | None = None
    checkpoint: ReachedCheckpoint | None = None


@dataclass
class PendingStep:
    """What a step records from before its action: control step, observation, flat physics state."""

    step: int
    obs: dict[str, np.ndarray]
    state: np.ndarray


@dataclass
class RewindPlan:
    """A rewind under way (:meth:`MonitoredEpisode.begin_rewind`): target, mode, drive progress."""

    checkpoint: ReachedCheckpoint
    mode: str
    from_step: int
    steps: int = 0
    grip_closed: bool = False


@dataclass
class EpisodeLog:
    """What happened in one episode: scores per step, events (alarms, checkpoints, rewinds)."""

    seed: int
    scores: list[float | None] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    rewinds: int = 0
    external_steps: int = 0
    monitor_time_s: float = 0.0
    monitor_calls: int = 0
