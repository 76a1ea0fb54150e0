"""Helpers of the env tests: make a task env or operator, skipping only while its module does not exist."""

from __future__ import annotations

import importlib

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
