"""Scripted operator for NutPeg.

Every decision is recomputed from the state, so the operator can take over at any step:

* ``grasp``: rise if low and away from the handle, line up above the handle with open fingers at a
  yaw that puts the pads across the handle, descend, close. Fingers that closed on nothing open again.
  Recoveries first: a nut hanging on the fingers is set down; a nut standing on edge (tilted) is
  toppled flat by pushing its upper rim along its hole axis with closed fingers; a nut whose handle
  lies so close to the peg that an open finger would hit the peg is dragged away by lowering the
  closed fingers into its hole (the closed pair, 24 mm square, fits the 36 mm hole at any yaw).
* ``align``: a nut held tilted (it was grasped while leaning) is set down on the table and released,
  to be grasped again flat. Otherwise raise the nut until its underside clears the peg top, then
  carry it so that the hole centre sits over the peg axis, turning the wrist by the smallest
  rotation that matches the nut's yaw to the peg's modulo 90 degrees (the hole is square). The
  grasp offset is measured each step in the gripper frame, so the target accounts for the handle
  swinging as the wrist turns.
* ``insert``: finish the fine alignment above the peg, lower the nut onto it, open near the table.
"""

from __future__ import annotations

import math

import numpy as np

from rewind.envs.core.base import MAX_DYAW, TaskEnv
from rewind.envs.core.mjcf import FINGER_STROKE
from rewind.envs.operators.base import Operator, wrap_angle
from rewind.envs.tasks.nut_peg import (
    GRASP_DZ,
    HANDLE_HALF_W,
    HOLE_HALF,
    NUT_HALF_H,
    PEG_HALF,
    PEG_HEIGHT,
    PEG_POS,
    PEG_YAW,
    WALL_HALF,
    nut_lowest_z,
    nut_tilt,
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
#: Fingertips sit this far below the gripper origin (m).
FINGERTIP_DZ = 0.014
#: Release the nut on the peg once the fingertips are this close to the table (m).
FLOOR_CLEARANCE = 0.005
#: The operator puts a held nut down and grasps it again when it is tilted more than this (rad).
HELD_TILT_MAX = 0.12
#: A free nut tilted more than this (rad) is standing on edge: topple it before grasping.
STANDING_TILT = 0.6
#: Lead (m) of the target ahead of the gripper while pushing or dragging the nut (~6 mm/step).
PUSH_STEP = 0.01
#: Where toppled or dragged nuts are pushed toward: the middle of the nut's start area.
HOME_XY = np.array([-0.09, 0.0])
#: Half the outer width of the ring (m).
RING_HALF = HOLE_HALF + 2 * WALL_HALF
#: Half-size of a finger pad in the gripper's x (m) and the closed pair's half-size in y.
FINGER_HALF_X = 0.012
#: Largest |gripper yaw| picked for a grasp: leaves room for the <= 45 degree alignment turn
#: inside [-pi, pi], so the wrist never turns through +-pi (see :meth:`NutPegOperator.move_to`).
MAX_GRASP_YAW = math.pi / 2 + 0.3
#: Finger command while approaching the handle: a 50 mm opening (15 mm of play on each side of the
#: 20 mm handle) rather than the full 90 mm, so an open finger does not reach into the peg when the
#: nut lies next to it.
PREGRASP_OPEN = 2 * 0.025 / FINGER_STROKE - 1.0


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


def _stuck_on_fingers(env: TaskEnv) -> bool:
    """The nut is off the table and away from the peg, close to the gripper, but not held by its
    handle (wedged on a finger, or caught by the ring)."""
    nut = env.object_pos("nut")
    off_table = nut_lowest_z(nut, env.object_quat("nut")) > 0.012
    on_peg = _peg_dist(nut) < 0.05 and nut_lowest_z(nut, env.object_quat("nut")) < PEG_HEIGHT + 0.005
    near_grip = float(np.linalg.norm(nut - env.gripper_pos())) < 0.08
    return off_table and near_grip and not on_peg


def _peg_dist(xy: np.ndarray) -> float:
    return float(np.hypot(xy[0] - PEG_POS[0], xy[1] - PEG_POS[1]))


def _away_from_peg(xy: np.ndarray) -> np.ndarray:
    """Horizontal unit vector from the peg axis toward ``xy`` (+x if on the axis)."""
    d = np.asarray(xy[:2], dtype=float) - PEG_POS
    n = float(np.hypot(*d))
    return d / n if n > 1e-6 else np.array([1.0, 0.0])


def fingers_in_hole(nut: np.ndarray, grip: np.ndarray) -> bool:
    """The fingers reach down into the nut's hole."""
    inside = float(np.hypot(*(grip[:2] - nut[:2]))) < HOLE_HALF
    return inside and grip[2] - FINGERTIP_DZ < nut[2] + NUT_HALF_H + 0.003 and grip[2] > nut[2] - 0.02


def handle_blocked(handle: np.ndarray, nut_yaw: float) -> bool:
    """An open finger at the pre-grasp opening would overlap the peg (with a few mm to spare)."""
    lateral = np.array([-math.sin(nut_yaw), math.cos(nut_yaw)])
    reach = 0.025 + 0.006  # pre-grasp half-opening plus half a finger's thickness
    limit = PEG_HALF * math.sqrt(2) + math.hypot(FINGER_HALF_X, 0.006) + 0.003
    return any(_peg_dist(handle[:2] + k * reach * lateral) < limit for k in (-1.0, 1.0))


def handle_pinchable(nut_quat: np.ndarray) -> bool:
    """The handle's width axis (local y, the pads' closing direction) is near horizontal."""
    w, x, y, z = nut_quat
    return abs(2 * (y * z + w * x)) < 0.5


def hole_axis_xy(nut_quat: np.ndarray) -> np.ndarray:
    """Horizontal unit projection of the nut's hole axis (local z); +x if the nut lies flat."""
    w, x, y, z = nut_quat
    ax = np.array([2 * (x * z + w * y), 2 * (y * z - w * x)])
    n = float(np.hypot(*ax))
    return ax / n if n > 1e-6 else np.array([1.0, 0.0])


class NutPegOperator(Operator):
    """Grasp the nut by its handle, carry it over the peg with matched yaw, lower it, release."""

    def move_to(self, env: TaskEnv, pos: np.ndarray, yaw: float, grip: float) -> np.ndarray:
        """:meth:`Operator.move_to`, but turning the wrist without passing through +-pi.

        The turn goes from the current yaw (unwrapped around the env's commanded
        :attr:`~rewind.envs.core.base.TaskEnv.target_yaw`) straight to ``yaw``, so the wrist stays in
        the ``[-MAX_GRASP_YAW - pi/4, MAX_GRASP_YAW + pi/4]`` range the grasp yaws are chosen for.
        """
        a = super().move_to(env, pos, yaw, grip)
        cmd = env.target_yaw  # the commanded yaw
        current = cmd + wrap_angle(env.gripper_yaw() - cmd)
        a[3] = np.clip((wrap_angle(yaw) - current) / MAX_DYAW * 0.7, -1.0, 1.0)
        return a

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
        recovery = self._grasp_recovery(env)
        if recovery is not None:
            return recovery
        if opening < 2 * HANDLE_HALF_W - 0.004 and low:
            # Closed on nothing: open and back off upwards.
            return self.move_to(env, [grip[0], grip[1], grip[2] + 0.02], env.gripper_yaw(), PREGRASP_OPEN)
        if xy_err > 0.008 or yaw_err > 0.08:
            if low and xy_err > 0.02:
                return self.move_to(env, [grip[0], grip[1], hover_z], env.gripper_yaw(), PREGRASP_OPEN)
            z = hover_z if (xy_err > 0.02 or not low) else grip[2]
            return self.move_to(env, [handle[0], handle[1], z], yaw, PREGRASP_OPEN)
        if grip[2] > grasp_z + 0.006:
            return self.move_to(env, [handle[0], handle[1], grasp_z], yaw, PREGRASP_OPEN)
        return self.move_to(env, [handle[0], handle[1], grasp_z], yaw, -1.0)

    # ------------------------------------------------------------------ recoveries
    def _grasp_recovery(self, env: TaskEnv) -> np.ndarray | None:
        """The action of a recovery that must come before a handle grasp, or None."""
        grip = env.gripper_pos()
        nut = env.object_pos("nut")
        # Open fingers inside the hole wedge against its walls: keep them closed there.
        in_hole = fingers_in_hole(nut, grip)
        if _stuck_on_fingers(env):
            # The nut hangs on the fingers without being held by its handle: set it down, let go.
            z = grip[2] + NUT_HALF_H + 0.005 - nut[2]
            return self.move_to(env, [grip[0], grip[1], z], env.gripper_yaw(), -1.0 if in_hole else 1.0)
        quat = env.object_quat("nut")
        if nut_tilt(quat) > STANDING_TILT:
            # A nut leaning on the peg is lifted off it by its handle where the pads can pinch it.
            if not (_peg_dist(nut) < 0.08 and handle_pinchable(quat)):
                return self._topple(env)
        if handle_blocked(env.handle_pos(), env.nut_yaw()) and _peg_dist(nut) > 0.03:
            return self._drag_clear(env)
        if in_hole:
            return self.move_to(env, [nut[0], nut[1], nut[2] + 0.06], env.gripper_yaw(), -1.0)
        return None

    def _topple(self, env: TaskEnv) -> np.ndarray:
        """Topple a nut standing on edge: push its upper rim along its hole axis, away from the peg.

        When the pusher's start point is taken by the peg, first slide the nut along its own plane
        (pushing low, it slides rather than tips) until the start point is clear."""
        nut = env.object_pos("nut")
        axis = hole_axis_xy(env.object_quat("nut"))
        home = HOME_XY - nut[:2]
        d = axis if float(np.dot(axis, home)) >= 0 else -axis
        for cand in (d, -d):
            if _peg_dist(nut[:2] - 0.06 * cand) > 0.05:
                # Push near the top of the upright ring (fingertips 1 cm below its rim).
                return self._push(env, cand, nut[2] + RING_HALF - 0.01 + FINGERTIP_DZ, 0.06)
        side = np.array([-axis[1], axis[0]])
        side = side if float(np.dot(side, home)) >= 0 else -side
        return self._push(env, side, FINGERTIP_DZ + 0.004, 0.055)

    def _push(self, env: TaskEnv, d: np.ndarray, push_z: float, reach: float) -> np.ndarray:
        """Push the nut along unit ``d`` with closed fingers at height ``push_z``, starting ``reach``
        behind its centre (reached from above)."""
        nut = env.object_pos("nut")
        grip = env.gripper_pos()
        rel = grip[:2] - nut[:2]
        along = float(np.dot(rel, d))
        lateral = abs(float(rel[0] * d[1] - rel[1] * d[0]))
        if along < -0.015 and lateral < 0.015 and abs(grip[2] - push_z) < 0.015:
            goal = grip[:2] + PUSH_STEP * d  # slowly, so the nut tips over rather than flies
            return self.move_to(env, [goal[0], goal[1], push_z], env.gripper_yaw(), -1.0)
        start = nut[:2] - reach * d
        safe_z = nut[2] + 0.07
        if float(np.hypot(*(start - grip[:2]))) > 0.01:
            z = safe_z if (float(np.hypot(*rel)) < 0.09 or grip[2] > safe_z) else grip[2]
            if grip[2] < z - 0.02:
                return self.move_to(env, [grip[0], grip[1], z], env.gripper_yaw(), -1.0)
            return self.move_to(env, [start[0], start[1], z], env.gripper_yaw(), -1.0)
        return self.move_to(env, [start[0], start[1], push_z], env.gripper_yaw(), -1.0)

    def _drag_clear(self, env: TaskEnv) -> np.ndarray:
        """Lower the closed fingers into the hole and drag the nut away from the peg."""
        nut = env.object_pos("nut")
        grip = env.gripper_pos()
        hook_z = nut[2] - NUT_HALF_H + FINGERTIP_DZ + 0.004
        xy_err = float(np.hypot(*(nut[:2] - grip[:2])))
        if grip[2] < hook_z + 0.01 and xy_err < 0.014:
            goal = grip[:2] + PUSH_STEP * _away_from_peg(nut)
            return self.move_to(env, [goal[0], goal[1], hook_z], env.gripper_yaw(), -1.0)
        hover_z = nut[2] + 0.06
        if xy_err > 0.004:
            if grip[2] < hover_z - 0.02 and xy_err > 0.014:
                return self.move_to(env, [grip[0], grip[1], hover_z], env.gripper_yaw(), -1.0)
            return self.move_to(
                env,
                [nut[0], nut[1], max(hover_z, grip[2]) if xy_err > 0.014 else grip[2]],
                env.gripper_yaw(),
                -1.0,
            )
        return self.move_to(env, [nut[0], nut[1], hook_z], env.gripper_yaw(), -1.0)

    def _put_down(self, env: TaskEnv) -> np.ndarray:
        """Set a nut held tilted down on the table, away from the peg, and let go."""
        nut = env.object_pos("nut")
        grip = env.gripper_pos()
        carry_z = self._carry_z(env)
        if _peg_dist(nut) < 0.1:
            goal = grip[:2] + 0.05 * _away_from_peg(nut)
            if grip[2] < carry_z - 0.015 and _peg_dist(nut) < 0.06:
                return self.move_to(env, [grip[0], grip[1], carry_z], env.gripper_yaw(), -1.0)
            return self.move_to(env, [goal[0], goal[1], max(grip[2], carry_z)], env.gripper_yaw(), -1.0)
        if nut_lowest_z(nut, env.object_quat("nut")) < 0.004 or grip[2] - FINGERTIP_DZ < FLOOR_CLEARANCE:
            return self.move_to(env, [grip[0], grip[1], grip[2] + 0.02], env.gripper_yaw(), PREGRASP_OPEN)
        return self.move_to(env, [grip[0], grip[1], grip[2] - LOWER_STEP], env.gripper_yaw(), -1.0)

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
        """Gripper height that holds the nut's lowest point ``CARRY_CLEARANCE`` above the peg top."""
        lowest = nut_lowest_z(env.object_pos("nut"), env.object_quat("nut"))
        return float(env.gripper_pos()[2] + PEG_HEIGHT + CARRY_CLEARANCE + self.dz - lowest)

    def _align(self, env: TaskEnv) -> np.ndarray:
        if nut_tilt(env.object_quat("nut")) > HELD_TILT_MAX:
            return self._put_down(env)
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
        if not on_peg and nut_tilt(env.object_quat("nut")) > HELD_TILT_MAX:
            return self._put_down(env)
        at_floor = grip[2] - FINGERTIP_DZ < FLOOR_CLEARANCE
        if nut_z < NUT_HALF_H + RELEASE_DZ or (on_peg and at_floor):
            # Rise a little while opening, so the fingers are not pressed into the table.
            return self.move_to(env, [grip[0], grip[1], grip[2] + 0.02], env.gripper_yaw(), PREGRASP_OPEN)
        if not on_peg and (xy_err > FINE_XY or abs(dyaw) > FINE_YAW):
            return self.move_to(env, [xy[0], xy[1], min(grip[2], self._carry_z(env))], yaw, -1.0)
        z_goal = grip[2] + (NUT_HALF_H - nut_z)
        return self.move_to(env, [xy[0], xy[1], max(z_goal, grip[2] - LOWER_STEP)], yaw, -1.0)
