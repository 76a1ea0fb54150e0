"""Stack3: stack three cubes in a fixed order, green on red, then blue on green.

The project's long-horizon benchmark. Three cubes of the same size start at random, non-overlapping
table positions and yaws. The episode succeeds when blue rests on green, green rests on red, red
stands on the table, neither upper cube is held, and the tower has settled.

Stages (``info["stage"]``, recomputed from the state every step, so a knocked-over tower or a drop
sends it back):

====  =======================  ===============================================================
idx   name                     the stage is current while ...
====  =======================  ===============================================================
0     ``grasp_green``          green is neither held nor released on red
1     ``place_green_on_red``   green is held (placing it ends with the release)
2     ``grasp_blue``           green sits released on red and blue is not held / not on green
3     ``place_blue_on_green``  blue is held, or rests on green but the tower has not yet settled
4     done                     blue on green on red, both released, the tower still
====  =======================  ===============================================================
"""

from __future__ import annotations

import mujoco
import numpy as np

from rewind.envs.core.base import TaskEnv, yaw_quat
from rewind.envs.core.mjcf import box_body, build_scene
from rewind.envs.core.predicates import in_gripper, resting_on

CUBE_HALF = 0.02
#: Bottom, middle and top of the target tower.
RED, GREEN, BLUE = "red_cube", "green_cube", "blue_cube"
CUBES = (RED, GREEN, BLUE)
_RGBA = {RED: "0.85 0.18 0.18 1", GREEN: "0.2 0.7 0.25 1", BLUE: "0.2 0.35 0.85 1"}
#: Half-extent (m) of the square the cube centres are drawn from, and their least spacing.
SPAWN_HALF = 0.15
MIN_SPACING = 0.08
#: Lateral tolerance (m) of "resting on": a cube more than this off-centre does not count as stacked.
STACK_XY_TOL = 0.015
#: A cube whose centre is this far above a table-resting height is off the table (on or against another).
ELEVATED_TOL = 0.012
#: The tower counts as settled when every cube moves slower than these (m/s, rad/s).
SETTLE_LIN = 0.03
SETTLE_ANG = 0.5


def on_table(pos: np.ndarray) -> bool:
    """A cube's centre is at table-resting height (it is not on, or leaning against, another body)."""
    return bool(abs(pos[2] - CUBE_HALF) < ELEVATED_TOL)


def cube_yaw(quat: np.ndarray) -> float:
    """Yaw (rad) of a cube's side faces about world z, whichever face is up (defined mod pi/2).

    Unlike the yaw of the quaternion itself, this stays meaningful for a cube that has rolled over.
    """
    rot = np.empty(9)
    mujoco.mju_quat2Mat(rot, np.asarray(quat, dtype=np.float64))
    rot = rot.reshape(3, 3)
    up = int(np.argmax(np.abs(rot[2])))
    side = rot[:, (up + 1) % 3]
    return float(np.arctan2(side[1], side[0]))


def stacked(top: np.ndarray, bottom: np.ndarray) -> bool:
    """Cube ``top`` rests squarely on cube ``bottom``."""
    return resting_on(top, bottom, 2 * CUBE_HALF, STACK_XY_TOL)


def stage_from_flags(
    green_on_red: bool, blue_on_green: bool, green_held: bool, blue_held: bool, settled: bool
) -> int:
    """The Stack3 stage index from its predicates (pure; see the module doc for the table).

    ``green_on_red`` must already include "red stands on the table".
    """
    if green_on_red and not green_held:
        if blue_on_green and not blue_held and settled:
            return 4
        if blue_held or blue_on_green:
            return 3
        return 2
    return 1 if green_held else 0


def sample_positions(rng: np.random.Generator, n: int = 3, max_tries: int = 1000) -> np.ndarray:
    """``n`` cube centres (x, y) in the spawn square, pairwise at least ``MIN_SPACING`` apart."""
    pts: list[np.ndarray] = []
    for _ in range(max_tries):
        p = rng.uniform(-SPAWN_HALF, SPAWN_HALF, size=2)
        if all(np.hypot(*(p - q)) >= MIN_SPACING for q in pts):
            pts.append(p)
            if len(pts) == n:
                return np.array(pts)
    raise RuntimeError(f"could not place {n} cubes {MIN_SPACING} m apart in {max_tries} draws")


class Stack3Env(TaskEnv):
    """Stack green on red, then blue on green. See the module doc for the stages."""

    task_name = "stack3"
    stage_names = ("grasp_green", "place_green_on_red", "grasp_blue", "place_blue_on_green")
    object_names = CUBES
    default_max_steps = 140

    def _scene_xml(self) -> str:
        bodies = "".join(
            box_body(n, CUBE_HALF, _RGBA[n], pos=f"{0.1 * i - 0.1} 0 {CUBE_HALF}")
            for i, n in enumerate(CUBES)
        )
        return build_scene("stack3", bodies)

    def _randomize(self, rng: np.random.Generator) -> None:
        xy = sample_positions(rng)
        for n, p in zip(CUBES, xy, strict=True):
            a = self._obj_qadr[n]
            self.data.qpos[a : a + 3] = [p[0], p[1], CUBE_HALF]
            self.data.qpos[a + 3 : a + 7] = yaw_quat(rng.uniform(-np.pi / 4, np.pi / 4))

    # ----------------------------------------------------------------- predicates
    def held_cube(self) -> str | None:
        """The cube between the closed finger pads, if any.

        A cube held on top of another can leave the lower one inside :func:`in_gripper`'s box too;
        of the candidates, the one whose centre is nearest the gripper origin is the one held.
        """
        grip = self.gripper_pos()
        names = [n for n in CUBES if in_gripper(self, n, CUBE_HALF)]
        return min(names, key=lambda n: float(np.linalg.norm(self.object_pos(n) - grip)), default=None)

    def held(self, name: str) -> bool:
        """Cube ``name`` is the one between the closed finger pads."""
        return self.held_cube() == name

    def object_speed(self, name: str) -> tuple[float, float]:
        """Linear (m/s) and angular (rad/s) speed of cube ``name``."""
        d = self._obj_dofadr[name]
        v = self.data.qvel[d : d + 6]
        return float(np.linalg.norm(v[:3])), float(np.linalg.norm(v[3:]))

    def settled(self) -> bool:
        """Every cube is (nearly) at rest."""
        return all(lin < SETTLE_LIN and ang < SETTLE_ANG for lin, ang in map(self.object_speed, CUBES))

    def green_on_red(self) -> bool:
        """Green rests squarely on red, and red stands on the table."""
        red = self.object_pos(RED)
        return on_table(red) and stacked(self.object_pos(GREEN), red)

    def blue_on_green(self) -> bool:
        """Blue rests squarely on green."""
        return stacked(self.object_pos(BLUE), self.object_pos(GREEN))

    def _compute_stage(self) -> int:
        held = self.held_cube()
        return stage_from_flags(
            green_on_red=self.green_on_red(),
            blue_on_green=self.blue_on_green(),
            green_held=held == GREEN,
            blue_held=held == BLUE,
            settled=self.settled(),
        )

    # ----------------------------------------------------------------- observations
    def _low_dim_obs(self) -> dict[str, np.ndarray]:
        """The base observation plus the offsets green - red and blue - green."""
        obs = super()._low_dim_obs()
        obs["green_to_red"] = (self.object_pos(GREEN) - self.object_pos(RED)).astype(np.float32)
        obs["blue_to_green"] = (self.object_pos(BLUE) - self.object_pos(GREEN)).astype(np.float32)
        return obs
