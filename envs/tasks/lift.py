"""Lift: grasp a cube and raise it 10 cm above the table."""

from __future__ import annotations

import numpy as np

from rewind.envs.core.base import TaskEnv, yaw_quat
from rewind.envs.core.mjcf import box_body, build_scene
from rewind.envs.core.predicates import in_gripper, lifted

CUBE_HALF = 0.02
LIFT_HEIGHT = 0.10


class LiftEnv(TaskEnv):
    """Stages: ``grasp`` (the cube is held between the fingers), ``lift`` (cube above 10 cm)."""

    task_name = "lift"
    stage_names = ("grasp", "lift")
    object_names = ("cube",)
    default_max_steps = 120

    def _scene_xml(self) -> str:
        return build_scene("lift", box_body("cube", CUBE_HALF, "0.85 0.2 0.2 1"))

    def _randomize(self, rng: np.random.Generator) -> None:
        a = self._obj_qadr["cube"]
        self.data.qpos[a : a + 3] = [rng.uniform(-0.12, 0.12), rng.uniform(-0.12, 0.12), CUBE_HALF]
        self.data.qpos[a + 3 : a + 7] = yaw_quat(rng.uniform(-np.pi / 4, np.pi / 4))

    def _compute_stage(self) -> int:
        held = in_gripper(self, "cube", CUBE_HALF)
        if held and lifted(self.object_pos("cube"), LIFT_HEIGHT):
            return 2
        return 1 if held else 0
