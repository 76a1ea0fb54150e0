"""Small pure functions that the tasks' stage predicates are built from."""

from __future__ import annotations

import numpy as np

from rewind.envs.core.base import TaskEnv


def in_gripper(env: TaskEnv, name: str, half_width: float, tol: float = 0.012) -> bool:
    """Object ``name`` sits between the finger pads (gripper frame) and they close on it."""
    rel = env.object_pos(name) - env.gripper_pos()
    yaw = env.gripper_yaw()
    c, s = np.cos(yaw), np.sin(yaw)
    x_local = c * rel[0] + s * rel[1]
    y_local = -s * rel[0] + c * rel[1]
    opening = env.gripper_opening()
    return (
        abs(x_local) < 0.02
        and abs(y_local) < 0.015
        and -0.045 < rel[2] < 0.03
        and opening < 2 * half_width + tol
        and opening > 2 * half_width * 0.5
    )


def resting_on(
    top: np.ndarray, bottom: np.ndarray, height: float, xy_tol: float, z_tol: float = 0.01
) -> bool:
    """``top`` sits on ``bottom``: centres ``height`` apart vertically and within ``xy_tol`` laterally."""
    dxy = np.hypot(top[0] - bottom[0], top[1] - bottom[1])
    return bool(dxy < xy_tol and abs(top[2] - bottom[2] - height) < z_tol)


def lifted(pos: np.ndarray, min_height: float) -> bool:
    """An object's centre is above ``min_height`` (m)."""
    return bool(pos[2] > min_height)
