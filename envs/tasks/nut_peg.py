"""NutPeg: pick up a square nut by its handle and drop it over a fixed square peg.

Geometry (metres, all native MJCF boxes):

* **Nut** (body ``nut``, free joint ``nut``): a square ring of four wall boxes around a square hole of
  half-width ``HOLE_HALF`` (wall thickness ``2 * WALL_HALF``, height ``2 * NUT_HALF_H``) plus a
  handle box sticking out along the nut's local +x, centred ``HANDLE_X`` from the hole centre. The body
  origin is the hole centre, so ``object_pos("nut")`` is the point that must go onto the peg axis.
* **Peg** (body ``peg``, no joint): a fixed square box of half-width ``PEG_HALF`` and height
  ``PEG_HEIGHT`` standing on the table at ``PEG_POS`` with yaw ``PEG_YAW``. The clearance is
  ``HOLE_HALF - PEG_HALF`` = 3 mm per side, so the nut only goes down with its yaw matched to the
  peg's (modulo 90 degrees: the hole is square) within roughly 0.1 rad.

Stages (recomputed from the state each step, so they can move backwards):

0. ``grasp``: the nut's handle is not held between the finger pads.
1. ``align``: the handle is held, but the hole is not yet centred on the peg axis with matched yaw.
2. ``insert``: the handle is held, the hole centre is within ``ALIGN_XY_TOL`` of the peg axis and
   the nut's yaw is within ``ALIGN_YAW_TOL`` of the peg's (mod 90 degrees). With a 3 mm clearance
   the nut can then only be above the peg or already on it.
3. done: the nut is released (not held), its hole centre is within ``INSERT_XY_TOL`` of the peg axis
   and its centre is below ``INSERT_Z``: it rests low on the peg.
"""

from __future__ import annotations

import math

import numpy as np

from rewind.envs.core.base import TaskEnv, quat_yaw, yaw_quat
from rewind.envs.core.mjcf import build_scene

PEG_HALF = 0.015
PEG_HEIGHT = 0.07
PEG_POS = np.array([0.12, 0.0])
PEG_YAW = 0.0
HOLE_HALF = 0.018
WALL_HALF = 0.006
NUT_HALF_H = 0.01
HANDLE_HALF_LEN = 0.024
#: Distance from the hole centre to the handle centre (the handle starts at the ring's outer face).
HANDLE_X = HOLE_HALF + 2 * WALL_HALF + HANDLE_HALF_LEN
HANDLE_HALF_W = 0.01
NUT_MASS = 0.06

ALIGN_XY_TOL = 0.004
ALIGN_YAW_TOL = 0.1
ALIGN_TILT_TOL = 0.3
INSERT_XY_TOL = 0.005
INSERT_Z = NUT_HALF_H + 0.015
#: Height of the gripper origin above the handle centre when grasping (fingertips 2 mm above the
#: nut's underside, so the nut can be set down on the table without the fingers touching it).
GRASP_DZ = 0.006

NUT_X_RANGE = (-0.16, -0.03)
NUT_Y_RANGE = (-0.12, 0.12)


def _nut_xml() -> str:
    h, w = NUT_HALF_H, WALL_HALF
    outer, mid = HOLE_HALF + 2 * w, HOLE_HALF + w
    walls = [
        ("wall_px", f"{mid} 0 0", f"{w} {outer} {h}"),
        ("wall_nx", f"{-mid} 0 0", f"{w} {outer} {h}"),
        ("wall_py", f"0 {mid} 0", f"{HOLE_HALF} {w} {h}"),
        ("wall_ny", f"0 {-mid} 0", f"{HOLE_HALF} {w} {h}"),
        ("handle", f"{HANDLE_X} 0 0", f"{HANDLE_HALF_LEN} {HANDLE_HALF_W} {h}"),
    ]
    # Mass is shared by volume; the total is NUT_MASS.
    vols = [np.prod([float(v) for v in size.split()]) for _, _, size in walls]
    geoms = "\n".join(
        f'      <geom name="nut_{n}" type="box" pos="{p}" size="{s}" mass="{NUT_MASS * v / sum(vols):.5f}"'
        f' friction="0.6 0.01 0.001" condim="4" contype="1" conaffinity="3" rgba="0.8 0.55 0.15 1"/>'
        for (n, p, s), v in zip(walls, vols, strict=True)
    )
    return f"""
    <body name="nut" pos="-0.1 0 {h}">
      <freejoint name="nut"/>
{geoms}
      <site name="nut_handle" pos="{HANDLE_X} 0 0" size="0.003" rgba="0 0 1 0.5" group="5"/>
    </body>"""


def _peg_xml() -> str:
    half_h = PEG_HEIGHT / 2
    return f"""
    <body name="peg" pos="{PEG_POS[0]} {PEG_POS[1]} {half_h}" euler="0 0 {PEG_YAW}">
      <geom name="peg" type="box" size="{PEG_HALF} {PEG_HALF} {half_h}" friction="0.3 0.005 0.0001"
            condim="3" contype="1" conaffinity="3" rgba="0.35 0.45 0.6 1"/>
    </body>"""


def _rotation(q: np.ndarray) -> np.ndarray:
    w, x, y, z = q
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def nut_lowest_z(nut_pos: np.ndarray, nut_quat: np.ndarray) -> float:
    """Height of the lowest corner of the nut's bounding box (ring plus handle), world frame."""
    outer = HOLE_HALF + 2 * WALL_HALF
    xs = (-outer, HANDLE_X + HANDLE_HALF_LEN)
    corners = np.array([[x, y, z] for x in xs for y in (-outer, outer) for z in (-NUT_HALF_H, NUT_HALF_H)])
    return float(nut_pos[2] + (corners @ _rotation(nut_quat).T)[:, 2].min())


