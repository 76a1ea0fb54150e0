"""What each robosuite task adds to the adapter: stage names, the stage function, default kwargs.

Stages come from robosuite's own predicates: ``_check_grasp`` (both finger pads touch the object)
and ``_check_success`` (Lift: cube 4 cm above the table; Can: can inside its bin region with the
gripper away; Square: nut around the square peg, low on it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rewind.envs.robosuite import GYM_IDS


def _lift_object(rs: Any) -> Any:
    return rs.cube


def _can_object(rs: Any) -> Any:
    return rs.objects[rs.object_id]


def _square_object(rs: Any) -> Any:
    return rs.nuts[rs.nut_id]


@dataclass(frozen=True)
class RobosuiteTask:
    """One supported robosuite task.

    Attributes:
        name: rewind's short name (``Lift``).
        gym_id: the Gymnasium id (``rewind/robosuite-Lift-v0``).
        env_name: robosuite's env name (``Lift``; robomimic's ``env_meta["env_name"]``).
        stage_names: the named stages, in order; the task is done past the last.
        target: the manipulated object (a robosuite ``MujocoObject``) of a robosuite env.
        max_steps: default episode length at 20 Hz (robomimic's rollout horizons).
    """

    name: str
    gym_id: str
    env_name: str
    stage_names: tuple[str, ...]
    target: Callable[[Any], Any]
    max_steps: int

    def stage(self, rs: Any) -> int:
        """Index of the current stage of robosuite env ``rs``; ``len(stage_names)`` once successful."""
        if rs._check_success():
            return len(self.stage_names)
        return int(bool(rs._check_grasp(gripper=rs.robots[0].gripper, object_geoms=self.target(rs))))


def _task(name: str, stages: tuple[str, ...], target: Callable[[Any], Any], max_steps: int) -> RobosuiteTask:
    gym_id, env_name = GYM_IDS[name]
    return RobosuiteTask(name, gym_id, env_name, stages, target, max_steps)


TASKS: dict[str, RobosuiteTask] = {
    t.name: t
    for t in (
        _task("Lift", ("grasp", "lift"), _lift_object, 200),
        _task("Can", ("grasp", "place"), _can_object, 400),
        _task("Square", ("grasp", "insert"), _square_object, 400),
    )
}
#: The only robot and arm controller the adapter supports (robomimic's benchmark setting).
ROBOTS = ("Panda",)
ARM_CONTROLLERS = ("OSC_POSE",)
#: robomimic's low-dim observation keys (``object`` is robosuite's ``object-state``).
OBS_KEYS = ("robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos", "object")


def get_task(name: str) -> RobosuiteTask:
    """A task by rewind name (``Can``), Gymnasium id or robosuite env name (``PickPlaceCan``)."""
    for t in TASKS.values():
        if name in (t.name, t.gym_id, t.env_name):
            return t
    valid = ", ".join(f"{t.name} ({t.env_name}, {t.gym_id})" for t in TASKS.values())
    raise KeyError(f"unknown robosuite task {name!r}; supported tasks: {valid}")
