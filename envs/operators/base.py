"""Scripted operators: the simulated person of the RaC protocol.

An :class:`Operator` reads the env's privileged state and returns the action a competent person
would send to complete the *current stage* from wherever the episode is: from reset, after a drop or
missed grasp, after a perturbation, after a rewind. Because every decision is recomputed from the
state each step (no hidden plan), handing control to it at any step is safe. The teleop tool plugs
into the same interface with a person behind it.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from rewind.envs.core.base import MAX_DPOS, MAX_DYAW, TaskEnv


@dataclass(frozen=True)
class OperatorNoise:
    """How much a scripted operator varies between episodes, so demos are diverse.

    Attributes:
        action_std: std of Gaussian noise added to the translation/yaw action entries.
        gain_range: per-episode speed gain drawn uniformly from this range.
        height_jitter: per-episode jitter (m) of the approach heights.
    """

    action_std: float = 0.05
    gain_range: tuple[float, float] = (0.8, 1.2)
    height_jitter: float = 0.01

    def __post_init__(self) -> None:
        if self.action_std < 0:
            raise ValueError(f"action_std must be >= 0; got {self.action_std}")
        lo, hi = self.gain_range
        if not 0 < lo <= hi:
            raise ValueError(f"gain_range must satisfy 0 < low <= high; got {self.gain_range}")


class Operator(ABC):
    """Maps the env's current state to an action (float32 ``[5]``) that advances the current stage."""

    def __init__(self, noise: OperatorNoise | None = None) -> None:
        self.noise = noise or OperatorNoise(action_std=0.0, gain_range=(1.0, 1.0), height_jitter=0.0)
        self._rng = np.random.default_rng(0)
        self.gain = 1.0
        self.dz = 0.0

    def reset(self, rng: np.random.Generator) -> None:
        """Start a new episode (or take over mid-episode): draw the per-episode style from ``rng``."""
        self._rng = rng
        self.gain = float(rng.uniform(*self.noise.gain_range))
        self.dz = float(rng.uniform(-1, 1) * self.noise.height_jitter)

    def act(self, env: TaskEnv) -> np.ndarray:
        """The next action for ``env`` (its ``unwrapped`` task env is read)."""
        base = env.unwrapped
        a = self.plan(base, base.stage())
        if self.noise.action_std > 0:
            a[:4] += self._rng.normal(0.0, self.noise.action_std, size=4)
        return np.clip(a, -1.0, 1.0).astype(np.float32)

    @abstractmethod
    def plan(self, env: TaskEnv, stage: int) -> np.ndarray:
        """Noise-free action for ``stage`` of ``env`` (float64 ``[5]``)."""

    # ------------------------------------------------------------------ primitives
    def move_to(self, env: TaskEnv, pos: np.ndarray, yaw: float, grip: float) -> np.ndarray:
        """Bounded P-step toward ``pos``/``yaw`` with finger command ``grip`` (-1 closed, +1 open)."""
        a = np.zeros(5)
        err = np.asarray(pos) - env.gripper_pos()
        a[:3] = np.clip(self.gain * err / MAX_DPOS * 0.6, -1.0, 1.0)
        a[3] = np.clip(wrap_angle(yaw - env.gripper_yaw()) / MAX_DYAW * 0.7, -1.0, 1.0)
        a[4] = grip
        return a

    def grasp(self, env: TaskEnv, name: str, half: float, grasp_z: float, yaw: float) -> np.ndarray:
        """Approach object ``name`` from above with open fingers, descend to ``grasp_z``, close."""
        obj = env.object_pos(name)
        grip = env.gripper_pos()
        hover_z = max(grasp_z + 0.08 + self.dz, 0.1)
        xy_err = float(np.hypot(*(obj[:2] - grip[:2])))
        yaw_err = abs(wrap_angle(yaw - env.gripper_yaw()))
        aligned = xy_err < 0.008 and yaw_err < 0.08
        opening = env.gripper_opening()
        if not aligned:
            # Rise first if low (never drag through objects), then line up above the object.
            z = hover_z if (xy_err > 0.02 or grip[2] > grasp_z + 0.03) else grip[2]
            if grip[2] < grasp_z + 0.03 and xy_err > 0.02:
                return self.move_to(env, [grip[0], grip[1], hover_z], env.gripper_yaw(), 1.0)
            return self.move_to(env, [obj[0], obj[1], z], yaw, 1.0)
        if grip[2] > grasp_z + 0.006:
            open_cmd = 1.0 if opening > 2 * half + 0.01 or grip[2] > grasp_z + 0.02 else -1.0
            return self.move_to(
                env, [obj[0], obj[1], grasp_z], yaw, open_cmd if grip[2] > grasp_z + 0.02 else 1.0
            )
        return self.move_to(env, [obj[0], obj[1], grasp_z], yaw, -1.0)


def wrap_angle(x: float) -> float:
    """Wrap an angle to (-pi, pi]."""
    return (x + math.pi) % (2 * math.pi) - math.pi


def grasp_yaw(obj_quat: np.ndarray, current_yaw: float, symmetry: float = math.pi / 2) -> float:
    """Gripper yaw that lines the fingers up with a body of ``symmetry``-fold yaw symmetry, nearest
    to ``current_yaw``."""
    w, x, y, z = obj_quat
    yaw = math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
    k = round((current_yaw - yaw) / symmetry)
    return yaw + k * symmetry
