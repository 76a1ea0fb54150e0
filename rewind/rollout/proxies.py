"""Stand-ins for envs that live in worker processes (:class:`rewind.rollout.workers.EnvWorkers`).

A :class:`WorkerEnv` answers what rollouts ask of an env by asking its pool, which talks to the
worker; :class:`RemoteTask` is its ``unwrapped``. The pool's calls they use: ``reset_env``,
``step_envs``/``outcome``, ``call``/``attr`` (a method or attribute of the env, its task or its
outermost wrapper that has it), ``physics_state`` and ``elapsed_steps``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rewind.rollout.pool import StepOutcome
from rewind.rollout.workers_io import freeze


class WorkerEnv:
    """One env of an :class:`EnvWorkers` pool, in its worker process; stands in for the env.

    ``close()`` does nothing (the pool closes its workers). ``worker_pool`` is how
    :func:`rewind.rollout.pool.step_many` finds the pool that steps a batch of proxies together.
    """

    def __init__(self, pool: Any, index: int) -> None:
        self.worker_pool, self.index = pool, index
        self._task = RemoteTask(pool, index)

    observation_space = property(lambda self: self.worker_pool.observation_space)
    action_space = property(lambda self: self.worker_pool.action_space)
    metadata = property(lambda self: self.worker_pool.metadata)
    render_mode = property(lambda self: self.worker_pool.render_mode)

    @property
    def unwrapped(self) -> RemoteTask:
        """The task env in the worker (its methods are called there)."""
        return self._task

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """``env.reset`` in the worker."""
        return self.worker_pool.reset_env(self.index, seed, options)

    def step(self, action: np.ndarray) -> StepOutcome:
        """``env.step`` in the worker (a rejected action raises its ``ActionError`` here)."""
        (reply,) = self.worker_pool.step_envs([self.index], [action])
        if reply[0] == "rejected":
            raise reply[1]
        return self.worker_pool.outcome(self.index, reply)

    def snapshot(self) -> Any:
        """``snapshot()`` of the env's outermost layer that has one (its arrays read-only here too)."""
        return freeze(self.worker_pool.call(self.index, "wrapper", "snapshot"))

    def restore(self, snap: Any) -> None:
        """``restore(snap)`` on the env's outermost layer that has one."""
        self.worker_pool.call(self.index, "wrapper", "restore", snap)

    def render(self) -> Any:
        """``env.render()`` in the worker (set ``MUJOCO_GL`` before the pool starts)."""
        return self.worker_pool.call(self.index, "env", "render")

    def get_wrapper_attr(self, name: str) -> Any:
        """``env.get_wrapper_attr(name)`` (a method comes back as a callable proxy)."""
        return self.worker_pool.attr(self.index, "wrapper", name)

    def close(self) -> None:
        """Nothing: the pool owns the worker."""


class RemoteTask:
    """``env.unwrapped`` of a :class:`WorkerEnv`: attributes are read, and methods called, in the worker;
    ``physics_state()`` and ``elapsed_steps`` come from what the last command left in shared memory."""

    def __init__(self, pool: Any, index: int) -> None:
        self._pool, self._index = pool, index

    def physics_state(self) -> np.ndarray:
        """The task env's flat physics state (a copy)."""
        return self._pool.physics_state(self._index)

    @property
    def elapsed_steps(self) -> int:
        """Control steps taken in the episode."""
        return self._pool.elapsed_steps(self._index)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._pool.attr(self._index, "unwrapped", name)
