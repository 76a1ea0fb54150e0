"""Evaluation of the scripted operators: success from reset, and when taking over a disrupted episode.

Two protocols, each one episode per env seed:

* :func:`run_from_reset`: the operator (default :class:`OperatorNoise`, the demo style) drives the
  episode from ``reset(seed=s)`` for the task's ``max_steps``.
* :func:`run_takeover`: the real perturbation wrappers are on (:class:`PerturbationConfig`, each
  with probability ``perturb_prob`` in its default window, so some fire after the handover too);
  for a random ``U{min_prefix..max_prefix}`` steps a disruptive prefix drives the episode (in a
  ``random_prefix_prob`` share of the episodes uniform random actions, otherwise the operator with
  heavy noise interrupted by bursts of uniform random actions); then a clean
  (noise-free) operator takes over with a budget of ``budget`` steps (default: the task's
  ``max_steps``). Episodes that end during the prefix count as they ended.

Every draw comes from generators seeded by the env seed, so an episode's record depends only on its
seed and the configuration (not on the other seeds of the batch). :func:`summarize` turns records
into rates with Wilson 95% intervals, lengths and failure causes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from rewind.envs.core.base import WORKSPACE_HIGH, TaskEnv
from rewind.envs.operators.base import Operator, OperatorNoise
from rewind.envs.registry import make_env, make_operator
from rewind.envs.wrappers import PerturbationConfig, apply_perturbations
from rewind.utils.stats import wilson_interval

#: An object whose centre is this far (m) beyond the gripper's workspace in x or y cannot be fetched.
REACH_MARGIN = 0.01


@dataclass(frozen=True)
class TakeoverConfig:
    """The takeover protocol.

    Attributes:
        perturb_prob: probability of each perturbation wrapper (nudge, slip, push) per episode.
        min_prefix, max_prefix: the disruptive prefix lasts ``U{min_prefix..max_prefix}`` steps.
        random_prefix_prob: per-episode chance that the prefix is all uniform random actions.
        prefix_noise: the style of the prefix's noisy operator.
        burst_prob: per-step chance that a burst of uniform random actions starts in the prefix.
        burst_len: inclusive range of a burst's length (steps).
        budget: steps the clean operator gets after the handover (None: the task's ``max_steps``).
    """

    perturb_prob: float = 0.5
    min_prefix: int = 5
    max_prefix: int = 80
    random_prefix_prob: float = 1 / 3
    prefix_noise: OperatorNoise = OperatorNoise(action_std=0.3, gain_range=(0.5, 1.5))
    burst_prob: float = 0.05
    burst_len: tuple[int, int] = (1, 5)
    budget: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.min_prefix <= self.max_prefix:
            raise ValueError(f"need 0 <= min_prefix <= max_prefix; got {self.min_prefix}, {self.max_prefix}")
        for name in ("random_prefix_prob", "burst_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1]; got {getattr(self, name)}")
        if not 1 <= self.burst_len[0] <= self.burst_len[1]:
            raise ValueError(f"burst_len must satisfy 1 <= low <= high; got {self.burst_len}")
        if self.budget is not None and self.budget < 1:
            raise ValueError(f"budget must be >= 1; got {self.budget}")

    def perturbations(self) -> PerturbationConfig:
        """The wrappers' configuration: every kind on with ``perturb_prob``, default windows."""
        p = self.perturb_prob
        return PerturbationConfig(nudge_prob=p, slip_prob=p, push_prob=p)


@dataclass
class OperatorEpisode:
    """Outcome of one operator episode.

    Attributes:
        seed: the env reset seed.
        protocol: ``"reset"`` or ``"takeover"``.
        success: the task was completed.
        length: steps the evaluated operator took (after the handover for a takeover; 0 when the
            episode ended during the prefix).
        final_stage: ``info["stage_name"]`` at the end.
        out_of_reach: some object ended outside the gripper's workspace (no operator can recover it).
        prefix_steps: steps of the disruptive prefix that ran (0 from reset).
        prefix_kind: ``"random"`` or ``"noisy"`` (None from reset).
        stage_at_handover: stage name when the operator took over (None from reset).
        done_at_handover: the episode had ended (success or sim error) before the handover.
        perturbations: kinds of the wrapper perturbations that fired, in order.
        sim_error: the simulator's error message, else None.
    """

    seed: int
    protocol: str
    success: bool
    length: int
    final_stage: str
    out_of_reach: bool = False
    prefix_steps: int = 0
    prefix_kind: str | None = None
    stage_at_handover: str | None = None
    done_at_handover: bool = False
    perturbations: list[str] = field(default_factory=list)
    sim_error: str | None = None

    def failure_cause(self) -> str | None:
        """Why the episode failed (``out_of_reach``, ``sim_error`` or ``timeout:<stage>``); None if it
        succeeded."""
        if self.success:
            return None
        if self.sim_error:
            return "sim_error"
        if self.out_of_reach:
            return "out_of_reach"
        return f"timeout:{self.final_stage}"


def object_out_of_reach(env: TaskEnv) -> bool:
    """Some object's centre lies outside the gripper's workspace in x or y (it cannot be fetched)."""
    lim = WORKSPACE_HIGH[:2] + REACH_MARGIN
    return any(bool(np.any(np.abs(env.object_pos(n)[:2]) > lim)) for n in env.object_names)


def drive(env: gym.Env, act, steps: int) -> tuple[bool, int, dict[str, Any], list[str]]:
    """Step ``env`` with ``act(env)`` for up to ``steps`` steps or until it terminates.

    Returns (terminated, steps taken, last info, kinds of the perturbations that fired).
    """
    info: dict[str, Any] = {}
    fired: list[str] = []
    for t in range(steps):
        _, _, terminated, _, info = env.step(act(env))
        fired += [p["type"] for p in info.get("perturbation", ())]
        if terminated:
            return True, t + 1, info, fired
    return False, steps, info, fired


def run_from_reset(
    task: str, seeds: Iterable[int], noise: OperatorNoise | None = None
) -> list[OperatorEpisode]:
    """Run the operator of ``task`` (style ``noise``, default :class:`OperatorNoise`) from reset.

    Episode ``seed`` resets the env with ``seed`` and draws the operator's style from
    ``np.random.default_rng(seed)``.
    """
    env = make_env(task)
    base: TaskEnv = env.unwrapped  # type: ignore[assignment]
    op = make_operator(task, noise=noise or OperatorNoise())
    records = []
    try:
        for seed in seeds:
            env.reset(seed=int(seed))
            op.reset(np.random.default_rng(int(seed)))
            _, n, info, _ = drive(env, op.act, base.max_steps)
            records.append(_record(base, int(seed), "reset", n, info))
    finally:
        env.close()
    return records


class _PrefixPolicy:
    """The disruptive prefix: a noisy operator interrupted by bursts of uniform random actions, or
    (``all_random``) uniform random actions throughout."""

    def __init__(self, noisy: Operator, cfg: TakeoverConfig, rng: np.random.Generator) -> None:
        self.noisy, self.cfg, self.rng = noisy, cfg, rng
        self.all_random = bool(rng.random() < cfg.random_prefix_prob)
        self.burst = 0

    def __call__(self, env: gym.Env) -> np.ndarray:
        """The next prefix action."""
        if self.all_random:
            return self.rng.uniform(-1.0, 1.0, size=5).astype(np.float32)
        if self.burst == 0 and self.rng.random() < self.cfg.burst_prob:
            self.burst = int(self.rng.integers(self.cfg.burst_len[0], self.cfg.burst_len[1] + 1))
        if self.burst > 0:
            self.burst -= 1
            return self.rng.uniform(-1.0, 1.0, size=5).astype(np.float32)
        return self.noisy.act(env)


def run_takeover(task: str, seeds: Iterable[int], cfg: TakeoverConfig | None = None) -> list[OperatorEpisode]:
    """Run the takeover protocol (module doc) of ``task`` once per seed."""
    cfg = cfg or TakeoverConfig()
    probe = make_env(task)
    budget = cfg.budget or probe.unwrapped.max_steps
    probe.close()
    env = apply_perturbations(make_env(task, max_steps=cfg.max_prefix + budget), cfg.perturbations())
    base: TaskEnv = env.unwrapped  # type: ignore[assignment]
    noisy = make_operator(task, noise=cfg.prefix_noise)
    clean = make_operator(task)
    records = []
    try:
        for seed in seeds:
            records.append(_takeover_episode(env, base, noisy, clean, int(seed), cfg, budget))
    finally:
        env.close()
    return records


def _takeover_episode(
    env: gym.Env,
    base: TaskEnv,
    noisy: Operator,
    clean: Operator,
    seed: int,
    cfg: TakeoverConfig,
    budget: int,
) -> OperatorEpisode:
    """One takeover episode on the (perturbation-wrapped) ``env``."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1,)))
    env.reset(seed=seed)
    noisy.reset(rng)
    clean.reset(np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(2,))))
    n_prefix = int(rng.integers(cfg.min_prefix, cfg.max_prefix + 1))
    prefix = _PrefixPolicy(noisy, cfg, rng)
    done, n_pre, info, fired = drive(env, prefix, n_prefix)
    handover = str(info["stage_name"]) if info else (*base.stage_names, "done")[base.stage()]
    n = 0
    if not done:
        _, n, info, more = drive(env, clean.act, budget)
        fired += more
    rec = _record(base, seed, "takeover", n, info)
    rec.prefix_steps, rec.stage_at_handover, rec.done_at_handover = n_pre, handover, done
    rec.prefix_kind, rec.perturbations = "random" if prefix.all_random else "noisy", fired
    return rec


def _record(base: TaskEnv, seed: int, protocol: str, length: int, info: dict[str, Any]) -> OperatorEpisode:
    success = bool(info.get("success", False))
    return OperatorEpisode(
        seed=seed,
        protocol=protocol,
        success=success,
        length=length,
        final_stage=str(info.get("stage_name", "?")),
        out_of_reach=not success and object_out_of_reach(base),
        sim_error=info.get("sim_error"),
    )


def summarize(records: Sequence[OperatorEpisode]) -> dict[str, Any]:
    """Success rate with its Wilson 95% interval, lengths and failure causes of ``records``.

    Lengths are steps of the evaluated operator; ``mean_len``/``max_len`` are over the successes it
    drove (not those already done at the handover). For
    takeover records it adds ``done_at_handover`` (successes before the handover) and the
    ``stage_at_handover`` histogram.
    """
    k, n = sum(r.success for r in records), len(records)
    lo, hi = wilson_interval(k, n)
    ok_len = [r.length for r in records if r.success and not r.done_at_handover]
    out: dict[str, Any] = {
        "successes": k,
        "episodes": n,
        "rate": round(k / n, 4) if n else 0.0,
        "wilson95": [round(lo, 4), round(hi, 4)],
        "mean_len": round(float(np.mean(ok_len)), 1) if ok_len else 0.0,
        "max_len": max(ok_len, default=0),
        "failed_object_out_of_reach": sum(r.failure_cause() == "out_of_reach" for r in records),
        "sim_errors": sum(r.sim_error is not None for r in records),
        "failure_causes": dict(Counter(c for r in records if (c := r.failure_cause()))),
        "failed_seeds": [r.seed for r in records if not r.success],
    }
    takeovers = [r for r in records if r.protocol == "takeover"]
    if takeovers:
        out["done_at_handover"] = sum(r.done_at_handover and r.success for r in takeovers)
        out["stage_at_handover"] = dict(Counter(r.stage_at_handover for r in takeovers))
        out["mean_prefix"] = round(float(np.mean([r.prefix_steps for r in takeovers])), 1)
        out["prefix_kind"] = dict(Counter(r.prefix_kind for r in takeovers))
        out["perturbations"] = dict(Counter(p for r in takeovers for p in r.perturbations))
    return out
