"""Scripted operator for Stack3: green on red, then blue on green, from any reachable state.

Every step is decided from the current state alone (see :mod:`rewind.envs.operators.base`):

* ``grasp_green``: put down any wrongly held cube; lift off any cube stacked on another; grasp green.
* ``place_green_on_red``: if red is not free on the table, put green down beside it; else carry green
  above red at a safe height, line it up in x, y and yaw, lower it onto red and release.
* ``grasp_blue`` / ``place_blue_on_green``: the same for blue on green.

All transits run at a height that clears every cube (and the cube being carried) by a margin, so
the gripper never sweeps through the tower; grasps pick the finger axis pointing away from nearby
cubes so the open fingers do not land on a neighbour.
"""

from __future__ import annotations

import math

import numpy as np

from rewind.envs.core.base import TaskEnv
from rewind.envs.core.mjcf import FINGER_STROKE
from rewind.envs.operators.base import Operator, wrap_angle
from rewind.envs.tasks.stack3 import BLUE, CUBE_HALF, CUBES, GREEN, RED, Stack3Env, cube_yaw, on_table

#: How far the fingertips reach below the gripper origin (m).
FINGER_DROP = 0.014
#: Clearance (m) kept above every cube during transits, and the highest transit level (m).
CLEAR_MARGIN, MAX_CLEAR_Z = 0.03, 0.22
#: Finger opening while approaching a cube (m): the cube plus 15 mm either side.
PREGRASP_OPEN = 2 * CUBE_HALF + 0.03
#: Gripper origin above the cube centre at the grasp (m).
GRASP_DZ = 0.003
#: Tolerances: lined up above a cube to descend (m, rad), close enough to keep closing (m).
ALIGN_XY, ALIGN_YAW, GRASP_XY = 0.006, 0.08, 0.012
#: Lined up to lower a held cube (m, rad); release when its bottom is within this of the seat (m).
PLACE_XY, PLACE_YAW, RELEASE_GAP = 0.004, 0.04, 0.005
#: Fingers moving slower than this (m/s) have stopped closing.
STALL_SPEED = 0.005
#: Cubes further than this from a grasped cube do not steer the choice of finger axis (m).
NEIGHBOUR_RANGE = 0.12
#: Spacing (m) a put-down spot keeps from every other cube; spots lie in a square of this half-size.
FREE_SPACING, SPOT_HALF = 0.09, 0.18
_YAW_LIMIT = math.pi - 0.05
_SPOTS = np.array(
    [(x, y) for x in np.linspace(-SPOT_HALF, SPOT_HALF, 7) for y in np.linspace(-SPOT_HALF, SPOT_HALF, 7)]
)


def finger_cmd(opening: float) -> float:
    """Finger command (-1 .. 1) that sets the pad distance to ``opening`` (m)."""
    return float(np.clip(opening / FINGER_STROKE - 1.0, -1.0, 1.0))


def finger_speed(env: TaskEnv) -> float:
    """Speed (m/s) at which the finger pads' distance is changing."""
    m = env.model
    dofs = [m.jnt_dofadr[m.joint(n).id] for n in ("finger_left", "finger_right")]
    return abs(float(env.data.qvel[dofs].sum()))


def yaw_in_range(yaw: float, symmetry: float = math.pi / 2) -> float:
    """The yaw equivalent to ``yaw`` under ``symmetry`` that lies within the gripper's yaw range,
    nearest ``yaw``."""
    k = min(range(-4, 5), key=lambda k: abs(k) if abs(yaw + k * symmetry) <= _YAW_LIMIT else 99)
    return yaw + k * symmetry


def sym_wrap(x: float, symmetry: float = math.pi / 2) -> float:
    """Wrap an angle to ``[-symmetry / 2, symmetry / 2)`` (a cube looks the same every quarter turn)."""
    return (x + symmetry / 2) % symmetry - symmetry / 2


def grasp_yaw_away(cube_yaw: float, current_yaw: float, offsets: list[np.ndarray]) -> float:
    """Gripper yaw for grasping a cube of yaw ``cube_yaw`` whose neighbours sit at ``offsets`` (xy).

    Of the two finger axes that fit the cube, take the one more nearly at right angles to the close
    neighbours (the open fingers reach out along it); on a tie, the one nearer ``current_yaw``.
    Returns the yaw of that axis class nearest ``current_yaw`` within the gripper's yaw range.
    """
    best: tuple[float, float, float] | None = None
    for k in range(-4, 5):
        yaw = cube_yaw + k * math.pi / 2
        if abs(yaw) > _YAW_LIMIT:
            continue
        axis = np.array([-math.sin(yaw), math.cos(yaw)])
        penalty = 0.0
        for d in offsets:
            r = float(np.hypot(*d))
            if 1e-6 < r < NEIGHBOUR_RANGE:
                penalty += (NEIGHBOUR_RANGE - r) * abs(float(axis @ d)) / r
        key = (round(penalty, 3), abs(yaw - current_yaw), yaw)
        if best is None or key[:2] < best[:2]:
            best = key
    assert best is not None
    return best[2]


