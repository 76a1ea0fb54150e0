"""A scripted operator driving a monitored episode: every operator action is one
``external_step`` of the :class:`~rewind.monitor.episode.MonitoredEpisode`, recorded with its label
(``correction``, ``human``), until the current stage or the whole task is done.

:func:`drive_operator` is how the recovery sources of :mod:`rewind.loop.sources` (``operator``,
``dagger``, and the stand-in person of ``human``) hand the episode to the operator;
:class:`EpisodeAsEnv` is the gym-env face the operator's stage completion
(:func:`rewind.envs.operators.handback.complete_current_stage`) steps through.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rewind.envs.operators.base import Operator
from rewind.envs.operators.handback import complete_current_stage
from rewind.monitor.episode import MonitoredEpisode


class EpisodeAsEnv:
    """A :class:`MonitoredEpisode` seen as a gym env by a scripted operator: each ``step`` is an
    ``external_step`` recorded as ``source`` (recorded, counted, policy queue cleared). ``stop()`` true
    after a step (a human-like operator gave up) ends the drive: the step reports ``truncated``."""

    def __init__(self, ep: MonitoredEpisode, source: str, stop: Callable[[], bool] | None = None) -> None:
        self.ep, self.source, self.stop = ep, source, stop

    @property
    def unwrapped(self) -> Any:
        """The task env (what operators read)."""
        return self.ep.base

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Apply ``action`` as ``source``; returns ``(obs, 0.0, done, stopped, info)``."""
        res = self.ep.external_step(action, self.source)
        return self.ep.obs, 0.0, res.done, self.stop is not None and self.stop(), res.info


def drive_operator(
    ep: MonitoredEpisode,
    operator: Operator,
    source: str,
    until: str,
    budget: int,
    failed_stage: int | None = None,
) -> tuple[int, bool]:
    """The operator drives ``ep`` (steps recorded as ``source``) until the current ``stage``, the whole
    ``task``, or (``failed``) the stage ``failed_stage`` the episode failed in is done, the episode ends,
    or the budget is spent; returns the steps taken and whether it completed what it set out to do.

    ``budget`` is the operator's steps for one stage. ``stage`` and ``task`` get ``budget`` in all;
    ``failed`` gets ``budget`` for each stage from the current one through ``failed_stage`` (a rewind
    that lost the object, e.g. a drive back that left the nut behind, has several stages to redo)."""
    if until == "failed":
        if failed_stage is None:
            raise ValueError("drive_operator: until='failed' needs failed_stage (the stage at the trigger)")
        budget *= max(1, failed_stage - ep.base.stage() + 1)
    env, steps, completed = EpisodeAsEnv(ep, source, getattr(operator, "stopped", None)), 0, False
    while steps < budget and not ep.done:
        res = complete_current_stage(env, operator, ep.obs, budget - steps)  # type: ignore[arg-type]
        steps += res.steps
        if until == "stage":
            completed = res.completed
        elif until == "failed":
            completed = ep.base.stage() > failed_stage
        else:
            completed = ep.success
        if until == "stage" or completed or res.done or not res.completed or res.steps == 0:
            break
    return steps, completed or ep.success
