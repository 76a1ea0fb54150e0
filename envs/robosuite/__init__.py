"""robosuite tasks behind rewind's env contract (optional extra ``rewind[robosuite]``).

robomimic's benchmark tasks (Lift, Can, Square) as Gymnasium envs with robomimic's low-dim
observation keys, OSC_POSE actions, named stages and exact ``snapshot()`` / ``restore()``. This
package imports nothing from robosuite: :func:`register` only records the Gymnasium ids, and the
env module imports robosuite when an env is made (so the base install never needs it). See
``docs/robosuite.md``.
"""

from __future__ import annotations

import gymnasium as gym

#: rewind task name -> (Gymnasium id, robosuite env name). The single source of the ids.
GYM_IDS: dict[str, tuple[str, str]] = {
    "Lift": ("rewind/robosuite-Lift-v0", "Lift"),
    "Can": ("rewind/robosuite-Can-v0", "PickPlaceCan"),
    "Square": ("rewind/robosuite-Square-v0", "NutAssemblySquare"),
}
#: The render cameras of the robomimic tasks (``env.camera``); the first is the default.
ROBOSUITE_CAMERAS: tuple[str, ...] = ("agentview", "frontview", "birdview", "sideview")
#: robosuite env name -> rewind task name (what a robomimic file's ``env_meta["env_name"]`` holds).
BY_ROBOSUITE_NAME: dict[str, str] = {rs: task for task, (_, rs) in GYM_IDS.items()}


def register() -> None:
    """Register the ``rewind/robosuite-*-v0`` ids with Gymnasium (idempotent; imports no robosuite)."""
    for task, (gym_id, _) in GYM_IDS.items():
        if gym_id not in gym.registry:
            gym.register(
                id=gym_id,
                entry_point="rewind.envs.robosuite.env:RobosuiteEnv",
                kwargs={"task": task},
                disable_env_checker=True,
            )