def free_spot(xy: np.ndarray, others: list[np.ndarray]) -> np.ndarray:
    """Where to put a cube now at ``xy`` down: right here if clear of ``others``, else the nearest clear
    spot."""

    def clear(p: np.ndarray) -> bool:
        return all(np.hypot(*(p - q[:2])) >= FREE_SPACING for q in others)

    if np.all(np.abs(xy) <= SPOT_HALF) and clear(xy):
        return np.asarray(xy, dtype=np.float64).copy()
    spots = [s for s in _SPOTS if clear(s)]
    if not spots:
        return np.zeros(2)
    return min(spots, key=lambda s: float(np.hypot(*(s - xy))))


class Stack3Operator(Operator):
    """Stacks green on red, then blue on green, recovering from drops, topples and misplaced cubes."""

    def plan(self, env: Stack3Env, stage: int) -> np.ndarray:
        """Noise-free action for ``stage`` (see the module doc)."""
        if stage == 0:
            return self._grasp_green(env)
        if stage == 1:
            red = env.object_pos(RED)
            blue = env.object_pos(BLUE)
            blue_on_red = np.hypot(*(blue[:2] - red[:2])) < 2 * CUBE_HALF and blue[2] > red[2] + CUBE_HALF
            if not on_table(red) or blue_on_red:
                return self.put_down(env, GREEN)
            return self.place_on(env, GREEN, RED)
        if stage == 2:
            return self.pick(env, BLUE)
        if stage == 3:
            if env.held(BLUE):
                return self.place_on(env, BLUE, GREEN)
            # Blue rests on green, released; let the tower settle while backing off.
            grip = env.gripper_pos()
            return self.move_to(env, grip + [0.0, 0.0, 0.01], env.gripper_yaw(), 1.0)
        grip = env.gripper_pos()
        return self.move_to(env, grip + [0.0, 0.0, 0.01], env.gripper_yaw(), 1.0)

    def _grasp_green(self, env: Stack3Env) -> np.ndarray:
        """Stage 0: clear wrongly held or stacked cubes out of the way, then grasp green."""
        for name in (RED, BLUE):
            if env.held(name):
                return self.put_down(env, name)
        elevated = [n for n in (RED, BLUE) if not on_table(env.object_pos(n))]
        if elevated:
            return self.pick(env, max(elevated, key=lambda n: env.object_pos(n)[2]))
        return self.pick(env, GREEN)

    # ------------------------------------------------------------------ heights
    def clear_z(self, env: Stack3Env, exclude: tuple[str, ...] = ()) -> float:
        """Height (m) the lowest point of the gripper and its load must stay above during transits."""
        tops = [env.object_pos(n)[2] + CUBE_HALF for n in CUBES if n not in exclude]
        # Capped: a cube stuck to the gripper rises with it and must not make it climb for ever.
        return min(max([0.0, *tops]) + CLEAR_MARGIN + self.dz, MAX_CLEAR_Z)

    # ------------------------------------------------------------------ primitives
    def pick(self, env: Stack3Env, name: str) -> np.ndarray:
        """Approach cube ``name`` from above at a safe height, line up, descend and close."""
        obj = env.object_pos(name)
        grip = env.gripper_pos()
        others = [env.object_pos(n)[:2] - obj[:2] for n in CUBES if n != name]
        yaw = grasp_yaw_away(cube_yaw(env.object_quat(name)), env.gripper_yaw(), others)
        xy_err = float(np.hypot(*(obj[:2] - grip[:2])))
        yaw_err = abs(wrap_angle(yaw - env.gripper_yaw()))
        grasp_z = obj[2] + GRASP_DZ
        opening = env.gripper_opening()
        # Pads pushed wider than the approach opening are wedged on something (two cubes side by
        # side, say): open all the way to let go.
        wedged = opening > PREGRASP_OPEN + 0.005 and any(
            not on_table(p) and np.linalg.norm(p - grip) < 0.06 for p in map(env.object_pos, CUBES)
        )
        open_cmd = 1.0 if wedged else finger_cmd(PREGRASP_OPEN)
        if xy_err > 2 * ALIGN_XY:
            hover = self.clear_z(env) + FINGER_DROP
            if grip[2] < hover - 0.015:
                if opening < PREGRASP_OPEN - 0.015:  # let go of anything before moving off (ease up
                    # a little too: a gripper pressed into the table cannot open)
                    return self.move_to(env, grip + [0.0, 0.0, 0.01], env.gripper_yaw(), open_cmd)
                return self.move_to(env, [grip[0], grip[1], hover], env.gripper_yaw(), open_cmd)
            return self.move_to(env, [obj[0], obj[1], max(hover, grip[2] - 0.02)], yaw, open_cmd)
        low = grip[2] < grasp_z + 0.006
        if low and xy_err < GRASP_XY and opening < PREGRASP_OPEN - 0.01:
            if opening > 2 * CUBE_HALF + 0.01 and finger_speed(env) < STALL_SPEED:
                # Fingers stalled wide of the cube (grasped across a corner, or tilted): let go.
                return self.move_to(env, grip, env.gripper_yaw(), open_cmd)
            return self.move_to(env, [obj[0], obj[1], min(grasp_z, grip[2])], yaw, -1.0)  # closing
        if xy_err > ALIGN_XY or yaw_err > ALIGN_YAW:
            return self.move_to(env, [obj[0], obj[1], grip[2]], yaw, open_cmd)
        if not low:
            return self.move_to(env, [obj[0], obj[1], grasp_z], yaw, open_cmd)
        return self.move_to(env, [obj[0], obj[1], grasp_z], yaw, -1.0)

    def place_on(self, env: Stack3Env, held: str, base: str) -> np.ndarray:
        """Carry the held cube above cube ``base``, match its yaw, lower it on top and release."""
        b = env.object_pos(base)
        d_yaw = sym_wrap(cube_yaw(env.object_quat(base)) - cube_yaw(env.object_quat(held)))
        return self.place_at(env, held, b[:2], b[2] + 2 * CUBE_HALF, d_yaw)

    def put_down(self, env: Stack3Env, held: str) -> np.ndarray:
        """Set the held cube down on the table at the nearest spot clear of the other cubes."""
        h = env.object_pos(held)
        spot = free_spot(h[:2], [env.object_pos(n) for n in CUBES if n != held])
        return self.place_at(env, held, spot, CUBE_HALF, 0.0)

    def place_at(self, env: Stack3Env, held: str, xy: np.ndarray, seat_z: float, d_yaw: float) -> np.ndarray:
        """Bring the held cube's centre to (``xy``, ``seat_z``) turned by ``d_yaw``, then open.

        Rises to a safe height before any long lateral move, lines up, lowers, and releases once the
        cube's bottom is within ``RELEASE_GAP`` of its seat.
        """
        h = env.object_pos(held)
        grip = env.gripper_pos()
        gyaw = env.gripper_yaw()
        yaw = yaw_in_range(gyaw + d_yaw)
        off = np.asarray(xy) - h[:2]
        xy_err = float(np.hypot(*off))
        tgt_xy = grip[:2] + off
        load_drop = max(grip[2] - (h[2] - CUBE_HALF), FINGER_DROP)  # gripper origin above lowest point
        safe = self.clear_z(env, exclude=(held,)) + load_drop
        if xy_err > 3 * PLACE_XY:
            if grip[2] < safe - 0.015:
                return self.move_to(env, [grip[0], grip[1], safe], yaw, -1.0)
            return self.move_to(env, [tgt_xy[0], tgt_xy[1], max(safe, grip[2] - 0.02)], yaw, -1.0)
        above_seat = grip[2] + (seat_z + 0.01 - h[2])
        if xy_err > PLACE_XY or abs(d_yaw) > PLACE_YAW:
            return self.move_to(env, [tgt_xy[0], tgt_xy[1], max(grip[2], above_seat)], yaw, -1.0)
        gap = h[2] - seat_z
        # Also let go once the fingertips reach the top of what is below, so a cube held high in the
        # pads is dropped the last few mm rather than the pads closing around the cube underneath.
        tips_down = grip[2] - FINGER_DROP < seat_z - CUBE_HALF + 0.002
        if gap > RELEASE_GAP and not tips_down:
            return self.move_to(env, [tgt_xy[0], tgt_xy[1], grip[2] - gap + 0.002], yaw, -1.0)
        return self.move_to(env, grip, gyaw, 1.0)
