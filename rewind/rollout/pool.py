"""Stepping a batch of environments: the one call every batched runner steps its envs through.

:func:`step_many` is the in-process version (a plain loop). Worker pools (``rollout.workers=N``)
provide the same call over subprocess proxies, so a runner written against it runs unchanged.

Contract of ``step_many(envs, indices, actions)``:

* ``envs``: the batch's environments; ``indices``: which of them to step (in this order);
  ``actions``: one ``[Da]`` action per index (same order).
* Returns one ``(obs, reward, terminated, truncated, info)`` per index, in the order of ``indices``.
* A rejected action (:class:`~rewind.envs.core.base.ActionError`, e.g. a non-finite action) does not
  raise: its row is ``(None, 0.0, True, False, {"stage": -1, "success": False, "sim_error":
  "action rejected: <message>"})``; the env was not stepped and the caller keeps its previous
  observation. Every other exception propagates.

:func:`step_chunks` is the same for several actions per env (the rest of a policy's action chunk):
each env takes its actions in order and stops after the step that ends its episode (terminated,
truncated or rejected). Workers then step a whole chunk per message instead of one step per message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from rewind.envs.core.base import ActionError

#: one env step's result: (obs or None when the action was rejected, reward, terminated, truncated, info)
StepOutcome = tuple[dict[str, np.ndarray] | None, float, bool, bool, dict[str, Any]]


def rejected(exc: ActionError) -> StepOutcome:
    """The row :func:`step_many` returns for an action the env refused."""
    return None, 0.0, True, False, {"stage": -1, "success": False, "sim_error": f"action rejected: {exc}"}


def step_one(env: gym.Env, action: np.ndarray) -> StepOutcome:
    """``env.step(action)`` with a rejected action turned into a :func:`rejected` row."""
    try:
        obs, reward, terminated, truncated, info = env.step(action)
    except ActionError as exc:
        return rejected(exc)
    return obs, float(reward), bool(terminated), bool(truncated), info


def step_many(
    envs: Sequence[gym.Env], indices: Sequence[int], actions: Sequence[np.ndarray]
) -> list[StepOutcome]:
    """Step ``envs[i]`` with ``actions[k]`` for the ``k``-th index ``i``; one outcome per index, in order.

    Raises:
        ValueError: ``indices`` and ``actions`` differ in length.
    """
    if len(indices) != len(actions):
        raise ValueError(f"step_many: {len(indices)} indices but {len(actions)} actions")
    workers = getattr(envs[indices[0]], "worker_pool", None) if len(indices) else None
    if workers is not None:  # proxies of rewind.rollout.workers.EnvWorkers: stepped in their processes
        return workers.step_many(envs, indices, actions)
    return [step_one(envs[i], a) for i, a in zip(indices, actions, strict=True)]


def step_chunk(env: gym.Env, actions: Sequence[np.ndarray]) -> list[StepOutcome]:
    """``env`` steps ``actions`` in order, stopping after the step that ends the episode."""
    rows: list[StepOutcome] = []
    for action in actions:
        rows.append(step_one(env, action))
        if rows[-1][2] or rows[-1][3]:
            break
    return rows


def step_chunks(
    envs: Sequence[gym.Env], indices: Sequence[int], action_seqs: Sequence[Sequence[np.ndarray]]
) -> list[list[StepOutcome]]:
    """Step ``envs[i]`` through ``action_seqs[k]`` (``[T, Da]``) for the ``k``-th index ``i``; per index
    the outcomes of the steps taken (at most ``T``, fewer when the episode ended), in order. Envs are
    independent, so the outcomes equal :func:`step_many` called once per step.

    Raises:
        ValueError: ``indices`` and ``action_seqs`` differ in length.
    """
    if len(indices) != len(action_seqs):
        raise ValueError(f"step_chunks: {len(indices)} indices but {len(action_seqs)} action sequences")
    workers = getattr(envs[indices[0]], "worker_pool", None) if len(indices) else None
    if workers is not None:
        return workers.step_chunks(envs, indices, action_seqs)
    return [step_chunk(envs[i], seq) for i, seq in zip(indices, action_seqs, strict=True)]
