"""Scripted operators for the robosuite tasks (OSC_POSE actions), the simulated person of the loop.

Like :mod:`rewind.envs.operators.base`, every decision is recomputed from the env's privileged state
each step (no hidden plan), so handing control to an operator at any step is safe. Actions are
bounded P-steps toward a target grip-site pose: position deltas scaled to OSC_POSE's 0.05 m per unit,
orientation as the rotation vector from the current to the target orientation (0.5 rad per unit),
gripper -1 open / +1 closed.
"""

from __future__ import annotations

import math

import numpy as np

from rewind.envs.operators.base import OperatorNoise, wrap_angle
from rewind.envs.robosuite.env import ORI_SCALE, POS_SCALE, RobosuiteEnv
from rewind.envs.robosuite.rotations import rotvec

#: The grip site's orientation at yaw pi/2 (robosuite's start): its z axis points down.
_DOWN = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])
OPEN, CLOSE = -1.0, 1.0


def _rotz(yaw: float) -> np.ndarray:
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


class RobosuiteOperator:
    """Maps a :class:`RobosuiteEnv`'s state to an OSC_POSE action (float32 ``[7]``)."""

    def __init__(self, noise: OperatorNoise | None = None) -> None:
        self.noise = noise or OperatorNoise(action_std=0.0, gain_range=(1.0, 1.0), height_jitter=0.0)
        self._rng = np.random.default_rng(0)
        self.gain = 1.0
        self.dz = 0.0

    def reset(self, rng: np.random.Generator) -> None:
        """Start a new episode (or take over mid-episode): draw the per-episode style from ``rng``."""
        self._rng = rng
        self.gain = float(rng.uniform(*self.noise.gain_range))
        self.dz = float(rng.uniform(-1, 1) * self.noise.height_jitter)

    def act(self, env) -> np.ndarray:
        """The next action for ``env`` (its ``unwrapped`` env is read)."""
        base: RobosuiteEnv = env.unwrapped
        a = self.plan(base, base.stage())
        if self.noise.action_std > 0:
            a[:6] += self._rng.normal(0.0, self.noise.action_std, size=6)
        return np.clip(a, -1.0, 1.0).astype(np.float32)

    def plan(self, env: RobosuiteEnv, stage: int) -> np.ndarray:
        """Noise-free action for ``stage`` of ``env`` (float64 ``[7]``)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ primitives
    @staticmethod
    def opening(env: RobosuiteEnv) -> float:
        """Distance between the Panda's fingers (m): about 0.08 open, 0 closed."""
        q = env.data.qpos[env.rs.robots[0]._ref_gripper_joint_pos_indexes["right"]]
        return float(q[0] - q[1])

    def move_to(self, env: RobosuiteEnv, pos: np.ndarray, yaw: float, grip: float) -> np.ndarray:
        """Bounded P-step toward grip-site position ``pos`` pointing down at ``yaw``, gripper ``grip``."""
        a = np.zeros(7)
        a[:3] = np.clip(self.gain * (np.asarray(pos) - env.eef_pos()) / POS_SCALE * 1.5, -1.0, 1.0)
        sid = env.rs.robots[0].eef_site_id["right"]
        current = env.data.site_xmat[sid].reshape(3, 3)
        target = _rotz(yaw - math.pi / 2) @ _DOWN
        a[3:6] = np.clip(rotvec(target @ current.T) / ORI_SCALE * 1.5, -1.0, 1.0)
        a[6] = grip
        return a

    def grasp(
        self, env: RobosuiteEnv, obj: np.ndarray, grasp_z: float, yaw: float, width: float
    ) -> np.ndarray:
        """Line up above ``obj`` with open fingers, descend to ``grasp_z``, close. A closed, empty
        gripper opens again (a missed grasp)."""
        grip = env.eef_pos()
        hover_z = grasp_z + 0.1 + self.dz
        xy_err = float(np.hypot(*(obj[:2] - grip[:2])))
        yaw_err = abs(wrap_angle(yaw - env.eef_yaw()))
        opening = self.opening(env)
        if opening < width - 0.01 and grip[2] < grasp_z + 0.03:  # closed on nothing: open and rise
            return self.move_to(env, [grip[0], grip[1], hover_z], yaw, OPEN)
        if xy_err > 0.01 or yaw_err > 0.1:
            if grip[2] < grasp_z + 0.04 and xy_err > 0.02:  # low: rise before moving sideways
                return self.move_to(env, [grip[0], grip[1], hover_z], yaw, OPEN)
            z = hover_z if xy_err > 0.02 else max(grip[2], grasp_z)
            return self.move_to(env, [obj[0], obj[1], z], yaw, OPEN)
        if grip[2] > grasp_z + 0.008:
            return self.move_to(env, [obj[0], obj[1], grasp_z], yaw, OPEN)
        return self.move_to(env, [obj[0], obj[1], grasp_z], yaw, CLOSE)


