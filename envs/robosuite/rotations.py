"""Small rotation helpers shared by the robosuite env and its scripted operators."""

from __future__ import annotations

import math

import numpy as np


def rotvec(r: np.ndarray) -> np.ndarray:
    """Rotation vector (axis * angle) of rotation matrix ``r`` (angles below pi)."""
    cos = float(np.clip((np.trace(r) - 1.0) / 2.0, -1.0, 1.0))
    angle = math.acos(cos)
    v = np.array([r[2, 1] - r[1, 2], r[0, 2] - r[2, 0], r[1, 0] - r[0, 1]])
    if angle < 1e-6:
        return 0.5 * v
    return v * (angle / (2.0 * math.sin(angle)))


def quat_xyzw_to_mat(q: np.ndarray) -> np.ndarray:
    """Rotation matrix of a unit quaternion in robosuite's ``(x, y, z, w)`` order."""
    x, y, z, w = (float(v) for v in np.asarray(q, dtype=np.float64) / np.linalg.norm(q))
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )
