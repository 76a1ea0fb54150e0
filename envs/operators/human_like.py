"""A human-like operator model: a scripted :class:`Operator` made slow, noisy and fallible, the more so
the farther the state is from the demos (``recovery/operator_model=human_like``, issue 13).

RaC's claim is about people: a correction from an unfamiliar failure state is slow and unreliable,
one from a familiar state (after rewinding to it) is easy. A scripted operator is equally good from
any state, so it cannot test that claim. :class:`HumanLikeOperator` wraps any task's scripted
operator and, per takeover (``reset``):

1. **reaction delay**: the first ``reaction_s`` seconds it sends the hold action (no motion, fingers
   kept as they are);
2. at its first decision it may **give up** (probability rising with the distance from the demos):
   it hesitates ``give_up_s`` seconds (hold) and stops; the driver ends the intervention, failed;
3. otherwise it drives with the scripted plan, plus Gaussian **noise** on translation/yaw, under a
   **speed cap** on translation and yaw, both worse far from the demos; each step a **botch** may start
   (a rate per second rising with the distance): ``botch_s`` seconds of drift in a random direction with
   the fingers commanded open or closed at random (a held object may drop).

Distance: :class:`~rewind.envs.operators.demo_distance.DemoDistance` (re-exported here), the
nearest-demo-state distance of the observation with every key scaled to its demos' widest min/max
span (``distance_scale=per_key``), divided by a reference (by default the median distance of held-out
demo episodes' states to the other episodes: ``ratio <= 1`` is "as close as a typical new demo").
Unfamiliarity ``u = clip((ratio - 1) / (far_ratio - 1), 0, 1)`` interpolates every parameter from its
``*_near`` to its ``*_far`` value. All randomness comes from the generator given to ``reset``.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from rewind.config import check_choice, require
from rewind.envs.core.base import MAX_DPOS, MAX_DYAW, TaskEnv
from rewind.envs.core.mjcf import FINGER_STROKE, N_SUBSTEPS, TIMESTEP
from rewind.envs.operators.base import Operator
from rewind.envs.operators.demo_distance import DISTANCE_SCALES, DemoDistance  # both re-exported

log = logging.getLogger(__name__)

#: Control period of every task (s): ``N_SUBSTEPS`` physics steps of ``TIMESTEP`` (20 Hz).
CONTROL_DT = TIMESTEP * N_SUBSTEPS
#: ``recovery.operator_model.name`` values.
OPERATOR_MODELS = ("perfect", "human_like")


@dataclass
class OperatorModelConfig:
    """Who drives the operator's interventions (Hydra group ``recovery/operator_model=``).

    ``perfect`` is the scripted operator unchanged (every other key is ignored except
    ``overhead_s``); ``human_like`` wraps it in :class:`HumanLikeOperator`. Where a value has no
    published source it is an assumption (see ``configs/recovery/operator_model/human_like.yaml``).

    Attributes:
        name: ``perfect`` or ``human_like``.
        reaction_s: hold time after each takeover (s).
        noise_near / noise_far: std of the Gaussian noise on the translation/yaw action entries.
        speed_near / speed_far: translation speed cap (m/s, norm of the xyz motion).
        yaw_rate_near / yaw_rate_far: yaw rate cap (rad/s).
        give_up_near / give_up_far: probability of giving up at a takeover's first decision.
        give_up_s: hesitation (hold) before a give-up ends the intervention (s).
        botch_rate_near / botch_rate_far: rate (per s) at which a botched stretch starts.
        botch_s: length of a botched stretch (s).
        far_ratio: distance ratio (to the demos' own reference distance) at which every parameter
            reaches its ``*_far`` value; at ratio <= 1 they are at ``*_near``.
        ref_quantile: quantile of held-out demo distances used as the reference distance.
        distance_scale: ``per_key`` (dims of a key share its widest demo span) or ``per_dim`` (each
            dim its own span: the first model, where near-constant channels ruled the distance).
        min_scale: least divisor of any dim, in observation units (0: none).
        overhead_s: simulated operator time added per intervention (s), on top of the steps.
    """

    name: str = "perfect"
    reaction_s: float = 0.25
    noise_near: float = 0.05
    noise_far: float = 0.2
    speed_near: float = 0.25
    speed_far: float = 0.12
    yaw_rate_near: float = 1.5
    yaw_rate_far: float = 0.75
    give_up_near: float = 0.0
    give_up_far: float = 0.3
    give_up_s: float = 1.0
    botch_rate_near: float = 0.0
    botch_rate_far: float = 0.5
    botch_s: float = 0.5
    far_ratio: float = 4.0
    ref_quantile: float = 0.5
    distance_scale: str = "per_key"
    min_scale: float = 0.0
    overhead_s: float = 0.0

    def __post_init__(self) -> None:
        check_choice("recovery.operator_model.name", self.name, OPERATOR_MODELS)
        for key in (
            "reaction_s",
            "noise_near",
            "noise_far",
            "give_up_s",
            "botch_rate_near",
            "botch_rate_far",
            "botch_s",
            "overhead_s",
        ):
            value = getattr(self, key)
            require(value >= 0, f"recovery.operator_model.{key} must be >= 0; got {value}")  # nan fails too
        for key in ("speed_near", "speed_far", "yaw_rate_near", "yaw_rate_far"):
            value = getattr(self, key)
            require(value > 0, f"recovery.operator_model.{key} must be > 0; got {value}")
        for key in ("give_up_near", "give_up_far"):
            value = getattr(self, key)
            require(0 <= value <= 1, f"recovery.operator_model.{key} must be in [0, 1]; got {value}")
        require(self.far_ratio > 1, f"recovery.operator_model.far_ratio must be > 1; got {self.far_ratio}")
        require(
            0 < self.ref_quantile <= 1,
            f"recovery.operator_model.ref_quantile must be in (0, 1]; got {self.ref_quantile}",
        )
        check_choice("recovery.operator_model.distance_scale", self.distance_scale, DISTANCE_SCALES)
        require(self.min_scale >= 0, f"recovery.operator_model.min_scale must be >= 0; got {self.min_scale}")

    def steps(self, seconds: float) -> int:
        """``seconds`` of operator time as control steps (rounded)."""
        return int(round(seconds / CONTROL_DT))


def operator_time_s(steps: int, interventions: int, overhead_s: float = 0.0) -> float:
    """Simulated operator time: ``steps`` control steps at :data:`CONTROL_DT` plus ``overhead_s`` per
    intervention."""
    return steps * CONTROL_DT + interventions * overhead_s


def hold_action(env: TaskEnv) -> np.ndarray:
    """No motion, the finger command the env is applying now (a hold does not drop what is held)."""
    a = np.zeros(5, dtype=np.float32)
    a[4] = float(np.clip(np.mean(env.data.ctrl) / FINGER_STROKE * 2.0 - 1.0, -1.0, 1.0))
    return a


@dataclass
class HumanLikeStats:
    """What a :class:`HumanLikeOperator` did, summed over its takeovers (steps are control steps)."""

    takeovers: int = 0
    steps: int = 0
    delay_steps: int = 0
    give_ups: int = 0
    give_up_steps: int = 0
    botches: int = 0
    botch_steps: int = 0
    ratios: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The counts plus the distance ratio at the takeovers' first decisions: mean, max and the
        10th/50th/90th percentiles (the mean alone is ruled by a few far outliers)."""
        d = {k: v for k, v in asdict(self).items() if k != "ratios"}
        r = np.sort(np.asarray(self.ratios))  # sorted: the same sums whatever order the takeovers came in
        pct = np.percentile(r, [10, 50, 90]) if r.size else [None] * 3
        return {
            **d,
            "ratio_mean": round(float(r.mean()), 4) if r.size else None,
            "ratio_max": round(float(r.max()), 4) if r.size else None,
            **{
                f"ratio_p{q}": (round(float(v), 4) if r.size else None)
                for q, v in zip((10, 50, 90), pct, strict=True)
            },
        }


class HumanLikeOperator(Operator):
    """A scripted operator ``inner`` driven like a person would (see the module docstring).

    Args:
        inner: the task's scripted operator (best built without its own action noise: the model's
            ``noise_*`` is then the whole noise).
        cfg: the model's parameters (``name`` is not checked here).
        distance: the demos' :class:`DemoDistance`; ``None``: every state counts as familiar.
    """

    def __init__(
        self, inner: Operator, cfg: OperatorModelConfig, distance: DemoDistance | None = None
    ) -> None:
        super().__init__(inner.noise)
        self.inner, self.cfg, self.distance = inner, cfg, distance
        self.stats = HumanLikeStats()
        self._t, self._give_up_left, self._botch_left = 0, -1, 0
        self._botch_dir, self._botch_grip = np.zeros(3), 1.0

    def reset(self, rng: np.random.Generator) -> None:
        """A new takeover: the delay starts again; the inner operator's style is drawn from ``rng`` too."""
        self._rng = rng
        self.inner.reset(rng)
        self._t, self._give_up_left, self._botch_left = 0, -1, 0
        self.stats.takeovers += 1

    def plan(self, env: TaskEnv, stage: int) -> np.ndarray:
        """The inner operator's noise-free plan."""
        return self.inner.plan(env, stage)

    def stopped(self) -> bool:
        """The operator gave up and has finished hesitating: the intervention should end now."""
        return self._give_up_left == 0

    def unfamiliarity(self, env: TaskEnv) -> tuple[float, float]:
        """``(u, ratio)`` of ``env``'s current state: ``u`` in [0, 1], 0 at the demos."""
        if self.distance is None:
            return 0.0, 0.0
        ratio = self.distance.ratio(env.observation())
        return float(np.clip((ratio - 1.0) / (self.cfg.far_ratio - 1.0), 0.0, 1.0)), ratio

    def _lerp(self, name: str, u: float) -> float:
        near, far = getattr(self.cfg, f"{name}_near"), getattr(self.cfg, f"{name}_far")
        return near + u * (far - near)

    def act(self, env: TaskEnv) -> np.ndarray:
        """The next action (float32 ``[5]``): hold during the delay or a give-up, else the noisy,
        speed-capped plan or a botched stretch."""
        base = env.unwrapped
        self._t += 1
        self.stats.steps += 1
        if self._t <= self.cfg.steps(self.cfg.reaction_s):
            self.stats.delay_steps += 1
            return hold_action(base)
        if self._give_up_left >= 0:
            return self._give_up_step(base)
        u, ratio = self.unfamiliarity(base)
        if self._t == self.cfg.steps(self.cfg.reaction_s) + 1:  # the first decision of this takeover
            self.stats.ratios.append(ratio)
            if self._rng.random() < self._lerp("give_up", u):
                self.stats.give_ups += 1
                self._give_up_left = max(1, self.cfg.steps(self.cfg.give_up_s))
                return self._give_up_step(base)
        cap = self._lerp("speed", u) * CONTROL_DT / MAX_DPOS
        a = self._botch_step(cap, u)
        if a is None:
            a = self.inner.act(env).astype(np.float64)
        std = self._lerp("noise", u)
        if std > 0:
            a[:4] += self._rng.normal(0.0, std, size=4)
        norm = float(np.linalg.norm(a[:3]))
        if norm > cap:
            a[:3] *= cap / norm
        yaw_cap = self._lerp("yaw_rate", u) * CONTROL_DT / MAX_DYAW
        a[3] = np.clip(a[3], -yaw_cap, yaw_cap)
        return np.clip(a, -1.0, 1.0).astype(np.float32)

    def _give_up_step(self, base: TaskEnv) -> np.ndarray:
        self._give_up_left = max(self._give_up_left - 1, 0)
        self.stats.give_up_steps += 1
        return hold_action(base)

    def _botch_step(self, cap: float, u: float) -> np.ndarray | None:
        """A botched action (drift, random finger command) when a botch is under way or starts now."""
        if self._botch_left == 0 and self._rng.random() < self._lerp("botch_rate", u) * CONTROL_DT:
            self.stats.botches += 1
            self._botch_left = max(1, self.cfg.steps(self.cfg.botch_s))
            d = self._rng.normal(size=3)
            self._botch_dir = d / max(float(np.linalg.norm(d)), 1e-9)
            self._botch_grip = float(self._rng.choice([-1.0, 1.0]))
        if self._botch_left == 0:
            return None
        self._botch_left -= 1
        self.stats.botch_steps += 1
        a = np.zeros(5)
        a[:3] = self._botch_dir * cap
        a[4] = self._botch_grip
        return a
