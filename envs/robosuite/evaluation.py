"""Scoring the robosuite operators: success from reset, and when taking over a disrupted episode.

The protocols follow :mod:`rewind.envs.evaluation` (one episode per env seed, every draw from
generators seeded by that seed) without its perturbation wrappers, which act on the native tasks'
gripper:

* :func:`run_from_reset`: the operator (default :class:`OperatorNoise`, the demo style) drives the
  episode from ``reset(seed=s)`` for the task's ``max_steps``.
* :func:`run_takeover`: for ``U{min_prefix..max_prefix}`` steps a disruptive prefix drives (in a
  ``random_prefix_prob`` share of the episodes uniform random actions, otherwise the operator with
  heavy noise interrupted by bursts of random actions); then a clean operator takes over with the
  task's ``max_steps``. An episode that ends during the prefix counts as it ended.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rewind.envs.operators.base import OperatorNoise
from rewind.envs.robosuite.env import RobosuiteEnv
from rewind.envs.robosuite.operators import RobosuiteOperator, make_operator
from rewind.utils.stats import wilson_interval


@dataclass(frozen=True)
class TakeoverConfig:
    """The takeover protocol: prefix length range, share of all-random prefixes, the noisy prefix
    operator's style, and the per-step chance and length range of random bursts."""

    min_prefix: int = 5
    max_prefix: int = 60
    random_prefix_prob: float = 1 / 3
    prefix_noise: OperatorNoise = OperatorNoise(action_std=0.3, gain_range=(0.5, 1.5))
    burst_prob: float = 0.05
    burst_len: tuple[int, int] = (1, 5)


def _episode(env: RobosuiteEnv, act, steps: int) -> tuple[bool, int, dict[str, Any]]:
    info: dict[str, Any] = {}
    for t in range(steps):
        _, _, terminated, _, info = env.step(act(env))
        if terminated:
            return True, t + 1, info
    return False, steps, info


def run_from_reset(
    task: str, seeds: Iterable[int], noise: OperatorNoise | None = None
) -> list[dict[str, Any]]:
    """One operator episode per seed from ``reset(seed)``; records of success, length, final stage."""
    env = RobosuiteEnv(task)
    op = make_operator(task, noise or OperatorNoise())
    records = []
    for seed in seeds:
        env.reset(seed=int(seed))
        op.reset(np.random.default_rng(int(seed)))
        _, n, info = _episode(env, op.act, env.max_steps)
        records.append(
            {
                "seed": int(seed),
                "success": bool(info.get("success")),
                "length": n,
                "final_stage": info.get("stage_name"),
            }
        )
    env.close()
    return records


def _prefix(noisy: RobosuiteOperator, cfg: TakeoverConfig, rng: np.random.Generator, dim: int):
    all_random = bool(rng.random() < cfg.random_prefix_prob)
    burst = [0]

    def act(env: RobosuiteEnv) -> np.ndarray:
        if not all_random and burst[0] == 0 and rng.random() < cfg.burst_prob:
            burst[0] = int(rng.integers(cfg.burst_len[0], cfg.burst_len[1] + 1))
        if all_random or burst[0] > 0:
            burst[0] = max(burst[0] - 1, 0)
            return rng.uniform(-1.0, 1.0, size=dim).astype(np.float32)
        return noisy.act(env)

    return act, ("random" if all_random else "noisy")


def run_takeover(task: str, seeds: Iterable[int], cfg: TakeoverConfig | None = None) -> list[dict[str, Any]]:
    """The takeover protocol (module doc) once per seed."""
    cfg = cfg or TakeoverConfig()
    env = RobosuiteEnv(task)
    budget = env.max_steps
    env.max_steps = cfg.max_prefix + budget
    noisy, clean = make_operator(task, cfg.prefix_noise), make_operator(task)
    records = []
    for seed in seeds:
        rng = np.random.default_rng(int(seed))
        env.reset(seed=int(seed))
        noisy.reset(rng)
        act, kind = _prefix(noisy, cfg, rng, env.action_space.shape[0])
        n_prefix = int(rng.integers(cfg.min_prefix, cfg.max_prefix + 1))
        done, _, info = _episode(env, act, n_prefix)
        rec: dict[str, Any] = {
            "seed": int(seed),
            "prefix_kind": kind,
            "prefix_steps": n_prefix,
            "done_at_handover": done,
            "stage_at_handover": info.get("stage_name"),
        }
        n = 0
        if not done:
            clean.reset(rng)
            _, n, info = _episode(env, clean.act, budget)
        rec.update(success=bool(info.get("success")), length=n, final_stage=info.get("stage_name"))
        records.append(rec)
    env.close()
    return records


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Success count and rate with a Wilson 95% interval, mean/max length, failed seeds."""
    k, n = sum(r["success"] for r in records), len(records)
    lengths = [r["length"] for r in records if r["success"]]
    return {
        "episodes": n,
        "successes": k,
        "rate": k / n if n else 0.0,
        "wilson95": list(wilson_interval(k, n)),
        "mean_length": float(np.mean(lengths)) if lengths else None,
        "max_length": max(lengths) if lengths else None,
        "failed": [{"seed": r["seed"], "final_stage": r["final_stage"]} for r in records if not r["success"]],
    }
