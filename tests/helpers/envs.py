"""Helpers of the env tests: make a task env or operator, skipping only while its module does not exist;
an env that hangs (for the env-worker fault tests)."""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rewind.envs as renvs
from rewind.envs.registry import TASKS


def _module_missing(path: str) -> bool:
    module = path.partition(":")[0]
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name == module:
            return True
        raise
    return False


def require_task(name: str) -> None:
    """Skip the test if task ``name``'s env module has not been written yet."""
    if _module_missing(TASKS[name].env):
        pytest.skip(f"task module {TASKS[name].env} does not exist yet")


def make(name: str, **kwargs) -> gym.Env:
    """The unwrapped task env ``name`` (skips while its module does not exist)."""
    require_task(name)
    return renvs.make_env(name, **kwargs).unwrapped


def make_operator(name: str, **kwargs):
    """The scripted operator of task ``name`` (skips while its module does not exist)."""
    if _module_missing(TASKS[name].operator):
        pytest.skip(f"operator module {TASKS[name].operator} does not exist yet")
    return renvs.make_operator(name, **kwargs)


def obs_equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    """Bit-identical observation dicts."""
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


class _HangOnStep(gym.Wrapper):
    """Sleeps ``seconds`` in step ``after`` of an episode reset with seed ``seed`` (a hung env)."""

    def __init__(self, env: gym.Env, seed: int, after: int, seconds: float) -> None:
        super().__init__(env)
        self.hang_seed, self.after, self.seconds = seed, after, seconds
        self.armed, self.steps = False, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        self.armed, self.steps = seed == self.hang_seed, 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple:
        self.steps += 1
        if self.armed and self.steps == self.after:
            time.sleep(self.seconds)
        return self.env.step(action)


@dataclass(frozen=True)
class HangingEnvFactory:
    """A picklable env factory (for env workers) whose env hangs: ``base()`` wrapped so that step
    ``after`` of the episode with seed ``seed`` sleeps ``seconds`` before it steps."""

    base: Callable[[], gym.Env]
    seed: int
    after: int = 3
    seconds: float = 3600.0

    def __call__(self) -> gym.Env:
        """Build the env."""
        return _HangOnStep(self.base(), self.seed, self.after, self.seconds)


def pid_gone(pid: int) -> bool:
    """No process with ``pid`` exists any more (a stopped worker was reaped or killed)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False
