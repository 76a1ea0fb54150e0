"""The task registry: one row per task, with its Gymnasium id, env class and scripted operator."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import gymnasium as gym


@dataclass(frozen=True)
class TaskEntry:
    """Where a task lives. ``env`` and ``operator`` are ``module:Class`` paths, imported on use."""

    name: str
    gym_id: str
    env: str
    operator: str


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


def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def get_task(name: str) -> TaskEntry:
    """Look up a task by short name (``stack3``) or Gymnasium id (``rewind/Stack3-v0``)."""
    for e in TASKS.values():
        if name in (e.name, e.gym_id):
            return e
    valid = ", ".join(f"{e.name} ({e.gym_id})" for e in TASKS.values())
    raise KeyError(f"unknown task {name!r}; valid tasks: {valid}")


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
    from rewind.envs.robosuite import register as register_robosuite

    register_robosuite()
