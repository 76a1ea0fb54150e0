"""Rewind checkpoints at the simulator level: immutable, exactly restorable episode states."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


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
