"""Scripted operator for PickPlace."""

from __future__ import annotations

import math

import numpy as np

from rewind.envs.core.base import TaskEnv
from rewind.envs.operators.base import Operator
from rewind.envs.tasks.pick_place import (
    BIN_CENTER,
    BIN_INNER,
    BIN_WALL_H,
    BIN_WALL_T,
    CAN_HALF_H,
    CAN_R,
    HELD_TILT,
    RELEASE_OPENING,
    can_tilt,
    over_bin,
)

#: The can's bottom must be this far above the wall tops before the gripper moves sideways to the bin.
WALL_CLEARANCE = 0.025
#: Gripper height (m) while carrying: the can's bottom (held 2.5 mm below the gripper origin) clears
#: the walls by ``WALL_CLEARANCE`` + 15 mm, more than the per-episode height jitter of the noise.
CARRY_Z = BIN_WALL_H + WALL_CLEARANCE + 0.015 + CAN_HALF_H + 0.0025
#: Horizontal error (m) to the bin centre within which the operator lowers the can.
CENTER_TOL = 0.012
#: Height (m) of the can's bottom above the floor at which the fingers open.
RELEASE_HEIGHT = 0.008


class PickPlaceOperator(Operator):
    """Grasp the can from above, rise over the bin walls, centre over the bin, lower, open, retreat.

    Every branch is chosen from the current state, so the operator completes the current stage from
    any reachable state. A can that has toppled over cannot be stood up again with a yaw-only parallel
    gripper; the operator then hovers above it (the episode is lost).
    """

    def plan(self, env: TaskEnv, stage: int) -> np.ndarray:
        if stage == 1:
            return self._carry(env)
        if stage == 2:
            return self._place(env)
        return self._grasp(env)

    # ------------------------------------------------------------------ stages
    def _grasp(self, env: TaskEnv) -> np.ndarray:
        can = env.object_pos("can")
        grip = env.gripper_pos()
        if _settling_in_bin(env):
            if env.gripper_opening() < RELEASE_OPENING:  # let go in place before moving
                return self.move_to(env, grip, env.gripper_yaw(), 1.0)
            return self.move_to(env, [grip[0], grip[1], CARRY_Z + self.dz], env.gripper_yaw(), 1.0)
        if can_tilt(env.object_quat("can")) > HELD_TILT:
            return self.move_to(env, [can[0], can[1], CARRY_Z + self.dz], env.gripper_yaw(), 1.0)
        grasp_z = max(float(can[2]) + 0.0025, 0.03)
        return self.grasp(env, "can", CAN_R, grasp_z, _grasp_yaw(can, env.gripper_yaw()))

    def _carry(self, env: TaskEnv) -> np.ndarray:
        grip = env.gripper_pos()
        can = env.object_pos("can")
        yaw = env.gripper_yaw()
        target = np.array([grip[0], grip[1], _carry_z(grip, can) + self.dz])
        if can[2] - CAN_HALF_H > BIN_WALL_H + WALL_CLEARANCE:
            target[:2] = BIN_CENTER
        return self.move_to(env, target, yaw, -1.0)

    def _place(self, env: TaskEnv) -> np.ndarray:
        grip = env.gripper_pos()
        can = env.object_pos("can")
        yaw = env.gripper_yaw()
        # Centre the gripper, not the can: the can shifts a little between the compliant fingers, and
        # chasing that shift would make the arm oscillate. The bin leaves ample clearance either way.
        xy_err = BIN_CENTER - grip[:2]
        bottom = float(can[2]) - CAN_HALF_H
        target = grip.copy()
        target[:2] = BIN_CENTER
        if np.abs(xy_err).max() > CENTER_TOL and bottom > BIN_WALL_H:
            target[2] = max(grip[2], _carry_z(grip, can) + self.dz)  # centre first, above the walls
            return self.move_to(env, target, yaw, -1.0)
        if bottom > RELEASE_HEIGHT:
            target[2] = grip[2] - (bottom - RELEASE_HEIGHT + 0.003)
            return self.move_to(env, target, yaw, -1.0)
        return self.move_to(env, grip, yaw, 1.0)


def _carry_z(grip: np.ndarray, can: np.ndarray) -> float:
    """Gripper height that carries the can's bottom ~5 cm over the walls, wherever it sits in the grasp."""
    return CARRY_Z + max(0.0, float(grip[2] - can[2]) - 0.0025)


def _settling_in_bin(env: TaskEnv) -> bool:
    """The can stands (near) upright on the bin floor, not held: it was just released there."""
    can = env.object_pos("can")
    return (
        over_bin(can, margin=CAN_R - 0.004)
        and can[2] < CAN_HALF_H + 0.015
        and can_tilt(env.object_quat("can")) < math.radians(25)
    )


def _grasp_yaw(can: np.ndarray, current_yaw: float) -> float:
    """Finger yaw for a top grasp of the can (a cylinder: any yaw works).

    The fingers close along the gripper's y axis. Near the bin the fingers are kept parallel to the
    closest wall so they do not strike it; elsewhere the yaw nearest the current one (mod pi) among
    0 and pi/2 is used.
    """
    d = can[:2] - BIN_CENTER
    if np.abs(d).max() < BIN_INNER + 2 * BIN_WALL_T + 0.05:
        base = math.pi / 2 if abs(d[1]) > abs(d[0]) else 0.0
        return base + round((current_yaw - base) / math.pi) * math.pi
    return round(current_yaw / (math.pi / 2)) * (math.pi / 2)
