"""Rewind checkpoints at the simulator level: immutable, exactly restorable episode states
(:class:`SimSnapshot`) and how a task env takes and restores them (:class:`SnapshotMixin`, the
``snapshot`` / ``restore`` half of :class:`~rewind.envs.core.base.TaskEnv`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mujoco
import numpy as np

#: The MuJoCo state that a snapshot holds and the replay store keeps per step.
STATE_SIG = mujoco.mjtState.mjSTATE_INTEGRATION


@dataclass(frozen=True)
class SimSnapshot:
    """An immutable, exactly restorable state of a task env (the raw material of a rewind checkpoint).

    Attributes:
        physics: the MuJoCo integration state (``mjSTATE_INTEGRATION``: time, qpos, qvel, act,
            warm-start, ctrl, applied forces, mocap pose, equality flags), float64 ``[state_dim]``,
            read-only.
        rng_state: the bit-generator state of the env's own ``np.random.Generator``.
        step_count: control steps taken in the episode so far.
        finger_friction_scale: the active finger-friction multiplier (perturbations change it).
        target_yaw: the commanded gripper yaw (rad); the mocap quaternion holds it too.
    """

    physics: np.ndarray
    rng_state: dict[str, Any]
    step_count: int
    finger_friction_scale: float
    target_yaw: float

    def __post_init__(self) -> None:
        if self.physics.flags.writeable:
            raise ValueError("SimSnapshot.physics must be a read-only array")


class SnapshotMixin:
    """Exact rewind of a task env: :meth:`snapshot` and :meth:`restore` (mixed into
    :class:`~rewind.envs.core.base.TaskEnv`, which provides the attributes and methods declared here)."""

    model: mujoco.MjModel
    data: mujoco.MjData
    state_dim: int
    _rng: np.random.Generator
    _step_count: int
    _target_yaw: float
    _friction_scale: float
    _set_finger_friction: Callable[[float], None]

    def snapshot(self) -> SimSnapshot:
        """Capture the full episode state; :meth:`restore` brings it back bit-exactly."""
        physics = np.empty(self.state_dim)
        mujoco.mj_getState(self.model, self.data, physics, STATE_SIG)
        physics.flags.writeable = False
        return SimSnapshot(
            physics=physics,
            rng_state=self._rng.bit_generator.state,
            step_count=self._step_count,
            finger_friction_scale=self._friction_scale,
            target_yaw=self._target_yaw,
        )

    def restore(self, snap: SimSnapshot) -> None:
        """Return to ``snap``: the same actions afterwards give bit-identical observations."""
        mujoco.mj_setState(self.model, self.data, snap.physics, STATE_SIG)
        self.data.warning.number[:] = 0
        self._rng.bit_generator.state = snap.rng_state
        self._step_count = snap.step_count
        self._target_yaw = snap.target_yaw
        if snap.finger_friction_scale != self._friction_scale:
            self._set_finger_friction(snap.finger_friction_scale)
