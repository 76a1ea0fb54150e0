"""PickPlace: grasp a can on the left of the table, carry it over, place it upright in a fixed bin.

Geometry (metres, world frame, table surface at z = 0):

* the can is a cylinder of radius ``CAN_R`` and half-height ``CAN_HALF_H`` (a 24-sided prism mesh for
  collisions: MuJoCo 4.0's cylinder-plane contact made a resting cylinder jump), ballasted in its base,
  spawned upright with its centre uniformly in ``CAN_X_RANGE`` x ``CAN_Y_RANGE`` (the left half);
* the bin is fixed at ``BIN_CENTER`` (the right half): four wall boxes of height ``BIN_WALL_H`` around
  an open square of half-size ``BIN_INNER``; its floor is the table itself (a thin visual mat marks it),
  so the can stands on the same plane it started on.

Stages (``info["stage"]`` is recomputed from the state every step, see :meth:`PickPlaceEnv._compute_stage`):

0. ``grasp`` -- the can is not held (and not placed).
1. ``carry`` -- the can is held, but its centre is not over the bin opening.
2. ``place`` -- the can is held over the bin opening; lower it and let go.
3. done      -- the can rests upright inside the bin, at rest, with the fingers open.
"""

from __future__ import annotations

import math

import numpy as np

from rewind.envs.core.base import TaskEnv, yaw_quat
from rewind.envs.core.mjcf import build_scene
from rewind.envs.core.predicates import in_gripper

CAN_R = 0.025
CAN_HALF_H = 0.035
#: Mass (kg) of the can's shell, plus a ballast disc in its base (like the liquid in a real can), which
#: keeps the centre of mass low so that knocks slide the can rather than topple it.
CAN_MASS = 0.04
CAN_BALLAST = 0.12
#: Friction between the can and the table (an explicit contact pair; everything else uses the geoms').
CAN_TABLE_FRICTION = 0.35
#: Sides of the prism that stands in for the can's cylinder in collisions.
CAN_SIDES = 24
CAN_X_RANGE = (-0.24, -0.07)
CAN_Y_RANGE = (-0.14, 0.14)
BIN_CENTER = np.array([0.17, 0.0])
BIN_INNER = 0.075
_BIN_X, _BIN_Y = float(BIN_CENTER[0]), float(BIN_CENTER[1])
BIN_WALL_H = 0.05
BIN_WALL_T = 0.008
#: The can counts as over the bin when its centre is this far inside the inner walls.
OVER_BIN_MARGIN = 0.01
#: Max tilt of the can's axis from vertical (rad) for it to count as upright.
UPRIGHT_TILT = math.radians(12.0)
#: Max tilt (rad) of a can that counts as held (a can lying between the fingers is not carried upright).
HELD_TILT = math.radians(35.0)
#: Max linear speed (m/s) of a can that counts as resting.
REST_SPEED = 0.05
#: Finger opening (m) above which the can counts as released.
RELEASE_OPENING = 2 * CAN_R + 0.008


def _bin_xml() -> str:
    cx, cy = BIN_CENTER
    off = BIN_INNER + BIN_WALL_T
    half_len = BIN_INNER + 2 * BIN_WALL_T
    h = BIN_WALL_H / 2
    walls = []
    for name, dx, dy, sx, sy in (
        ("bin_wall_px", off, 0.0, BIN_WALL_T, half_len),
        ("bin_wall_nx", -off, 0.0, BIN_WALL_T, half_len),
        ("bin_wall_py", 0.0, off, half_len, BIN_WALL_T),
        ("bin_wall_ny", 0.0, -off, half_len, BIN_WALL_T),
    ):
        walls.append(
            f'<geom name="{name}" type="box" size="{sx} {sy} {h}" pos="{dx} {dy} {h}" rgba="0.3 0.45 0.7 1"'
            ' friction="0.8 0.005 0.0001" contype="1" conaffinity="3"/>'
        )
    mat = (
        f'<geom name="bin_mat" type="box" size="{BIN_INNER} {BIN_INNER} 0.0005" pos="0 0 0.0005"'
        ' rgba="0.55 0.65 0.85 1" contype="0" conaffinity="0"/>'
    )
    return (
        f'\n    <body name="bin" pos="{cx} {cy} 0">\n      '
        + "\n      ".join([*walls, mat])
        + "\n    </body>"
    )


