"""Lockstep batched rollouts: ``B`` envs step together under one batched policy call.

Each batch resets every env with consecutive seeds and steps until all are done; a finished env is
held (no longer stepped, its last observation still fed to the policy so the batch keeps its size).
With a seeded ``torch.Generator`` the records are a pure function of the seeds and the weights.
Envs step through :func:`rewind.rollout.pool.step_many`, so the batch may live in this process or in
worker processes (:class:`rewind.rollout.workers.EnvWorkers`, ``rollout.workers=N``): same records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch

from rewind.policies.base import ActionChunkPolicy, to_torch_obs
from rewind.policies.noise import RowGenerators
from rewind.rollout.pool import StepOutcome, step_chunks, step_many


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


def run_batch(
    envs: Sequence[gym.Env],
    policy: ActionChunkPolicy,
    seeds: list[int],
    generator: torch.Generator | RowGenerators,
    device: torch.device,
    observers: Sequence[RolloutObserver] = (),
    chunked: bool = True,
) -> list[EpisodeRecord]:
    """Run one lockstep batch: env ``i`` is reset with ``seeds[i]``; returns the records in order.
    ``generator`` is the batch's sampling noise: one generator, or one stream per env (row).

    With ``chunked`` (and no observers, which see every step), when the policy has queued the rest of
    a chunk (``queued_actions``) the envs step all of it in one :func:`step_chunks` call (one message
    per worker with ``rollout.workers``), then the policy observes those steps one by one as it would
    have: the records do not depend on ``chunked``.
    """
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
    chunked = chunked and not observers and hasattr(policy, "queued_actions")

    def act() -> np.ndarray:
        batch = to_torch_obs(_stack(obs_list, keys), device)
        return policy.select_action(batch, generator=generator).float().cpu().numpy()

    while not done.all():
        actions = act()
        active = np.flatnonzero(~done).tolist()
        if chunked and (queued := policy.queued_actions()):
            seqs = np.stack([actions, *(q.float().cpu().numpy() for q in queued)], axis=1)  # [B, T, Da]
            rows = step_chunks(envs, active, [seqs[i] for i in active])
            for t in range(seqs.shape[1]):
                if t and done.all():
                    break
                if t:
                    act()  # the policy observes step t's observations and pops its queue, as per step
                for i, env_rows in zip(active, rows, strict=True):
                    if t < len(env_rows):
                        _apply(records[i], env_rows[t], obs_list, done, i, envs[i], observers)
            continue
        for i in active:
            for ob in observers:
                ob.before_step(i, envs[i], obs_list[i], actions[i])
        outcomes = step_many(envs, active, [actions[i] for i in active])
        for i, outcome in zip(active, outcomes, strict=True):
            _apply(records[i], outcome, obs_list, done, i, envs[i], observers)
    return records


def _apply(
    rec: EpisodeRecord,
    outcome: StepOutcome,
    obs_list: list[dict[str, np.ndarray]],
    done: np.ndarray,
    i: int,
    env: gym.Env,
    observers: Sequence[RolloutObserver],
) -> None:
    """Env ``i``'s step ``outcome`` into its record, its observation and ``done``; observers told."""
    obs, reward, terminated, truncated, info = outcome
    for ob in observers:
        ob.after_step(i, env, reward, info)
    rec.length += 1
    rec.last_stage = int(info["stage"])
    rec.max_stage = max(rec.max_stage, rec.last_stage)
    rec.success = bool(info["success"])
    rec.sim_error = info.get("sim_error")
    rec.perturbations += [p.get("type", "?") for p in info.get("perturbation", ())]
    if obs is not None:
        obs_list[i] = obs
    if terminated or truncated:
        done[i] = True
        for ob in observers:
            ob.on_end(i, rec)


def policy_obs_keys(policy: ActionChunkPolicy, obs: dict[str, np.ndarray]) -> list[str]:
    """Observation keys the policy consumes (``used_obs_keys``, else ``obs_keys``, else all)."""
    keys = getattr(policy, "used_obs_keys", None) or getattr(policy, "obs_keys", None)
    return list(keys) if keys else sorted(obs)
