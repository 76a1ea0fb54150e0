"""The task registry: one row per task, with its Gymnasium id, env class and scripted operator: the
suite every install has (:data:`TASKS`) and the tasks of optional extras (:data:`EXTRA_TASKS`)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from rewind.envs.robosuite import GYM_IDS, ROBOSUITE_CAMERAS
from rewind.envs.robosuite import register as register_robosuite


@dataclass(frozen=True)
class TaskEntry:
    """Where a task lives. ``env`` and ``operator`` are ``module:Class`` paths, imported on use.

    Attributes:
        name: the short name (the Hydra option ``env=<name>``).
        gym_id: the registered Gymnasium id.
        env: the env class; operator: the scripted operator class.
        cameras: the render cameras ``env.camera`` may name; the first is the default.
        rgb: whether the env offers a camera observation (``env.rgb=true``).
        extra: the optional install extra the task needs (``robosuite``), or ``None``.
    """

    name: str
    gym_id: str
    env: str
    operator: str
    cameras: tuple[str, ...] = ("front", "top")
    rgb: bool = True
    extra: str | None = None


TASKS: dict[str, TaskEntry] = {
    e.name: e
    for e in (
        TaskEntry(
            "lift",
            "rewind/Lift-v0",
            "rewind.envs.tasks.lift:LiftEnv",
            "rewind.envs.operators.lift:LiftOperator",
        ),
        TaskEntry(
            "pick_place",
            "rewind/PickPlace-v0",
            "rewind.envs.tasks.pick_place:PickPlaceEnv",
            "rewind.envs.operators.pick_place:PickPlaceOperator",
        ),
        TaskEntry(
            "stack3",
            "rewind/Stack3-v0",
            "rewind.envs.tasks.stack3:Stack3Env",
            "rewind.envs.operators.stack3:Stack3Operator",
        ),
        TaskEntry(
            "nut_peg",
            "rewind/NutPeg-v0",
            "rewind.envs.tasks.nut_peg:NutPegEnv",
            "rewind.envs.operators.nut_peg:NutPegOperator",
        ),
    )
}
#: Tasks of optional install extras: robomimic's tasks on robosuite (``rewind[robosuite]``, in its own
#: virtualenv; docs/robosuite.md). Valid ``env=`` options everywhere; kept apart from :data:`TASKS`
#: (the suite every install has) so code that walks the suite never needs an extra.
EXTRA_TASKS: dict[str, TaskEntry] = {
    e.name: e
    for e in (
        TaskEntry(
            f"robosuite_{task.lower()}",
            GYM_IDS[task][0],
            "rewind.envs.robosuite.env:RobosuiteEnv",
            f"rewind.envs.robosuite.operators:{task}Operator",
            cameras=ROBOSUITE_CAMERAS,
            rgb=False,
            extra="robosuite",
        )
        for task in ("Lift", "Can")
    )
}
#: Every ``env=`` option: the suite, then the extras' tasks.
ALL_TASKS: dict[str, TaskEntry] = {**TASKS, **EXTRA_TASKS}


def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def get_task(name: str) -> TaskEntry:
    """Look up a task by short name (``stack3``) or Gymnasium id (``rewind/Stack3-v0``)."""
    for e in ALL_TASKS.values():
        if name in (e.name, e.gym_id):
            return e
    valid = ", ".join(f"{e.name} ({e.gym_id})" for e in ALL_TASKS.values())
    raise KeyError(f"unknown task {name!r}; valid tasks: {valid}")


def check_installed(entry: TaskEntry) -> None:
    """Raise ``ImportError`` naming the extra and how to install it when ``entry`` needs an optional
    extra this install lacks (robosuite: the package and its version pins; nothing is imported)."""
    if entry.extra == "robosuite":
        from rewind.envs.robosuite.compat import check_installed as check_robosuite

        check_robosuite()


def make_env(name: str, **kwargs: Any) -> gym.Env:
    """``gymnasium.make`` for a task given by short name or id; kwargs go to the env constructor."""
    return gym.make(get_task(name).gym_id, **kwargs)


def make_operator(name: str, **kwargs: Any):
    """The scripted operator of a task (see :mod:`rewind.envs.operators.base`)."""
    return _load(get_task(name).operator)(**kwargs)


def register_all() -> None:
    """Register every task with Gymnasium (idempotent), and the ``rewind/robosuite-*-v0`` ids."""
    for e in TASKS.values():
        if e.gym_id not in gym.registry:
            gym.register(id=e.gym_id, entry_point=e.env, disable_env_checker=True)
    # The robosuite ids (optional extra): registered by name only, robosuite is imported on make.
    register_robosuite()
