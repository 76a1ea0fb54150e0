"""Scripted operator for NutPeg.

Every decision is recomputed from the state, so the operator can take over at any step:

* ``grasp``: rise if low and away from the handle, line up above the handle with open fingers at a
  yaw that puts the pads across the handle, descend, close. Fingers that closed on nothing open again.
* ``align``: raise the nut until its underside clears the peg top, then carry it so that the hole
  centre sits over the peg axis, turning the wrist by the smallest rotation that matches the nut's
  yaw to the peg's modulo 90 degrees (the hole is square). The grasp offset is measured each step
  in the gripper frame, so the target accounts for the handle swinging as the wrist turns.
* ``insert``: finish the fine alignment above the peg, lower the nut onto it, open near the table.
"""

from __future__ import annotations

import math

import numpy as np

from rewind.envs.core.base import TaskEnv
from rewind.envs.operators.base import Operator, wrap_angle
from rewind.envs.tasks.nut_peg import (
    GRASP_DZ,
    HANDLE_HALF_W,
    NUT_HALF_H,
    PEG_HEIGHT,
    PEG_POS,
    PEG_YAW,
    yaw_error_mod,
)

#: Clearance (m) of the nut's underside above the peg top while carrying.
CARRY_CLEARANCE = 0.025
#: Fine alignment required before lowering the nut onto the peg top.
FINE_XY = 0.0015
FINE_YAW = 0.03
#: Largest downward step of the lowering target (m), so the nut meets the peg gently.
LOWER_STEP = 0.015
#: Release once the nut's centre is this close to its resting height on the table.
RELEASE_DZ = 0.006
#: Largest |gripper yaw| picked for a grasp: leaves room for the <= 45 degree alignment turn
#: inside the env's [-pi, pi] yaw range.
MAX_GRASP_YAW = math.pi / 2 + 0.3


def handle_grasp_yaw(nut_yaw: float, current_yaw: float) -> float:
    """Gripper yaw that puts the pads across the handle (2-fold), nearest ``current_yaw`` within
    ``[-MAX_GRASP_YAW, MAX_GRASP_YAW]``."""
    candidates = [wrap_angle(nut_yaw), wrap_angle(nut_yaw + math.pi)]
    ok = [c for c in candidates if abs(c) <= MAX_GRASP_YAW] or candidates
    return min(ok, key=lambda c: abs(wrap_angle(c - current_yaw)))


def gripper_xy_for(nut_xy: np.ndarray, grip_xy: np.ndarray, grip_yaw: float, new_yaw: float) -> np.ndarray:
    """Gripper xy that puts the hole centre on the peg axis once the wrist has turned to ``new_yaw``.

    The nut's offset from the gripper is fixed in the gripper frame while it is held, so it is
    rotated from ``grip_yaw`` to ``new_yaw``.
    """
    rel = np.asarray(nut_xy) - np.asarray(grip_xy)
    d = new_yaw - grip_yaw
    c, s = math.cos(d), math.sin(d)
    rel_new = np.array([c * rel[0] - s * rel[1], s * rel[0] + c * rel[1]])
    return PEG_POS - rel_new


class NutPegOperator(Operator):
    """Grasp the nut by its handle, carry it over the peg with matched yaw, lower it, release."""

    def plan(self, env: TaskEnv, stage: int) -> np.ndarray:
        if stage == 0:
            return self._grasp(env)
        if stage == 1:
            return self._align(env)
        if stage == 2:
            return self._insert(env)
        grip = env.gripper_pos()
        return self.move_to(env, [grip[0], grip[1], grip[2] + 0.02], env.gripper_yaw(), 1.0)

    # ------------------------------------------------------------------ grasp
    def _grasp(self, env: TaskEnv) -> np.ndarray:
        handle = env.handle_pos()
        grip = env.gripper_pos()
        yaw = handle_grasp_yaw(env.nut_yaw(), env.gripper_yaw())
        grasp_z = max(handle[2] + GRASP_DZ, NUT_HALF_H + GRASP_DZ)
        hover_z = grasp_z + 0.08 + self.dz
        xy_err = float(np.hypot(*(handle[:2] - grip[:2])))
        yaw_err = abs(wrap_angle(yaw - env.gripper_yaw()))
        opening = env.gripper_opening()
        low = grip[2] < grasp_z + 0.03
        if opening < 2 * HANDLE_HALF_W - 0.004 and low:
            # Closed on nothing: open and back off upwards.
            return self.move_to(env, [grip[0], grip[1], grip[2] + 0.02], env.gripper_yaw(), 1.0)
        if xy_err > 0.008 or yaw_err > 0.08:
            if low and xy_err > 0.02:
                return self.move_to(env, [grip[0], grip[1], hover_z], env.gripper_yaw(), 1.0)
            z = hover_z if (xy_err > 0.02 or not low) else grip[2]
            return self.move_to(env, [handle[0], handle[1], z], yaw, 1.0)
        if grip[2] > grasp_z + 0.006:
            return self.move_to(env, [handle[0], handle[1], grasp_z], yaw, 1.0)
        return self.move_to(env, [handle[0], handle[1], grasp_z], yaw, -1.0)

    # ------------------------------------------------------------------ carry and lower
    def _targets(self, env: TaskEnv) -> tuple[np.ndarray, float, float, float]:
        """Gripper xy and yaw that centre the hole on the peg, the hole's xy error, the yaw error."""
        nut = env.object_pos("nut")
        grip = env.gripper_pos()
        grip_yaw = env.gripper_yaw()
        dyaw = yaw_error_mod(env.nut_yaw(), PEG_YAW)
        new_yaw = grip_yaw + dyaw
        xy = gripper_xy_for(nut[:2], grip[:2], grip_yaw, new_yaw)
        xy_err = float(np.hypot(*(nut[:2] - PEG_POS)))
        return xy, new_yaw, xy_err, dyaw

    def _carry_z(self, env: TaskEnv) -> float:
        """Gripper height that holds the nut's underside ``CARRY_CLEARANCE`` above the peg top."""
        nut_z = env.object_pos("nut")[2]
        nut_target = PEG_HEIGHT + NUT_HALF_H + CARRY_CLEARANCE + self.dz
        return float(env.gripper_pos()[2] + nut_target - nut_z)

    def _align(self, env: TaskEnv) -> np.ndarray:
        grip = env.gripper_pos()
        xy, yaw, _, _ = self._targets(env)
        carry_z = self._carry_z(env)
        if grip[2] < carry_z - 0.015:
            return self.move_to(env, [grip[0], grip[1], carry_z], yaw, -1.0)
        return self.move_to(env, [xy[0], xy[1], carry_z], yaw, -1.0)

    def _insert(self, env: TaskEnv) -> np.ndarray:
        grip = env.gripper_pos()
        nut_z = env.object_pos("nut")[2]
        xy, yaw, xy_err, dyaw = self._targets(env)
        on_peg = nut_z - NUT_HALF_H < PEG_HEIGHT - 0.002
        if nut_z < NUT_HALF_H + RELEASE_DZ:
            return self.move_to(env, [xy[0], xy[1], grip[2]], yaw, 1.0)
        if not on_peg and (xy_err > FINE_XY or abs(dyaw) > FINE_YAW):
            return self.move_to(env, [xy[0], xy[1], min(grip[2], self._carry_z(env))], yaw, -1.0)
        z_goal = grip[2] + (NUT_HALF_H - nut_z)
        return self.move_to(env, [xy[0], xy[1], max(z_goal, grip[2] - LOWER_STEP)], yaw, -1.0)
