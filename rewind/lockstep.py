"""Lockstep batched rollouts: ``B`` envs step together under one batched policy call.

Each batch resets every env with consecutive seeds and steps until all are done; a finished env is
held (no longer stepped, its last observation still fed to the policy so the batch keeps its size).
With a seeded ``torch.Generator`` the records are a pure function of the seeds and the weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch

from rewind.envs.core.base import ActionError
from rewind.policies.base import ActionChunkPolicy, to_torch_obs


@dataclass
class EpisodeRecord:
    """Outcome of one evaluation episode.

    Attributes:
        seed: the env reset seed.
        success: the task was completed.
        length: control steps taken.
        last_stage: ``info["stage"]`` at the end (-1 after a simulation error).
        max_stage: furthest stage reached (``num_stages`` = done).
        sim_error: the simulator's (or the action check's) error message, else None.
        perturbations: kinds of the perturbations that fired, in order (``perturb`` profile).
        video: path of the episode's MP4 when one was recorded.
    """

    seed: int
    success: bool
    length: int
    last_stage: int
    max_stage: int
    sim_error: str | None = None
    perturbations: list[str] = field(default_factory=list)
    video: str | None = None


class RolloutObserver(Protocol):
    """Receives the steps of every env of a batch (videos, store writing)."""

    def on_reset(self, i: int, env: gym.Env, seed: int, info: dict[str, Any]) -> None:
        """Env ``i`` of the batch was reset with ``seed``."""

    def before_step(self, i: int, env: gym.Env, obs: dict[str, np.ndarray], action: np.ndarray) -> None:
        """Env ``i`` is about to apply ``action`` in observation ``obs``."""

    def after_step(self, i: int, env: gym.Env, reward: float, info: dict[str, Any]) -> None:
        """Env ``i`` applied the action; ``info`` is the step's result."""

    def on_end(self, i: int, record: EpisodeRecord) -> None:
        """Env ``i``'s episode ended with ``record``."""


def _stack(obs_list: list[dict[str, np.ndarray]], keys: list[str]) -> dict[str, np.ndarray]:
    return {k: np.stack([o[k] for o in obs_list]) for k in keys}


def _safe_step(env: gym.Env, action: np.ndarray) -> tuple[dict, float, bool, dict]:
    """``env.step`` where a non-finite action ends the episode as a simulation error."""
    try:
        obs, reward, terminated, truncated, info = env.step(action)
    except ActionError as exc:
        return {}, 0.0, True, {"stage": -1, "success": False, "sim_error": f"policy action rejected: {exc}"}
    return obs, float(reward), bool(terminated or truncated), info


def run_batch(
    envs: list[gym.Env],
    policy: ActionChunkPolicy,
    seeds: list[int],
    generator: torch.Generator,
    device: torch.device,
    observers: Sequence[RolloutObserver] = (),
) -> list[EpisodeRecord]:
    """Run one lockstep batch: env ``i`` is reset with ``seeds[i]``; returns the records in order."""
    envs = envs[: len(seeds)]
    policy.reset()
    obs_list, records = [], []
    for i, (env, seed) in enumerate(zip(envs, seeds, strict=True)):
        obs, info = env.reset(seed=seed)
        obs_list.append(obs)
        records.append(EpisodeRecord(seed, False, 0, info["stage"], info["stage"]))
        for ob in observers:
            ob.on_reset(i, env, seed, info)
    keys = list(policy_obs_keys(policy, obs_list[0]))
    done = np.zeros(len(seeds), dtype=bool)
    while not done.all():
        batch = to_torch_obs(_stack(obs_list, keys), device)
        actions = policy.select_action(batch, generator=generator).float().cpu().numpy()
        for i in np.flatnonzero(~done):
            for ob in observers:
                ob.before_step(i, envs[i], obs_list[i], actions[i])
            obs, reward, finished, info = _safe_step(envs[i], actions[i])
            for ob in observers:
                ob.after_step(i, envs[i], reward, info)
            rec = records[i]
            rec.length += 1
            rec.last_stage = int(info["stage"])
            rec.max_stage = max(rec.max_stage, rec.last_stage)
            rec.success = bool(info["success"])
            rec.sim_error = info.get("sim_error")
            rec.perturbations += [p.get("type", "?") for p in info.get("perturbation", ())]
            if obs:
                obs_list[i] = obs
            if finished:
                done[i] = True
                for ob in observers:
                    ob.on_end(i, rec)
    return records


def policy_obs_keys(policy: ActionChunkPolicy, obs: dict[str, np.ndarray]) -> list[str]:
    """Observation keys the policy consumes (``used_obs_keys``, else ``obs_keys``, else all)."""
    keys = getattr(policy, "used_obs_keys", None) or getattr(policy, "obs_keys", None)
    return list(keys) if keys else sorted(obs)