def handle_point(nut_pos: np.ndarray, nut_quat: np.ndarray) -> np.ndarray:
    """World position of the handle centre of a nut at ``nut_pos`` with orientation ``nut_quat``."""
    w, x, y, z = nut_quat
    # First column of the rotation matrix: the nut's local x axis in the world.
    axis = np.array([1 - 2 * (y * y + z * z), 2 * (x * y + w * z), 2 * (x * z - w * y)])
    return np.asarray(nut_pos) + HANDLE_X * axis


def yaw_error_mod(yaw: float, target: float, symmetry: float = math.pi / 2) -> float:
    """Signed smallest rotation from ``yaw`` to ``target`` modulo ``symmetry`` (rad)."""
    return (target - yaw + symmetry / 2) % symmetry - symmetry / 2


def handle_held(
    handle: np.ndarray, grip: np.ndarray, grip_yaw: float, opening: float, tol: float = 0.02
) -> bool:
    """The handle centre sits between the finger pads (gripper frame) and the pads close on it."""
    rel = handle - grip
    c, s = math.cos(grip_yaw), math.sin(grip_yaw)
    x_local = c * rel[0] + s * rel[1]
    y_local = -s * rel[0] + c * rel[1]
    return bool(
        abs(x_local) < 0.02
        and abs(y_local) < 0.012
        and -0.022 < rel[2] < 0.045
        and HANDLE_HALF_W < opening < 2 * HANDLE_HALF_W + tol
    )


def nut_tilt(nut_quat: np.ndarray) -> float:
    """Angle (rad) between the nut's hole axis (local z) and world z, folded to [0, pi/2] (the nut is
    symmetric top to bottom)."""
    w, x, y, _ = nut_quat
    cos_t = abs(1.0 - 2.0 * (x * x + y * y))
    return math.acos(min(1.0, cos_t))


def aligned_over_peg(nut_pos: np.ndarray, nut_yaw: float, tilt: float = 0.0) -> bool:
    """The nut lies flat (tilt under ``ALIGN_TILT_TOL``), its hole centre on the peg axis (within
    ``ALIGN_XY_TOL``), its yaw matched to the peg's (mod 90 deg, within ``ALIGN_YAW_TOL``)."""
    dxy = math.hypot(nut_pos[0] - PEG_POS[0], nut_pos[1] - PEG_POS[1])
    yaw_ok = abs(yaw_error_mod(nut_yaw, PEG_YAW)) < ALIGN_YAW_TOL
    return dxy < ALIGN_XY_TOL and yaw_ok and tilt < ALIGN_TILT_TOL


def resting_on_peg(nut_pos: np.ndarray) -> bool:
    """The hole centre is on the peg axis (within ``INSERT_XY_TOL``) and the nut is low on the peg."""
    dxy = math.hypot(nut_pos[0] - PEG_POS[0], nut_pos[1] - PEG_POS[1])
    return dxy < INSERT_XY_TOL and nut_pos[2] < INSERT_Z


class NutPegEnv(TaskEnv):
    """Stages: ``grasp`` (handle held), ``align`` (hole over the peg, yaw matched), ``insert``
    (nut released, resting low on the peg). See the module docstring for the geometry."""

    task_name = "nut_peg"
    stage_names = ("grasp", "align", "insert")
    object_names = ("nut",)
    default_max_steps = 90

    def _scene_xml(self) -> str:
        return build_scene("nut_peg", _nut_xml() + _peg_xml())

    def _randomize(self, rng: np.random.Generator) -> None:
        a = self._obj_qadr["nut"]
        x, y = rng.uniform(*NUT_X_RANGE), rng.uniform(*NUT_Y_RANGE)
        self.data.qpos[a : a + 3] = [x, y, NUT_HALF_H]
        self.data.qpos[a + 3 : a + 7] = yaw_quat(rng.uniform(-math.pi, math.pi))

    # ----------------------------------------------------------------- state helpers
    def handle_pos(self) -> np.ndarray:
        """World position of the nut's handle centre [3]."""
        return handle_point(self.object_pos("nut"), self.object_quat("nut"))

    def nut_yaw(self) -> float:
        """Yaw of the nut (rad); its handle points along this direction."""
        return quat_yaw(self.object_quat("nut"))

    def nut_held(self) -> bool:
        """Whether the handle is held between the finger pads."""
        return handle_held(self.handle_pos(), self.gripper_pos(), self.gripper_yaw(), self.gripper_opening())

    def _compute_stage(self) -> int:
        nut = self.object_pos("nut")
        held = self.nut_held()
        if not held:
            return 3 if resting_on_peg(nut) else 0
        aligned = aligned_over_peg(nut, self.nut_yaw(), nut_tilt(self.object_quat("nut")))
        return 2 if aligned else 1

    def _low_dim_obs(self) -> dict[str, np.ndarray]:
        """The base observation plus the handle position, its offset from the gripper and the peg."""
        obs = super()._low_dim_obs()
        handle = self.handle_pos()
        obs["nut_handle_pos"] = handle.astype(np.float32)
        obs["nut_handle_to_eef"] = (handle - self.gripper_pos()).astype(np.float32)
        obs["peg_pos"] = np.array([PEG_POS[0], PEG_POS[1], PEG_HEIGHT], dtype=np.float32)
        return obs
