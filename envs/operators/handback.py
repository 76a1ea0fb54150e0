"""Stage-by-stage mode: an operator completes the current stage, then hands control back.

This is the correction step of the RaC protocol (the person finishes the sub-task in progress and
lets the policy continue); the teleop tool and the recovery loop use the same function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from rewind.envs.operators.base import Operator

#: Called after every operator step with (obs before the step, action, info after the step).
StepHook = Callable[[dict[str, np.ndarray], np.ndarray, dict[str, Any]], None]


@dataclass(frozen=True)
class HandbackResult:
    """Outcome of :func:`complete_current_stage`.

    Attributes:
        start_stage: the stage the operator took over in.
        end_stage: the stage when it handed back (``> start_stage`` when completed).
        steps: operator-driven control steps (the cost axis of every comparison).
        completed: the stage advanced (or the task succeeded).
        done: the episode ended (success, sim error or step limit).
        obs: the observation at hand-back.
        info: the last step's info.
    """

    start_stage: int
    end_stage: int
    steps: int
    completed: bool
    done: bool
    obs: dict[str, np.ndarray]
    info: dict[str, Any]


def complete_current_stage(
    env: gym.Env,
    operator: Operator,
    obs: dict[str, np.ndarray],
    max_steps: int,
    on_step: StepHook | None = None,
) -> HandbackResult:
    """Let ``operator`` drive ``env`` until the current stage advances, then hand back.

    Args:
        env: the (possibly wrapped) task env, mid-episode.
        operator: a scripted operator (already ``reset`` for this episode).
        obs: the current observation (returned unchanged if no step is taken).
        max_steps: operator step budget; the hand-back happens at the latest after this many steps.
        on_step: optional hook, e.g. to record the steps with the label ``correction``.
    """
    if max_steps < 0:
        raise ValueError(f"max_steps must be >= 0; got {max_steps}")
    base = env.unwrapped
    start = base.stage()
    info: dict[str, Any] = {"stage": start, "success": base.is_success()}
    steps, done = 0, False
    while steps < max_steps and not done and base.stage() <= start:
        action = operator.act(env)
        new_obs, _, terminated, truncated, info = env.step(action)
        if on_step is not None:
            on_step(obs, action, info)
        obs, steps, done = new_obs, steps + 1, bool(terminated or truncated)
    end = int(info["stage"]) if steps else start
    return HandbackResult(start, end, steps, end > start or bool(info.get("success")), done, obs, info)
