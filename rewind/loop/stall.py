"""The stall trigger sized from the demos (``recovery.stall_from_demos``): how long a demo spends in a
stage, and the loop's ``stall_steps`` derived from it once per loop.

A *stage duration* is what the loop's stall trigger (:func:`rewind.loop.episodes.run_episode`)
measures: the steps between two advances of the best stage reached so far in an episode. A stage that
is left and re-entered (the object dropped and grasped again) is one duration, from the advance into
it to the advance out of it; a step that skips a stage is one advance. The stage of a stored step is
recomputed from its simulator state (``set_physics_state`` then ``stage()``: the stages are
predicates of the state, the same value the live ``info["stage"]`` gave).

Which steps count:

* only **successful** episodes: a failed episode's last interval never ended, it is not a duration;
* the **final stage** counts: its duration ends at the step whose action completed the task (the
  store keeps the state *before* each action, so success is the step after the last stored state);
* **time after success** does not count: a store whose episodes go on after success (robomimic
  datasets may) is cut at the first stored state where the task is done.

``stall_steps = ceil(factor * q)``, ``q`` the ``percentile``-th percentile (numpy's linear
interpolation) of every demo stage duration. The trigger fires after ``stall_steps`` steps without an
advance, so a stage of at most ``stall_steps`` steps never triggers it.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rewind.config import ConfigError
from rewind.envs.config import EnvConfig, build_env
from rewind.loop.lineage import rel
from rewind.store import ReplayStore
from rewind.utils.io import atomic_write_json

log = logging.getLogger(__name__)

#: The loop's record of the threshold, in its ``out_dir`` (written once; a resumed loop reads it).
STALL_FILE = "stall.json"


def episode_stage_durations(stages: Sequence[int], num_stages: int, success: bool) -> list[tuple[int, int]]:
    """``(stage, steps)`` per advance of the best stage of one episode (see the module doc).

    Args:
        stages: the stage of each stored state (``stages[t]``: before action ``t``).
        num_stages: the task's stage count (a stage ``>= num_stages`` is success).
        success: the episode completed the task; ``False`` gives ``[]``.
    """
    if not success or not len(stages):
        return []
    out: list[tuple[int, int]] = []
    best, since = int(stages[0]), 0
    for t in range(1, len(stages) + 1):
        # after step t the state is stages[t]; past the last stored state the task is done
        stage = int(stages[t]) if t < len(stages) else num_stages
        if stage > best:
            out.append((best, t - since))
            best, since = stage, t
        if best >= num_stages:
            break
    return out


@dataclass
class StallThreshold:
    """The loop's stall threshold from the demos, and what it was computed from.

    Attributes:
        stall_steps: ``ceil(factor * q)``, the threshold the collection uses.
        factor / percentile: ``recovery.stall_from_demos`` and ``recovery.stall_percentile``.
        q: the ``percentile``-th percentile of the demo stage durations (steps).
        demo_stages: stage durations counted; demo_episodes: successful episodes they come from;
        skipped_episodes: unsuccessful episodes left out.
        demos: the demo store; env: the env that recomputed the stages.
        by_stage: per stage name: ``n``, ``median``, ``p95``, ``max`` of its durations.
    """

    stall_steps: int
    factor: float
    percentile: float
    q: float
    demo_stages: int
    demo_episodes: int
    skipped_episodes: int
    demos: str
    env: str
    by_stage: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The JSON mapping (``stall.json``, the round's ``collection.stall_from_demos``)."""
        return asdict(self)

    def describe(self) -> str:
        """One line for the log."""
        return (
            f"stall_steps={self.stall_steps} = ceil({self.factor:g} x {self.q:.1f}), the "
            f"{self.percentile:g}th percentile of {self.demo_stages} stage durations in "
            f"{self.demo_episodes} demos of {self.env} ({self.demos})"
        )


def threshold_steps(durations: Sequence[int], factor: float, percentile: float) -> tuple[int, float]:
    """``(ceil(factor * q), q)`` with ``q`` the ``percentile``-th percentile of ``durations``."""
    q = float(np.percentile(np.asarray(durations, dtype=np.float64), percentile))
    return int(math.ceil(round(factor * q, 9))), q


