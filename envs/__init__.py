"""rewind.envs: the MuJoCo task suite (Lift, PickPlace, Stack3, NutPeg), scripted operators and
perturbation wrappers; robomimic's tasks on robosuite (``rewind.envs.robosuite``, the optional extra
``rewind[robosuite]``). Importing this package registers the ``rewind/*-v0`` Gymnasium ids."""

from rewind.envs.registry import (
    ALL_TASKS,
    EXTRA_TASKS,
    TASKS,
    get_task,
    make_env,
    make_operator,
    register_all,
)

register_all()

__all__ = ["ALL_TASKS", "EXTRA_TASKS", "TASKS", "get_task", "make_env", "make_operator", "register_all"]
