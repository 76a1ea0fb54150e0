"""rewind.envs: the MuJoCo task suite (Lift, PickPlace, Stack3, NutPeg), scripted operators and
perturbation wrappers. Importing this package registers the ``rewind/*-v0`` Gymnasium ids."""

from rewind.envs.registry import TASKS, get_task, make_env, make_operator, register_all

register_all()

__all__ = ["TASKS", "get_task", "make_env", "make_operator", "register_all"]