def store_episode_durations(
    store: str | Path, env: gym.Env, env_name: str, sources: Sequence[str] | None = None
) -> tuple[list[list[tuple[int, int]]], int]:
    """``(stage, steps)`` per successful episode of ``store`` (:func:`episode_stage_durations`), and the
    count of episodes skipped (unsuccessful, or with a step whose source is not in ``sources`` when
    given); the env's state is overwritten (use an env built for this).

    Raises:
        ConfigError: the env cannot recompute stages from stored states, the store has no successful
            episode, or its episodes were recorded on another env or do not fit this one; the message
            names the store and the env.
    """
    base = env.unwrapped
    where = f"recovery.stall_from_demos: the demo store {store} has no stage information for env {env_name}"
    if not (hasattr(base, "stage") and hasattr(base, "set_physics_state") and hasattr(base, "num_stages")):
        raise ConfigError(f"{where}: the env cannot restore a stored state and read its stage")
    # the env's Gymnasium id, or (a robomimic import) robosuite's env name
    ids = {getattr(env.spec, "id", None), getattr(getattr(base, "task", None), "env_name", None)} - {None}
    out: list[list[tuple[int, int]]] = []
    skipped = 0
    with ReplayStore.open(store) as s:
        for info in s.episodes():
            if info.env_id not in ids:
                raise ConfigError(f"{where}: episode {info.id} was recorded on {info.env_id}")
            if not info.success or (sources is not None and set(info.source_counts) - set(sources)):
                skipped += 1
                continue
            try:
                stages = [_stage_of(base, state) for state in s.load(info.id, obs_keys=()).states]
            except ValueError as exc:
                raise ConfigError(f"{where}: episode {info.id}: {exc}") from None
            out.append(episode_stage_durations(stages, base.num_stages, True))
    if not any(out):
        raise ConfigError(f"{where}: no successful episode with a stage advance ({skipped} skipped)")
    return out, skipped


def store_stage_durations(
    store: str | Path, env: gym.Env, env_name: str
) -> tuple[list[tuple[int, int]], int, int]:
    """Every ``(stage, steps)`` of ``store``'s successful episodes, with the counts of episodes used and
    skipped (:func:`store_episode_durations`)."""
    episodes, skipped = store_episode_durations(store, env, env_name)
    return [d for ep in episodes for d in ep], len(episodes), skipped


def _stage_of(base: Any, state: np.ndarray) -> int:
    base.set_physics_state(state)
    return int(base.stage())


def _by_stage(durations: list[tuple[int, int]], names: Sequence[str]) -> dict[str, dict[str, float]]:
    out = {}
    for stage in sorted({s for s, _ in durations}):
        d = np.array([n for s, n in durations if s == stage], dtype=np.float64)
        name = names[stage] if 0 <= stage < len(names) else str(stage)
        out[name] = {
            "n": int(d.size),
            "median": float(np.median(d)),
            "p95": float(np.percentile(d, 95)),
            "max": float(d.max()),
        }
    return out


def demo_stall_threshold(
    store: str | Path, env: gym.Env, env_name: str, factor: float, percentile: float
) -> StallThreshold:
    """The stall threshold ``ceil(factor * q)`` from the stage durations of ``store``'s demos."""
    durations, used, skipped = store_stage_durations(store, env, env_name)
    steps, q = threshold_steps([n for _, n in durations], factor, percentile)
    names = tuple(getattr(env.unwrapped, "stage_names", ()))
    return StallThreshold(
        steps,
        factor,
        percentile,
        q,
        len(durations),
        used,
        skipped,
        str(store),
        env_name,
        _by_stage(durations, names),
    )


def loop_stall_threshold(
    out: Path, demos: Path, env_cfg: EnvConfig, factor: float, percentile: float
) -> StallThreshold:
    """The loop's threshold: read from ``out/stall.json`` when an earlier start computed it with the same
    ``factor`` and ``percentile``, else computed from ``demos`` with an env built for it and written
    there (``demos`` recorded relative to ``out``)."""
    path = out / STALL_FILE
    if path.exists():
        saved = StallThreshold(**json.loads(path.read_text()))
        if (saved.factor, saved.percentile) == (factor, percentile):
            return saved
    env = build_env(env_cfg)
    try:
        stall = demo_stall_threshold(demos, env, env_cfg.name, factor, percentile)
    finally:
        env.close()
    stall.demos = rel(out, demos)
    atomic_write_json(path, stall.to_json())
    return stall
