"""Scripted operator for Lift."""

from __future__ import annotations

import numpy as np

from rewind.envs.core.base import TaskEnv
from rewind.envs.operators.base import Operator, grasp_yaw
from rewind.envs.tasks.lift import CUBE_HALF, LIFT_HEIGHT


class LiftOperator(Operator):
    """Grasp the cube from above, then raise it straight up."""

    def plan(self, env: TaskEnv, stage: int) -> np.ndarray:
        yaw = grasp_yaw(env.object_quat("cube"), env.gripper_yaw())
        if stage == 0:
            return self.grasp(env, "cube", CUBE_HALF, CUBE_HALF, yaw)
        grip = env.gripper_pos()
        return self.move_to(env, [grip[0], grip[1], LIFT_HEIGHT + 0.05], yaw, -1.0)
