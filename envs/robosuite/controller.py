"""The controller side of the adapter: which controller configs are supported, the kwargs
``robosuite.make`` gets (:func:`robosuite_kwargs`), and the controller state that a rewind checkpoint
must carry besides the MuJoCo state.

robosuite keeps state outside ``MjData``: each part controller's goal, reference frames, nullspace
target and flags; the Panda gripper's ramped command (``current_action``, 0.2 per step); the robot's
history buffers. :func:`capture_controllers` copies all of it (every array and scalar attribute of
each part controller, in one deep copy so arrays that alias each other still do), and
:func:`restore_controllers` writes a fresh copy back, so a snapshot can be restored any number of
times.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from rewind.envs.robosuite.tasks import ARM_CONTROLLERS, ROBOTS

_VALUE_TYPES = (np.ndarray, np.generic, int, float, bool, str, type(None))
_ROBOT_BUFFERS = (
    "recent_qpos",
    "recent_actions",
    "recent_torques",
    "recent_ee_forcetorques",
    "recent_ee_pose",
    "recent_ee_vel",
    "recent_ee_vel_buffer",
    "recent_ee_acc",
)


class UnsupportedEnvMeta(ValueError):
    """An env description (a robomimic ``env_meta``, say) names a task, robot or controller the
    adapter lacks; the message lists the supported ones."""


def _supported_controllers() -> str:
    names = ", ".join(ARM_CONTROLLERS)
    return (
        f"supported arm controllers: {names} (a robosuite 1.4 part config, or a BASIC composite config "
        "whose body_parts.right has that type)"
    )


def composite_config(controller_configs: dict[str, Any] | None, robot: str = "Panda") -> dict[str, Any]:
    """robosuite 1.5's composite controller config for ``robot`` from ``controller_configs``.

    ``None`` gives robosuite's default for the robot (BASIC with an OSC_POSE arm). A robosuite 1.4
    part config (``{"type": "OSC_POSE", ...}``, robomimic's v1.4 datasets) is converted with
    robosuite's own ``refactor_composite_controller_config``. Body parts the single-arm robot lacks
    are dropped (robosuite would drop them with a warning on every reset).

    Raises:
        UnsupportedEnvMeta: the robot or the arm controller is not supported.
    """
    from robosuite.controllers import load_composite_controller_config  # noqa: PLC0415 - optional extra
    from robosuite.controllers.composite.composite_controller_factory import (  # noqa: PLC0415
        refactor_composite_controller_config,
    )

    if robot not in ROBOTS:
        raise UnsupportedEnvMeta(f"robot {robot!r} is not supported; supported robots: {', '.join(ROBOTS)}")
    if controller_configs is None:
        cfg = load_composite_controller_config(controller="BASIC", robot=robot)
    elif "body_parts" not in controller_configs:
        if controller_configs.get("type") not in ARM_CONTROLLERS:
            raise UnsupportedEnvMeta(
                f"controller {controller_configs.get('type')!r} is not supported; {_supported_controllers()}"
            )
        cfg = refactor_composite_controller_config(
            copy.deepcopy(controller_configs), robot.lower(), ["right"]
        )
    else:
        cfg = copy.deepcopy(controller_configs)
    arm = cfg.get("body_parts", {}).get("right", {})
    if cfg.get("type") != "BASIC" or arm.get("type") not in ARM_CONTROLLERS:
        raise UnsupportedEnvMeta(
            f"controller {cfg.get('type')!r} with arm controller {arm.get('type')!r} is not supported; "
            f"{_supported_controllers()}"
        )
    cfg["body_parts"] = {"right": arm}
    return cfg


def capture_controllers(robots: list[Any]) -> tuple[Any, ...]:
    """A private deep copy of every robot's controller state (see the module doc)."""
    state = []
    for robot in robots:
        parts = {
            name: {k: v for k, v in vars(c).items() if isinstance(v, _VALUE_TYPES)}
            for name, c in robot.composite_controller.part_controllers.items()
        }
        grippers = {arm: robot.gripper[arm].current_action for arm in robot.arms if robot.has_gripper[arm]}
        buffers = {k: getattr(robot, k) for k in _ROBOT_BUFFERS}
        state.append((parts, grippers, buffers))
    return copy.deepcopy(tuple(state))


def restore_controllers(robots: list[Any], state: tuple[Any, ...]) -> None:
    """Write a fresh copy of ``state`` (from :func:`capture_controllers`) back into ``robots``."""
    for robot, (parts, grippers, buffers) in zip(robots, copy.deepcopy(state), strict=True):
        for name, values in parts.items():
            vars(robot.composite_controller.part_controllers[name]).update(values)
        for arm, value in grippers.items():
            robot.gripper[arm].current_action = value
        for key, value in buffers.items():
            setattr(robot, key, value)


#: robosuite kwargs the adapter sets itself (low-dim, headless, no hard resets, episode end by rewind).
FORCED_KWARGS = (
    "has_renderer",
    "has_offscreen_renderer",
    "use_camera_obs",
    "ignore_done",
    "hard_reset",
    "seed",
)
_DEFAULTS: dict[str, Any] = {"control_freq": 20, "reward_shaping": False, "use_object_obs": True}


def robosuite_kwargs(
    robot: str, controller_configs: dict | None, env_kwargs: dict | None, model_seed: int
) -> dict[str, Any]:
    """The kwargs for ``robosuite.make``: defaults, then ``env_kwargs``, then the adapter's forced ones."""
    kwargs = {**_DEFAULTS, **(env_kwargs or {})}
    robots = kwargs.pop("robots", robot)
    robots = [robots] if isinstance(robots, str) else list(robots)
    if len(robots) != 1 or robots[0] not in ROBOTS:
        raise UnsupportedEnvMeta(f"robots {robots} are not supported; supported: one of {list(ROBOTS)}")
    kwargs["controller_configs"] = composite_config(
        kwargs.pop("controller_configs", controller_configs), robots[0]
    )
    for key in (
        "camera_names",
        "camera_heights",
        "camera_widths",
        "camera_depths",
        "render_camera",
        "renderer",
        "camera_segmentations",
    ):
        kwargs.pop(key, None)  # low-dim only: camera settings of an image dataset do not apply
    forced = {
        "has_renderer": False,
        "has_offscreen_renderer": False,
        "use_camera_obs": False,
        "ignore_done": True,
        "hard_reset": False,
        "seed": int(model_seed),
    }
    return {**kwargs, "robots": robots[0], **forced}
