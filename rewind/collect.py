"""Demo collection: the scripted operator drives each episode and successful demos land in the store."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from rewind.config import CommandConfig, require
from rewind.envs import make_operator
from rewind.envs.config import EnvConfig, build_env
from rewind.envs.operators.base import Operator, OperatorNoise
from rewind.store import ReplayStore, format_store_info, store_info, store_spec_for

log = logging.getLogger(__name__)


@dataclass
class NoiseConfig:
    """Operator noise (see :class:`rewind.envs.operators.base.OperatorNoise`)."""

    action_std: float = 0.05
    gain_low: float = 0.8
    gain_high: float = 1.2
    height_jitter: float = 0.01

    def build(self) -> OperatorNoise:
        """The operator-side noise object (validates ranges)."""
        return OperatorNoise(self.action_std, (self.gain_low, self.gain_high), self.height_jitter)


@dataclass
class CollectConfig(CommandConfig):
    """Schema of ``rewind-collect`` (``configs/collect.yaml``).

    Attributes:
        env: the task (Hydra group ``env=lift|pick_place|stack3|nut_peg``).
        episodes: number of demo attempts; failed attempts are counted, not stored.
        seed: seed of the first episode; episode ``i`` uses ``seed + i``.
        out: the replay store to append to (created if missing); default ``<out_dir>/store``.
        noise: operator noise, so demos are diverse.
        progress: show a progress bar.
    """

    env: EnvConfig = field(default_factory=EnvConfig)
    episodes: int = 20
    seed: int = 0
    out: str | None = None
    noise: NoiseConfig = field(default_factory=NoiseConfig)
    progress: bool = True

    def __post_init__(self) -> None:
        require(self.episodes >= 1, f"episodes must be >= 1; got {self.episodes}")
        require(self.seed >= 0, f"seed must be >= 0; got {self.seed}")


def record_episode(
    env: gym.Env, operator: Operator, seed: int
) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """Run one operator episode from ``reset(seed)``; return per-step arrays and the final info.

    Step ``t`` pairs the observation and simulator state *before* action ``t`` with that action.
    """
    obs, info = env.reset(seed=seed)
    operator.reset(np.random.default_rng(np.random.SeedSequence([seed, 1])))
    steps: dict[str, list[Any]] = {"obs": [], "action": [], "state": [], "reward": []}
    base = env.unwrapped
    done = False
    while not done:
        action = operator.act(env)
        steps["obs"].append(obs)
        steps["state"].append(base.physics_state())
        steps["action"].append(action)
        obs, reward, terminated, truncated, info = env.step(action)
        steps["reward"].append(reward)
        done = terminated or truncated
    return steps, info


def run_collect(cfg: CollectConfig) -> dict[str, Any]:
    """Collect ``cfg.episodes`` operator demos into the store; return the summary."""
    env = build_env(cfg.env)
    operator = make_operator(cfg.env.name, noise=cfg.noise.build())
    store_path = cfg.out or f"{cfg.out_dir}/store"
    start = time.perf_counter()
    n_ok, lengths, failures = 0, [], []
    with ReplayStore.open_or_create(store_path, store_spec_for(env)) as store:
        bar = tqdm(range(cfg.episodes), desc=f"collect {cfg.env.name}", disable=not cfg.progress)
        for i in bar:
            seed = cfg.seed + i
            steps, info = record_episode(env, operator, seed)
            if not info["success"]:
                failures.append({"seed": seed, "stage": info["stage"], "sim_error": info.get("sim_error")})
                continue
            n = len(steps["action"])
            obs = {k: np.stack([o[k] for o in steps["obs"]]) for k in steps["obs"][0]}
            store.add_episode(
                obs=obs,
                actions=np.stack(steps["action"]),
                states=np.stack(steps["state"]),
                sources=["demo"] * n,
                rewards=np.asarray(steps["reward"], dtype=np.float32),
                meta={
                    "seed": seed,
                    "policy_version": f"operator/{cfg.env.name}",
                    "round": 0,
                    "success": True,
                    "n_operator_steps": n,
                },
            )
            n_ok += 1
            lengths.append(n)
            bar.set_postfix(ok=n_ok, failed=len(failures))
    env.close()
    info = store_info(store_path)
    log.info("store %s\n%s", store_path, format_store_info(info))
    return {
        "env": cfg.env.name,
        "episodes": cfg.episodes,
        "succeeded": n_ok,
        "failed": len(failures),
        "success_rate": n_ok / cfg.episodes,
        "mean_length": float(np.mean(lengths)) if lengths else 0.0,
        "failures": failures,
        "store": store_path,
        "store_info": info,
        "wall_time_s": round(time.perf_counter() - start, 3),
    }