def _can_xml() -> str:
    return f"""
    <body name="can" pos="-0.15 0 {CAN_HALF_H}">
      <freejoint name="can"/>
      <geom name="can" type="mesh" mesh="can" rgba="0.85 0.55 0.1 1" mass="{CAN_MASS}"
            friction="1.0 0.01 0.001" condim="4" contype="1" conaffinity="3"/>
      <geom name="can_label" type="cylinder" size="{CAN_R + 0.0005} 0.015" rgba="0.9 0.9 0.9 1"
            contype="0" conaffinity="0" mass="0"/>
      <geom name="can_ballast" type="cylinder" size="{CAN_R - 0.004} 0.008" pos="0 0 {-CAN_HALF_H + 0.009}"
            contype="0" conaffinity="0" group="3" mass="{CAN_BALLAST}"/>
    </body>"""


def _contact_xml() -> str:
    f = CAN_TABLE_FRICTION
    return f"""
  <contact>
    <exclude body1="world" body2="can"/>
    <pair geom1="can" geom2="table" condim="4" friction="{f} {f} 0.01 0.0001 0.0001"/>
  </contact>
</mujoco>"""


def _can_mesh_xml(sides: int = CAN_SIDES) -> str:
    """The can's collision shape: a ``sides``-gon prism (robust flat contacts with plane and boxes)."""
    ang = np.arange(sides) * 2 * math.pi / sides
    verts = [
        f"{CAN_R * math.cos(t):.6f} {CAN_R * math.sin(t):.6f} {z:.6f}"
        for z in (-CAN_HALF_H, CAN_HALF_H)
        for t in ang
    ]
    return f'<mesh name="can" vertex="{" ".join(verts)}"/>'


def can_tilt(quat: np.ndarray) -> float:
    """Angle (rad) between the can's axis (body z) and world z, for quaternion ``quat`` (w, x, y, z)."""
    w, x, y, z = quat
    cos_tilt = 1.0 - 2.0 * (x * x + y * y)
    return float(math.acos(max(-1.0, min(1.0, cos_tilt))))


def can_axis_yaw(quat: np.ndarray) -> float:
    """Heading (rad) of the can's axis projected onto the table (meaningful only when tilted)."""
    w, x, y, z = quat
    ax = 2.0 * (x * z + w * y)
    ay = 2.0 * (y * z - w * x)
    return float(math.atan2(ay, ax))


def over_bin(pos: np.ndarray, margin: float = OVER_BIN_MARGIN) -> bool:
    """The point ``pos`` lies over the bin opening, ``margin`` inside the inner walls (xy only)."""
    dx, dy = abs(float(pos[0]) - _BIN_X), abs(float(pos[1]) - _BIN_Y)
    return max(dx, dy) < BIN_INNER - margin


class PickPlaceEnv(TaskEnv):
    """Pick up a can and place it upright in a bin. Stages ``grasp``, ``carry``, ``place`` (see the
    module doc)."""

    task_name = "pick_place"
    stage_names = ("grasp", "carry", "place")
    object_names = ("can",)
    default_max_steps = 200

    def _scene_xml(self) -> str:
        xml = build_scene("pick_place", _can_xml() + _bin_xml(), assets_xml=_can_mesh_xml())
        head, _, _ = xml.rpartition("</mujoco>")
        return head + _contact_xml()

    def _randomize(self, rng: np.random.Generator) -> None:
        a = self._obj_qadr["can"]
        self.data.qpos[a : a + 3] = [rng.uniform(*CAN_X_RANGE), rng.uniform(*CAN_Y_RANGE), CAN_HALF_H]
        self.data.qpos[a + 3 : a + 7] = yaw_quat(rng.uniform(-math.pi, math.pi))

    # ------------------------------------------------------------------ predicates
    def can_held(self) -> bool:
        """The can is upright-ish between the closed finger pads."""
        return in_gripper(self, "can", CAN_R, tol=0.012) and can_tilt(self.object_quat("can")) < HELD_TILT

    def can_upright(self) -> bool:
        """The can's axis is within ``UPRIGHT_TILT`` of vertical."""
        return can_tilt(self.object_quat("can")) < UPRIGHT_TILT

    def can_placed(self) -> bool:
        """The can stands upright on the bin floor inside the walls, at rest, and the fingers are open."""
        pos = self.object_pos("can")
        if not (over_bin(pos, margin=CAN_R - 0.002) and abs(float(pos[2]) - CAN_HALF_H) < 0.006):
            return False
        a = self._obj_dofadr["can"]
        vx, vy, vz = self.data.qvel[a : a + 3]
        return (
            self.can_upright()
            and math.sqrt(vx * vx + vy * vy + vz * vz) < REST_SPEED
            and self.gripper_opening() > RELEASE_OPENING
        )

    def _compute_stage(self) -> int:
        if self.can_placed():
            return 3
        if not self.can_held():
            return 0
        return 2 if over_bin(self.object_pos("can")) else 1