def _body_yaw(env: RobosuiteEnv, symmetry: float) -> float:
    """Yaw of the task object, folded by its ``symmetry`` to the one nearest the gripper's."""
    obj = env.task.target(env.rs)
    m = env.data.xmat[env.rs.sim.model.body_name2id(obj.root_body)].reshape(3, 3)
    yaw = math.atan2(m[1, 0], m[0, 0])
    return yaw + round((env.eef_yaw() - yaw) / symmetry) * symmetry


class LiftOperator(RobosuiteOperator):
    """Grasp the cube from above (fingers lined up with a face), then raise it."""

    def plan(self, env: RobosuiteEnv, stage: int) -> np.ndarray:
        cube = env.object_pos()
        yaw = _body_yaw(env, math.pi / 2)
        if stage == 0:
            return self.grasp(env, cube, cube[2], yaw, width=0.04)
        grip = env.eef_pos()
        return self.move_to(env, [grip[0], grip[1], env.rs.table_offset[2] + 0.15], yaw, CLOSE)


class CanOperator(RobosuiteOperator):
    """Grasp the can from above, carry it high to its bin quadrant, lower it, release, retreat."""

    CARRY_Z = 1.02

    def plan(self, env: RobosuiteEnv, stage: int) -> np.ndarray:
        rs = env.rs
        can = env.object_pos()
        target = _drop_point(rs, rs.object_id)
        grip = env.eef_pos()
        yaw = math.pi / 2
        in_bin = not rs.not_in_bin(can, rs.object_id)
        if stage == 0:
            if in_bin:  # released in its bin: move away (success needs the gripper clear of the can)
                return self.move_to(env, [grip[0], grip[1], self.CARRY_Z], yaw, OPEN)
            return self.grasp(env, can, can[2] + 0.012, yaw, width=0.05)
        xy_err = float(np.hypot(*(target[:2] - can[:2])))
        if xy_err > 0.03:
            if can[2] < self.CARRY_Z - 0.12 and xy_err > 0.08:  # lift clear of the bin walls first
                return self.move_to(env, [grip[0], grip[1], self.CARRY_Z], yaw, CLOSE)
            return self.move_to(env, [target[0], target[1], self.CARRY_Z], yaw, CLOSE)
        release_z = rs.bin2_pos[2] + 0.09
        if can[2] > release_z + 0.01:
            return self.move_to(env, [target[0], target[1], grip[2] - (can[2] - release_z)], yaw, CLOSE)
        return self.move_to(env, [grip[0], grip[1], grip[2]], yaw, OPEN)


def _drop_point(rs, bin_id: int) -> np.ndarray:
    """Where to lower an object into its quadrant of the goal bin: robosuite's ``not_in_bin`` bounds,
    at the corner nearest the robot plus a margin (the quadrant centres far from the robot are at
    the Panda's reach limit)."""
    x_low = rs.bin2_pos[0] - (rs.bin_size[0] / 2 if bin_id in (0, 2) else 0.0)
    y_low = rs.bin2_pos[1] - (rs.bin_size[1] / 2 if bin_id < 2 else 0.0)
    return np.array([x_low + 0.055, y_low + 0.06, rs.bin2_pos[2]])


OPERATORS: dict[str, type[RobosuiteOperator]] = {"Lift": LiftOperator, "Can": CanOperator}


def make_operator(task: str, noise: OperatorNoise | None = None) -> RobosuiteOperator:
    """The scripted operator of robosuite task ``task`` (``Lift`` or ``Can``)."""
    if task not in OPERATORS:
        raise KeyError(f"no scripted operator for robosuite task {task!r}; available: {', '.join(OPERATORS)}")
    return OPERATORS[task](noise=noise)
